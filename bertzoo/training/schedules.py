"""Learning-rate schedules for pre-training and fine-tuning."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bertzoo")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `learning_rate` over `warmup_steps`, then
    linear decay to 0 at `total_steps` (and 0 after).

    Two decay forms:
    - `continuous=False` (default, google-research/bert `optimization.py`):
      `lr * (1 - step / total_steps)` after warmup, the polynomial decay that
      started at step 0, so the rate drops slightly at the end of warmup
      (`lr * (1 - warmup_steps / total_steps)`).
    - `continuous=True` (Hugging Face `get_linear_schedule_with_warmup`):
      `lr * (total_steps - step) / (total_steps - warmup_steps)`, which
      reaches exactly `lr` at the end of warmup.

    `micro_steps`: optimizer calls per weight update. Keras optimizers with
    `gradient_accumulation_steps=n` evaluate the schedule at the micro-batch
    counter, so pass `micro_steps=n` to count weight updates instead
    (`make_optimizer` does this).

    Example:
    >>> schedule = WarmupLinearDecay(1e-4, warmup_steps=10, total_steps=100)
    >>> float(schedule(5)), float(schedule(55))
    (5e-05, 4.5e-05)
    """

    def __init__(self, learning_rate, warmup_steps, total_steps, continuous=False, micro_steps=1):
        if total_steps <= 0 or warmup_steps < 0 or warmup_steps > total_steps:
            raise ValueError(
                "Need 0 <= warmup_steps <= total_steps and total_steps > 0; got "
                f"warmup_steps={warmup_steps}, total_steps={total_steps}."
            )
        if micro_steps < 1:
            raise ValueError(f"micro_steps must be >= 1, got {micro_steps}.")
        self.learning_rate = learning_rate
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.continuous = bool(continuous)
        self.micro_steps = int(micro_steps)

    def __call__(self, step):
        # float32 counts exactly up to 2**24 steps.
        step = ops.floor(ops.cast(step, "float32") / self.micro_steps)
        lr = ops.cast(self.learning_rate, "float32")
        warmup = float(self.warmup_steps)
        total = float(self.total_steps)
        if self.continuous:
            decay = lr * (total - step) / max(total - warmup, 1.0)
        else:
            decay = lr * (1.0 - step / total)
        decay = ops.maximum(decay, 0.0)
        if self.warmup_steps == 0:
            return decay
        warm = lr * step / warmup
        return ops.where(step < warmup, warm, decay)

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "continuous": self.continuous,
            "micro_steps": self.micro_steps,
        }
