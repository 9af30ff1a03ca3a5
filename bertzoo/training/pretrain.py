"""The pre-training run behind `recipes/pretrain.py`: corpus -> vocabulary ->
examples -> masked LM (+ NSP/SOP) with checkpoints, resume, TensorBoard and a
preset directory at the end.

    config = PretrainConfig(preset="bert_tiny", seq_len=(64, 128), steps=(600, 100))
    metrics = run_pretraining(config)

Everything the run writes goes under `config.output`:

    .bertzoo.lock          held for the whole run: one run per output at a time
    .bertzoo-run.json      what bertzoo wrote here (bertzoo.io.rundir): a run
                           claims these paths first (a user's file at one is
                           an error), and removes only what it lists
    run_config.json        the settings (a resumed run must match them)
    corpus.txt             the built-in corpus, when no corpus files are given
    vocab.txt|spiece.model the vocabulary (given, the preset's, or trained)
    data/seq{L}/           static mode: masked TFRecords per sequence length
    checkpoints/ckpt-*/    model + optimizer + step + data position (atomic)
    logs/                  TensorBoard: loss, accuracies, learning rate
    preset/                the trained backbone + vocabulary (from_preset)
    metrics.json           initial/final held-out metrics, steps, speed

Rerunning the same command resumes from the newest checkpoint, at the same
place in the (deterministic) data stream; at most `checkpoint_every` steps are
repeated. Other settings are refused while there is a checkpoint; before the
first one (a run that failed early), the files derived from the earlier
settings (vocabulary, data, initial evaluation) are discarded and the run
starts over, as with `resume=False`. A NaN or infinite loss stops the run
with `NonFiniteError` (bertzoo.training.guards): no checkpoint of that state,
no preset. Phases (`seq_len=(128, 512)`, `steps=(900, 100)`) run one after the
other on one learning-rate schedule, as in the BERT paper.
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

from bertzoo import batching
from bertzoo import presets as preset_lib
from bertzoo.convert.loader import resolve_preset
from bertzoo.data import (
    MaskedLMMasker,
    create_examples,
    make_pretraining_dataset,
    read_corpus,
    read_metadata,
    read_pretraining_dataset,
    tokenize_documents,
    write_pretraining_tfrecords,
)
from bertzoo.data.corpus import expand_files
from bertzoo.data.examples import min_seq_len
from bertzoo.errors import BertzooError
from bertzoo.io.publish import atomic_write_text, publish_directory
from bertzoo.io.rundir import RunDirectory
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.electra import ElectraPretrainer, electra_batch
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.training.callbacks import ProgressLog, TensorBoardLogger, Throughput
from bertzoo.training.checkpoint import PREFIX as CHECKPOINT_PREFIX
from bertzoo.training.checkpoint import CheckpointManager, PeriodicCheckpoint
from bertzoo.training.distribute import STRATEGIES, make_distribution
from bertzoo.training.guards import NonFiniteGuard, check_finite_settings
from bertzoo.training.optimizers import OPTIMIZERS, make_optimizer
from bertzoo.training.runs import (
    AUTO,
    CHECKPOINTS_DIR,
    CORPUS_FILE,
    DATA_DIR,
    LOG_DIR,
    LOGS,
    METRICS_FILE,
    PRECISIONS,
    RUN_SETTINGS_FILE,
    RunConfig,
    batch_size_setting,
    comma_ints,
    comma_strings,
    device_memory_setting,
    resolve_batch_size,
    setting,
    split_documents,
    verbose_setting,
    write_builtin_corpus,
)

logger = logging.getLogger(__name__)

DATA_MODES = ("dynamic", "static")
OBJECTIVE_CHOICES = ("auto", "nsp", "sop", "none", "electra")
MASKING_CHOICES = ("token", "whole_word", "ngram")
CORPUS_LAYOUTS = ("sentences", "documents")
INITIAL_EVAL_FILE = "initial_eval.json"
PRESET_DIR = "preset"  # the trained backbone + vocabulary


class PretrainError(BertzooError, ValueError):
    """The run's settings are inconsistent or do not fit the model/data."""


@dataclasses.dataclass
class PretrainConfig(RunConfig):
    """Settings of a pre-training run (the recipe's flags).

    Phases: `seq_len` and `steps` are tuples of the same length; phase i
    trains `steps[i]` steps on examples of `seq_len[i]` tokens.
    """

    preset: str = setting(
        "bert_tiny",
        "built-in preset name (random init) or a preset/HF directory (continue "
        "pre-training); default %(default)s",
        group="model",
    )
    corpus: tuple = setting(
        (),
        "comma-separated text files or globs (one sentence per line, blank line between "
        "documents); default: the built-in corpus",
        parse=comma_strings,
        group="data",
    )
    corpus_layout: str = setting(
        "sentences", "'documents': one document per line", choices=CORPUS_LAYOUTS, group="data"
    )
    vocab: str = setting(
        None,
        "vocab.txt or spiece.model; default: the preset directory's, else trained on the corpus",
        group="data",
    )
    vocab_size: int = setting(8000, "size of a trained vocabulary", group="data")
    include_hangul: str = setting(
        "none",
        "a trained vocabulary always holds every syllable of this Hangul set, so Korean the "
        "corpus lacks is not unknown: common = the 2,350 KS X 1001 syllables (4,700 WordPiece "
        "tokens), all = all 11,172 (22,344); they count against --vocab-size; default "
        "%(default)s",
        choices=("none", "common", "all"),
        group="data",
    )
    lowercase: bool = setting(None, "default: the preset's setting", group="data")
    strip_accents: bool = setting(
        None,
        "default: follows --lowercase; use --no-strip-accents for Korean (keeps Hangul "
        "syllables whole)",
        group="data",
    )
    objective: str = setting(
        "auto",
        "nsp / sop / none: masked LM with that sentence objective; electra: replaced-token "
        "detection (a generator + the preset as discriminator, no pooler); auto: electra for "
        "ELECTRA presets, nsp for BERT, sop for ALBERT-shaped models, none without a pooler",
        choices=OBJECTIVE_CHOICES,
        group="model",
    )
    generator: str = setting(
        None,
        "electra: the generator's preset or directory (e.g. electra_small_generator); default: "
        "the preset directory's generator/, else the discriminator scaled by --generator-size",
        group="model",
    )
    generator_size: float = setting(
        0.25,
        "electra: generator width / discriminator width (the paper: 1/4 Small, 1/3 Base)",
        group="model",
    )
    rtd_weight: float = setting(
        50.0, "electra: weight of the replaced-token-detection loss", group="model"
    )
    masking: str = setting("token", "default %(default)s", choices=MASKING_CHOICES, group="data")
    mask_rate: float = setting(0.15, "share of tokens masked", group="data")
    max_predictions_per_seq: tuple = setting(
        (),
        "prediction slots per phase; default ceil(seq_len * mask_rate)",
        flag="--max-predictions",
        parse=comma_ints,
        group="data",
    )
    seq_len: tuple = setting(
        (64, 128),
        "sequence length per phase, e.g. 128,512; default %(default)s",
        parse=comma_ints,
        group="data",
    )
    steps: tuple = setting(
        (600, 100),
        "steps per phase, e.g. 900,100; default %(default)s",
        parse=comma_ints,
        group="training",
    )
    batch_size: int | str = batch_size_setting(32, "global batch size")
    device_memory: str | None = device_memory_setting()
    learning_rate: float = setting(2e-3, "peak learning rate", group="training")
    optimizer: str = setting("adamw", "optimizer", choices=OPTIMIZERS, group="training")
    warmup_steps: int = setting(None, "default: 10% of all steps", group="training")
    weight_decay: float = setting(
        0.01, "weight decay (not on LayerNorm and bias variables)", group="training"
    )
    gradient_accumulation_steps: int = setting(
        1,
        "update the weights every N batches (steps still count batches)",
        flag="--gradient-accumulation",
        group="training",
    )
    dropout: float = setting(None, "override the preset's dropout", group="model")
    precision: str = setting(
        "float32", "mixed_float16 adds dynamic loss scaling", choices=PRECISIONS, group="training"
    )
    strategy: str = setting(
        "default",
        "tpu / mirrored / multi_worker (TF_CONFIG) / default; data_parallel on JAX",
        choices=STRATEGIES,
        group="training",
    )
    tpu: str = setting(
        None, "TPU name or grpc:// address (with --strategy tpu)", group="training", compared=False
    )
    jit_compile: bool = setting(True, "XLA-compile the train step", group="training")
    steps_per_execution: int = setting(1, "train steps per compiled call", group="training")
    data_mode: str = setting(
        "dynamic",
        "dynamic: re-masked every epoch in tf.data; static: masked TFRecords (dupe factor)",
        choices=DATA_MODES,
        group="data",
    )
    data: tuple = setting(
        (),
        "comma-separated TFRecord directories, one per phase (from write_pretraining_tfrecords)",
        parse=comma_strings,
        group="data",
    )
    dupe_factor: int = setting(2, "static data: masked copies of each example", group="data")
    short_seq_prob: float = setting(
        0.1, "share of examples made shorter than seq_len", group="data"
    )
    eval_fraction: float = setting(
        0.05, "held-out documents for the initial/final evaluation", group="data"
    )
    eval_batches: int = setting(8, "held-out batches per evaluation", group="data")
    seed: int = setting(0, "seed of the data order, masks and initialisation", group="data")
    output: str = setting("runs/pretrain", "default %(default)s", group="output", compared=False)
    resume: bool = setting(
        True,
        "resume from --output's last checkpoint (default); --no-resume starts over, deleting "
        "what earlier runs wrote there (never files bertzoo did not write)",
        group="output",
        compared=False,
    )
    checkpoint_every: int = setting(
        100, "checkpoint interval (steps)", group="output", compared=False
    )
    keep_checkpoints: int = setting(2, "checkpoints kept", group="output", compared=False)
    log_every: int = setting(10, "TensorBoard interval (steps)", group="output", compared=False)
    verbose: int = verbose_setting(1)


# === Checks ===


def _choice(name, value, valid):
    if value not in valid:
        raise PretrainError(f"{name}={value!r} is not valid. Valid: {', '.join(map(str, valid))}.")


def _positive(name, value):
    if not isinstance(value, int) or value < 1:
        raise PretrainError(f"{name} must be a positive integer, got {value!r}.")


def validate_config(config):
    """Checks the settings that need no model or data; raises PretrainError."""
    check_finite_settings(config, PretrainError)
    _choice("objective", config.objective, OBJECTIVE_CHOICES)
    _choice("masking", config.masking, MASKING_CHOICES)
    _choice("optimizer", config.optimizer, OPTIMIZERS)
    _choice("precision", config.precision, PRECISIONS)
    _choice("data_mode", config.data_mode, DATA_MODES)
    _choice("corpus_layout", config.corpus_layout, CORPUS_LAYOUTS)
    _choice("include_hangul", config.include_hangul, ("none", "common", "all"))
    if not config.seq_len or len(config.seq_len) != len(config.steps):
        raise PretrainError(
            f"seq_len {list(config.seq_len)} and steps {list(config.steps)} need one entry per "
            "phase each (e.g. seq_len=128,512 with steps=900,100)."
        )
    for s in config.seq_len:
        _positive("seq_len", s)
    for s in config.steps:
        _positive("steps", s)
    if config.max_predictions_per_seq and len(config.max_predictions_per_seq) != len(
        config.seq_len
    ):
        raise PretrainError(
            f"max_predictions_per_seq {list(config.max_predictions_per_seq)} needs one entry per "
            f"phase (seq_len {list(config.seq_len)})."
        )
    if config.data and len(config.data) != len(config.seq_len):
        raise PretrainError(
            f"data {list(config.data)} needs one TFRecord directory per phase (seq_len {list(config.seq_len)})."
        )
    for name in (
        *(() if config.batch_size == AUTO else ("batch_size",)),
        "vocab_size",
        "checkpoint_every",
        "keep_checkpoints",
        "log_every",
        "steps_per_execution",
        "gradient_accumulation_steps",
        "dupe_factor",
        "eval_batches",
    ):
        _positive(name, getattr(config, name))
    if not 0.0 < config.generator_size <= 1.0:
        raise PretrainError(f"generator_size must be in (0, 1], got {config.generator_size}.")
    if not config.rtd_weight > 0:
        raise PretrainError(f"rtd_weight must be > 0, got {config.rtd_weight}.")
    if config.generator is not None and config.objective not in ("electra", "auto"):
        raise PretrainError(
            f"--generator is for objective electra; objective is {config.objective!r}."
        )
    if not 0.0 < config.mask_rate < 1.0:
        raise PretrainError(f"mask_rate must be in (0, 1), got {config.mask_rate}.")
    if not 0.0 <= config.eval_fraction < 0.5:
        raise PretrainError(f"eval_fraction must be in [0, 0.5), got {config.eval_fraction}.")
    if config.learning_rate <= 0:
        raise PretrainError(f"learning_rate must be > 0, got {config.learning_rate}.")
    n = config.gradient_accumulation_steps
    if n > 1 and any(s % n for s in config.steps):
        raise PretrainError(
            f"With gradient_accumulation_steps={n}, each phase's steps (batches; the weights "
            f"change every {n}) must be a multiple of {n}; got steps {list(config.steps)}."
        )
    total = sum(config.steps)
    if config.warmup_steps is not None and not 0 <= config.warmup_steps <= total:
        raise PretrainError(
            f"warmup_steps={config.warmup_steps} must be in [0, {total}] (all steps)."
        )


def max_predictions(config):
    """Prediction slots per phase: given, or ceil(seq_len * mask_rate) (20
    at 128 and 77 at 512, the reference's settings)."""
    if config.max_predictions_per_seq:
        return tuple(config.max_predictions_per_seq)
    return tuple(max(1, math.ceil(s * config.mask_rate - 1e-9)) for s in config.seq_len)


def _has_checkpoint(output):
    return any(p.is_dir() for p in (output / CHECKPOINTS_DIR).glob(f"{CHECKPOINT_PREFIX}*"))


def _check_resumable(output, config):
    """A run resumed from a checkpoint must train the same thing on the same
    data (checked only when there is a checkpoint)."""
    changed = config.changed_settings(output)
    if changed:
        changes = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        raise PretrainError(
            f"{output} holds a run with other settings ({changes}). Rerun with the "
            "same settings to resume, pick another --output, or pass --no-resume to start over "
            "(this deletes the checkpoints, logs, trained vocabulary and data files bertzoo wrote there)."
        )


def _check_inputs(config):
    """The input files exist (checked before anything is written)."""
    try:
        if config.corpus:
            expand_files(list(config.corpus))
        for directory in config.data:
            read_metadata(directory)
    except FileNotFoundError as e:
        raise PretrainError(str(e)) from None
    if config.vocab is not None and not Path(config.vocab).is_file():
        raise PretrainError(f"--vocab file {config.vocab} does not exist.")


# === Data ===


def _corpus_files(config, output, chief):
    if config.corpus:
        return [str(p) for p in config.corpus]
    path = output / CORPUS_FILE
    if chief:
        write_builtin_corpus(path)
    _wait_for(path)
    return [str(path)]


def _preset_document(preset):
    return resolve_preset(preset)


def _tokenizer_settings(config, document):
    settings = dict(document.get("tokenizer", {}))
    kind = settings.pop("kind", "wordpiece")
    if config.lowercase is not None:
        settings["lowercase"] = config.lowercase
    if config.strip_accents is not None:
        settings["strip_accents"] = config.strip_accents
    return kind, settings


def _vocabulary_plan(config):
    """(tokenizer class, kind, settings, vocabulary file): the given file,
    the preset directory's, or None when the run trains one."""
    from bertzoo.tokenizers import tokenizer_class

    document, directory, _ = _preset_document(config.preset)
    kind, settings = _tokenizer_settings(config, document)
    cls = tokenizer_class(kind)
    vocabulary = config.vocab
    if (
        vocabulary is None
        and directory is not None
        and (Path(directory) / cls.vocabulary_file).is_file()
    ):
        vocabulary = Path(directory) / cls.vocabulary_file
    return cls, kind, settings, vocabulary


def prepare_tokenizer(config, output, files, chief=True):
    """The given vocabulary, the preset directory's, or one trained on the
    corpus (written to `output` once and reused on resume)."""
    from bertzoo.tokenizers.train import train_sentencepiece, train_wordpiece

    cls, kind, settings, vocabulary = _vocabulary_plan(config)
    if vocabulary is not None and config.include_hangul != "none":
        logger.warning(
            "include_hangul=%r is ignored: the vocabulary %s is given, not trained.",
            config.include_hangul,
            vocabulary,
        )
    if vocabulary is None:
        vocabulary = output / cls.vocabulary_file
        if chief and not vocabulary.is_file():
            lowercase = settings.get("lowercase", True)
            strip = settings.get("strip_accents")
            logger.info(
                "Training a %s vocabulary of up to %d tokens on %s.", kind, config.vocab_size, files
            )
            if kind == "sentencepiece":
                train_sentencepiece(
                    files,
                    config.vocab_size,
                    vocabulary,
                    lowercase=lowercase,
                    strip_accents=True if strip is None else strip,
                    hard_vocab_limit=False,
                    include_hangul=config.include_hangul,
                )
            else:
                train_wordpiece(
                    files,
                    config.vocab_size,
                    lowercase=lowercase,
                    strip_accents=strip,
                    output=vocabulary,
                    include_hangul=config.include_hangul,
                )
        _wait_for(vocabulary)
    return cls(vocabulary, **settings)


def _wait_for(path, seconds=600):
    """Non-chief workers wait for files the chief writes."""
    deadline = time.time() + seconds
    while not Path(path).exists():
        if time.time() > deadline:
            raise TimeoutError(
                f"{path} did not appear within {seconds} s (written by the chief worker)."
            )
        time.sleep(0.5)


# === Model ===


def check_positions(config, document=None):
    """Every phase's sequence length must fit the preset's position table,
    and hold an example: [CLS] A [SEP] B [SEP] with a sentence objective
    (auto: with the preset's pooler), a little less without."""
    if document is None:
        document = _preset_document(config.preset)[0]
    pairs = config.objective in ("nsp", "sop") or (
        config.objective == "auto" and document["backbone"].get("use_pooler", True)
    )
    shortest, needed = min(config.seq_len), min_seq_len("nsp" if pairs else "none")
    if shortest < needed and pairs:
        which = " (nsp or sop for this preset)" if config.objective == "auto" else ""
        raise PretrainError(
            f"seq_len={shortest} is too short: with objective {config.objective}{which} an example is a "
            f"sentence pair, [CLS] A [SEP] B [SEP], of at least {needed} tokens. Use seq_len >= {needed}, "
            f"or objective none (seq_len >= {min_seq_len('none')})."
        )
    if shortest < needed:
        raise PretrainError(
            f"seq_len={shortest} is too short: an example needs at least {needed} tokens ([CLS] text [SEP] "
            f"with room to mask). Use seq_len >= {needed}."
        )
    positions = document["backbone"].get("max_sequence_length", 512)
    longest = max(config.seq_len)
    if longest > positions:
        raise PretrainError(
            f"seq_len={longest} is longer than the model's {positions} position embeddings "
            f"(preset {config.preset!r}, max_sequence_length). Use seq_len <= {positions}."
        )


def _is_electra(config, document):
    return config.objective == "electra" or (
        config.objective == "auto" and document.get("metadata", {}).get("model_type") == "electra"
    )


def build_backbone(config, vocabulary_size, preset=None):
    """The architecture of `preset` (default: the run's; its weights when it
    is a directory that has them) with the vocabulary's size and the run's
    precision. For objective electra a built-in architecture is built
    without its pooler (ELECTRA has none)."""
    preset = config.preset if preset is None else preset
    document, directory, kind = _preset_document(preset)
    overrides = {"dtype": config.precision}
    if config.dropout is not None:
        overrides["dropout"] = config.dropout
    # The run's preset decides the checks (it is `preset` unless this builds the generator).
    run_document = document if preset == config.preset else _preset_document(config.preset)[0]
    check_positions(config, run_document)
    electra = _is_electra(config, run_document)
    if directory is not None and not (
        kind == "bertzoo" and not (Path(directory) / preset_lib.WEIGHTS_FILE).exists()
    ):
        # Continued pre-training of a checkpoint (a config.json without
        # weights is an architecture, like a built-in preset).
        backbone = BertBackbone.from_preset(preset, **overrides)
        if backbone.vocabulary_size != vocabulary_size:
            raise PretrainError(
                f"The vocabulary has {vocabulary_size} tokens but {preset} has "
                f"{backbone.vocabulary_size} token embeddings; continue pre-training a checkpoint "
                "with its own vocabulary."
            )
        if electra and backbone.use_pooler:
            raise PretrainError(
                f"{preset} has a pooler; objective electra trains a discriminator without one. "
                "Start from an ELECTRA checkpoint or a built-in architecture."
            )
        return backbone
    arch = {**document["backbone"], **overrides, "vocabulary_size": vocabulary_size}
    if electra:
        arch["use_pooler"] = False
    backbone = BertBackbone(**arch)
    backbone.preset_info = {
        k: document[k] for k in ("description", "tokenizer", "metadata") if k in document
    }
    if electra:
        metadata = backbone.preset_info.setdefault("metadata", {})
        backbone.preset_info["metadata"] = {**metadata, "model_type": "electra"}
    return backbone


def build_generator(config, discriminator):
    """ELECTRA's generator: `--generator` (a preset or directory), else the
    preset directory's `generator/`, else the discriminator scaled by
    `--generator-size`."""
    preset = config.generator
    if preset is None:
        directory = _preset_document(config.preset)[1]
        if (
            directory is not None
            and (Path(directory) / preset_lib.GENERATOR_DIR / preset_lib.CONFIG_FILE).is_file()
        ):
            preset = str(Path(directory) / preset_lib.GENERATOR_DIR)
    if preset is None:
        return ElectraPretrainer.generator_for(discriminator, config.generator_size)
    generator = build_backbone(config, discriminator.vocabulary_size, preset=preset)
    generator.preset_info.setdefault("metadata", {})["model_type"] = "electra"
    return generator


def resolve_objective(config, backbone):
    if config.objective != "auto":
        return config.objective
    if backbone.preset_info.get("metadata", {}).get("model_type") == "electra":
        return "electra"
    if not backbone.use_pooler:
        return "none"
    kind = backbone.preset_info.get("tokenizer", {}).get("kind", "wordpiece")
    # ALBERT-shaped models (factorised or shared) train with SOP.
    if (
        kind == "sentencepiece"
        or backbone.embedding_dim != backbone.hidden_dim
        or backbone.num_groups != backbone.num_layers
    ):
        return "sop"
    return "nsp"


def build_pretrainer(config, backbone, objective):
    """The pre-training model: `ElectraPretrainer` (a generator + the
    backbone as discriminator) for objective electra, else `BertPretrainer`."""
    if objective == "electra":
        generator = build_generator(config, backbone)
        return ElectraPretrainer(
            generator, backbone, rtd_weight=config.rtd_weight, seed=config.seed
        )
    return BertPretrainer(backbone, objective=objective)


def example_objective(objective):
    """The sentence objective the examples are built for: ELECTRA's are
    single segments, as MLM-only ones."""
    return "none" if objective == "electra" else objective


def _model_batches(dataset, objective):
    """ELECTRA's model takes the masked-LM labels inside its input dict."""
    if objective != "electra":
        return dataset
    return dataset.map(tf.autograph.experimental.do_not_convert(electra_batch))


# === The run ===


def _written(config):
    """The paths (under `output`) this run writes, claimed at its start."""
    names = [RUN_SETTINGS_FILE, CHECKPOINTS_DIR, LOGS, INITIAL_EVAL_FILE, PRESET_DIR, METRICS_FILE]
    if not config.corpus:
        names.append(CORPUS_FILE)
    cls, _, _, vocabulary = _vocabulary_plan(config)
    if vocabulary is None:
        names.append(cls.vocabulary_file)
    if config.data_mode == "static" and not config.data:
        names += sorted({f"{DATA_DIR}/seq{s}" for s in config.seq_len})
    return names


def _discard_derived(config, output, run):
    """Starting over: what earlier runs here derived from their settings
    goes (checkpoints, logs, trained vocabulary, data files, metrics), if
    bertzoo wrote it and it is not an input of this run. The built-in
    corpus and the last preset/ stay until rewritten."""
    derived = [CHECKPOINTS_DIR, LOGS, "vocab.txt", "spiece.model", INITIAL_EVAL_FILE, METRICS_FILE]
    derived += [name for name in run.recorded if name.startswith(f"{DATA_DIR}/")]
    inputs = [Path(p).resolve() for p in (config.vocab, *config.data) if p]
    if config.corpus:
        inputs += [p.resolve() for p in expand_files(list(config.corpus))]
    for name in derived:
        path = (output / name).resolve()
        if not any(p == path or path in p.parents for p in inputs):
            run.remove(name)


def _phase_data(config, phase, train_examples, tokenizer, masker, output, chief, start_batch):
    """The training stream of one phase, starting at batch `start_batch`."""
    seq = config.seq_len[phase]
    seed = config.seed + 1000 * phase
    if config.data:
        directory = config.data[phase]
    elif config.data_mode == "static":
        directory = output / DATA_DIR / f"seq{seq}"
        if chief and not (directory / "pretraining_metadata.json").is_file():
            write_pretraining_tfrecords(
                train_examples, directory, num_shards=4, masker=masker, seed=seed
            )
        _wait_for(directory / "pretraining_metadata.json")
    else:
        return make_pretraining_dataset(
            train_examples,
            config.batch_size,
            masker,
            seed=seed,
            repeat=True,
            start_batch=start_batch,
        )
    meta = read_metadata(directory)
    return read_pretraining_dataset(
        directory,
        config.batch_size,
        seq,
        masker=None if meta["masked"] else masker,
        vocabulary_size=tokenizer.vocabulary_size,
        seed=seed,
        repeat=True,
        start_batch=start_batch,
    )


def _auto_batch_size(config, distribution):
    """`--batch-size auto`: planned at the longest phase, for the run's
    architecture with the vocabulary size it will have (a trained one's
    --vocab-size, or the checkpoint's)."""
    if config.batch_size != AUTO:
        return config
    document, directory, _ = _preset_document(config.preset)
    if _is_electra(config, document):
        raise PretrainError(
            "--batch-size auto plans BERT-style masked-LM steps; objective electra also runs "
            "a generator, which the planner does not model. Pass --batch-size N."
        )
    architecture = dict(document["backbone"])
    if config.dropout is not None:
        architecture["dropout"] = config.dropout
    if directory is None and not config.vocab:
        architecture["vocabulary_size"] = config.vocab_size
    return resolve_batch_size(
        config,
        architecture,
        max(config.seq_len),
        "pretrain",
        PretrainError,
        replicas=distribution.num_replicas,
        optimizer=config.optimizer,
        accumulation=config.gradient_accumulation_steps,
    )


def run_pretraining(config):
    """Runs (or resumes) pre-training as `config` says; returns the metrics
    written to `metrics.json`."""
    validate_config(config)
    check_positions(config)  # before any data work
    _check_inputs(config)
    distribution = make_distribution(config.strategy, tpu=config.tpu)
    config = _auto_batch_size(config, distribution)
    distribution.check_batch_size(config.batch_size)
    with RunDirectory(config.output, chief=distribution.is_chief) as run:  # one run at a time
        return _run(config, distribution, run)


def _run(config, distribution, run):
    output = Path(config.output)
    chief = distribution.is_chief
    manager = CheckpointManager(output / CHECKPOINTS_DIR, keep=config.keep_checkpoints)
    resuming = config.resume and _has_checkpoint(output)
    if resuming:
        _check_resumable(output, config)
    run.claim(*_written(config))  # a user's file in the way: an error, before anything is written
    if not resuming and (not config.resume or config.changed_settings(output)):
        # Starting over, or no checkpoint yet and the files here were made
        # with other settings (an earlier run failed early): they go.
        _discard_derived(config, output, run)
    if chief:
        config.record(output)
    keras.utils.set_random_seed(config.seed)

    # --- data ---
    files = _corpus_files(config, output, chief)
    tokenizer = prepare_tokenizer(config, output, files, chief)
    documents = tokenize_documents(read_corpus(files, layout=config.corpus_layout), tokenizer)
    train_docs, eval_docs = split_documents(documents, config.eval_fraction, config.seed)
    held_out = bool(eval_docs)
    if not held_out:
        logger.warning(
            "No held-out documents (%d document(s), eval_fraction=%g): the initial and final "
            "metrics are measured on training documents. Separate documents with blank lines.",
            len(documents),
            config.eval_fraction,
        )
        eval_docs = train_docs

    # --- model ---
    with distribution.scope():
        backbone = build_backbone(config, tokenizer.vocabulary_size)
        objective = resolve_objective(config, backbone)
        model = build_pretrainer(config, backbone, objective)
        # Steps count batches; the schedule counts weight updates (one per
        # `gradient_accumulation_steps` batches).
        accumulate = config.gradient_accumulation_steps
        total = sum(config.steps)
        warmup = config.warmup_steps if config.warmup_steps is not None else int(0.1 * total)
        optimizer = make_optimizer(
            config.optimizer,
            config.learning_rate,
            total_steps=total // accumulate,
            warmup_steps=warmup // accumulate,
            weight_decay=config.weight_decay,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            loss_scaling=config.precision == "mixed_float16",
        )
        model.compile(
            optimizer=optimizer,
            jit_compile=distribution.resolve_jit_compile(config.jit_compile),
            steps_per_execution=config.steps_per_execution,
        )

    predictions = max_predictions(config)
    maskers = [
        MaskedLMMasker(tokenizer, seq, p, kind=config.masking, mask_rate=config.mask_rate)
        for seq, p in zip(config.seq_len, predictions)
    ]
    # Held-out evaluation at the last (longest) phase's length. Masks are
    # drawn once (cached): the initial and final numbers, and those of a
    # resumed run, are on the same predictions.
    eval_examples = create_examples(
        eval_docs,
        tokenizer,
        seq_len=config.seq_len[-1],
        objective=example_objective(objective),
        seed=config.seed + 7,
    )
    eval_truncated = round(eval_examples.truncated / max(1, len(eval_examples)), 4)
    logger.info(
        "Held-out examples at length %d: %d, %.1f%% cut at the length limit (the reference's "
        "truncate_seq_pair).",
        config.seq_len[-1],
        len(eval_examples),
        100 * eval_truncated,
    )
    eval_batch = min(config.batch_size, len(eval_examples))
    eval_set = (
        make_pretraining_dataset(
            eval_examples, eval_batch, maskers[-1], seed=config.seed + 11, shuffle=False
        )
        .take(config.eval_batches)
        .cache()
    )  # the same masks for every evaluation
    # Each batch padded only to its longest sequence's bucket.
    eval_set = _model_batches(batching.trim_dataset(eval_set, config.seq_len[-1]), objective)

    # --- resume ---
    step = 0
    if config.resume and manager.latest() is not None:
        state = manager.restore(model)
        step = int(state["step"])
        logger.info("Resumed from %s at step %d.", manager.restored_path, step)
    initial_path = output / INITIAL_EVAL_FILE
    if initial_path.is_file():
        initial = json.loads(initial_path.read_text(encoding="utf-8"))
    else:
        initial = _evaluate(model, eval_set)
        if chief:
            atomic_write_text(initial_path, json.dumps(initial, indent=2) + "\n")
    resumed_from = step

    tensorboard = TensorBoardLogger(output / LOG_DIR, config.log_every, enabled=chief)
    progress = ProgressLog(config.log_every, sum(config.steps), logger=logger)
    throughput = []
    bounds = np.cumsum([0, *config.steps])
    started = time.perf_counter()
    for phase, seq in enumerate(config.seq_len):
        if step >= bounds[phase + 1]:
            continue
        done_in_phase = step - bounds[phase]
        train_examples = create_examples(
            train_docs,
            tokenizer,
            seq_len=seq,
            objective=example_objective(objective),
            short_seq_prob=config.short_seq_prob,
            dupe_factor=config.dupe_factor,
            seed=config.seed + phase,
        )
        dataset = _phase_data(
            config, phase, train_examples, tokenizer, maskers[phase], output, chief, done_in_phase
        )
        dataset = _model_batches(dataset, objective)
        if distribution.num_workers > 1:
            # Every worker reads the same stream and keeps its share of each
            # global batch: the run (and its data position on resume) is
            # that of a single process. (AUTO would give workers different
            # files.)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.DATA
            )
            dataset = dataset.with_options(options)
        remaining = int(bounds[phase + 1] - step)
        phase_start = int(bounds[phase])

        def state_fn(global_step, phase=phase, phase_start=phase_start):
            return {
                "phase": phase,
                "seq_len": config.seq_len[phase],
                "data_position": global_step - phase_start,
            }

        tensorboard.start_at(step)
        meter = Throughput(config.batch_size)
        callbacks = [
            # Before the checkpoint callback: a NaN loss raises before a
            # checkpoint of that state is written.
            NonFiniteGuard(
                step,
                kept=f"The last good checkpoint in {manager.directory} was kept; "
                f"{output / 'preset'} was not updated.",
            ),
            PeriodicCheckpoint(
                manager, config.checkpoint_every, start_step=step, state_fn=state_fn, enabled=chief
            ),
            tensorboard,
            meter,
        ]
        if config.verbose:
            logger.info(
                "Phase %d/%d: seq_len %d, steps %d-%d, %d examples, global batch %d.",
                phase + 1,
                len(config.seq_len),
                seq,
                step + 1,
                bounds[phase + 1],
                len(train_examples),
                config.batch_size,
            )
        if config.verbose == 2:  # not a terminal: a line per logging interval, not per phase
            progress.start_at(step)
            callbacks.append(progress)
        model.fit(
            dataset,
            epochs=1,
            steps_per_epoch=remaining,
            callbacks=callbacks,
            verbose=1 if config.verbose == 1 else 0,
            shuffle=False,
        )  # the dataset shuffles itself
        step = int(bounds[phase + 1])
        throughput.append(meter)
    seconds = time.perf_counter() - started

    final = _evaluate(model, eval_set)
    tensorboard.write({f"eval/{k}": v for k, v in final.items()}, step)
    measured = [m for m in throughput if m.seconds > 0]
    examples_per_second = (
        sum(m.steps for m in measured) * config.batch_size / sum(m.seconds for m in measured)
        if measured
        else None
    )
    metrics = {
        **{f"initial_{k}": v for k, v in initial.items()},
        **{f"final_{k}": v for k, v in final.items()},
        "steps": step,
        "resumed_from_step": resumed_from,
        "examples_per_second": examples_per_second,
        "train_seconds": seconds,
        "seq_len": list(config.seq_len),
        "batch_size": config.batch_size,
        "objective": objective,
        "vocabulary_size": tokenizer.vocabulary_size,
        "parameters": int(backbone.count_params()),
        "train_documents": len(train_docs),
        "eval_documents": len(eval_docs),
        "eval_held_out": held_out,
        "eval_examples": len(eval_examples),
        "truncated": {"eval": eval_truncated},
        "num_replicas": distribution.num_replicas,
        "backend": keras.backend.backend(),
    }
    if chief:
        # The heads are saved beside the backbone: a teacher for distillation.
        _save_preset(config, model, backbone, tokenizer, objective, output / PRESET_DIR)
        atomic_write_text(output / METRICS_FILE, json.dumps(metrics, indent=2) + "\n")
    return metrics


def _evaluate(model, eval_set):
    result = model.evaluate(eval_set, return_dict=True, verbose=0)
    return {k: float(v) for k, v in result.items()}


def _save_preset(config, model, backbone, tokenizer, objective, directory):
    """The trained backbone with its pre-training heads + vocabulary,
    published as one bertzoo preset directory (`bertzoo.io.publish`); for
    ELECTRA the discriminator, with the generator in `generator/`."""
    with publish_directory(directory, "preset") as staging:
        _write_preset(config, model, backbone, tokenizer, objective, staging)
    return directory


def _write_preset(config, model, backbone, tokenizer, objective, directory):
    tokenizer.save_to_preset(directory)
    preset_info = {
        "description": (
            f"Pre-trained by bertzoo's recipe from {config.preset} ({objective} objective, "
            f"{sum(config.steps)} steps, seq_len {'/'.join(map(str, config.seq_len))})."
        ),
        "tokenizer": tokenizer.preset_section(),
        "metadata": {
            k: v
            for k, v in backbone.preset_info.get("metadata", {}).items()
            if k in ("paper", "license", "model_type")
        },
    }
    # Presets record no dtype policy (precision is a setting of each run);
    # mixed-precision variables are float32 anyway.
    if objective == "electra":
        model.save_to_preset(directory, tokenizer=tokenizer, preset_info=preset_info)
    else:
        backbone.save_to_preset(
            directory, preset_info=preset_info, head_tensors=model.head_tensors()
        )
