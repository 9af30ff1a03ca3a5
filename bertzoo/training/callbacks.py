"""Training callbacks shared by the recipes."""

import logging
import time

import keras
import tensorflow as tf


class TensorBoardLogger(keras.callbacks.Callback):
    """Writes loss, accuracies and the learning rate every `every` global
    steps, and evaluation metrics on demand, to a TensorBoard directory."""

    def __init__(self, log_dir, every, start_step=0, enabled=True):
        super().__init__()
        self.every = every
        self.start_step = start_step
        self.writer = tf.summary.create_file_writer(str(log_dir)) if enabled else None
        self._last = start_step

    def start_at(self, step):
        """The next `fit` continues the step count from global step `step`
        (its batch i is step `step` + i + 1)."""
        self.start_step = self._last = step

    def _learning_rate(self):
        optimizer = self.model.optimizer
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        # Keras evaluates the schedule at the optimizer's iteration count.
        return float(keras.ops.convert_to_numpy(inner.learning_rate))

    def on_train_batch_end(self, batch, logs=None):
        step = self.start_step + batch + 1
        if self.writer is None or step // self.every == self._last // self.every:
            return
        self._last = step
        self.write({f"train/{k}": v for k, v in (logs or {}).items()}, step)
        self.write({"train/learning_rate": self._learning_rate()}, step)

    def write(self, scalars, step):
        if self.writer is None:
            return
        with self.writer.as_default():
            for name, value in scalars.items():
                tf.summary.scalar(name, float(value), step=step)
        self.writer.flush()


class Throughput(keras.callbacks.Callback):
    """Examples per second over a `fit`, leaving out the first execution
    (tracing and XLA compilation)."""

    def __init__(self, batch_size):
        super().__init__()
        self.batch_size = batch_size
        self.first = None
        self.steps = 0
        self.seconds = 0.0

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self.first is None:
            self.first = (now, batch + 1)
        else:
            self.steps = batch + 1 - self.first[1]
            self.seconds = now - self.first[0]


class ProgressLog(keras.callbacks.Callback):
    """One log line every `every` global steps (and at `total`): the step and
    the running metrics, for logs that are not a terminal (CI, redirected
    output), where Keras' progress bar would write a frame per update."""

    def __init__(self, every, total, start_step=0, logger=None):
        super().__init__()
        self.every = max(1, int(every))
        self.total = int(total)
        self.start_step = start_step
        self.logger = logger or logging.getLogger(__name__)

    def start_at(self, step):
        """The next `fit` continues the step count from global step `step`."""
        self.start_step = step

    def on_train_batch_end(self, batch, logs=None):
        step = self.start_step + batch + 1
        if step % self.every and step != self.total:
            return
        metrics = ", ".join(f"{k} {float(v):.4f}" for k, v in sorted((logs or {}).items()))
        self.logger.info("step %d/%d: %s", step, self.total, metrics)
