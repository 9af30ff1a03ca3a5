"""Plumbing shared by the three runs (`bertzoo.training.pretrain`,
`bertzoo.training.finetune`, `bertzoo.training.distill`) and their recipes:

- the names of the files a run writes in its output directory;
- the precisions a run accepts;
- `RunConfig`, the base of the runs' settings dataclasses: JSON conversion,
  the settings record in `RUN_SETTINGS_FILE` and the comparison a resumed run
  makes with it;
- the built-in corpus of the corpus runs (pre-training, distillation) and
  their held-out documents;
- command-line flags built from the settings' field metadata, so a flag's
  name, default, choices and help are written once, beside the setting:

      @dataclasses.dataclass
      class MyConfig(RunConfig):
          steps: int = setting(100, "training steps", group="training")
          output: str = setting("runs/x", "run directory", compared=False)

      parser = argparse.ArgumentParser()
      add_config_flags(parser, MyConfig)
      config = config_from_args(MyConfig, parser.parse_args())
"""

import argparse
import dataclasses
import json
import logging
import random
import re
import signal
import sys
import typing
from pathlib import Path

from bertzoo import quiet
from bertzoo.batching import BATCHING_MODES
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import atomic_write_text
from bertzoo.settings import setting

logger = logging.getLogger(__name__)

RUN_SETTINGS_FILE = "run_config.json"  # the settings of the run in an output directory
# What kind of run wrote the output, and the fingerprints of its input files
# at its start (`bertzoo.io.fingerprint`), which a resumed run compares.
RUN_INFO_FILE = "run_info.json"
METRICS_FILE = "metrics.json"
CHECKPOINTS_DIR = "checkpoints"  # bertzoo.training.checkpoint's directories
DATA_DIR = "data"  # files a run derives from its inputs (built-in datasets, TFRecords)
LOG_DIR = "logs"  # TensorBoard
# TensorBoard's files (a user's files in logs/ are not bertzoo's):
LOGS = f"{LOG_DIR}/events.out.tfevents.*"
CORPUS_FILE = "corpus.txt"  # the built-in corpus, when a run is given no corpus files
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# The choices of --strategy and --optimizer (`bertzoo.training.distribute`,
# `bertzoo.training.optimizers`), here so that settings load without Keras.
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu", "data_parallel")
OPTIMIZERS = ("adamw", "lamb")
VERBOSITY = (0, 1, 2)  # Keras: silent, progress bar, one line per epoch


# === Settings ===


def batching_setting():
    """The `batching` setting of a run that trains on text batches
    (`bertzoo.batching`)."""
    return setting(
        "padded",
        "how training batches are padded: padded (random batches, each padded to its longest "
        "text's bucket: the batches of fixed, less work), buckets (texts of similar length "
        "batched together: least padding, but where length goes with the label, batches of "
        "one label train worse) or fixed (every batch padded to --sequence-length)",
        choices=BATCHING_MODES,
        group="training",
    )


def jit_compile_setting():
    """The `jit_compile` setting of a run that trains, resolved by
    `Distribution.resolve_jit_compile`. Not compared on resume: it picks
    the execution path, not the numbers (float rounding aside), so a run
    recorded with XLA on (pre-training's earlier default) resumes."""
    return setting(
        None,
        "XLA-compile the train step (default: on GPUs; not on CPUs, where TensorFlow's own "
        "kernels run it faster, bf16 included, and one trace serves every batch length; "
        "TPUs always compile)",
        group="training",
        compared=False,
    )


def verbose_setting(default):
    """The `verbose` setting of a run: Keras' progress output, `default` for
    the library. The recipes' `--verbose` defaults to it when stdout is a
    terminal, and to one line per epoch (2) when stdout is a file or pipe (CI,
    redirected logs), where progress-bar frames are noise."""
    when = f"{default} when stdout is a terminal, else 2" if default != 2 else "2"
    return setting(
        default,
        f"Keras progress output: 0 none, 1 progress bar, 2 one line per epoch (default: {when})",
        choices=VERBOSITY,
        group="output",
        compared=False,
        piped_default=2,
    )


@dataclasses.dataclass
class RunConfig:
    """Base of the runs' settings dataclasses (fields made with `setting`).

    `run_kind` names the kind of run ("pretrain", "finetune", "distill"),
    recorded in the output: a run of another kind there is refused.
    `input_files` names the settings that hold input file paths, whose
    fingerprints a resumed run compares with those recorded at its start."""

    run_kind: typing.ClassVar[str] = ""
    input_files: typing.ClassVar[tuple] = ()
    # Settings that name files or directories (a path or a tuple of them;
    # `input_files` too): a resume compares where they point, so the same
    # file spelt relative in one command and absolute in the other matches.
    path_settings: typing.ClassVar[tuple] = ()

    def to_json(self):
        """The settings as a JSON object (tuples become lists)."""
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_json(cls, document):
        """The settings of a `to_json` object (lists become tuples); keys
        that are not settings are an error (TypeError)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in document.items()})

    @classmethod
    def compared_settings(cls):
        """Names of the settings a resumed run must share with the run it
        continues (those not marked `compared=False`)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("compared", True))

    def record(self, output):
        """Writes the settings to `output`/`RUN_SETTINGS_FILE` (atomically)."""
        atomic_write_text(
            Path(output) / RUN_SETTINGS_FILE, json.dumps(self.to_json(), indent=2) + "\n"
        )

    def check_resumable(self, output, error, unrecorded_resumes=False, start_over=None):
        """Raises `error` unless the checkpoints in `output` come from a run
        with the same compared settings. None recorded: nothing is known to
        match (refused), unless `unrecorded_resumes`. `start_over` says what
        `--no-resume` deletes there."""
        changed = self.changed_settings(output)
        if changed is None and unrecorded_resumes:
            return
        if changed is None:
            changes = "none recorded"
            changed = self.compared_settings()
        else:
            changes = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        if changed:
            deletes = f" ({start_over})" if start_over else ""
            raise error(
                f"{output} holds checkpoints of a run with other settings ({', '.join(changed)}). "
                f"Recorded -> now: {changes}. Rerun with the same settings to resume, use "
                f"another --output, or --no-resume to start over there{deletes}."
            )

    def foreign_settings(self, output):
        """The settings recorded in `output` that this kind of run has none
        of (sorted), or () when there are none or no record: settings of a
        run of another kind."""
        path = Path(output) / RUN_SETTINGS_FILE
        if not path.is_file():
            return ()
        try:
            recorded = load_json(path)
        except (OSError, ValueError):
            return ()
        if not isinstance(recorded, dict):
            return ()
        return tuple(sorted(set(recorded) - {f.name for f in dataclasses.fields(self)}))

    def changed_settings(self, output):
        """{name: (recorded, current)} for each compared setting that differs
        from the settings recorded in `output`; None when none are recorded.
        Settings a record lacks count as their defaults: a run recorded
        before a setting existed ran as its default does, and resumes."""
        path = Path(output) / RUN_SETTINGS_FILE
        if not path.is_file():
            return None
        recorded, current = load_json(path), self.to_json()
        defaults = type(self)().to_json()
        recorded = {**{k: v for k, v in defaults.items() if k not in recorded}, **recorded}
        free = set(current) - set(self.compared_settings())
        paths = set(self.path_settings) | set(self.input_files)
        return {
            k: (recorded.get(k), current.get(k))
            for k in sorted(set(recorded) | set(current))
            if k not in free
            and recorded.get(k) != current.get(k)
            and not (k in paths and _same_paths(recorded.get(k), current.get(k)))
        }


def _same_paths(a, b):
    """Whether two recorded values of a path setting (a path, or a list of
    them) name the same files, relative ones taken from the working
    directory (a resume runs the same command from the same place)."""

    def where(value):
        if isinstance(value, str):
            return str(Path(value).expanduser().resolve())
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return [where(v) for v in value]
        return value

    return where(a) == where(b)


# === The built-in corpus ===


def write_builtin_corpus(path):
    """Writes the built-in corpus (the Python documentation's help topics,
    `bertzoo.data.builtin_corpus`) to `path` unless it is there already;
    returns the path."""
    path = Path(path)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        from bertzoo.data.builtin_corpus import python_docs_corpus, write_corpus

        write_corpus(python_docs_corpus(), path)
    logger.info("Built-in corpus: the Python documentation help topics (%s).", path)
    return path


def split_documents(documents, eval_fraction, seed):
    """Held-out documents for evaluation: a seeded random `eval_fraction` of
    them (at least one when the fraction is > 0 and there are >= 2)."""
    if eval_fraction <= 0 or len(documents) < 2:
        return documents, []
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    n_eval = max(1, int(round(len(documents) * eval_fraction)))
    held = set(order[:n_eval])
    train = [d for i, d in enumerate(documents) if i not in held]
    return train, [d for i, d in enumerate(documents) if i in held]


# === Sequence length from the data ===

# The share of examples a default sequence length keeps whole.
COVERAGE = 0.99


def covering_length(lengths, cap, coverage=COVERAGE, multiple=8):
    """The default sequence length for examples of packed `lengths`
    (`bertzoo.preprocessing.packed_lengths`): the shortest multiple of
    `multiple` that keeps at least `coverage` of them whole, capped at `cap`
    (the model's positions, or the length a teacher was trained at).
    Length-aware batching (`bertzoo.batching`) pads each batch only to its
    own longest text, so a longer maximum costs short texts nothing."""
    import numpy as np

    lengths = np.asarray(lengths)
    if not len(lengths):
        return int(cap)
    needed = int(np.sort(lengths)[max(0, int(np.ceil(coverage * len(lengths))) - 1)])
    return int(min(cap, max(multiple, -(-needed // multiple) * multiple)))


def truncation(lengths_by_split, sequence_length):
    """{split: share of its examples longer than `sequence_length` (cut)}."""
    import numpy as np

    return {
        name: round(float(np.mean(np.asarray(lengths) > sequence_length)), 4)
        if len(lengths)
        else 0.0
        for name, lengths in lengths_by_split.items()
    }


def log_truncation(shares, sequence_length, chosen_by):
    """Says how many examples the run cuts at `sequence_length`: a warning
    when any split loses more than 1 - COVERAGE of its examples."""
    line = ", ".join(f"{name} {share:.1%}" for name, share in shares.items())
    message = f"Sequence length {sequence_length} ({chosen_by}); examples truncated: {line}."
    if any(share > 1 - COVERAGE + 1e-9 for share in shares.values()):
        logger.warning("%s Pass a longer --sequence-length to keep them whole.", message)
    else:
        logger.info(message)


# === Command-line flags ===


def comma_strings(text):
    """argparse type: "a, b,c" -> ("a", "b", "c") (empty items dropped)."""
    return tuple(x.strip() for x in str(text).split(",") if x.strip())


def comma_ints(text):
    """argparse type: "1,2,3" -> (1, 2, 3)."""
    try:
        return tuple(int(x) for x in comma_strings(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


AUTO = "auto"


def batch_size_flag(text):
    """argparse type: a positive integer or "auto"."""
    if str(text).strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'auto', got {text!r}"
        ) from None


def batch_size_setting(default, help):
    """The recipes' `batch_size` setting: an integer, or "auto" (see
    `resolve_batch_size`)."""
    return setting(
        default,
        f"{help}; auto: the largest batch that fits the device memory, from bertzoo.plan",
        parse=batch_size_flag,
        group="training",
    )


def device_memory_setting():
    return setting(
        None,
        "memory per device that --batch-size auto plans for, e.g. 16GiB (default: the "
        "accelerator's, or this machine's available memory on CPU)",
        group="training",
        compared=False,
    )


def resolve_batch_size(
    config, preset, seq_len, mode, error, replicas=1, optimizer="adamw", accumulation=1
):
    """`config` with `batch_size="auto"` replaced by the largest global
    batch that `bertzoo.plan` fits in `config.device_memory` (or the
    device's) on each of `replicas` devices, and logged; `error`: the run's
    error class. Other configs come back as they are."""
    if config.batch_size != AUTO:
        return config
    from bertzoo.planner import device_memory, format_bytes, parse_memory, plan

    try:
        if config.device_memory is not None:
            memory, where = parse_memory(config.device_memory), "--device-memory"
        else:
            memory, where = device_memory()
        result = plan(
            preset,
            seq_len=seq_len,
            memory=memory,
            precision=config.precision,
            optimizer=optimizer,
            mode=mode,
            gradient_accumulation=accumulation,
        )
    except (RuntimeError, ValueError) as e:
        raise error(f"--batch-size auto: {e}") from None
    if result.max_batch == 0:
        raise error(
            f"--batch-size auto: one sequence of {seq_len} tokens needs "
            f"{format_bytes(result.peak_bytes(1))}, more than the {format_bytes(memory)} of {where}."
        )
    batch = result.max_batch * replicas
    message = (
        f"--batch-size auto: {batch} ({result.max_batch} per device; {mode} at {seq_len} tokens, "
        f"{config.precision}, peak {format_bytes(result.peak_bytes(result.max_micro_batch))} of "
        f"{format_bytes(memory)}, {where})"
    )
    logger.info(message)
    return dataclasses.replace(config, batch_size=batch)


def flag_name(field):
    """The command-line flag of a settings field."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def _value_type(cls, field):
    """The field's type without `| None`."""
    hint = typing.get_type_hints(cls)[field.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 else hint


def add_config_flags(parser, cls, groups=()):
    """Adds a flag for every field of the settings dataclass `cls` (made
    with `setting`) to `parser`, in help groups (`groups` first, in that
    order, then the others as met), with the field's default (the flag's
    destination is the field name). bool fields get `--NAME` and
    `--no-NAME`."""
    groups = {name: parser.add_argument_group(name) for name in groups}
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if "help" not in meta:
            raise TypeError(
                f"{cls.__name__}.{field.name} is not a setting() field: it has no flag."
            )
        group = meta["group"]
        if group not in groups:
            groups[group] = parser.add_argument_group(group) if group else parser
        # A plain % in the text is a percent sign; %(default)s stays argparse's.
        text = re.sub(r"%(?!\()", "%%", meta["help"])
        options = {"dest": field.name, "default": field.default, "help": text}
        if meta["piped_default"] is not None:
            options["default"] = None  # config_from_args picks by stdout
        kind = _value_type(cls, field)
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            if meta["parse"] is not None:
                options["type"] = meta["parse"]
            elif kind in (int, float):
                options["type"] = kind
            elif kind is not str:
                raise TypeError(f"{cls.__name__}.{field.name}: a {kind} setting needs parse=.")
            if meta["choices"] is not None:
                options["choices"] = meta["choices"]
        groups[group].add_argument(flag_name(field), **options)
    return parser


def config_from_args(cls, args):
    """The settings of parsed flags (`add_config_flags`). A flag with a
    `piped_default` left unset takes the field's default when stdout is a
    terminal, and the piped default otherwise."""
    values = {}
    for field in dataclasses.fields(cls):
        value = getattr(args, field.name)
        piped = field.metadata.get("piped_default")
        if value is None and piped is not None:
            value = field.default if sys.stdout.isatty() else piped
        values[field.name] = value
    return cls(**values)


RECIPE_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def recipe_parser(doc, cls, groups, prog=None):
    """A recipe's argument parser: its docstring's first paragraph as the
    description, the rest (examples) as the epilog, and a flag per setting
    of the run configuration `cls` (`add_config_flags`, `groups` in order)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1].rstrip("\n") + "\n\n" + quiet.HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return add_config_flags(parser, cls, groups=groups)


def run_recipe(parser, cls, run, argv=None):
    """What every recipe's `main` does before it prints its results: parses
    `argv` into a `cls` configuration, logs bertzoo's progress (other
    libraries: warnings only) and calls `run(config)`. Returns `(args,
    result, error)`: `error` is the `BertzooError` the run stopped with (bad
    settings, inputs or output, another run on --output, a NaN loss, a
    SIGTERM or SIGINT: `Preempted`; result None), for the recipe to print as
    one line, without a traceback (`recipe_exit`)."""
    from bertzoo.errors import BertzooError
    from bertzoo.training.preemption import Interrupted, Preempted, interruptible, signal_name

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format=RECIPE_LOG_FORMAT)
    logging.getLogger("bertzoo").setLevel(logging.INFO)
    try:
        with interruptible():
            return args, run(config_from_args(cls, args)), None
    except BertzooError as e:
        return args, None, e
    except (Interrupted, KeyboardInterrupt) as e:
        signum = getattr(e, "signum", signal.SIGINT)
        stopped = Preempted(
            f"Stopped by {signal_name(signum)} outside the training steps; every file written "
            "is complete; rerun the same command to go on from the last checkpoint.",
            signum,
        )
        return args, None, stopped


def recipe_exit(error):
    """Prints `error` (what `run_recipe` returned) as one line on stderr,
    "error: ...", or for a run stopped by a signal its message ("Stopped
    by SIGTERM after step ..."), and returns the recipe's exit status: 2, or
    128 + the signal's number."""
    status = getattr(error, "exit_status", 2)
    print(f"error: {error}" if status == 2 else str(error), file=sys.stderr, flush=True)
    return status
