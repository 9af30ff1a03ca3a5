"""The in-memory data path of runs started before prepared shards
(`bertzoo.training.pretrain_data` is today's): a checkpoint written by such
a run records no stream position, and the run resumes on the data it
started with: the whole corpus read, tokenized and split in memory, every
phase's examples built at once. New runs never take this path."""

import dataclasses
import logging

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
from bertzoo.training.pretrain_config import mask_rate, max_predictions
from bertzoo.training.pretrain_data import (
    corpus_files,
    eval_batches,
    example_objective,
    prepare_tokenizer,
)
from bertzoo.training.runs import DATA_DIR, split_documents
from bertzoo.training.workers import wait_for

logger = logging.getLogger("bertzoo.training.pretrain")  # the run's log lines


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
        MaskedLMMasker(tokenizer, seq, p, kind=config.masking, mask_rate=mask_rate(config))
        for seq, p in zip(config.seq_len, max_predictions(config))
    ]
    return Corpus(tokenizer, train_docs, eval_docs, held_out, maskers)


def eval_data(config, corpus, objective):
    """Held-out evaluation at the last phase's length, from all held-out
    documents."""
    eval_examples = create_examples(
        corpus.eval_docs,
        corpus.tokenizer,
        seq_len=config.seq_len[-1],
        objective=example_objective(objective),
        seed=config.seed + 7,
    )
    return eval_batches(config, eval_examples, corpus.maskers[-1], objective)


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


class MemoryData:
    """The in-memory path's data, with the interface of
    `pretrain_data.PreparedData`: a phase's examples built at once, its
    position a batch count."""

    readers = 1  # one stream, each worker keeping its share of every batch
    positions = None

    def __init__(self, run, corpus, objective):
        self.run, self.corpus, self.objective = run, corpus, objective
        self.tokenizer = corpus.tokenizer
        self._sizes = {}

    def phase_dataset(self, phase, start_batch, position=None):
        examples = phase_examples(self.run.config, self.corpus, phase, self.objective)
        self._sizes[phase] = len(examples)
        return phase_data(self.run, self.corpus, phase, examples, start_batch)

    def position(self, phase, batches):
        return {}  # the batch count (`data_position`) is the position

    def restored_position(self, restored, phase, start_batch, step, checkpoint):
        return None  # `start_batch` is the position

    def describe(self, phase):
        return f"{self._sizes.get(phase, 0)} examples in memory"

    def facts(self):
        return {
            "train_documents": len(self.corpus.train_docs),
            "eval_documents": len(self.corpus.eval_docs),
            "eval_held_out": self.corpus.held_out,
        }
