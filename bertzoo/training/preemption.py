"""Stopping a run cleanly on SIGTERM (what spot, preemptible and TPU VMs,
Kubernetes and Slurm send before they stop a machine) or SIGINT (Ctrl-C).

    with run.preemptible() as signals:          # bertzoo.training.lifecycle
        model.fit(..., callbacks=[..., StopAtStep(signals, start, total, save)])
        signals.check(lambda: "after epoch 2: checkpoint ... written")

- `StopSignals`: while its `with` block runs, SIGTERM and SIGINT are only
  noted (Python runs the handler between bytecodes, so a training step under
  way is finished first). A second signal is noted too and changes nothing:
  the save under way goes on to the end, and checkpoints are written
  atomically anyway (`bertzoo.training.checkpoint`).
- `StopAtStep`: a Keras callback that, at the first step boundary after a
  signal, calls `save(model, step, logs)` (a checkpoint of that step, with
  the run's data position) and raises `Preempted`, whose message is the one
  line the recipes print, and whose `exit_status` is 128 + the signal's
  number (143 for SIGTERM, 130 for SIGINT), the status of a process killed
  by it.
- `interruptible()`: what the recipes wrap a whole run in: outside the
  training loops, a first SIGTERM or SIGINT raises `Interrupted` where the
  run is (files being published are left complete: every write is atomic),
  later ones (and any after a training loop stopped on one) are ignored so
  the clean-up goes on undisturbed; `run_recipe` turns it into a one-line
  `Preempted`.

Only the main thread can install signal handlers; elsewhere (a run started
from a worker thread) these do nothing and signals keep their handlers.
"""

import contextlib
import signal
import threading

import keras

from bertzoo.errors import BertzooError

SIGNALS = (signal.SIGTERM, signal.SIGINT)

# Set when a training loop stopped on a signal: `interruptible`'s handler
# then ignores the next ones (the run is already stopping cleanly).
_stopping = threading.Event()


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Preempted(BertzooError):
    """The run stopped on a signal, after saving what it could; the message
    says what was kept and how to go on. `exit_status`: 128 + the signal."""

    def __init__(self, message, signum):
        super().__init__(message)
        self.signum = int(signum)
        self.exit_status = 128 + self.signum


class Interrupted(BaseException):  # noqa: N818 (like KeyboardInterrupt, not an Exception)
    """A signal arrived outside the training loops (`interruptible`)."""

    def __init__(self, signum):
        super().__init__(signal_name(signum))
        self.signum = int(signum)


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()


class StopSignals:
    """Notes SIGTERM and SIGINT while its `with` block runs (see the module
    docstring); the handlers in place before are restored at its end.

    `received`: the first signal's number, or None; `count`: how many came.
    """

    def __init__(self):
        self.received = None
        self.count = 0
        self._previous = {}

    def _note(self, signum, frame):
        self.count += 1
        if self.received is None:
            self.received = signum

    def __enter__(self):
        if _in_main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._note)
        return self

    def __exit__(self, *exc):
        if self.received is not None:
            _stopping.set()
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    @property
    def name(self):
        return signal_name(self.received) if self.received is not None else None

    def stop(self, what):
        """Raises `Preempted`: "Stopped by SIGTERM {what}"."""
        raise Preempted(f"Stopped by {self.name} {what}", self.received)

    def check(self, what):
        """At a safe point of a run (a checkpoint just written): when a
        signal came, raises `Preempted` with "Stopped by SIGTERM
        {what()}"."""
        if self.received is not None:
            self.stop(what())


class StopAtStep(keras.callbacks.Callback):
    """At the first step boundary after a signal noted by `signals`, saves
    and stops the run with `Preempted`.

    Args:
        signals: a `StopSignals`.
        start_step: the global step this `fit` starts at.
        total: the run's last global step (for the message), or None.
        save: `save(model, step, logs) -> text` writes a checkpoint of
            global step `step` (`logs`: the step's Keras logs) and returns
            what the message says of it ("checkpoint DIR written"); None:
            the run keeps no checkpoint of its steps.
        kept: what the message says when `save` is None.
        where: `where(step) -> text` (" (epoch 2, batch 5 of 8)") added
            after the step in the message.
        rerun: the message's last clause.

    Put it last in `fit`'s callbacks, after the NaN guard (a step with a
    NaN loss is not saved) and the periodic checkpoint (a step it just
    saved is not saved again: `save` decides). With `steps_per_execution`
    > 1 the boundary is the end of an execution.
    """

    def __init__(
        self,
        signals,
        start_step,
        total,
        save=None,
        kept="",
        where=None,
        rerun="rerun the same command to resume there.",
    ):
        super().__init__()
        self.signals = signals
        self.start_step = self.step = int(start_step)
        self.total = None if total is None else int(total)
        self.save = save
        self.kept = kept
        self.where = where
        self.rerun = rerun
        self._epoch_start = self.start_step

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.step

    def on_train_batch_end(self, batch, logs=None):
        self.step = self._epoch_start + batch + 1
        if self.signals.received is None:
            return
        self.model.stop_training = True
        # `self.model` syncs JAX's training state into the variables.
        kept = self.save(self.model, self.step, logs or {}) if self.save else self.kept
        where = self.where(self.step) if self.where else ""
        self.signals.stop(f"after step {self.step} of {self.total}{where}: {kept}; {self.rerun}")


@contextlib.contextmanager
def interruptible():
    """Wraps a whole run (the recipes): a first SIGTERM or SIGINT raises
    `Interrupted` wherever the run is, later ones are ignored (the clean-up
    of the first goes on). Training loops install their own handlers
    (`StopSignals`) inside."""
    if not _in_main_thread():
        yield
        return
    raised = []

    def interrupt(signum, frame):
        if raised or _stopping.is_set():
            return
        raised.append(signum)
        raise Interrupted(signum)

    _stopping.clear()
    previous = {signum: signal.signal(signum, interrupt) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stopping.clear()
