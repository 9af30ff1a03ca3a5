"""The distillation run behind `recipes/distill.py`: a frozen teacher, a
smaller student, one of three methods, and a report of what the student kept
(`quality_retained`) and gained (`speedup`), both measured in the same run.

Methods:
- "distilbert": DistilBERT pre-training distillation on a text corpus
  (student initialised from every other teacher layer when the widths match).
- "tinybert-general": TinyBERT stage 1 (attention, embedding and hidden
  states) on a text corpus.
- "tinybert-task": TinyBERT stage 2 for a classifier teacher (the fine-tune
  recipe's output): intermediate layers, then the prediction layer, on the
  task's training texts plus TinyBERT-style augmentations labelled by the
  teacher; scored by accuracy on the validation split, which the student
  never trains on.

A student without weights of its own starts from the teacher's embeddings
(projected to its width; see `_init_student`).

One run at a time per output directory (`bertzoo.io.rundir`): the run locks
it and claims the paths it writes before writing them (a user's file there is
an `OutputError`). A NaN or infinite loss in either stage stops the run with
`NonFiniteError` (`bertzoo.training.guards`); student/ stays as it was.

`run_distillation(DistillConfig(...))` is what the recipe and tests call.
"""

import dataclasses
import logging
from pathlib import Path

import keras

from bertzoo import tasks as task_kinds
from bertzoo.data.examples import min_seq_len
from bertzoo.distill.evaluate import measure_speedup
from bertzoo.distill.layer_map import DistillationError, resolve_layer_map, suggested_layer_map
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.tasks import BertClassifier
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.training.distill_config import (
    METHOD_DEFAULTS,
    METHODS,
    PRECISIONS,
    DistillConfig,
    parse_layer_map,
)
from bertzoo.training.distill_context import REPORT_FILE, STUDENT_DIR, Distillation, save_student
from bertzoo.training.distill_corpus import distill_corpus
from bertzoo.training.distill_task import distill_task
from bertzoo.training.distill_task_data import teacher_record
from bertzoo.training.distribute import make_distribution
from bertzoo.training.guards import check_finite_settings
from bertzoo.training.lifecycle import Run
from bertzoo.training.runs import (
    CHECKPOINTS_DIR,
    CORPUS_FILE,
    DATA_DIR,
    LOGS,
    RUN_SETTINGS_FILE,
    STRATEGIES,
)
from bertzoo.training.students import (
    build_student,
    check,
    init_student,
    needs_own_teacher,
    resolve_teacher,
    run_dtype,
)

logger = logging.getLogger(__name__)

# Defined in the stage modules, named here as before.
__all__ = [
    "METHODS",
    "METHOD_DEFAULTS",
    "PRECISIONS",
    "REPORT_FILE",
    "STUDENT_DIR",
    "DistillConfig",
    "parse_layer_map",
    "resolve_defaults",
    "run_distillation",
    "teacher_record",
    "validate_config",
]


def validate_config(config):
    """Checks every setting before any work; errors say what is valid."""
    check_finite_settings(config, DistillationError)
    check(
        config.method in METHODS,
        f"method must be one of {', '.join(METHODS)}, got {config.method!r}.",
    )
    check(
        (config.train is None) == (config.validation is None),
        "Pass both --train and --validation, or neither (the built-in sentiment set).",
    )
    for name in ("train", "validation"):
        path = getattr(config, name)
        check(path is None or Path(path).is_file(), f"--{name} file {path} does not exist.")
    for path in config.corpus:
        check(Path(path).exists(), f"--corpus file {path} does not exist.")
    if config.method != "tinybert-task":
        check(
            config.train is None,
            "--train/--validation are for --method tinybert-task; "
            "distilbert and tinybert-general read --corpus text files.",
        )
    for name in (
        "steps",
        "prediction_steps",
        "epochs",
        "prediction_epochs",
        "patience",
        "batch_size",
        "learning_rate",
        "sequence_length",
        "temperature",
        "benchmark_batch_size",
        "benchmark_sequence_length",
    ):
        value = getattr(config, name)
        check(value is None or value > 0, f"{name} must be positive, got {value}.")
    for name in (
        "kl_weight",
        "mlm_weight",
        "cosine_weight",
        "attention_weight",
        "hidden_weight",
        "embedding_weight",
        "augment",
    ):
        check(getattr(config, name) >= 0, f"{name} must be >= 0, got {getattr(config, name)}.")
    if config.sequence_length is not None and config.method in METHODS:
        # tinybert-task: [CLS] text [SEP]; corpus methods: create_examples' minimum.
        needed = 3 if config.method == "tinybert-task" else min_seq_len("none")
        check(
            config.sequence_length >= needed,
            f"--sequence-length {config.sequence_length} is too short: --method {config.method} needs at "
            f"least {needed} tokens ([CLS] text [SEP]{', with room to mask' if needed > 3 else ''}).",
        )
    check(
        0 <= config.warmup_proportion < 1,
        f"warmup_proportion must be in [0, 1), got {config.warmup_proportion}.",
    )
    check(
        0 <= config.holdout_fraction < 0.5,
        f"holdout_fraction must be in [0, 0.5), got {config.holdout_fraction}.",
    )
    check(
        config.augment_method in ("auto", "mlm", "embedding"),
        f"augment_method must be auto, mlm or embedding, got {config.augment_method!r}.",
    )
    check(
        0 <= config.eval_fraction < 1,
        f"eval_fraction must be in [0, 1), got {config.eval_fraction}.",
    )
    check(
        config.precision in PRECISIONS,
        f"precision must be one of {', '.join(PRECISIONS)}, got {config.precision!r}.",
    )
    check(
        config.strategy in STRATEGIES,
        f"strategy must be one of {', '.join(STRATEGIES)}, got {config.strategy!r}.",
    )


def resolve_defaults(config):
    changes = {
        k: v for k, v in METHOD_DEFAULTS[config.method].items() if getattr(config, k) is None
    }
    config = dataclasses.replace(config, **changes)
    if config.prediction_steps is None and config.steps is not None:
        config = dataclasses.replace(config, prediction_steps=config.steps)
    validate_config(config)
    return config


# === The run ===


def run_distillation(config):
    """Runs distillation as `config` says; returns the report written to
    `report.json`. The stages: `bertzoo.training.distill_corpus` (distilbert,
    tinybert-general) or `bertzoo.training.distill_task` (tinybert-task),
    over the run lifecycle of `bertzoo.training.lifecycle`."""
    validate_config(config)
    config = resolve_defaults(config)
    distribution = make_distribution(config.strategy, tpu=config.tpu)
    distribution.check_batch_size(config.batch_size)
    with Run(config, DistillationError, chief=distribution.is_chief) as run:
        return _distill(run, distribution)


def _written(config):
    """The paths (under the output) the run writes, claimed before any is."""
    names = [LOGS, STUDENT_DIR, REPORT_FILE, CHECKPOINTS_DIR, RUN_SETTINGS_FILE]
    if needs_own_teacher(config):
        names.append("teacher")
    if config.method == "tinybert-task" and config.train is None:
        names += [f"data/{name}" for name in task_kinds.get("classification").builtin_files]
    if config.method != "tinybert-task" and not config.corpus:
        names.append(f"{DATA_DIR}/{CORPUS_FILE}")
    return names


def _distill(run, distribution):
    config = run.config
    keras.utils.set_random_seed(config.seed)
    if needs_own_teacher(config):
        run.open(_written(config))  # before the teacher is fine-tuned into output/teacher
    teacher_path = resolve_teacher(config)
    tokenizer = tokenizer_from_preset(teacher_path)
    run.start_clock()
    context = _models(run, distribution, teacher_path, tokenizer)
    run.open(_written(config))
    run.output.mkdir(parents=True, exist_ok=True)
    with run.preemptible() as context.signals:  # SIGTERM/SIGINT: stop at a step boundary
        if config.method == "tinybert-task":
            quality, student_model = distill_task(context)
        else:
            quality, student_model = distill_corpus(context)
    context.signals = None
    report = _report(context, quality, student_model, run.seconds())
    if config.method != "tinybert-task":  # task students are published at their best epoch
        save_student(context, student_model)
        run.remove(CHECKPOINTS_DIR)  # a preempted step's, now published
    run.publish(REPORT_FILE, report)
    for key in ("teacher_params", "student_params", "speedup", "quality_retained"):
        logger.info("%s: %s", key, report[key])
    return report


def _models(run, distribution, teacher_path, tokenizer):
    """The teacher, the student's backbone, the layer map between them and
    how the student started, in the distribution's scope: the run's
    `Distillation` context."""
    config = run.config
    with distribution.scope():
        teacher = _teacher(config, teacher_path)
        t_backbone = teacher.backbone if config.method == "tinybert-task" else teacher
        s_backbone, has_weights = build_student(config, t_backbone)
        layer_map = _layer_map(config, t_backbone, s_backbone)
        logger.info(
            "Teacher %s: %d layers x %d; student: %d layers x %d, %d heads.",
            teacher_path,
            t_backbone.num_layers,
            t_backbone.hidden_dim,
            s_backbone.num_layers,
            s_backbone.hidden_dim,
            s_backbone.num_heads,
        )
        student_init = init_student(config, t_backbone, s_backbone, has_weights)
    context = Distillation(
        run, distribution, teacher, teacher_path, s_backbone, layer_map, tokenizer
    )
    context.student_init = student_init
    return context


def _teacher(config, teacher_path):
    """The teacher: a classifier for tinybert-task, else a backbone."""
    dtype = run_dtype(config)
    if config.method != "tinybert-task":
        return BertBackbone.from_preset(teacher_path, **dtype)
    teacher = BertClassifier.from_preset(teacher_path, **dtype)
    check(
        teacher.head_loaded and teacher.num_classes >= 2,
        f"--method tinybert-task needs a classifier teacher (a fine-tune recipe output with a "
        f"classification head); {teacher_path} has none.",
    )
    return teacher


def _layer_map(config, t_backbone, s_backbone):
    """The teacher layer each student layer learns from (0-based), or None
    (distilbert's default)."""
    layer_map = config.layer_map
    if (
        layer_map is None
        and config.student is None
        and t_backbone.num_layers % s_backbone.num_layers
    ):
        layer_map = suggested_layer_map(t_backbone.num_layers, s_backbone.num_layers)
        logger.info(
            "Layer map (default student): student layer i <- teacher layer %s (1-based).",
            [i + 1 for i in layer_map],
        )
    if config.method != "distilbert":
        layer_map = resolve_layer_map(layer_map, t_backbone.num_layers, s_backbone.num_layers)
    return layer_map


def _report(context, quality, student_model, seconds):
    """The run's report (`REPORT_FILE`): size, speed and quality of the
    student against the teacher."""
    config, teacher, s_backbone = context.config, context.teacher, context.student
    t_backbone = teacher.backbone if config.method == "tinybert-task" else teacher
    bench_length = min(
        config.benchmark_sequence_length,
        t_backbone.max_sequence_length,
        s_backbone.max_sequence_length,
    )
    speed = measure_speedup(teacher, student_model, config.benchmark_batch_size, bench_length)
    layer_map = context.layer_map
    return {
        "method": config.method,
        "teacher": context.teacher_path,
        "teacher_params": int(teacher.count_params()),
        "student_params": int(student_model.count_params()),
        "speedup": speed["speedup"],
        "quality_retained": quality["quality_retained"],
        **{k: v for k, v in quality.items() if k != "quality_retained"},
        "inference": speed,
        "student_layers": s_backbone.num_layers,
        "student_hidden_dim": s_backbone.hidden_dim,
        "layer_map": None if layer_map is None else [int(i) for i in layer_map],
        "student_init": context.student_init,
        "stages": context.stages,
        "seconds": round(seconds, 1),
        "student": str(context.student_dir),
        "config": config.to_json(),
    }
