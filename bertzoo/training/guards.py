"""Guards against NaN and infinity: in the settings, and during training.

- `check_finite_settings(config, error)`: every float setting of a run's
  config dataclass must be finite (`--learning-rate nan` would otherwise
  train, and publish, NaN weights).
- `NonFiniteGuard`: a Keras callback that stops training with
  `NonFiniteError` when a reported loss is NaN or infinite, naming the step.
  Put it BEFORE the checkpoint callback in `fit`'s list (Keras calls
  callbacks in list order): the exception then leaves `fit` before a
  checkpoint of the broken state is written, and before the run publishes
  anything. At the end of `fit` it also checks the weights (an update can
  make them NaN after a finite loss), before the run evaluates or publishes
  them; `CheckpointManager.save` refuses NaN weights itself.
"""

import dataclasses
import math
import numbers

import keras
import numpy as np

from bertzoo.errors import NonFiniteError


def check_finite_settings(config, error):
    """Raises `error` ("--learning-rate must be a finite number, got nan")
    for the first float setting of the dataclass `config` (or float in a
    tuple setting) that is NaN or infinite."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        for item in value if isinstance(value, tuple) else (value,):
            if (
                isinstance(item, numbers.Real)
                and not isinstance(item, bool)
                and not math.isfinite(item)
            ):
                flag = "--" + field.name.replace("_", "-")
                raise error(f"{flag} must be a finite number, got {item}.")


def _finite(value):
    return bool(np.all(np.isfinite(np.asarray(keras.ops.convert_to_numpy(value), "float64"))))


class NonFiniteGuard(keras.callbacks.Callback):
    """Raises `NonFiniteError` when a loss in the logs is NaN or infinite.

    Args:
        start_step: the global step training starts at (the restored step).
        kept: what the error says was kept, e.g. "The last good checkpoint
            was kept; preset/ was not written."
        stage: a name for the error message (e.g. a distillation stage).

    With `steps_per_execution` > 1 Keras reports once per execution; the
    error then names the steps of that execution.
    """

    def __init__(self, start_step=0, kept="", stage=None):
        super().__init__()
        self.start_step = self.step = start_step
        self.kept = kept
        self.stage = stage
        self._epoch_start = start_step
        self._first = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.step

    def on_train_batch_begin(self, batch, logs=None):
        self._first = self._epoch_start + batch + 1

    def on_train_batch_end(self, batch, logs=None):
        self.step = self._epoch_start + batch + 1
        logs = logs or {}
        for name in sorted(
            (k for k in logs if "loss" in k), key=lambda k: k != "loss"
        ):  # the total first
            if not _finite(logs[name]):
                self._fail(f"the training {name} became {float(np.asarray(logs[name]))}")

    def on_train_end(self, logs=None):
        # `self.model` syncs JAX's training state into the variables.
        for variable in self.model.trainable_weights:
            if not _finite(variable):
                self._fail(f"the weight {variable.path} became NaN or infinite")

    def _fail(self, what):
        first = self._first if self._first is not None else self.step
        where = f"step {self.step}" if first >= self.step else f"steps {first}-{self.step}"
        stage = f" ({self.stage})" if self.stage else ""
        kept = f" {self.kept}" if self.kept else ""
        self.model.stop_training = True
        raise NonFiniteError(
            f"Training stopped at {where}{stage}: {what}.{kept} Lower the learning rate (--learning-rate) "
            "or check the data."
        )
