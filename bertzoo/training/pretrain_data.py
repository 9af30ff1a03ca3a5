"""Pre-training's data stage (`bertzoo.training.pretrain`): the corpus,
the vocabulary (given, the preset's or trained), documents and held-out
documents, examples and masked batches per phase, and the held-out
evaluation set."""

import dataclasses
import logging
import time
from pathlib import Path

import tensorflow as tf

from bertzoo import batching
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
from bertzoo.models.electra import electra_batch
from bertzoo.training.pretrain_config import max_predictions, preset_document
from bertzoo.training.runs import (
    CORPUS_FILE,
    DATA_DIR,
    split_documents,
    write_builtin_corpus,
)

logger = logging.getLogger("bertzoo.training.pretrain")  # the run's log lines


def corpus_files(config, output, chief):
    if config.corpus:
        return [str(p) for p in config.corpus]
    path = output / CORPUS_FILE
    if chief:
        write_builtin_corpus(path)
    wait_for(path)
    return [str(path)]


def _tokenizer_settings(config, document):
    settings = dict(document.get("tokenizer", {}))
    kind = settings.pop("kind", "wordpiece")
    if config.lowercase is not None:
        settings["lowercase"] = config.lowercase
    if config.strip_accents is not None:
        settings["strip_accents"] = config.strip_accents
    return kind, settings


def vocabulary_plan(config):
    """(tokenizer class, kind, settings, vocabulary file): the given file,
    the preset directory's, or None when the run trains one."""
    from bertzoo.tokenizers import tokenizer_class

    document, directory, _ = preset_document(config.preset)
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

    cls, kind, settings, vocabulary = vocabulary_plan(config)
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
        wait_for(vocabulary)
    return cls(vocabulary, **settings)


def wait_for(path, seconds=600):
    """Non-chief workers wait for files the chief writes."""
    deadline = time.time() + seconds
    while not Path(path).exists():
        if time.time() > deadline:
            raise TimeoutError(
                f"{path} did not appear within {seconds} s (written by the chief worker)."
            )
        time.sleep(0.5)


def example_objective(objective):
    """The sentence objective the examples are built for: ELECTRA's are
    single segments, as MLM-only ones."""
    return "none" if objective == "electra" else objective


def model_batches(dataset, objective):
    """ELECTRA's model takes the masked-LM labels inside its input dict."""
    if objective != "electra":
        return dataset
    return dataset.map(tf.autograph.experimental.do_not_convert(electra_batch))


def phase_data(run, corpus, phase, train_examples, start_batch):
    """The training stream of one phase (`train_examples` masked by
    `corpus.maskers[phase]`), starting at batch `start_batch`."""
    config, output, chief = run.config, run.output, run.chief
    tokenizer, masker = corpus.tokenizer, corpus.maskers[phase]
    seq = config.seq_len[phase]
    seed = config.seed + 1000 * phase
    # Both sources: the phase's seed, endless, from the data position.
    stream = {"seed": seed, "repeat": True, "start_batch": start_batch}
    if config.data:
        directory = config.data[phase]
    elif config.data_mode == "static":
        directory = output / DATA_DIR / f"seq{seq}"
        if chief and not (directory / "pretraining_metadata.json").is_file():
            write_pretraining_tfrecords(
                train_examples, directory, num_shards=4, masker=masker, seed=seed
            )
        wait_for(directory / "pretraining_metadata.json")
    else:
        return make_pretraining_dataset(train_examples, config.batch_size, masker, **stream)
    meta = read_metadata(directory)
    return read_pretraining_dataset(
        directory,
        config.batch_size,
        seq,
        masker=None if meta["masked"] else masker,
        vocabulary_size=tokenizer.vocabulary_size,
        **stream,
    )


@dataclasses.dataclass
class Corpus:
    """The data stage's documents: tokenized, split into training and
    held-out documents (training documents stand in when none are held
    out), with the maskers of the phases."""

    tokenizer: object
    train_docs: list
    eval_docs: list
    held_out: bool
    maskers: list


def read_documents(run):
    """The corpus (given, or the built-in one written to the output),
    tokenized with the run's vocabulary and split into training and held-out
    documents."""
    config = run.config
    files = corpus_files(config, run.output, run.chief)
    tokenizer = prepare_tokenizer(config, run.output, files, run.chief)
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
    maskers = [
        MaskedLMMasker(tokenizer, seq, p, kind=config.masking, mask_rate=config.mask_rate)
        for seq, p in zip(config.seq_len, max_predictions(config))
    ]
    return Corpus(tokenizer, train_docs, eval_docs, held_out, maskers)


@dataclasses.dataclass
class EvalSet:
    """The held-out evaluation: its examples, the share of them cut at the
    length limit, and their batches (masks drawn once)."""

    examples: object
    truncated: float
    batches: object


def eval_data(config, corpus, objective):
    """Held-out evaluation at the last (longest) phase's length. Masks are
    drawn once (cached): the initial and final numbers, and those of a
    resumed run, are on the same predictions."""
    eval_examples = create_examples(
        corpus.eval_docs,
        corpus.tokenizer,
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
            eval_examples, eval_batch, corpus.maskers[-1], seed=config.seed + 11, shuffle=False
        )
        .take(config.eval_batches)
        .cache()
    )  # the same masks for every evaluation
    # Each batch padded only to its longest sequence's bucket.
    eval_set = model_batches(batching.trim_dataset(eval_set, config.seq_len[-1]), objective)
    return EvalSet(eval_examples, eval_truncated, eval_set)


def phase_examples(config, corpus, phase, objective):
    """The training examples of phase `phase` (at its sequence length)."""
    return create_examples(
        corpus.train_docs,
        corpus.tokenizer,
        seq_len=config.seq_len[phase],
        objective=example_objective(objective),
        short_seq_prob=config.short_seq_prob,
        dupe_factor=config.dupe_factor,
        seed=config.seed + phase,
    )
