"""Fine-tuning's settings (`bertzoo.training.finetune`): `FinetuneConfig`,
the run's own settings plus every task kind's, and `FinetuneError`.

Importing it imports neither Keras nor TensorFlow: the recipe's --help, and
its argument errors, need neither.
"""

import dataclasses

from bertzoo import tasks as task_kinds
from bertzoo.errors import BertzooError
from bertzoo.training.kind_settings import compose_config
from bertzoo.training.runs import (
    PRECISIONS,
    STRATEGIES,
    RunConfig,
    batch_size_setting,
    batching_setting,
    device_memory_setting,
    jit_compile_setting,
    setting,
    verbose_setting,
)


class FinetuneError(BertzooError, ValueError):
    """A fine-tuning setting or input is invalid."""


@dataclasses.dataclass
class _FinetuneRunSettings(RunConfig):
    """Settings of one fine-tuning run (the recipe's flags); `FinetuneConfig`
    adds the task kinds' own (`bertzoo.tasks`: e.g. columns, QA windows)."""

    run_kind = "finetune"
    # A resumed run refuses these files changed since it started.
    input_files = ("train", "validation")
    path_settings = ("init",)

    task: str = setting(
        "classification",
        ", ".join(task_kinds.get(n).description for n in task_kinds.names()),
        choices=task_kinds.REGISTERED,
        group="data",
    )
    train: str | None = setting(
        None,
        "training file (TSV/CSV/JSONL, CoNLL or SQuAD JSON); default: the built-in dataset "
        "of --task",
        group="data",
    )
    validation: str | None = setting(None, "validation file, same format as --train", group="data")
    init: str | None = setting(
        None,
        "preset name, bertzoo preset directory (e.g. runs/pretrain/preset) or Hugging Face "
        "directory; default: the MiniLM checkpoint",
        group="model",
    )
    vocabulary: str | None = setting(
        None, "vocabulary file, for built-in (architecture) presets", group="model"
    )
    output: str = setting(
        "runs/finetune", "run directory (best/, logs/, metrics.json)", group="output"
    )
    learning_rate: float | None = setting(
        None,
        "peak AdamW learning rate (default, first that applies: 1e-3 with --lora-rank; 1e-4 "
        "on the built-in tagging/QA sets; else 5e-5)",
        group="training",
    )
    epochs: int | None = setting(None, "default 3 (built-in tagging/QA sets 4)", group="training")
    batch_size: int | str | None = batch_size_setting(
        None, "global batch size (default 32; built-in tagging/QA sets 16)"
    )
    device_memory: str | None = device_memory_setting()
    warmup_proportion: float = setting(
        0.1, "share of steps with linear warmup (then linear decay to 0)", group="training"
    )
    weight_decay: float = setting(
        0.01, "AdamW weight decay (not on LayerNorm and bias variables)", group="training"
    )
    sequence_length: int | None = setting(
        None,
        "packed length (QA: window length); default: the shortest multiple of 8 that keeps "
        "99% of the training examples whole, up to the model's positions (QA: 128; the "
        "built-in datasets: 64)",
        group="training",
    )
    dropout: float = setting(0.1, "head dropout", group="model")
    lora_rank: int | None = setting(
        None,
        "LoRA: train rank-N adapters on the --lora-targets projections, and the head, with "
        "the rest of the backbone frozen (default: full fine-tuning; the learning rate then "
        "defaults to 1e-3). best/ holds the merged model, adapter/ the adapter alone",
        group="model",
    )
    lora_alpha: float | None = setting(
        None,
        "LoRA scale numerator: adapters are scaled by alpha / rank (default: the rank)",
        group="model",
    )
    lora_targets: str = setting(
        "all",
        "LoRA: the Dense layers that get adapters: all = every projection of the encoder "
        "blocks (query, key, value, attention output, both feed-forward layers), attention = "
        "query and value (fewer parameters, lower accuracy), or comma-separated layer names; "
        "default %(default)s",
        group="model",
    )
    seed: int = setting(0, "seed of the data order and initialisation", group="training")
    precision: str = setting(
        "float32",
        "float32, or mixed precision (mixed_float16 adds loss scaling)",
        choices=PRECISIONS,
        group="training",
    )
    strategy: str = setting(
        "default", "distribution strategy", choices=STRATEGIES, group="training"
    )
    tpu: str | None = setting(
        None, "TPU name or grpc:// address (with --strategy tpu)", group="training"
    )
    jit_compile: bool | None = jit_compile_setting()
    batching: str = batching_setting()
    export: str | None = setting(
        None,
        "also write a serving model here (SavedModel + .keras, strings in): a new or empty "
        "directory, or an earlier export with --overwrite",
        group="output",
        compared=False,
    )
    overwrite: bool = setting(
        False,
        "replace an earlier bertzoo export at --export (nothing else is ever replaced)",
        group="output",
        compared=False,
    )
    resume: bool = setting(
        True,
        "continue from the last finished epoch in --output (default); --no-resume starts over",
        group="output",
        compared=False,
    )
    verbose: int = verbose_setting(1)


# The run's settings, then each task kind's (a flag each; recorded and
# compared like the run's own).
FinetuneConfig = compose_config(
    "FinetuneConfig", _FinetuneRunSettings, task_kinds.settings_classes(), __name__
)
