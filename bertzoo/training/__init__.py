"""Training utilities: optimizers and learning-rate schedules, distribution
strategies, atomic checkpoints with resume, and the runs behind the recipes:
pre-training (`bertzoo.training.pretrain`), fine-tuning
(`bertzoo.training.finetune`) and distillation (`bertzoo.training.distill`),
with the plumbing they share (`bertzoo.training.runs`)."""

from bertzoo.training.checkpoint import (
    CheckpointManager,
    PeriodicCheckpoint,
    TrainingCheckpointError,
)
from bertzoo.training.distribute import (
    STRATEGIES,
    Distribution,
    DistributionError,
    make_distribution,
)
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
    "CheckpointManager",
    "Distribution",
    "DistributionError",
    "PeriodicCheckpoint",
    "STRATEGIES",
    "TrainingCheckpointError",
    "make_distribution",
    "DEFAULT_EXCLUSIONS",
    "OPTIMIZERS",
    "AdamW",
    "Lamb",
    "WarmupLinearDecay",
    "make_optimizer",
    "uses_weight_decay",
]
