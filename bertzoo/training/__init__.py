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

from bertzoo.lazy import lazy_exports

# Loaded on first use, so that the recipes' settings (and their --help) are
# read without Keras or TensorFlow.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CheckpointManager": "bertzoo.training.checkpoint",
        "PeriodicCheckpoint": "bertzoo.training.checkpoint",
        "TrainingCheckpointError": "bertzoo.training.checkpoint",
        "STRATEGIES": "bertzoo.training.runs",
        "Distribution": "bertzoo.training.distribute",
        "DistributionError": "bertzoo.training.distribute",
        "make_distribution": "bertzoo.training.distribute",
        "DEFAULT_EXCLUSIONS": "bertzoo.training.optimizers",
        "OPTIMIZERS": "bertzoo.training.runs",
        "AdamW": "bertzoo.training.optimizers",
        "Lamb": "bertzoo.training.optimizers",
        "make_optimizer": "bertzoo.training.optimizers",
        "uses_weight_decay": "bertzoo.training.optimizers",
        "WarmupLinearDecay": "bertzoo.training.schedules",
    },
)

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
