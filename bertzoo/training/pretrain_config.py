"""Pre-training's settings (`bertzoo.training.pretrain`): `PretrainConfig`,
the checks made before any model or data work, and the settings derived
from them."""

import dataclasses
import logging
import math
from pathlib import Path

from bertzoo.errors import BertzooError
from bertzoo.presets import MLM_ONLY_FAMILIES, max_input_length, modernbert_shaped
from bertzoo.training.runs import (
    AUTO,
    OPTIMIZERS,
    PRECISIONS,
    STRATEGIES,
    RunConfig,
    batch_size_setting,
    comma_ints,
    comma_strings,
    device_memory_setting,
    jit_compile_setting,
    setting,
    verbose_setting,
)

# The checks below that read presets, corpora or models import those modules
# (and so Keras and TensorFlow) when they run: the settings themselves, and
# the recipe's --help, need neither.

logger = logging.getLogger("bertzoo.training.pretrain")  # the run's log lines

DATA_MODES = ("dynamic", "static")
PACKINGS = ("auto", "full_sentences", "doc_sentences")
OBJECTIVE_CHOICES = ("auto", "nsp", "sop", "none", "electra")
MASKING_CHOICES = ("token", "whole_word", "ngram")
CORPUS_LAYOUTS = ("sentences", "documents")
# --mask-rate's default: BERT's 15%, and ModernBERT's 30% for presets shaped like it.
MASK_RATE = 0.15
MODERNBERT_MASK_RATE = 0.30
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

    run_kind = "pretrain"
    path_settings = ("corpus", "prepared", "vocab", "data")

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
    prepared: str = setting(
        None,
        "a corpus prepared beforehand (python -m bertzoo prepare): trained from as it is, with "
        "the tokenizer it was prepared with; replaces --corpus and --vocab",
        group="data",
    )
    corpus_layout: str = setting(
        "sentences", "'documents': one document per line", choices=CORPUS_LAYOUTS, group="data"
    )
    vocab: str = setting(
        None,
        "vocab.txt, spiece.model, vocab.json (merges.txt beside it) or sentencepiece.bpe.model, "
        "as the preset's tokenizer kind takes; default: the preset directory's, else trained on "
        "the corpus",
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
    pre_tokenize: str = setting(
        "words",
        "what a trained vocabulary learns its pieces on: words, or morphemes (WordPiece and "
        "byte-level BPE: Korean words cut at their morpheme boundaries with kiwipiepy, KLUE's "
        'recipe; pip install "kiwipiepy>=0.20"); the tokenizer stays plain; default %(default)s',
        choices=("words", "morphemes"),
        group="data",
    )
    lowercase: bool = setting(None, "default: the preset's setting", group="data")
    strip_accents: bool = setting(
        None,
        "default: follows --lowercase, except that a WordPiece vocabulary the run trains on a "
        "corpus whose words are 1% or more Hangul keeps it off, with a notice (stripping "
        "turns syllables into jamo); --no-strip-accents for Korean says so",
        group="data",
    )
    objective: str = setting(
        "auto",
        "nsp / sop / none: masked LM with that sentence objective; electra: replaced-token "
        "detection (a generator + the preset as discriminator, no pooler); auto: electra for "
        "ELECTRA presets, nsp for BERT, sop for ALBERT-shaped models, none without a pooler "
        "and for RoBERTa- and ModernBERT-shaped ones",
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
    mask_rate: float = setting(
        None,
        f"share of tokens masked; default {MODERNBERT_MASK_RATE} for ModernBERT-shaped presets "
        f"(rotary positions or a gated feed-forward: ModernBERT's recipe), else {MASK_RATE}",
        group="data",
    )
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
    jit_compile: bool | None = jit_compile_setting()
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
    packing: str = setting(
        "auto",
        "single-segment examples (objective none, electra): full_sentences fills each sequence "
        "with whole consecutive sentences, across documents (RoBERTa's FULL-SENTENCES; what "
        "auto picks for them); doc_sentences keeps each sequence in one document, with "
        "--short-seq-prob (the reference's chunking). Sentence pairs (nsp, sop) are never packed",
        choices=PACKINGS,
        group="data",
    )
    shard_mb: float = setting(
        16,
        "corpus preparation: MB of text per shard; a phase holds one shard's examples and a "
        "resume builds one shard's (16 MB: about 10 s on one core)",
        group="data",
    )
    prepare_workers: int = setting(
        None,
        "corpus preparation and WordPiece vocabulary training: worker processes; default: "
        "the CPU count (fewer for a small corpus)",
        group="data",
        compared=False,
    )
    data_service: str = setting(
        None,
        "a tf.data service dispatcher (grpc://HOST:PORT, python -m bertzoo data-service) whose "
        "workers read, mask and batch the masked records (--data-mode static or --data); "
        "resumes near, not exactly at, the data position (docs/scale-out.md)",
        group="data",
        compared=False,
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


def _choice(name, value, valid):
    if value not in valid:
        raise PretrainError(f"{name}={value!r} is not valid. Valid: {', '.join(map(str, valid))}.")


def _positive(name, value):
    if not isinstance(value, int) or value < 1:
        raise PretrainError(f"{name} must be a positive integer, got {value!r}.")


def validate_config(config):
    """Checks the settings that need no model or data; raises PretrainError."""
    from bertzoo.training.guards import check_finite_settings

    check_finite_settings(config, PretrainError)
    _choice("objective", config.objective, OBJECTIVE_CHOICES)
    _choice("masking", config.masking, MASKING_CHOICES)
    _choice("optimizer", config.optimizer, OPTIMIZERS)
    _choice("precision", config.precision, PRECISIONS)
    _choice("data_mode", config.data_mode, DATA_MODES)
    _choice("corpus_layout", config.corpus_layout, CORPUS_LAYOUTS)
    _choice("packing", config.packing, PACKINGS)
    _choice("include_hangul", config.include_hangul, ("none", "common", "all"))
    _choice("pre_tokenize", config.pre_tokenize, ("words", "morphemes"))
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
        *(("prepare_workers",) if config.prepare_workers is not None else ()),
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
    if config.mask_rate is not None and not 0.0 < config.mask_rate < 1.0:
        raise PretrainError(f"mask_rate must be in (0, 1), got {config.mask_rate}.")
    if not (isinstance(config.shard_mb, int | float) and config.shard_mb * (1 << 20) >= 1):
        raise PretrainError(f"shard_mb must be a positive number of MB, got {config.shard_mb!r}.")
    if config.data_service and not (config.data or config.data_mode == "static"):
        raise PretrainError(
            "--data-service serves masked records (a TensorFlow graph); the on-the-fly stream "
            "runs Python, which service workers cannot. Add --data-mode static (or --data DIRS)."
        )
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


def mask_rate(config, document=None):
    """The run's mask rate: `--mask-rate`, else ModernBERT's 0.30 for a
    ModernBERT-shaped preset (`presets.modernbert_shaped`), else 0.15."""
    if config.mask_rate is not None:
        return config.mask_rate
    if document is None:
        document = preset_document(config.preset)[0]
    return MODERNBERT_MASK_RATE if modernbert_shaped(document) else MASK_RATE


def resolve_defaults(config, document=None):
    """`config` with the defaults that depend on the preset filled in (the
    mask rate), so the run records, and a resume compares, what it uses."""
    return dataclasses.replace(config, mask_rate=mask_rate(config, document))


def max_predictions(config):
    """Prediction slots per phase: given, or ceil(seq_len * mask_rate) (20
    at 128 and 77 at 512, the reference's settings)."""
    if config.max_predictions_per_seq:
        return tuple(config.max_predictions_per_seq)
    rate = mask_rate(config)
    return tuple(max(1, math.ceil(s * rate - 1e-9)) for s in config.seq_len)


def check_inputs(config):
    """The input files exist (checked before anything is written)."""
    from bertzoo.data import read_metadata
    from bertzoo.data.corpus import CorpusFilesError, expand_files
    from bertzoo.data.shards import open_prepared

    try:
        if config.corpus:
            expand_files(list(config.corpus))
        for directory in config.data:
            read_metadata(directory)
    except (FileNotFoundError, CorpusFilesError) as e:
        raise PretrainError(str(e)) from None
    if config.prepared:
        try:
            open_prepared(config.prepared)  # finished, and its small files verified
        except (OSError, ValueError) as e:
            raise PretrainError(f"--prepared: {e}") from None
    if config.vocab is not None and not Path(config.vocab).is_file():
        raise PretrainError(f"--vocab file {config.vocab} does not exist.")


def preset_document(preset):
    from bertzoo.convert.loader import resolve_preset

    return resolve_preset(preset)


def corpus_layout(config):
    """The layout of the run's corpus: that of the `--prepared` directory
    (recorded in it), else `--corpus-layout`. A prepared directory that
    cannot be read gives `--corpus-layout` (`check_inputs` says why)."""
    if config.prepared:
        from bertzoo.data.shards import open_prepared

        try:
            return open_prepared(config.prepared, verify=False).document["settings"]["layout"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return config.corpus_layout


def check_positions(config, document=None):
    """Every phase's sequence length must fit the preset's position table,
    and hold an example: [CLS] A [SEP] B [SEP] with a sentence objective
    (auto: with the preset's pooler), a little less without."""
    from bertzoo.data.examples import min_seq_len

    if document is None:
        document = preset_document(config.preset)[0]
    segments = document["backbone"].get("num_segments", 2)
    modern = modernbert_shaped(document)
    pairs = config.objective in ("nsp", "sop") or (
        config.objective == "auto"
        and document["backbone"].get("use_pooler", True)
        and segments >= 2
        and document.get("metadata", {}).get("model_type") not in MLM_ONLY_FAMILIES
        and not modern
    )
    if config.objective in ("nsp", "sop") and modern:
        raise PretrainError(
            f"objective {config.objective} is not for ModernBERT-shaped presets (rotary "
            "positions or a gated feed-forward), which pre-train with masked LM only, as "
            "ModernBERT does: use --objective none or auto."
        )
    if pairs and corpus_layout(config) == "documents":
        which = " (what auto picks for this preset)" if config.objective == "auto" else ""
        prepared = f"--prepared {config.prepared} was prepared with" if config.prepared else "with"
        raise PretrainError(
            f"objective {config.objective}{which} trains on pairs of consecutive sentences, but "
            f"{prepared} --corpus-layout documents each line is one whole document, so every "
            "pair would take a random second segment and the sentence task learns nothing. Use "
            "--objective none (masked LM on full sequences of the documents), or one sentence "
            "per line with a blank line between documents (--corpus-layout sentences)."
        )
    if config.objective in ("nsp", "sop") and segments < 2:
        raise PretrainError(
            f"objective {config.objective} trains on sentence pairs, whose second sentence has "
            f"segment id 1, but this preset has {segments} segment row(s) (num_segments="
            f"{segments}, as RoBERTa's one): use --objective none (masked LM only) or auto."
        )
    if config.packing == "doc_sentences" and corpus_layout(config) == "documents":
        raise PretrainError(
            "--packing doc_sentences fills each sequence with whole sentences of one document "
            "and cuts a longer sentence; with --corpus-layout documents a whole document is one "
            "line, so all of it past its first sequence would be dropped. Use --packing auto "
            "(full_sentences: long documents are split into full sequences)."
        )
    if pairs and config.packing == "full_sentences":
        raise PretrainError(
            f"--packing full_sentences makes single-segment sequences; objective "
            f"{config.objective!r} trains on sentence pairs here. Use --objective none (or "
            "electra), or --packing auto."
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
    positions = max_input_length(document["backbone"])
    longest = max(config.seq_len)
    if longest > positions:
        raise PretrainError(
            f"seq_len={longest} is longer than the model's {positions} position embeddings "
            f"(preset {config.preset!r}, max_sequence_length). Use seq_len <= {positions}."
        )


def is_electra(config, document):
    return config.objective == "electra" or (
        config.objective == "auto" and document.get("metadata", {}).get("model_type") == "electra"
    )
