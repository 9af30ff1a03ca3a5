"""The life of a run in its output directory, shared by the three runs
(pre-training, fine-tuning, distillation):

    with Run(config, PretrainError, chief=distribution.is_chief) as run:
        run.open(written)                        # lock, then claim what it writes
        if not run.resumes(manager.latest()):    # same settings, or an error
            run.start_over(CHECKPOINTS_DIR)      # bertzoo's files only; settings recorded
        tensorboard = run.tensorboard(every=10)
        ...
        run.publish(METRICS_FILE, metrics)

- the lock: one run per output at a time (`bertzoo.io.rundir`), held until
  the `with` block ends;
- the claim: every path the run writes is recorded before any is written (a
  user's file at one is an `OutputError`);
- resume or start over: a run continues the checkpoints in its output only
  when they come from a run with the same settings (`RunConfig.check_resumable`)
  and its input files (`RunConfig.input_files`) did not change since it
  started; starting over removes what bertzoo wrote there and records the
  settings (`RUN_SETTINGS_FILE`), the kind of run and the inputs'
  fingerprints (`RUN_INFO_FILE`, `bertzoo.io.fingerprint`);
- an output that holds a run of another kind (a pre-training run's, for a
  fine-tuning run) is refused, resume or not: nothing of it is removed;
- publish: JSON results written atomically;
- TensorBoard and progress: the writer under `LOG_DIR` and the log lines of
  runs whose output is not a terminal;
- preemption: `preemptible()` notes SIGTERM and SIGINT around the training
  loops, which then save at the next step boundary and stop with one line
  (`bertzoo.training.preemption`);
- the clock: seconds since `start_clock()`.

On workers other than the chief, locking, claiming and removing do nothing
(`RunDirectory`), and neither does recording the settings.
"""

import dataclasses
import json
import logging
import time
from pathlib import Path

from bertzoo.io.fingerprint import change, fingerprint
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import atomic_write_text
from bertzoo.io.rundir import RunDirectory
from bertzoo.io.textfiles import InputFilesError, expand_inputs
from bertzoo.training.callbacks import ProgressLog, TensorBoardLogger
from bertzoo.training.checkpoint import PREFIX as CHECKPOINT_PREFIX
from bertzoo.training.preemption import StopSignals
from bertzoo.training.runs import (
    CHECKPOINTS_DIR,
    LOG_DIR,
    RUN_INFO_FILE,
    RUN_SETTINGS_FILE,
    flag_name,
)

logger = logging.getLogger(__name__)

# Settings recorded in an output without a recorded kind that a run must
# lack before the output counts as another kind of run's: one or two come
# and go as bertzoo's settings change between versions.
FOREIGN_SETTINGS = 3


class Run:
    """One run's output directory `config.output` (see the module docstring).

    `config`: the run's settings (a `RunConfig`); `error`: the run's error
    class, raised when its checkpoints cannot be resumed; `start_over`: what
    `--no-resume` deletes there, said in that error."""

    def __init__(self, config, error, chief=True, start_over=None):
        self.config = config
        self.error = error
        self.chief = bool(chief)
        self.output = Path(config.output)
        self.directory = RunDirectory(self.output, chief=chief)
        self.start_over_text = start_over
        self.started = None
        self.opened = False  # locked, and what the run writes claimed
        # The input files' fingerprints, taken before the run reads them.
        self.inputs = self._fingerprints()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.directory.release()

    # === Lock and claim ===

    def lock(self):
        """Takes the output's lock (a no-op when held). Returns self."""
        self.directory.lock()
        return self

    def open(self, written):
        """Locks the output and claims the paths `written` (relative to it),
        once: a user's file there is an `OutputError`, and a run of another
        kind there the run's error, before anything is written. Returns
        self."""
        if not self.opened:
            self.directory.lock()
            self.check_kind()  # before anything there is claimed
            # The run's kind and inputs go with its settings record.
            info = (RUN_INFO_FILE,) if RUN_SETTINGS_FILE in written else ()
            self.directory.claim(*written, *info)
            self.opened = True
        return self

    def remove(self, *names):
        """Deletes recorded paths (only what bertzoo wrote)."""
        self.directory.remove(*names)

    @property
    def recorded(self):
        return self.directory.recorded

    # === Resume or start over ===

    def any_checkpoint(self):
        """The first checkpoint directory in the output, complete or not, or
        None."""
        found = sorted((self.output / CHECKPOINTS_DIR).glob(f"{CHECKPOINT_PREFIX}*"))
        return next((p for p in found if p.is_dir()), None)

    def resumes(self, checkpoint, unrecorded_resumes=False):
        """Whether the run continues `checkpoint` (a path in the output, or
        None): when the settings allow resuming and there is one. Its run's
        settings must then be this run's (else `self.error`);
        `unrecorded_resumes`: a checkpoint without recorded settings resumes
        (else it is refused)."""
        self.check_kind()
        if not (self.config.resume and checkpoint):
            return False
        self.config.check_resumable(
            self.output,
            self.error,
            unrecorded_resumes=unrecorded_resumes,
            start_over=self.start_over_text,
        )
        self.check_inputs()
        return True

    def check_kind(self):
        """Refuses an output that holds a run of another kind (recorded in
        `RUN_INFO_FILE`, or else told by its recorded settings), whatever
        `resume` says: starting over there would delete that run's files."""
        kind = type(self.config).run_kind
        recorded = self._run_info().get("kind")
        foreign = self.config.foreign_settings(self.output)
        if recorded and kind and recorded != kind:
            what = f"a {recorded} run"
        elif not recorded and len(foreign) >= FOREIGN_SETTINGS:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            what = f"another kind of run (its recorded settings include {shown})"
        else:
            return
        raise self.error(
            f"--output {self.output} holds {what}, not a {kind or 'run like this'} run; use "
            "another --output (nothing there was changed)."
        )

    def _run_info(self):
        """The recorded `RUN_INFO_FILE`, or {} (none, or unreadable)."""
        try:
            info = self.read(RUN_INFO_FILE)
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def _fingerprints(self):
        """{setting: fingerprint} of the input files the settings name."""
        prints = {}
        for name in type(self.config).input_files:
            value = getattr(self.config, name, None)
            if value is None or value == () or value == []:
                continue
            if isinstance(value, tuple | list):
                # Several files or glob patterns (a corpus): one fingerprint
                # per file they name, keyed "setting:path".
                try:
                    paths = [(f"{name}:{p}", p) for p in expand_inputs(value)]
                except InputFilesError:
                    continue  # the run's own checks say what is wrong with them
            else:
                paths = [(name, value)]
            for key, path in paths:
                try:
                    prints[key] = {"path": str(path), **fingerprint(path)}
                except OSError:
                    continue  # the run's own checks say what is wrong with it
        return prints

    def check_inputs(self):
        """Refuses to resume when an input file changed since the run
        started (the fingerprints in `RUN_INFO_FILE`): its checkpoints were
        trained on other data. A run recorded without them resumes."""
        recorded = self._run_info().get("inputs")
        if not isinstance(recorded, dict):
            return
        fields = {f.name: f for f in dataclasses.fields(self.config)}
        for name, was in recorded.items():
            now = self.inputs.get(name)
            if now is None or not isinstance(was, dict) or now.get("path") != was.get("path"):
                continue  # another path is a changed setting, refused before
            what = change(was, now)
            if what is None:
                if now["mtime_ns"] != was.get("mtime_ns"):
                    logger.info(
                        "%s was modified since the run started, but its size and first and "
                        "last MiB are unchanged: resuming.",
                        now["path"],
                    )
                continue
            setting_name = name.split(":", 1)[0]
            flag = flag_name(fields[setting_name]) if setting_name in fields else setting_name
            deletes = f" ({self.start_over_text})" if self.start_over_text else ""
            raise self.error(
                f"{flag} {now['path']} changed since the run in {self.output} started ({what}); "
                "its checkpoints were trained on the old data. Restore the file to resume, or "
                f"rerun with --no-resume to start over there{deletes}."
            )

    def start_over(self, *derived):
        """A fresh start: removes the recorded paths `derived` (what earlier
        runs here derived from their settings) and records this run's
        settings."""
        self.remove(*derived)
        self.record()

    def record(self):
        """Writes the settings record (`RUN_SETTINGS_FILE`) and the run's
        kind and input fingerprints (`RUN_INFO_FILE`), on the chief."""
        if self.chief:
            self.config.record(self.output)
            if self.directory.owns(RUN_INFO_FILE):
                info = {"kind": type(self.config).run_kind, "inputs": self.inputs}
                self.publish(RUN_INFO_FILE, info)

    # === Results, logs, progress ===

    def publish(self, name, document):
        """Writes the JSON `document` to `name` in the output, atomically;
        returns its path."""
        path = self.output / name
        atomic_write_text(path, json.dumps(document, indent=2) + "\n")
        return path

    def read(self, name):
        """The JSON document `name` in the output, or None when absent."""
        path = self.output / name
        if not path.is_file():
            return None
        return load_json(path)

    def tensorboard(self, every, enabled=True):
        """The run's TensorBoard writer (in `LOG_DIR`), a callback."""
        return TensorBoardLogger(self.output / LOG_DIR, every, enabled=enabled)

    def progress(self, every, total, logger=None):
        """A callback that logs a line every `every` of `total` steps."""
        return ProgressLog(every, total, logger=logger or logging.getLogger(__name__))

    def preemptible(self):
        """A `StopSignals` context: around a training loop, SIGTERM and SIGINT
        are noted, for its `StopAtStep` callbacks and `check` calls to save
        at the next step boundary and stop the run with one line."""
        return StopSignals()

    def start_clock(self):
        self.started = time.perf_counter()

    def seconds(self):
        """Seconds since `start_clock()`."""
        return time.perf_counter() - self.started
