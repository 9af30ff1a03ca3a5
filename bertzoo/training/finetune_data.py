"""Fine-tuning's data stage (`bertzoo.training.finetune`): the task files
(or the built-in dataset of the task kind) read into model inputs at the
run's sequence length, checked before anything is written; one epoch's
batches; the task metrics on a split."""

import dataclasses
import logging
import tempfile

import numpy as np

from bertzoo import batching
from bertzoo import tasks as task_kinds
from bertzoo.convert.loader import resolve_preset
from bertzoo.presets import max_input_length
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.training.kind_settings import kind_settings
from bertzoo.training.runs import (
    COVERAGE,
    DATA_DIR,
    covering_length,
    log_truncation,
    resolve_batch_size,
    truncation,
)

logger = logging.getLogger("bertzoo.training.finetune")  # the run's log lines

# The window length of kinds that never cut text (QA), when not given.
WINDOW_LENGTH = 128


@dataclasses.dataclass
class FinetuneData:
    """What the data stage hands the training stage."""

    tokenizer: object
    train: object  # the task kind's TaskData
    validation: object
    label_set: object
    truncated: dict | None  # {split: share cut at sequence_length}; None: the kind never cuts
    dataset: object  # the built-in dataset's description, or {"train": path, "validation": path}
    builtin: str | None  # the built-in dataset's description, when the run reads it


# === Data ===


def load_split(config, path, tokenizer, sequence_length, segments, label_set=None):
    """Reads one file and turns it into model inputs and targets, as the
    task kind `config.task` says (`bertzoo.tasks`). Returns `(TaskData,
    label_set)`: for classification and tagging the training split defines
    the label set; a validation label outside it is an error with its line."""
    kind = task_kinds.get(config.task)
    settings = kind_settings(config, kind)
    return kind.load(settings, path, tokenizer, sequence_length, segments, label_set)


def _sequence_length(config, path, tokenizer, segments, positions, builtin=False):
    """Reads the training split at the run's sequence length: the one
    given, the built-in dataset's (`builtin`: the kind's `builtin_training`),
    or else the shortest multiple of 8 that keeps `COVERAGE` (99%) of the
    training examples whole, at most the model's `positions`; kinds that
    never cut text (QA) take `WINDOW_LENGTH`. Returns (config with the
    length set, training data, label set, {"train": packed lengths} or None,
    how the length was chosen)."""
    kind = task_kinds.get(config.task)
    given, given_by = config.sequence_length, "given: --sequence-length"
    if given is None and builtin and "sequence_length" in kind.builtin_training:
        given = min(kind.builtin_training["sequence_length"], positions)
        given_by = "the built-in dataset's default"
        config = dataclasses.replace(config, sequence_length=given)
    if given is None and not kind.cuts_text:
        window = min(WINDOW_LENGTH, positions)
        config = dataclasses.replace(config, sequence_length=window)
        train, label_set = load_split(config, path, tokenizer, window, segments)
        return config, train, label_set, None, "the window default"
    train, label_set = load_split(config, path, tokenizer, given or positions, segments)
    lengths = kind.packed_lengths(train, tokenizer) if kind.cuts_text else None
    if given is not None:
        return config, train, label_set, None if lengths is None else {"train": lengths}, given_by
    if lengths is None:  # a kind that gives no lengths: the fixed default
        chosen, how = min(WINDOW_LENGTH, positions), "the default"
    else:
        chosen = covering_length(lengths, positions)
        how = f"from the data: keeps {COVERAGE:.0%} of the training examples whole, at most {positions}"
    if chosen != positions:
        train, label_set = load_split(config, path, tokenizer, chosen, segments)
    config = dataclasses.replace(config, sequence_length=chosen)
    return config, train, label_set, None if lengths is None else {"train": lengths}, how


def epoch_dataset(config, data, epoch, start_batch=0):
    """One epoch's batches (`bertzoo.batching.training_dataset`: padded to
    their longest sequence's bucket, as `config.batching` says), drawn with
    the run's seed plus the epoch: the same batches whether or not the run
    was resumed. `start_batch`: the rest of the epoch after that many
    batches (a run resumed mid-epoch)."""
    return batching.training_dataset(
        data.features,
        data.targets,
        config.batch_size,
        config.seed + epoch,
        config.sequence_length,
        mode=config.batching,
        start_batch=start_batch,
    )


# === Evaluation ===


def evaluate(config, model, data, batch_size):
    """Task metrics on one split (by name, floats), from the model's
    predictions and the task kind's postprocessing and metric function."""
    predictions = model.predict(data.features, batch_size=batch_size, verbose=0)  # by length
    kind = task_kinds.get(config.task)
    return kind.evaluate(kind_settings(config, kind), predictions, data)


# === The stage ===


def read_data(run, init, distribution):
    """Reads and checks the run's data before anything is written, and sets
    the run's sequence length and batch size (`run.config`). Returns a
    `FinetuneData`."""
    config = run.config
    document, _, _ = resolve_preset(init)
    positions = max_input_length(document["backbone"])
    if config.sequence_length is not None and config.sequence_length > positions:
        raise run.error(
            f"sequence_length={config.sequence_length} is longer than the {positions} positions "
            f"of {init}."
        )
    # The backbone's segment rows: the task kinds pack for them
    # (`bertzoo.preprocessing.segment_inputs`; one-segment RoBERTa-family
    # models never see segment id 1).
    segments = document["backbone"].get("num_segments", 2)
    tokenizer = tokenizer_from_preset(init, vocabulary=config.vocabulary)
    # The length checks again, now that the separators between a pair's
    # texts are known (RoBERTa's and XLM-R's two need one token more).
    kind = task_kinds.get(config.task)
    problem = kind.settings_error(
        kind_settings(config, kind),
        config.sequence_length,
        config.train is not None,
        separators=tokenizer.pair_separators,
    )
    if problem:
        raise run.error(problem)
    with tempfile.TemporaryDirectory(prefix="bertzoo-builtin-") as staging:
        # A built-in dataset is read from a private folder; the output gets
        # its copy only once every check has passed (below).
        config, paths, builtin = _data_files(config, staging)
        config, train, label_set, lengths, chosen_by = _sequence_length(
            config, paths[0], tokenizer, segments, positions, builtin=builtin is not None
        )
        validation, _ = load_split(
            config, paths[1], tokenizer, config.sequence_length, segments, label_set
        )
    _log_labels(label_set, train)
    truncated = None
    if lengths is not None:
        lengths["validation"] = task_kinds.get(config.task).packed_lengths(validation, tokenizer)
        truncated = truncation(lengths, config.sequence_length)
        log_truncation(truncated, config.sequence_length, chosen_by)
    run.config = _batch_size(run, config, init, distribution)
    dataset = builtin or {"train": str(paths[0]), "validation": str(paths[1])}
    return FinetuneData(tokenizer, train, validation, label_set, truncated, dataset, builtin)


def _log_labels(label_set, train):
    """The label set the model is built for, once, with each class's number
    of training examples where the targets are one class id per row."""
    if label_set is None:
        return
    names = list(label_set.names)
    targets = train.targets
    shown = [repr(n) for n in names]
    if isinstance(targets, np.ndarray) and targets.ndim == 1 and targets.dtype.kind in "iu":
        counts = np.bincount(targets, minlength=len(names))
        shown = [f"{n!r} ({c})" for n, c in zip(names, counts)]
    more = f", ... and {len(names) - 50} more" if len(names) > 50 else ""
    logger.info("Labels (%d): %s%s", len(names), ", ".join(shown[:50]), more)


def copy_builtin(run, data):
    """Writes the built-in dataset the run reads (if any) into the output's
    `DATA_DIR` (claimed), once the output is open."""
    if data.builtin is not None:
        config = run.config
        paths = task_kinds.get(config.task).write_builtin(run.output / DATA_DIR, config.seed)
        logger.info("Built-in dataset: %s (%s, %s)", data.builtin, paths[0], paths[1])


def _data_files(config, staging):
    """(config, (train path, validation path), the built-in dataset's
    description or None): the given files, or the built-in dataset written
    to `staging` (its reader settings are the kind's `builtin_settings`,
    set by `resolve_defaults`)."""
    if config.train is not None:
        return config, (config.train, config.validation), None
    kind = task_kinds.get(config.task)
    train, validation = kind.write_builtin(staging, config.seed)
    return config, (train, validation), kind.builtin_description


def _batch_size(run, config, init, distribution):
    config = resolve_batch_size(
        config,
        init,
        config.sequence_length,
        "finetune",
        run.error,
        replicas=distribution.num_replicas,
    )
    distribution.check_batch_size(config.batch_size)
    return config
