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
  when they come from a run with the same settings (`RunConfig.check_resumable`);
  starting over removes what bertzoo wrote there and records the settings
  (`RUN_SETTINGS_FILE`);
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

import json
import logging
import time
from pathlib import Path

from bertzoo.io.publish import atomic_write_text
from bertzoo.io.rundir import RunDirectory
from bertzoo.training.callbacks import ProgressLog, TensorBoardLogger
from bertzoo.training.checkpoint import PREFIX as CHECKPOINT_PREFIX
from bertzoo.training.preemption import StopSignals
from bertzoo.training.runs import CHECKPOINTS_DIR, LOG_DIR


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
        once: a user's file there is an `OutputError`, before anything is
        written. Returns self."""
        if not self.opened:
            self.directory.lock()
            self.directory.claim(*written)
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
        if not (self.config.resume and checkpoint):
            return False
        self.config.check_resumable(
            self.output,
            self.error,
            unrecorded_resumes=unrecorded_resumes,
            start_over=self.start_over_text,
        )
        return True

    def start_over(self, *derived):
        """A fresh start: removes the recorded paths `derived` (what earlier
        runs here derived from their settings) and records this run's
        settings."""
        self.remove(*derived)
        self.record()

    def record(self):
        """Writes the settings record (`RUN_SETTINGS_FILE`), on the chief."""
        if self.chief:
            self.config.record(self.output)

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
        return json.loads(path.read_text(encoding="utf-8"))

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
