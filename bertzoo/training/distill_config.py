"""Distillation's settings (`bertzoo.training.distill`): `DistillConfig`,
the methods and their defaults.

Importing it imports neither Keras nor TensorFlow: the recipe's --help, and
its argument errors, need neither.
"""

import dataclasses

from bertzoo.training.runs import PRECISIONS as RUN_PRECISIONS
from bertzoo.training.runs import (
    STRATEGIES,
    RunConfig,
    batching_setting,
    comma_ints,
    comma_strings,
    setting,
    verbose_setting,
)

METHODS = ("distilbert", "tinybert-general", "tinybert-task")
# The distillers have no loss scaling: no mixed_float16.
PRECISIONS = tuple(p for p in RUN_PRECISIONS if p != "mixed_float16")
# Per method: steps (per stage), learning rate, temperature, sequence length.
METHOD_DEFAULTS = {
    "distilbert": {"steps": 300, "learning_rate": 5e-4, "temperature": 2.0, "sequence_length": 128},
    "tinybert-general": {
        "steps": 300,
        "learning_rate": 1e-3,
        "temperature": 1.0,
        "sequence_length": 128,
    },
    # Whole epochs with early stopping, at a sequence length from the data
    # (`bertzoo.training.distill_task`); --steps / --sequence-length fix them instead.
    "tinybert-task": {
        "epochs": 10,
        "prediction_epochs": 10,
        "learning_rate": 1e-3,
        "temperature": 1.0,
    },
}


def parse_layer_map(text):
    """argparse type of `--layer-map`: 1-based teacher layers ("3,6,9,12")
    -> the 0-based tuple of `DistillConfig.layer_map`."""
    return tuple(i - 1 for i in comma_ints(text))


@dataclasses.dataclass
class DistillConfig(RunConfig):
    """Settings of one distillation run (the recipe's flags)."""

    run_kind = "distill"
    # A resumed run refuses these files changed since it started (its
    # checkpoints were trained on them): the task files, or the corpus.
    input_files = ("train", "validation", "corpus")
    path_settings = ("teacher",)

    method: str = setting(
        "tinybert-task",
        "distilbert (KL + MLM + cosine), tinybert-general (stage 1: attention and "
        "hidden states on a corpus) or tinybert-task (stage 2 for a classifier teacher)",
        choices=METHODS,
        group="models",
    )
    teacher: str | None = setting(
        None,
        "preset name or directory; tinybert-task: a fine-tune recipe output (DIR/best); "
        "default: runs/finetune/best or MiniLM",
        group="models",
    )  # None: see resolve_teacher()
    student: str | None = setting(
        None,
        "built-in preset (e.g. tinybert_4l_312d, distilbert_base), JSON file of backbone "
        "settings, or preset directory with weights; default: TinyBERT-4-style (distilbert: half "
        "the teacher's layers)",
        group="models",
    )
    output: str = setting(
        "runs/distill", "run directory (student/, report.json, logs/)", group="output"
    )
    corpus: tuple = setting(
        (),
        "text files for distilbert / tinybert-general, comma-separated (default: built-in corpus)",
        parse=comma_strings,
        group="data",
    )
    train: str | None = setting(
        None,
        "tinybert-task training file (TSV/CSV/JSONL); default: built-in sentiment set",
        group="data",
    )
    validation: str | None = setting(
        None, "held-out file for the quality score, same format", group="data"
    )
    text_columns: tuple = setting(
        (),
        "text column of TSV/CSV/JSONL files",
        flag="--text-column",
        parse=comma_strings,
        group="data",
    )
    label_column: str | None = setting(None, "label column of TSV/CSV/JSONL files", group="data")
    steps: int | None = setting(
        None,
        "steps per stage (corpus methods: default 300); tinybert-task: a fixed number of "
        "intermediate-layer steps instead of epochs with early stopping",
        group="training",
    )
    prediction_steps: int | None = setting(
        None,
        "tinybert-task prediction-layer steps with --steps (default: --steps)",
        group="training",
    )
    epochs: int | None = setting(
        None,
        "tinybert-task: most epochs of intermediate-layer distillation over the training texts "
        "plus augmentations (default 10; fewer when the held-out slice stops improving)",
        group="training",
    )
    prediction_epochs: int | None = setting(
        None,
        "tinybert-task: most epochs of prediction-layer distillation (default 10; the best "
        "epoch on the held-out slice is the student)",
        group="training",
    )
    patience: int = setting(
        2,
        "tinybert-task: stop a stage after this many epochs without improvement on the "
        "held-out slice of the training data",
        group="training",
    )
    holdout_fraction: float = setting(
        0.1,
        "tinybert-task: share of the training texts held out (not trained on, not augmented) "
        "for early stopping; --validation is never used for it",
        group="data",
    )
    batch_size: int = setting(32, "global batch size", group="training")
    learning_rate: float | None = setting(
        None, "peak AdamW learning rate (default: distilbert 5e-4, tinybert 1e-3)", group="training"
    )
    warmup_proportion: float = setting(0.1, "share of steps with linear warmup", group="training")
    sequence_length: int | None = setting(
        None,
        "packed length; default: corpus methods 128, tinybert-task the shortest multiple of 8 "
        "that keeps 99% of the training texts whole, at most the teacher's fine-tuning length",
        group="training",
    )
    batching: str = batching_setting()
    temperature: float | None = setting(
        None, "soft-target temperature (distilbert 2, tinybert 1)", group="training"
    )
    kl_weight: float = setting(5.0, "weight of the kl loss", group="training")
    mlm_weight: float = setting(2.0, "weight of the mlm loss", group="training")
    cosine_weight: float = setting(1.0, "weight of the cosine loss", group="training")
    attention_weight: float = setting(1.0, "weight of the attention loss", group="training")
    hidden_weight: float = setting(1.0, "weight of the hidden loss", group="training")
    embedding_weight: float = setting(1.0, "weight of the embedding loss", group="training")
    layer_map: tuple | None = setting(
        None,
        "teacher layer per student layer, 1-based, e.g. 3,6,9,12 (default: uniform)",
        parse=parse_layer_map,
        group="models",
    )  # 0-based here
    init_from_teacher: bool = setting(
        True,
        "start a student without weights from the teacher: distilbert at the teacher's width "
        "copies its embeddings and every other layer, any other student gets the teacher's "
        "embeddings projected onto their principal directions (default: on)",
        group="models",
    )  # see _init_student
    augment: int = setting(
        20, "tinybert-task: augmented copies per training text (0: none)", group="data"
    )
    augment_method: str = setting(
        "auto",
        "tinybert-task: mlm (words replaced by what a masked-LM head proposes: the teacher's, "
        "or that of the model it was fine-tuned from), embedding (nearest neighbours in the "
        "teacher's token embeddings) or auto (mlm where a head exists)",
        choices=("auto", "mlm", "embedding"),
        group="data",
    )
    eval_fraction: float = setting(
        0.1, "corpus methods: held-out share of the documents", group="data"
    )
    benchmark_batch_size: int = setting(
        32, "batch size of the speed-up measurement", group="output"
    )
    benchmark_sequence_length: int = setting(
        128, "sequence length of the speed-up measurement", group="output"
    )
    precision: str = setting(
        "float32", "float32 or mixed_bfloat16", choices=PRECISIONS, group="training"
    )
    strategy: str = setting(
        "default", "distribution strategy", choices=STRATEGIES, group="training"
    )
    tpu: str | None = setting(
        None, "TPU name or grpc:// address (with --strategy tpu)", group="training"
    )
    seed: int = setting(
        0, "seed of the data order, augmentation and initialisation", group="training"
    )
    resume: bool = setting(
        True,
        "tinybert-task: continue from the last finished epoch in --output (default); "
        "--no-resume starts over",
        group="output",
        compared=False,
    )
    verbose: int = verbose_setting(2)
