"""Text files -> tokenized document shards, once, in parallel, in bounded
memory; resumable and published with a manifest.

    from bertzoo.data.prepare import prepare_corpus, PrepareSettings
    summary = prepare_corpus(["corpus/*.txt", "more.txt.gz"], tokenizer, "prepared/",
                             PrepareSettings(shard_bytes=64 << 20, workers=2))

The inputs are cut into pieces of about `shard_bytes` at document
boundaries (`bertzoo.data.textstream`). `workers` workers take the pieces
one at a time, largest first: the calling process (in a thread) and
`workers - 1` processes of the `spawn` context (TensorFlow is not
fork-safe). A worker streams its piece's lines, tokenizes sentences in
batches with the tokenizer's TF ops and writes shard files atomically
(`bertzoo.data.prepare_worker`, `bertzoo.data.shardfile`): one per piece of
a plain file, one per `shard_bytes` of text of a `.gz` file. A worker holds
at most one shard's token ids plus one batch of text, so peak memory is
about `workers` x (`shard_bytes` plus TensorFlow and the tokenizer),
whatever the corpus size.

The output directory holds the shards, `prepared.json` (settings, tokenizer
identity, each input's path, size, modification time and SHA-256 (over its
pieces' SHA-256s, computed while streaming), the summary) and the manifest
(`bertzoo-manifest.json`, kind "prepared", written last). Until the manifest
exists the directory is a preparation in progress: `.prepare-journal.json`
records each finished piece with its key (piece, input size and mtime,
settings, tokenizer) and its shards' SHA-256s, and a rerun keeps every piece
whose key and hashes still match and prepares only the rest (a `.gz` file is
one piece: it restarts from its beginning). The same inputs, settings and tokenizer give byte-identical shards,
whatever the number of workers.

`run_preparation` is all of this around an engine that prepares the pieces
left: `prepare_corpus` passes the local pool, `bertzoo.data.beam_prepare`
an Apache Beam pipeline, whose workers, which cannot reach this process,
leave a record per finished piece (`.prepare-piece-NAME.json`) that the
journal takes in.
"""

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import os
import re
from pathlib import Path

from bertzoo.data import progress as progress_lib
from bertzoo.data import shardfile, textstream
from bertzoo.data.corpus import LAYOUTS, CorpusError, expand_files
from bertzoo.data.prepare_worker import (
    COUNTS,
    FORMAT_VERSION,
    init_spawned_worker,
    init_worker,
    prepare_piece,
    tokenizer_identity,
    tokenizer_spec,
)
from bertzoo.io import manifest as manifest_lib
from bertzoo.io import textfiles
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import atomic_path, atomic_write_text, check_output_directory
from bertzoo.io.rundir import LOCK_FILE, RunDirectory

logger = logging.getLogger("bertzoo.data")

PREPARED_FILE = "prepared.json"
JOURNAL_FILE = ".prepare-journal.json"
# A finished piece's journal entry, written by its worker where the workers
# cannot reach the launcher (Beam): the journal takes these in.
RECORD_PREFIX = ".prepare-piece-"
MANIFEST_KIND = "prepared"


@dataclasses.dataclass(frozen=True)
class PrepareSettings:
    """layout: "sentences" (one sentence per line, a blank line between
    documents) or "documents" (one document per line). shard_bytes: raw text
    per shard (and per worker's buffer). workers: this process and `workers - 1`
    spawned ones (None: the CPU count, at most one per `BYTES_PER_WORKER`
    of text; 1: this process only).
    max_line_bytes: longer lines are skipped and counted.
    batch_sentences: sentences per tokenizer call. seed: recorded, the
    default seed of the examples made from the shards."""

    layout: str = "sentences"
    shard_bytes: int = 16 << 20
    workers: int | None = None
    max_line_bytes: int = 1 << 20
    batch_sentences: int = 2048
    seed: int = 12345

    def check(self):
        if self.layout not in LAYOUTS:
            raise CorpusError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}.")
        for name in ("shard_bytes", "batch_sentences"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CorpusError(f"{name} must be a positive int, got {value!r}.")
        textfiles.check_max_line_bytes(self.max_line_bytes, CorpusError)
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise CorpusError(f"workers must be a positive int or None, got {self.workers!r}.")

    def identity(self):
        """The settings that decide the shards' bytes (not workers, seed)."""
        return {
            k: getattr(self, k)
            for k in ("layout", "shard_bytes", "max_line_bytes", "batch_sentences")
        }


# === The whole preparation ===


# The names of the shards a preparation writes (`<piece name>-NNNNN`):
# only these are ever replaced or deleted in its output.
SHARD_NAME = re.compile(r"shard-\d{5,}-\d{5,}-\d{5,}" + re.escape(shardfile.SUFFIX))


def _check_output(output):
    """Refuses, before writing, an output that is a file, a bertzoo
    directory of another kind, or a directory holding files bertzoo did not
    write there. A preparation owns the names it writes only in a directory
    that is its own (its journal or its manifest, `check_output_directory`):
    anywhere else a `vocab.txt`, a `prepared.json` or a `.bzshard` is the
    user's, and is refused, never replaced or deleted."""
    fixed = {PREPARED_FILE, JOURNAL_FILE, manifest_lib.MANIFEST_FILE}
    fixed |= {"vocab.txt", "spiece.model"}  # the tokenizer's vocabulary, written last
    check_output_directory(
        output,
        MANIFEST_KIND,
        "a prepared corpus",
        lambda name: (
            name in fixed
            or SHARD_NAME.fullmatch(name) is not None
            or ".tmp-" in name
            or name.startswith(RECORD_PREFIX)
        ),
        journal=JOURNAL_FILE,
        always=(LOCK_FILE,),
    )


def _piece_key(piece, info, settings, identity):
    document = {
        "piece": dataclasses.asdict(piece),
        "input": {k: info[k] for k in ("size", "mtime_ns")},
        "settings": settings.identity(),
        "tokenizer": identity["sha256"],
        "format_version": FORMAT_VERSION,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _record_path(output, name):
    return Path(output) / f"{RECORD_PREFIX}{name}.json"


def write_piece_record(output, name, entry):
    """A worker's record of its finished piece `name` (its journal entry,
    key included), written atomically beside the shards."""
    atomic_write_text(_record_path(output, name), json.dumps(entry, sort_keys=True))


def read_piece_record(output, name):
    """The record `write_piece_record` left for piece `name`, or None."""
    try:
        return load_json(_record_path(output, name))
    except (OSError, ValueError):
        return None


def _remove_piece_records(output):
    for path in Path(output).glob(f"{RECORD_PREFIX}*.json"):
        path.unlink(missing_ok=True)


def _load_journal(output):
    """The journal's entries, and the pieces' records (newer: they are
    taken in and removed whenever the journal is written)."""
    path = output / JOURNAL_FILE
    journal = {}
    if path.is_file():
        try:
            journal = dict(load_json(path)["shards"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged journal only costs the work it recorded
    for record in output.glob(f"{RECORD_PREFIX}*.json"):
        name = record.name[len(RECORD_PREFIX) : -len(".json")]
        journal[name] = read_piece_record(output, name)
    return journal


def _shard_good(output, shard):
    path = output / Path(shard["name"]).name
    return (
        path.is_file()
        and path.stat().st_size == shard["size"]
        and manifest_lib.sha256_file(path) == shard["sha256"]
    )


def _still_good(output, entry, key):
    """A journal entry of a finished piece: same key, every shard intact."""
    return (
        isinstance(entry, dict)
        and entry.get("key") == key
        and all(_shard_good(output, shard) for shard in entry.get("shards", [None]))
    )


def _keep_finished(output, pieces, keys):
    """The journal's entries still valid for this plan; stale shards of an
    earlier plan, and an earlier manifest, are removed (all bertzoo's)."""
    journal = _load_journal(output)
    wanted = {p.name for p in pieces}
    done = {
        name: entry
        for name, entry in journal.items()
        if name in wanted and _still_good(output, entry, keys[name])
    }
    kept = {shard["name"] for entry in done.values() for shard in entry["shards"]}
    for path in output.glob(f"*{shardfile.SUFFIX}"):
        if path.name not in kept and SHARD_NAME.fullmatch(path.name):
            path.unlink()  # unfinished or stale: a shard name of bertzoo's, in its own output
    for name in (manifest_lib.MANIFEST_FILE, PREPARED_FILE):
        (output / name).unlink(missing_ok=True)
    _write_journal(output, done)
    _remove_piece_records(output)  # taken in (or stale)
    return done


def _write_journal(output, done):
    text = json.dumps({"format_version": FORMAT_VERSION, "shards": done}, indent=1, sort_keys=True)
    atomic_write_text(output / JOURNAL_FILE, text)


# A spawned worker starts in about 4 s on an idle machine (importing
# TensorFlow, tracing the tokenizer; 10 s or more on a busy one) and then
# tokenizes about 4-5 MB/s: it pays for itself from about this much text
# (benchmarks/prepare.py).
BYTES_PER_WORKER = 64 << 20


def _worker_count(workers, sizes):
    """`workers` when given, else the CPU count, but no more workers than
    pieces; by default also no more than one per BYTES_PER_WORKER of text
    (a small corpus is prepared in this process, without spawning)."""
    if workers is None:
        workers = min(os.cpu_count() or 1, max(1, sum(sizes) // BYTES_PER_WORKER))
    return max(1, min(workers, len(sizes)))


@dataclasses.dataclass(frozen=True)
class Work:
    """The pieces left to prepare, handed to an engine: `todo` (largest
    first) and their `sizes` in bytes, what a worker needs (`task(piece)` is
    `prepare_piece`'s argument), each piece's journal `keys`, `progress`."""

    todo: list
    sizes: list
    spec: dict
    settings: PrepareSettings
    output: Path
    keys: dict
    progress: progress_lib.Progress

    def task(self, piece):
        return (piece, self.spec, self.settings, str(self.output))


def local_pool(work, on_done):
    """The local engine: `settings.workers` workers of `_run_pieces`."""
    workers = _worker_count(work.settings.workers, work.sizes)
    _run_pieces([work.task(p) for p in work.todo], workers, work.progress, on_done)


def _run_pieces(tasks, workers, progress, on_done):
    """Runs `prepare_piece` over `tasks` with `workers` workers: this
    process (in a thread: it has TensorFlow and the tokenizer loaded, so it
    starts at once) and `workers - 1` spawned processes. Each worker takes
    the next task when it finishes one, so the largest-first order
    balances them."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait

    local_counter = progress_lib.LocalCounter()
    init_worker(local_counter)
    executors = [(ThreadPoolExecutor(1), 1)]
    counters = [local_counter]
    if workers > 1:
        context = multiprocessing.get_context("spawn")
        counters.append(context.Value("q", 0))
        pool = ProcessPoolExecutor(
            workers - 1,
            mp_context=context,
            initializer=init_spawned_worker,
            initargs=(counters[1],),
        )
        executors.append((pool, workers - 1))
    pending, running = list(reversed(tasks)), {}

    def fill():
        for executor, slots in executors:
            busy = sum(1 for e, _ in running.values() if e is executor)
            for _ in range(slots - busy):
                if pending:
                    task = pending.pop()
                    running[executor.submit(prepare_piece, task)] = (executor, task[0])

    try:
        fill()
        while running:
            finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                on_done(running.pop(future)[1], future.result())
            fill()
            progress.update(progress.base + sum(c.value for c in counters))
    finally:
        # Idle workers exit on their own; waiting for TensorFlow's teardown
        # in each would add seconds. On an error, pending pieces are dropped.
        for executor, _ in executors:
            executor.shutdown(wait=False, cancel_futures=True)
        init_worker(None)


def _summary(shards, infos):
    totals = {"bytes": sum(i["size"] for i in infos), **dict.fromkeys(COUNTS, 0)}
    for shard in shards:
        for k in COUNTS:
            totals[k] += shard["stats"][k]
    totals["unk_share"] = totals["unk_tokens"] / max(1, totals["tokens"])
    totals["shards"] = len(shards)
    return totals


def _input_records(paths, infos, pieces, done):
    records = []
    for i, (path, info) in enumerate(zip(paths, infos, strict=True)):
        digest = hashlib.sha256()
        for piece in pieces:
            if piece.input_index == i:
                digest.update(done[piece.name]["piece_sha256"].encode())
        records.append({**info, "path": str(path.resolve()), "sha256": digest.hexdigest()})
    return records


def _write_vocabulary(output, tokenizer):
    """The tokenizer's vocabulary file beside the shards, so a training run
    rebuilds the exact tokenizer from the directory alone."""
    source = tokenizer_spec(tokenizer)["source"]
    data = source if isinstance(source, bytes) else ("\n".join(source) + "\n").encode("utf-8")
    with atomic_path(output / tokenizer.vocabulary_file) as tmp:
        Path(tmp).write_bytes(data)
    return tokenizer.vocabulary_file


def _publish(output, settings, identity, inputs, pieces, done):
    shards = [(p, shard) for p in pieces for shard in done[p.name]["shards"]]
    entries = [shard for _, shard in shards]
    summary = _summary(entries, inputs)
    if not summary["documents"]:
        raise CorpusError(
            f"The corpus is empty: {', '.join(i['path'] for i in inputs)} yield no tokenized "
            f"sentence ({summary['dropped_binary']} binary and {summary['dropped_too_long']} "
            "over-long lines dropped). Give UTF-8 text, one sentence per line."
        )
    document = {
        "format_version": FORMAT_VERSION,
        "settings": {**settings.identity(), "seed": settings.seed},
        "tokenizer": identity,
        "inputs": inputs,
        "shards": [
            {
                "name": e["name"],
                **{k: e["stats"][k] for k in ("documents", "sentences", "tokens")},
                "input": p.input_index,
                "piece": p.piece_index,
                "start": p.start,
                "end": p.end,
            }
            for p, e in shards
        ],
        "summary": summary,
    }
    atomic_write_text(output / PREPARED_FILE, json.dumps(document, indent=1, sort_keys=True))
    files = {e["name"]: {"size": e["size"], "sha256": e["sha256"]} for e in entries}
    files.update(manifest_lib.describe_files(output, [PREPARED_FILE, identity["file"]]))
    atomic_write_text(
        output / manifest_lib.MANIFEST_FILE, manifest_lib.manifest_text(MANIFEST_KIND, files)
    )
    return document


def summary_line(s):
    """The summary as one sentence."""
    return (
        f"{s['shards']} shards, {s['documents']} documents, {s['sentences']} sentences, "
        f"{s['tokens']} tokens ({100 * s['unk_share']:.3f}% [UNK]); {s['empty_lines']} empty "
        f"lines; dropped {s['dropped_too_long']} too-long and {s['dropped_binary']} binary "
        f"lines; {s['invalid_utf8_lines']} lines with invalid UTF-8 (replaced); "
        f"{s['split_documents']} documents split across shards."
    )


def prepare_corpus(inputs, tokenizer, output, settings=None, progress_stream=None):
    """Prepares `inputs` (paths and globs, `.gz` too) into `output` (see the
    module docstring) and returns the `prepared.json` document. Every input
    check runs before anything is written; an earlier, interrupted
    preparation into `output` is continued."""
    return run_preparation(inputs, tokenizer, output, settings, local_pool, progress_stream)


def run_preparation(inputs, tokenizer, output, settings, engine, progress_stream=None):
    """`prepare_corpus` with another engine: `engine(work, on_done)` prepares
    the pieces of `work` (a `Work`) and calls `on_done(piece, entry)` with
    each one's `prepare_piece` result, in this process; this function checks,
    plans, resumes from the journal and publishes."""
    settings = settings or PrepareSettings()
    settings.check()
    paths = expand_files(inputs)
    output = Path(output)
    _check_output(output)
    infos = []
    for p in paths:
        st = p.stat()
        infos.append({"size": st.st_size, "mtime_ns": st.st_mtime_ns})
    pieces = textstream.plan_pieces(paths, settings.shard_bytes, settings.layout)
    identity = tokenizer_identity(tokenizer)
    keys = {p.name: _piece_key(p, infos[p.input_index], settings, identity) for p in pieces}
    with RunDirectory(output):
        done = _keep_finished(output, pieces, keys)
        todo = [p for p in pieces if p.name not in done]
        if done:
            logger.info("Resuming: %d of %d pieces already prepared.", len(done), len(pieces))
        size = lambda p: (p.end if p.end is not None else infos[p.input_index]["size"]) - p.start
        todo.sort(key=lambda p: (-size(p), p.name))  # largest first: balanced workers
        progress = progress_lib.Progress(
            sum(size(p) for p in pieces),
            sum(size(p) for p in pieces) - sum(size(p) for p in todo),
            stream=progress_stream,
        )
        spec = tokenizer_spec(tokenizer)

        def on_done(piece, entry):
            done[piece.name] = {**entry, "key": keys[piece.name]}
            _write_journal(output, done)

        if todo:
            sizes = [size(p) for p in todo]
            engine(Work(todo, sizes, spec, settings, output, keys, progress), on_done)
            _remove_piece_records(output)  # the engine took them in through on_done
        progress.close()
        inputs_info = _input_records(paths, infos, pieces, done)
        identity = {**identity, "file": _write_vocabulary(output, tokenizer)}
        document = _publish(output, settings, identity, inputs_info, pieces, done)
    logger.info("Prepared %s: %s", output, summary_line(document["summary"]))
    return document
