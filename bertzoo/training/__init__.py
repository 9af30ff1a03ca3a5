"""Training utilities: optimizers and learning-rate schedules, distribution
strategies, atomic checkpoints with resume, and the runs behind the recipes:
pre-training (`bertzoo.training.pretrain`), fine-tuning
(`bertzoo.training.finetune`) and distillation (`bertzoo.training.distill`),
each split by stage (`pretrain_config`, `pretrain_data`, `pretrain_model`;
`finetune_data`, `finetune_loop`; `distill_context`, `distill_corpus`,
`distill_task_data`, `distill_task`), over one run lifecycle
(`bertzoo.training.lifecycle`: lock, claim, resume or start over, settings
record, publish, TensorBoard, progress), with the settings and flags they
share (`bertzoo.training.runs`)."""

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
