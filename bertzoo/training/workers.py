"""Multi-worker pre-training's coordination through the shared output
directory: workers wait for files another writes (`wait_for`), and each
reader of a run that streams disjoint shards records where it stands at
every checkpoint step (`ReaderPositions`), for the chief to checkpoint only
when all have and for each to resume at its own position."""

import json
import logging
import time
from pathlib import Path

from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import atomic_write_text
from bertzoo.training.checkpoint import PREFIX as CHECKPOINT_PREFIX
from bertzoo.training.pretrain_config import PretrainError

logger = logging.getLogger("bertzoo.training.pretrain")  # the run's log lines

# Each reader's stream position at each checkpoint step.
POSITIONS_DIR = "positions"


def wait_for(path, seconds=24 * 3600, writer="the chief worker", log_every=300):
    """Non-chief workers wait for files the chief writes (a vocabulary, a
    prepared corpus: hours for a large corpus), and the chief for the other
    workers' data positions; saying so every `log_every` seconds."""
    start = said = time.time()
    while not Path(path).exists():
        now = time.time()
        if now - start > seconds:
            raise TimeoutError(f"{path} did not appear within {seconds} s (written by {writer}).")
        if now - said >= log_every:
            logger.info("Waiting %.0f s so far for %s (written by %s).", now - start, path, writer)
            said = now
        time.sleep(min(0.5, seconds / 10))


def check_readers(config, prepared, readers):
    """A multi-worker run streams disjoint shards, at least one per worker:
    a corpus of fewer shards with documents is refused, saying how to
    prepare more."""
    shards = sum(1 for s in prepared.document["shards"] if s["documents"] > 0)
    if shards >= readers:
        return
    if config.prepared:
        how = f"prepare {config.prepared} again with a smaller --shard-mb"
    else:
        how = f"rerun with a smaller --shard-mb (now {config.shard_mb:g})"
    raise PretrainError(
        f"--strategy multi_worker: each of the {readers} workers streams shards of its own, "
        f"and {prepared.directory} has {shards} shard(s) with documents; {how} so that the "
        f"corpus makes at least {readers}, or train with fewer workers."
    )


class ReaderPositions:
    """Where each reader (worker) of a multi-worker run stands in its own
    stream at each checkpoint step: `POSITIONS_DIR/reader-{w}/step-{N}.json`
    (the chief's state.json cannot know the other workers' positions),
    written atomically by reader w. The chief writes checkpoint N only once
    every reader's file for step N is there (`wait_for_all`), so a complete
    checkpoint has its readers' positions; each reader keeps only the files
    of steps that still have a checkpoint, and its newest.

    `output`: the run's output (shared by the workers); `checkpoints`: the
    run's `CheckpointManager`."""

    def __init__(self, output, readers, reader, checkpoints):
        self.directory = Path(output) / POSITIONS_DIR
        self.readers, self.reader, self.checkpoints = int(readers), int(reader), checkpoints

    def path(self, step, reader=None):
        reader = self.reader if reader is None else reader
        return self.directory / f"reader-{reader}" / f"step-{int(step):09d}.json"

    def record(self, step, phase, position):
        """Writes this reader's `position` (a `StreamPosition`) at global
        step `step` of phase `phase`, then prunes."""
        document = {
            "step": int(step),
            "phase": int(phase),
            "reader": self.reader,
            "readers": self.readers,
            "stream": position.as_dict(),
        }
        atomic_write_text(self.path(step), json.dumps(document, indent=2) + "\n")
        self.prune(newest=step)

    def wait_for_all(self, step, seconds=600):
        """Waits until every reader's position at `step` is written (the
        chief, before it writes checkpoint `step`)."""
        for reader in range(self.readers):
            wait_for(self.path(step, reader), seconds, writer=f"worker {reader}")

    def checkpoint_steps(self):
        return {int(p.name[len(CHECKPOINT_PREFIX) :]) for p in self.checkpoints.checkpoints()}

    def prune(self, newest=None, after=None):
        """Removes this reader's files of steps without a checkpoint (but
        `newest`), and of steps past `after` (a run resumed at step `after`
        writes those again)."""
        kept = self.checkpoint_steps() | {newest}
        for path in (self.directory / f"reader-{self.reader}").glob("step-*.json"):
            try:
                step = int(path.stem[len("step-") :])
            except ValueError:
                continue
            if step not in kept or (after is not None and step > after):
                path.unlink(missing_ok=True)

    def read(self, step, phase, checkpoint):
        """This reader's position (a dict) at `step`, where `checkpoint` (of
        phase `phase`) was restored."""
        path = self.path(step)
        try:
            document = load_json(path)
        except FileNotFoundError:
            raise PretrainError(
                f"{path} is missing: worker {self.reader} recorded its data position at step "
                f"{step} ({checkpoint}) there and resumes from it; restore the file, or rerun "
                "with --no-resume to start over."
            ) from None
        except (OSError, ValueError) as e:
            raise PretrainError(f"{path} cannot be read ({e}); rerun with --no-resume.") from None
        expected = {"step": step, "phase": phase, "reader": self.reader, "readers": self.readers}
        found = {k: document.get(k) for k in expected} if isinstance(document, dict) else {}
        if found != expected or "stream" not in document:
            raise PretrainError(
                f"{path} records {found}, not the position of {expected}; rerun with --no-resume."
            )
        return document["stream"]
