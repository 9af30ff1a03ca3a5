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
import json
import logging
import time
from pathlib import Path

import keras

from bertzoo import batching
from bertzoo import tasks as task_kinds
from bertzoo.data.corpus import read_corpus, tokenize_documents
from bertzoo.data.examples import create_examples, min_seq_len
from bertzoo.data.masking import MaskedLMMasker
from bertzoo.data.pipeline import make_pretraining_dataset
from bertzoo.data.readers import LabelSet
from bertzoo.distill.augment import WORD, augment_texts, mlm_candidates, neighbour_table
from bertzoo.distill.distillers import (
    DistilBertDistiller,
    TinyBertDistiller,
    as_pretrainer,
    prediction_distiller,
)
from bertzoo.distill.evaluate import (
    accuracy,
    hidden_cosine,
    measure_speedup,
    measure_speedup_on_features,
)
from bertzoo.distill.init import init_student_from_teacher
from bertzoo.distill.layer_map import DistillationError, resolve_layer_map, suggested_layer_map
from bertzoo.errors import BertzooError
from bertzoo.io.publish import atomic_directory, atomic_write_text
from bertzoo.io.rundir import RunDirectory
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.models.tasks import BertClassifier
from bertzoo.preprocessing import BertPreprocessor, packed_lengths
from bertzoo.tasks.sentences import text_features
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.training.callbacks import TensorBoardLogger
from bertzoo.training.checkpoint import CheckpointManager
from bertzoo.training.distribute import STRATEGIES, make_distribution
from bertzoo.training.finetune import (
    FinetuneConfig,
    load_split,
)
from bertzoo.training.guards import NonFiniteGuard, check_finite_settings
from bertzoo.training.kind_settings import kind_settings, with_kind_settings
from bertzoo.training.optimizers import make_optimizer
from bertzoo.training.runs import (
    CHECKPOINTS_DIR,
    CORPUS_FILE,
    COVERAGE,
    DATA_DIR,
    LOG_DIR,
    LOGS,
    METRICS_FILE,
    RUN_SETTINGS_FILE,
    RunConfig,
    batching_setting,
    comma_ints,
    comma_strings,
    covering_length,
    log_truncation,
    setting,
    split_documents,
    truncation,
    verbose_setting,
    write_builtin_corpus,
)
from bertzoo.training.runs import (
    PRECISIONS as RUN_PRECISIONS,
)
from bertzoo.training.students import (
    COPY_LAYERS,
    build_student,
    check,
    init_student,
    needs_own_teacher,
    resolve_teacher,
    run_dtype,
)

logger = logging.getLogger(__name__)

METHODS = ("distilbert", "tinybert-general", "tinybert-task")
# The distillers have no loss scaling: no mixed_float16.
PRECISIONS = tuple(p for p in RUN_PRECISIONS if p != "mixed_float16")
REPORT_FILE = "report.json"
STUDENT_DIR = "student"
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
    # (`_run_task`); --steps / --sequence-length fix them instead.
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


# === Data ===


def _corpus_documents(config, tokenizer):
    if config.corpus:
        files = list(config.corpus)
    else:
        files = [str(write_builtin_corpus(Path(config.output) / DATA_DIR / CORPUS_FILE))]
    documents = tokenize_documents(read_corpus(files), tokenizer)
    train, held = split_documents(documents, config.eval_fraction, config.seed)
    check(
        held, "The corpus needs at least 2 documents (separated by blank lines) to hold some out."
    )
    return train, held


def _corpus_examples(config, tokenizer, teacher):
    check(
        config.sequence_length <= teacher.max_sequence_length,
        f"sequence_length={config.sequence_length} is longer than the teacher's "
        f"{teacher.max_sequence_length} positions.",
    )
    train_docs, held_docs = _corpus_documents(config, tokenizer)
    make = lambda docs, seed: create_examples(
        docs, tokenizer, seq_len=config.sequence_length, objective="none", seed=seed
    )  # noqa: E731
    masker = MaskedLMMasker(
        tokenizer, config.sequence_length, max(1, round(0.15 * config.sequence_length))
    )
    return make(train_docs, config.seed), make(held_docs, config.seed + 7), masker


def _inputs_only(ds, keep_positions=False):
    """The model inputs of the pre-training pipeline's (x, y, w) batches,
    without `mask_positions` unless asked."""
    return ds.map(
        lambda x, y, w: {k: v for k, v in x.items() if keep_positions or k != "mask_positions"}
    )


# === Run ===


def _fit(model, dataset, steps, config, tensorboard, stage, start_step=0):
    """Trains one stage for `steps` steps; its TensorBoard steps follow
    `start_step` (the steps of the stages before it in the same log), so
    the stages' curves do not overlap."""
    tensorboard.start_at(start_step)
    logger.info("%s: %d steps", stage, steps)
    # A NaN loss stops the run: the student is not published.
    guard = NonFiniteGuard(
        stage=stage,
        kept=f"Distillation keeps no checkpoints; "
        f"{Path(config.output) / STUDENT_DIR} was not updated.",
    )
    return model.fit(
        dataset,
        epochs=1,
        steps_per_epoch=steps,
        verbose=config.verbose,
        callbacks=[guard, tensorboard],
    )


def _optimizer(config, steps):
    return make_optimizer(
        "adamw",
        config.learning_rate,
        total_steps=steps,
        warmup_steps=int(config.warmup_proportion * steps),
    )


def _history(fit):
    return {k: float(v[-1]) for k, v in fit.history.items()}


def run_distillation(config):
    """Runs distillation as `config` says; returns the report written to
    `report.json`."""
    validate_config(config)
    config = resolve_defaults(config)
    distribution = make_distribution(config.strategy, tpu=config.tpu)
    distribution.check_batch_size(config.batch_size)
    rundir = RunDirectory(config.output, chief=distribution.is_chief)
    try:
        return _run(config, distribution, rundir)
    finally:
        rundir.release()


def _written(config):
    """The paths (under the output) the run writes, claimed before any is."""
    names = [LOGS, STUDENT_DIR, REPORT_FILE]
    if config.method == "tinybert-task":
        names += [CHECKPOINTS_DIR, RUN_SETTINGS_FILE]
    if needs_own_teacher(config):
        names.append("teacher")
    if config.method == "tinybert-task" and config.train is None:
        names += [f"data/{name}" for name in task_kinds.get("classification").builtin_files]
    if config.method != "tinybert-task" and not config.corpus:
        names.append(f"{DATA_DIR}/{CORPUS_FILE}")
    return names


def _open_output(config, rundir):
    """Locks the output (one run at a time) and claims what the run writes:
    a user's file there is an `OutputError`, before anything is written."""
    if not rundir.locked:
        rundir.lock()
        rundir.claim(*_written(config))


def _run(config, distribution, rundir):
    output = Path(config.output)
    keras.utils.set_random_seed(config.seed)
    if needs_own_teacher(config):
        _open_output(config, rundir)  # before the teacher is fine-tuned into output/teacher
    teacher_path = resolve_teacher(config)
    tokenizer = tokenizer_from_preset(teacher_path)
    task = config.method == "tinybert-task"
    dtype = run_dtype(config)
    started = time.perf_counter()
    with distribution.scope():
        if task:
            teacher = BertClassifier.from_preset(teacher_path, **dtype)
            check(
                teacher.head_loaded and teacher.num_classes >= 2,
                f"--method tinybert-task needs a classifier teacher (a fine-tune recipe output with a "
                f"classification head); {teacher_path} has none.",
            )
            t_backbone = teacher.backbone
        else:
            t_backbone = BertBackbone.from_preset(teacher_path, **dtype)
            teacher = t_backbone
        s_backbone, has_weights = build_student(config, t_backbone)
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

    _open_output(config, rundir)
    tensorboard = TensorBoardLogger(output / LOG_DIR, every=10)
    output.mkdir(parents=True, exist_ok=True)
    stages = {}
    if task:
        report_quality, student_model = _run_task(
            config,
            teacher,
            teacher_path,
            s_backbone,
            layer_map,
            tokenizer,
            distribution,
            tensorboard,
            stages,
            rundir,
        )
    else:
        report_quality, student_model = _run_corpus(
            config,
            teacher,
            s_backbone,
            student_init == COPY_LAYERS,
            layer_map,
            tokenizer,
            distribution,
            tensorboard,
            stages,
        )
    seconds = time.perf_counter() - started

    bench_length = min(
        config.benchmark_sequence_length,
        t_backbone.max_sequence_length,
        s_backbone.max_sequence_length,
    )
    speed = measure_speedup(teacher, student_model, config.benchmark_batch_size, bench_length)
    report = {
        "method": config.method,
        "teacher": teacher_path,
        "teacher_params": int(teacher.count_params()),
        "student_params": int(student_model.count_params()),
        "speedup": speed["speedup"],
        "quality_retained": report_quality["quality_retained"],
        **{k: v for k, v in report_quality.items() if k != "quality_retained"},
        "inference": speed,
        "student_layers": s_backbone.num_layers,
        "student_hidden_dim": s_backbone.hidden_dim,
        "layer_map": None if layer_map is None else [int(i) for i in layer_map],
        "student_init": student_init,
        "stages": stages,
        "seconds": round(seconds, 1),
        "student": str(output / STUDENT_DIR),
        "config": config.to_json(),
    }
    if not task:  # task students are published at their best epoch (_run_task)
        _save_student(
            config, student_model, s_backbone, tokenizer, teacher_path, output / STUDENT_DIR
        )
    atomic_write_text(output / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    for key in ("teacher_params", "student_params", "speedup", "quality_retained"):
        logger.info("%s: %s", key, report[key])
    return report


def teacher_record(teacher_path):
    """What the teacher's own fine-tuning run recorded, when the teacher is
    a fine-tune recipe output (DIR/best): its sequence length, its
    validation file and its score there (DIR/metrics.json). None otherwise."""
    directory = Path(teacher_path)
    settings_file = directory / "finetune.json"
    if not settings_file.is_file():
        return None
    try:
        settings = json.loads(settings_file.read_text(encoding="utf-8"))
        run = settings.get("config", {})
        length = settings.get("serving", {}).get("sequence_length") or run["sequence_length"]
        record = {
            "sequence_length": int(length),
            "init": settings.get("init"),
            "epoch": settings.get("epoch"),
        }
    except (ValueError, KeyError, TypeError) as e:
        raise DistillationError(f"{settings_file} cannot be read: {e}") from None
    metrics_file = directory.parent / METRICS_FILE
    if metrics_file.is_file():
        try:
            metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
            same = Path(metrics.get("preset", "")).resolve() == directory.resolve()
            dataset = metrics.get("dataset")
            if same and isinstance(metrics.get("validation"), dict):
                record["metric"] = metrics["main_metric"]
                record["value"] = float(metrics["validation"][metrics["main_metric"]])
                record["metrics_file"] = str(metrics_file)
                if isinstance(dataset, dict):
                    record["validation"] = dataset.get("validation")
        except (ValueError, KeyError, TypeError) as e:
            logger.warning(
                "%s cannot be read (%s); the teacher is measured here only.", metrics_file, e
            )
    return record


def _same_file(a, b):
    """Whether two paths name files with the same bytes."""
    try:
        a, b = Path(a), Path(b)
        return (
            a.is_file()
            and b.is_file()
            and (a.resolve() == b.resolve() or a.read_bytes() == b.read_bytes())
        )
    except OSError:
        return False


def _holdout(n, fraction, seed):
    """Indices of the training texts kept out of distillation for early
    stopping: a seeded `fraction` of them (none below 10 texts)."""
    import numpy as np

    count = int(round(n * fraction))
    if count < 1 or n - count < 10:
        return np.zeros(0, "int64")
    return np.sort(np.random.default_rng(seed + 101).permutation(n)[:count])


def _mlm_source(teacher_path, record):
    """A preset with a trained masked-LM head for augmentation: the model
    the teacher was fine-tuned from (its encoder is the one its head was
    trained with, as TinyBERT augments with the pre-trained BERT), else the
    teacher itself; None when neither has one."""
    from bertzoo.models.fill_mask import NoMaskedLMHead, masked_lm_model

    for candidate in ((record or {}).get("init"), teacher_path):
        if not candidate:
            continue
        try:
            return masked_lm_model(candidate), candidate
        except (NoMaskedLMHead, BertzooError, OSError, ValueError):
            continue
    return None, None


def _augment(config, teacher, teacher_path, record, tokenizer, texts, exclude):
    """TinyBERT's augmentation of `texts` (`config.augment` variants each):
    replacements from a masked-LM head (the teacher's, or its fine-tuning
    start's) where `augment_method` allows and one exists, else nearest
    neighbours in the teacher's token-embedding table. Returns (variants,
    dropped, {"method", "source"})."""
    method = config.augment_method
    mlm, source = (None, None)
    if method in ("auto", "mlm"):
        mlm, source = _mlm_source(teacher_path, record)
        check(
            mlm is not None or method == "auto",
            f"--augment-method mlm needs a masked-LM head: neither {teacher_path} nor the model "
            "it was fine-tuned from has one. Use --augment-method embedding (or auto).",
        )
    if mlm is not None:
        candidates = mlm_candidates(mlm[0], mlm[1], texts)
        used = {"method": "mlm", "source": str(source)}
    else:
        words = {w for t in texts for w in WORD.findall(t.lower())}
        neighbours = neighbour_table(
            tokenizer,
            keras.ops.convert_to_numpy(teacher.backbone.token_embedding.embeddings),
            words,
        )
        candidates = [[neighbours.get(w) for w in WORD.findall(t.lower())] for t in texts]
        used = {"method": "embedding", "source": "the teacher's token embeddings"}
    extra, dropped = augment_texts(
        texts, candidates, config.augment, exclude=exclude, seed=config.seed
    )
    return extra, dropped, used


def _task_data(config, teacher, teacher_path, record, tokenizer):
    """Reads the task files; picks the sequence length (given, or from the
    data: 99% of the training texts whole, at most the teacher's training
    length or positions); holds out a slice of the training texts for early
    stopping; augments the rest. Returns a dict of what the run needs."""
    ft = FinetuneConfig(
        task="classification",
        text_columns=config.text_columns,
        label_column=config.label_column,
        train=config.train,
        validation=config.validation,
    )
    train_path, validation_path = config.train, config.validation
    if train_path is None:
        kind = task_kinds.get("classification")
        data_dir = Path(config.output) / "data"
        train_path, validation_path = kind.write_builtin(data_dir, config.seed)
        ft = dataclasses.replace(ft, train=str(train_path), validation=str(validation_path))
        ft = with_kind_settings(ft, kind.builtin_settings(kind_settings(ft, kind)))
    segments = teacher.backbone.num_segments > 0
    label_set = LabelSet(teacher.label_names) if teacher.label_names else None
    positions = teacher.backbone.max_sequence_length
    cap = min(positions, record["sequence_length"]) if record else positions
    train, label_set = load_split(ft, train_path, tokenizer, cap, segments, label_set)
    check(
        len(label_set) == teacher.num_classes,
        f"{train_path} has {len(label_set)} labels; the teacher classifies into {teacher.num_classes}.",
    )
    check(
        all(len(e.texts) == 1 for e in train.examples),
        "tinybert-task augmentation handles single texts, not pairs.",
    )
    validation, _ = load_split(ft, validation_path, tokenizer, cap, segments, label_set)
    kind = task_kinds.get("classification")
    lengths = {
        "train": kind.packed_lengths(train, tokenizer),
        "validation": kind.packed_lengths(validation, tokenizer),
    }
    if config.sequence_length is not None:
        length, chosen_by = config.sequence_length, "--sequence-length"
    else:
        length = covering_length(lengths["train"], cap)
        limit = "the teacher's training length" if record and cap < positions else "its positions"
        chosen_by = f"from the data: keeps {COVERAGE:.0%} of the training texts whole, at most {limit} ({cap})"
    texts = [e.texts[0] for e in train.examples]
    held = _holdout(len(texts), config.holdout_fraction, config.seed)
    held_set = set(int(i) for i in held)
    kept = [t for i, t in enumerate(texts) if i not in held_set]
    pool, dropped, augmentation = list(kept), 0, {"method": "none", "source": None}
    if config.augment:
        extra, dropped, augmentation = _augment(
            config,
            teacher,
            teacher_path,
            record,
            tokenizer,
            kept,
            exclude=[e.texts[0] for e in validation.examples] + [texts[i] for i in held],
        )
        pool += extra
    preprocessor = BertPreprocessor(tokenizer, length, segment_ids=segments)
    lengths["distillation"] = packed_lengths(tokenizer, [(t,) for t in pool])
    shares = truncation(lengths, length)
    log_truncation(shares, length, chosen_by)
    features = lambda rows: text_features(preprocessor, rows)  # noqa: E731
    logger.info(
        "Distillation set: %d training texts (%d more held out for early stopping) + %d "
        "augmented (%s; %d variants equal to held-out texts dropped).",
        len(kept),
        len(held),
        len(pool) - len(kept),
        augmentation["method"],
        dropped,
    )
    val_features = features([e.texts for e in validation.examples])
    held_features = features([(texts[i],) for i in held]) if len(held) else None
    return {
        "train_path": train_path,
        "validation_path": validation_path,
        "ft": ft,
        "segments": segments,
        "sequence_length": length,
        "chosen_by": chosen_by,
        "truncated": shares,
        "pool": pool,
        "pool_features": features([(t,) for t in pool]),
        "validation": validation,
        "validation_features": val_features,
        "held_features": held_features,
        "held_targets": train.targets[held] if len(held) else None,
        "held_count": int(len(held)),
        "original_count": len(kept),
        "augmentation": {**augmentation, "variants": len(pool) - len(kept), "dropped": dropped},
    }


def _teacher_quality(config, teacher, tokenizer, data, record):
    """The teacher's accuracy on --validation at its own settings (its
    fine-tuning run's sequence length), and what that run recorded. When
    the run's validation file is this one, the two must agree."""
    own_length = record["sequence_length"] if record else data["sequence_length"]
    own_length = min(own_length, teacher.backbone.max_sequence_length)
    validation, _ = load_split(
        data["ft"],
        data["validation_path"],
        tokenizer,
        own_length,
        data["segments"],
        LabelSet(teacher.label_names) if teacher.label_names else None,
    )
    measured = accuracy(teacher, validation.features, validation.targets, 64)
    out = {
        "accuracy": measured,
        "sequence_length": own_length,
        "settings": "its fine-tuning run's sequence length"
        if record
        else "the distillation's sequence length (no fine-tuning record found)",
    }
    if record and "value" in record:
        out["recorded"] = {
            "accuracy": record["value"],
            "file": record["metrics_file"],
            "validation": record.get("validation"),
        }
        if record.get("validation") and _same_file(record["validation"], data["validation_path"]):
            out["recorded"]["same_validation_file"] = True
            if abs(measured - record["value"]) > 1e-9:
                logger.warning(
                    "The teacher scores %.4f here but %.4f in %s on the same file: the teacher "
                    "preset changed since that run.",
                    measured,
                    record["value"],
                    record["metrics_file"],
                )
        else:
            out["recorded"]["same_validation_file"] = False
    return out


def _epoch_plan(config, count, batch_size):
    """(steps per epoch, most epochs) of each tinybert-task stage: `--steps`
    / `--prediction-steps` as one fixed epoch each, else whole passes over
    the distillation set, `--epochs` / `--prediction-epochs` at most."""
    per_epoch = max(1, count // batch_size)
    if config.steps is not None:
        return {
            "intermediate": (config.steps, 1),
            "prediction": (config.prediction_steps or config.steps, 1),
        }
    return {
        "intermediate": (per_epoch, config.epochs),
        "prediction": (per_epoch, config.prediction_epochs),
    }


def _run_task(
    config,
    teacher,
    teacher_path,
    s_backbone,
    layer_map,
    tokenizer,
    distribution,
    tensorboard,
    stages,
    rundir,
):
    """TinyBERT task distillation: intermediate layers, then the prediction
    layer, each for whole epochs over the training texts plus augmentations
    until the held-out slice of the training data stops improving
    (`--patience` epochs), with a checkpoint after every epoch so a killed
    run resumes where it stopped. The best prediction-stage epoch is the
    published student."""
    output = Path(config.output)
    record = teacher_record(teacher_path)
    data = _task_data(config, teacher, teacher_path, record, tokenizer)
    plan = _epoch_plan(config, len(data["pool"]), config.batch_size)
    with distribution.scope():
        student = BertClassifier(s_backbone, teacher.num_classes, label_names=teacher.label_names)
        inter = TinyBertDistiller(
            teacher,
            student,
            layer_map=layer_map,
            attention_weight=config.attention_weight,
            hidden_weight=config.hidden_weight,
            embedding_weight=config.embedding_weight,
        )
        inter.compile(
            optimizer=_optimizer(config, plan["intermediate"][0] * plan["intermediate"][1]),
            jit_compile=distribution.resolve_jit_compile(None),
        )
        pred = prediction_distiller(teacher, student, temperature=config.temperature)
        pred.compile(
            optimizer=_optimizer(config, plan["prediction"][0] * plan["prediction"][1]),
            loss="sparse_categorical_crossentropy",
            jit_compile=distribution.resolve_jit_compile(None),
        )
    models = {"intermediate": inter, "prediction": pred}
    probe = batching.trim_to_bucket(
        {k: v[:2] for k, v in data["pool_features"].items()}, data["sequence_length"]
    )
    for model in models.values():
        model(probe)  # built, so a checkpoint can be restored into it
    manager = CheckpointManager(output / CHECKPOINTS_DIR, keep=1)
    state = _resume_state(config, output, manager, rundir, models)
    held = data["held_features"]
    student_dir = output / STUDENT_DIR
    step = state.get("global_step", 0)
    for stage, title in (
        ("intermediate", "Stage 2a: intermediate layers"),
        ("prediction", "Stage 2b: prediction layer"),
    ):
        model = models[stage]
        if stage == "prediction" and state["stage"] == "intermediate":
            state.update(stage="prediction", epoch=0, best=None, bad=0, done=False)
        if state["stage"] != stage or state["done"]:
            if stage == "intermediate":
                inter.release()
            continue
        per_epoch, most = plan[stage]
        for epoch in range(state["epoch"], most):
            tensorboard.start_at(step)
            ds = batching.training_dataset(
                data["pool_features"],
                None,
                config.batch_size,
                config.seed + epoch + (0 if stage == "intermediate" else 1000),
                data["sequence_length"],
                mode=config.batching,
                epochs=None,
            )
            guard = NonFiniteGuard(
                step,
                stage=f"{title}, epoch {epoch + 1}",
                kept=f"The last good checkpoint was kept; {student_dir} was not updated.",
            )
            fit = model.fit(
                ds,
                epochs=1,
                steps_per_epoch=per_epoch,
                verbose=config.verbose,
                callbacks=[guard, tensorboard],
            )
            step += per_epoch
            entry = {"epoch": epoch + 1, **{k: float(v[-1]) for k, v in fit.history.items()}}
            if held is not None and stage == "intermediate":
                score = -_held_loss(inter, held, config.batch_size)
                entry["held_out_loss"] = -score
            elif held is not None:
                score = accuracy(student, held, data["held_targets"], 64)
                entry["held_out_accuracy"] = score
            else:
                score = float(epoch)  # no held-out slice: the last epoch is the best
            state["history"].setdefault(stage, []).append(entry)
            improved = state["best"] is None or score > state["best"]
            if improved:
                state["best"], state["bad"], state["best_epoch"] = score, 0, epoch + 1
                if stage == "prediction":
                    _save_student(config, student, s_backbone, tokenizer, teacher_path, student_dir)
            else:
                state["bad"] += 1
            logger.info(
                "%s, epoch %d/%d: %s%s",
                title,
                epoch + 1,
                most,
                ", ".join(f"{k} {v:.4f}" for k, v in entry.items() if k != "epoch"),
                "" if improved else f" (no better for {state['bad']})",
            )
            state["epoch"] = epoch + 1
            state["done"] = state["bad"] >= config.patience or epoch + 1 == most
            state["global_step"] = step
            manager.save(model, step, _checkpoint_state(state))
            if state["done"]:
                break
        stages[stage] = {
            **(state["history"].get(stage) or [{}])[-1],
            "epochs": len(state["history"].get(stage, [])),
            "best_epoch": state["best_epoch"],
            "steps_per_epoch": per_epoch,
            "stopped_early": state["bad"] >= config.patience,
        }
        if stage == "intermediate":
            inter.release()
    student = BertClassifier.from_preset(student_dir)  # the best prediction-stage epoch
    features = data["validation_features"]
    student_acc = accuracy(student, features, data["validation"].targets, 64)
    teacher_here = accuracy(teacher, features, data["validation"].targets, 64)
    own = _teacher_quality(config, teacher, tokenizer, data, record)
    # Speed on the held-out texts themselves, at their own lengths.
    on_texts = measure_speedup_on_features(teacher, student, features, config.benchmark_batch_size)
    logger.info(
        "speed-up on the %d validation texts (mean %.1f tokens): %.2fx (%.0f vs %.0f texts/s)",
        on_texts["texts"],
        on_texts["mean_tokens"],
        on_texts["speedup"],
        on_texts["student_texts_per_second"],
        on_texts["teacher_texts_per_second"],
    )
    logger.info(
        "validation accuracy: teacher %.4f (at its own sequence length %d; %.4f at %d), "
        "student %.4f",
        own["accuracy"],
        own["sequence_length"],
        teacher_here,
        data["sequence_length"],
        student_acc,
    )
    return {
        "quality_retained": round(student_acc / own["accuracy"], 4) if own["accuracy"] else None,
        "metric": "accuracy",
        "teacher_metric": own["accuracy"],
        "student_metric": student_acc,
        "teacher": own,
        "teacher_at_distillation_length": teacher_here,
        "speedup_on_validation": on_texts["speedup"],
        "inference_on_validation": on_texts,
        "sequence_length": data["sequence_length"],
        "sequence_length_chosen": data["chosen_by"],
        "truncated": data["truncated"],
        "held_out": {
            "file": str(data["validation_path"]),
            "examples": len(data["validation"].examples),
        },
        "early_stopping": {
            "held_out_training_texts": data["held_count"],
            "patience": config.patience,
        },
        "augmentation": data["augmentation"],
        "distillation_examples": len(data["pool"]),
        "history": state["history"],
    }, student


def _held_loss(distiller, features, batch_size):
    """The intermediate-layer distillation loss on the held-out slice (no
    dropout), averaged over its rows."""
    import numpy as np

    total, rows = 0.0, 0
    n = len(features["token_ids"])
    for start in range(0, n, batch_size):
        x = {k: v[start : start + batch_size] for k, v in features.items()}
        out = distiller(x, training=False)
        loss = distiller.compute_loss(x=x, y_pred=out, training=False)
        count = len(x["token_ids"])
        total += float(np.asarray(keras.ops.convert_to_numpy(loss))) * count
        rows += count
    return total / max(rows, 1)


def _checkpoint_state(state):
    return {k: v for k, v in state.items() if k not in ("step", "format_version")}


def _resume_state(config, output, manager, rundir, models):
    """Where the epoch loop starts: fresh, or where the last checkpoint of a
    run with the same settings in `output` left off (its stage's model
    restored). Other settings there are an error, as in the other runs."""
    fresh = {
        "stage": "intermediate",
        "epoch": 0,
        "best": None,
        "best_epoch": None,
        "bad": 0,
        "done": False,
        "history": {},
        "global_step": 0,
    }
    if not config.resume:
        rundir.remove(CHECKPOINTS_DIR)
    elif manager.latest() is not None:
        config.check_resumable(output, DistillationError)
        latest = json.loads((manager.latest() / "state.json").read_text(encoding="utf-8"))
        if latest.get("stage") == "prediction":
            models["intermediate"].release()  # the prediction stage trains the whole student
        state = manager.restore(models[latest.get("stage", "intermediate")])
        logger.info(
            "Resumed from %s: %s stage, %d epochs done.",
            manager.restored_path,
            state["stage"],
            state["epoch"],
        )
        return {**fresh, **_checkpoint_state(state)}
    config.record(output)
    return fresh


def _run_corpus(
    config,
    teacher,
    s_backbone,
    copy_layers,
    layer_map,
    tokenizer,
    distribution,
    tensorboard,
    stages,
):
    train_examples, held_examples, masker = _corpus_examples(config, tokenizer, teacher)
    ds = make_pretraining_dataset(
        train_examples, config.batch_size, masker, seed=config.seed, repeat=True
    )
    held = make_pretraining_dataset(
        held_examples,
        min(config.batch_size, len(held_examples)),
        masker,
        seed=config.seed + 11,
        shuffle=False,
        drop_remainder=False,
    )
    if config.batching != "fixed":  # each batch padded to its longest sequence's bucket
        ds = batching.trim_dataset(ds, config.sequence_length)
        held = batching.trim_dataset(held, config.sequence_length)
    with distribution.scope():
        if config.method == "distilbert":
            t_model = as_pretrainer(teacher, "teacher", need_head=config.kl_weight > 0)
            s_model = BertPretrainer(s_backbone, objective="none")
            if copy_layers:
                used = init_student_from_teacher(s_model, t_model, layer_map)
                logger.info(
                    "Student initialised from teacher layers %s (1-based).", [i + 1 for i in used]
                )
            distiller = DistilBertDistiller(
                t_model,
                s_model,
                temperature=config.temperature,
                kl_weight=config.kl_weight,
                mlm_weight=config.mlm_weight,
                cosine_weight=config.cosine_weight,
            )
        else:
            distiller = TinyBertDistiller(
                teacher,
                s_backbone,
                layer_map=layer_map,
                attention_weight=config.attention_weight,
                hidden_weight=config.hidden_weight,
                embedding_weight=config.embedding_weight,
            )
        distiller.compile(
            optimizer=_optimizer(config, config.steps),
            jit_compile=distribution.resolve_jit_compile(None),
        )
    data = ds if config.method == "distilbert" else _inputs_only(ds)
    stages[config.method] = _history(
        _fit(distiller, data, config.steps, config, tensorboard, config.method)
    )
    if config.method == "distilbert":
        jit = distribution.resolve_jit_compile(None)
        t_model.compile(optimizer="adam", jit_compile=jit)
        s_model.compile(optimizer="adam", jit_compile=jit)
        teacher_acc = float(
            t_model.evaluate(held, verbose=0, return_dict=True)["masked_lm_accuracy"]
        )
        student_acc = float(
            s_model.evaluate(held, verbose=0, return_dict=True)["masked_lm_accuracy"]
        )
        cosine = hidden_cosine(distiller, _inputs_only(held, keep_positions=True), project=False)
        logger.info(
            "held-out masked-LM accuracy: teacher %.4f, student %.4f", teacher_acc, student_acc
        )
        return {
            "quality_retained": round(student_acc / teacher_acc, 4) if teacher_acc else None,
            "metric": "masked_lm_accuracy",
            "teacher_metric": teacher_acc,
            "student_metric": student_acc,
            "hidden_cosine": round(cosine, 4),
            "held_out": {"examples": len(held_examples)},
        }, s_backbone
    cosine = hidden_cosine(distiller, _inputs_only(held), project=True)
    logger.info(
        "held-out cosine between teacher and (projected) student last hidden states: %.4f", cosine
    )
    return {
        "quality_retained": round(cosine, 4),
        "metric": "hidden_cosine",
        "teacher_metric": 1.0,
        "student_metric": cosine,
        "held_out": {"examples": len(held_examples)},
    }, s_backbone


def _save_student(config, model, backbone, tokenizer, teacher_path, directory):
    """The student alone, as a preset directory (a classifier preset for
    task distillation), swapped in complete."""
    preset_info = {
        "description": f"Distilled ({config.method}) from {teacher_path} by bertzoo's recipe.",
        "tokenizer": tokenizer.preset_section(),
        "metadata": {"source_checkpoint": f"distilled from {teacher_path}"},
    }
    with atomic_directory(directory) as staging:
        if isinstance(model, BertClassifier):
            model.save_to_preset(staging, tokenizer=tokenizer, preset_info=preset_info)
        else:
            tokenizer.save_to_preset(staging)
            backbone.save_to_preset(staging, preset_info=preset_info)
