"""Training utilities: optimizers and learning-rate schedules (backend
agnostic; TensorFlow-only pieces such as strategies live beside them)."""

from bertzoo.training.optimizers import (
    DEFAULT_EXCLUSIONS,
    OPTIMIZERS,
    AdamW,
    Lamb,
    make_optimizer,
    uses_weight_decay,
)
from bertzoo.training.schedules import WarmupLinearDecay

__all__ = [
    "DEFAULT_EXCLUSIONS",
    "OPTIMIZERS",
    "AdamW",
    "Lamb",
    "WarmupLinearDecay",
    "make_optimizer",
    "uses_weight_decay",
]
