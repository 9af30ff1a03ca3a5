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
from bertzoo.distill.augment import WORD, augment_texts, neighbour_table
from bertzoo.distill.distillers import (
    DistilBertDistiller,
    TinyBertDistiller,
    as_pretrainer,
    prediction_distiller,
)
from bertzoo.distill.evaluate import accuracy, hidden_cosine, measure_speedup
from bertzoo.distill.init import init_student_from_teacher
from bertzoo.distill.layer_map import DistillationError, resolve_layer_map, suggested_layer_map
from bertzoo.io.publish import atomic_directory, atomic_write_text
from bertzoo.io.rundir import RunDirectory
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.models.tasks import BertClassifier
from bertzoo.preprocessing import BertPreprocessor
from bertzoo.tasks.sentences import text_features
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.training.callbacks import TensorBoardLogger
from bertzoo.training.distribute import STRATEGIES, make_distribution
from bertzoo.training.finetune import (
    FinetuneConfig,
    load_split,
)
from bertzoo.training.guards import NonFiniteGuard, check_finite_settings
from bertzoo.training.optimizers import make_optimizer
from bertzoo.training.runs import (
    CORPUS_FILE,
    DATA_DIR,
    LOG_DIR,
    LOGS,
    RunConfig,
    batching_setting,
    comma_ints,
    comma_strings,
    setting,
    split_documents,
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
    "tinybert-task": {
        "steps": 300,
        "learning_rate": 1e-3,
        "temperature": 1.0,
        "sequence_length": 32,
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
        "steps per stage (default 300); tinybert-task runs two stages (intermediate, prediction)",
        group="training",
    )
    prediction_steps: int | None = setting(
        None, "tinybert-task prediction-layer steps (default: --steps)", group="training"
    )
    batch_size: int = setting(32, "global batch size", group="training")
    learning_rate: float | None = setting(
        None, "peak AdamW learning rate (default: distilbert 5e-4, tinybert 1e-3)", group="training"
    )
    warmup_proportion: float = setting(0.1, "share of steps with linear warmup", group="training")
    sequence_length: int | None = setting(None, "default 128 (tinybert-task: 32)", group="training")
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
    if config.prediction_steps is None:
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
            config, teacher, s_backbone, layer_map, tokenizer, distribution, tensorboard, stages
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
    _save_student(config, student_model, s_backbone, tokenizer, teacher_path, output / STUDENT_DIR)
    atomic_write_text(output / REPORT_FILE, json.dumps(report, indent=2) + "\n")
    for key in ("teacher_params", "student_params", "speedup", "quality_retained"):
        logger.info("%s: %s", key, report[key])
    return report


def _run_task(config, teacher, s_backbone, layer_map, tokenizer, distribution, tensorboard, stages):
    ft = FinetuneConfig(
        task="classification",
        text_columns=config.text_columns,
        label_column=config.label_column,
        train=config.train,
        validation=config.validation,
    )
    train_path, validation_path = config.train, config.validation
    if train_path is None:
        from bertzoo.data import builtin_tasks

        train_path, validation_path, settings = builtin_tasks.write_builtin_task(
            "classification", Path(config.output) / "data", config.seed
        )
        ft = dataclasses.replace(
            ft,
            train=str(train_path),
            validation=str(validation_path),
            text_columns=settings["text_columns"],
            label_column=settings["label_column"],
        )
    segments = teacher.backbone.num_segments > 0
    label_set = LabelSet(teacher.label_names) if teacher.label_names else None
    train, label_set = load_split(
        ft, train_path, tokenizer, config.sequence_length, segments, label_set
    )
    check(
        len(label_set) == teacher.num_classes,
        f"{train_path} has {len(label_set)} labels; the teacher classifies into {teacher.num_classes}.",
    )
    validation, _ = load_split(
        ft, validation_path, tokenizer, config.sequence_length, segments, label_set
    )
    texts = [e.texts[0] for e in train.examples]
    check(
        all(len(e.texts) == 1 for e in train.examples),
        "tinybert-task augmentation handles single texts, not pairs.",
    )
    pool = list(texts)
    dropped = 0
    if config.augment:
        words = {w for t in texts for w in WORD.findall(t.lower())}
        neighbours = neighbour_table(
            tokenizer,
            keras.ops.convert_to_numpy(teacher.backbone.token_embedding.embeddings),
            words,
        )
        extra, dropped = augment_texts(
            texts,
            neighbours,
            config.augment,
            exclude=[e.texts[0] for e in validation.examples],
            seed=config.seed,
        )
        pool += extra
    preprocessor = BertPreprocessor(tokenizer, config.sequence_length, segment_ids=segments)
    features = text_features(preprocessor, [(t,) for t in pool])
    logger.info(
        "Distillation set: %d training texts + %d augmented (%d variants equal to held-out "
        "texts dropped).",
        len(texts),
        len(pool) - len(texts),
        dropped,
    )
    # Teacher and student see batches padded to their longest text's bucket.
    ds = batching.training_dataset(
        features,
        None,
        config.batch_size,
        config.seed,
        config.sequence_length,
        mode=config.batching,
        epochs=None,
    )
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
            optimizer=_optimizer(config, config.steps),
            jit_compile=distribution.resolve_jit_compile(None),
        )
    stages["intermediate"] = _history(
        _fit(inter, ds, config.steps, config, tensorboard, "Stage 2a: intermediate layers")
    )
    inter.release()
    with distribution.scope():
        pred = prediction_distiller(teacher, student, temperature=config.temperature)
        pred.compile(
            optimizer=_optimizer(config, config.prediction_steps),
            loss="sparse_categorical_crossentropy",
            jit_compile=distribution.resolve_jit_compile(None),
        )
    # Stage 2b continues stage 2a's step count in the TensorBoard log.
    stages["prediction"] = _history(
        _fit(
            pred,
            ds,
            config.prediction_steps,
            config,
            tensorboard,
            "Stage 2b: prediction layer",
            start_step=config.steps,
        )
    )
    teacher_acc = accuracy(teacher, validation.features, validation.targets, 64)
    student_acc = accuracy(student, validation.features, validation.targets, 64)
    logger.info("validation accuracy: teacher %.4f, student %.4f", teacher_acc, student_acc)
    return {
        "quality_retained": round(student_acc / teacher_acc, 4) if teacher_acc else None,
        "metric": "accuracy",
        "teacher_metric": teacher_acc,
        "student_metric": student_acc,
        "held_out": {"file": str(validation_path), "examples": len(validation.examples)},
        "distillation_examples": len(pool),
    }, student


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
