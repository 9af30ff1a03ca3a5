"""Pre-training's data stage (`bertzoo.training.pretrain`): the corpus,
the vocabulary (given, the preset's or trained), the corpus prepared once
into tokenized document shards (`bertzoo.data.prepare`; or a directory
prepared beforehand, `--prepared`), held-out documents, and per phase the
stream of masked batches with its exact data position.

A run never re-reads its raw corpus once it is prepared: the preparation in
`--output`/prepared is reused on every start and resume (only pieces whose
input changed are prepared again on a fresh start; a resumed run whose
corpus changed is refused). Memory is that of one shard's examples per
phase, whatever the corpus size.

A multi-worker run (TensorFlow `--strategy multi_worker`) streaming on the
fly has one reader per worker: worker w streams only the non-empty shards
w, w + n, w + 2n, ... in batches of global_batch / n, its share of every
step, and records its own stream position at every checkpoint step
(`bertzoo.training.workers.ReaderPositions`), where its resume starts. Static records (`--data-mode
static`, `--data`) are read by every worker whole, each keeping its share
of every global batch.
"""

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import tensorflow as tf

from bertzoo import batching
from bertzoo.data import (
    MaskedLMMasker,
    make_pretraining_dataset,
    read_metadata,
    read_pretraining_dataset,
)
from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.data.prepared_records import RecordSettings, write_prepared_records
from bertzoo.data.service import records_dataset_via_service
from bertzoo.data.shards import (
    CorpusChangedError,
    ExampleStream,
    StreamPosition,
    StreamSettings,
    held_out_count,
    held_out_examples,
    open_prepared,
    resolve_held_out,
)
from bertzoo.io import manifest as manifest_lib
from bertzoo.models.electra import electra_batch
from bertzoo.training.checkpoint import STATE_FILE
from bertzoo.training.pretrain_config import (
    PretrainError,
    mask_rate,
    max_predictions,
    preset_document,
)
from bertzoo.training.runs import CORPUS_FILE, DATA_DIR, write_builtin_corpus
from bertzoo.training.workers import ReaderPositions, check_readers, wait_for

logger = logging.getLogger("bertzoo.training.pretrain")  # the run's log lines

PREPARED_DIR = "prepared"  # the run's own preparation of its corpus
# Checkpoints of runs that stream from prepared shards say so (and where
# the stream stands); a checkpoint without it is from the in-memory path.
INPUT_VERSION = 2
# Held-out documents are collected until they hold this many evaluation
# batches' worth of tokens (an example takes at most seq_len of them).
EVAL_TOKEN_MARGIN = 2
# Fewer held-out examples than this are warned about (their accuracy is noise).
MIN_EVAL_EXAMPLES = 100


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
    # The file the preset names (a byte-level BPE's tokenizer.json), else the kind's.
    file_name = settings.pop("vocabulary_file", cls.vocabulary_file)
    vocabulary = config.vocab
    if vocabulary is None and directory is not None and (Path(directory) / file_name).is_file():
        vocabulary = Path(directory) / file_name
    return cls, kind, settings, vocabulary


# The tokenizer kinds a run's vocabulary can be trained for on morphemes
# (their tokenizers look pieces up inside words).
MORPHEME_KINDS = ("wordpiece", "byte_level_bpe")


def check_vocabulary_training(config):
    """The vocabulary settings that need the preset's tokenizer kind, checked
    before anything is written: --pre-tokenize morphemes needs a kind that
    takes it and the analyser installed; --include-hangul a kind that can
    have unknown characters. Only when the run trains its vocabulary."""
    from bertzoo.tokenizers import morphemes

    if config.prepared:
        return
    _, kind, _, vocabulary = vocabulary_plan(config)
    if vocabulary is not None:
        return
    if config.pre_tokenize == "morphemes":
        if kind not in MORPHEME_KINDS:
            raise PretrainError(
                f"--pre-tokenize morphemes trains a {' or '.join(MORPHEME_KINDS)} vocabulary; "
                f"preset {config.preset!r} uses a {kind} tokenizer."
            )
        try:
            morphemes.check_available()
        except morphemes.MorphemeAnalyzerMissingError as e:
            raise PretrainError(str(e)) from None
    if kind == "byte_level_bpe" and config.include_hangul != "none":
        raise PretrainError(
            f"--include-hangul does not apply to preset {config.preset!r}'s byte-level BPE: "
            "every byte has a token, so no Hangul is ever unknown."
        )


def _preset_special_tokens(settings):
    """The special tokens a preset's byte-level BPE names (ModernBERT's
    [CLS], ...), for the trained vocabulary; None: RoBERTa's."""
    from bertzoo.tokenizers.byte_bpe import ROBERTA_SPECIALS

    tokens = {role: settings.get(f"{role}_token", t) for role, t in ROBERTA_SPECIALS.items()}
    return None if tokens == ROBERTA_SPECIALS else tokens


def _train_vocabulary(config, kind, settings, vocabulary, files):
    """Trains the run's vocabulary file `vocabulary` (of `kind`) on `files`."""
    from bertzoo.tokenizers.train import (
        train_fairseq_sentencepiece,
        train_sentencepiece,
        train_wordpiece,
    )
    from bertzoo.tokenizers.train_bpe import train_byte_level_bpe

    lowercase = settings.get("lowercase", True)
    strip = settings.get("strip_accents")
    logger.info(
        "Training a %s vocabulary of up to %d tokens on %s%s.",
        kind,
        config.vocab_size,
        files,
        " (pieces learnt within morphemes)" if config.pre_tokenize == "morphemes" else "",
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
    elif kind == "fairseq_sentencepiece":
        train_fairseq_sentencepiece(
            files,
            config.vocab_size,
            vocabulary,
            hard_vocab_limit=False,
            include_hangul=config.include_hangul,
        )
    elif kind == "byte_level_bpe":
        train_byte_level_bpe(
            files,
            config.vocab_size,
            vocabulary,
            add_prefix_space=settings.get("add_prefix_space", False),
            pre_tokenize=config.pre_tokenize,
            workers=config.prepare_workers,
            special_tokens=_preset_special_tokens(settings),
        )
    else:
        train_wordpiece(
            files,
            config.vocab_size,
            lowercase=lowercase,
            strip_accents=strip,
            output=vocabulary,
            include_hangul=config.include_hangul,
            workers=config.prepare_workers,
            keep_hangul_syllables=config.strip_accents is None,
            pre_tokenize=config.pre_tokenize,
        )


def prepare_tokenizer(config, output, files, chief=True):
    """The given vocabulary, the preset directory's, or one trained on the
    corpus (written to `output` once and reused on resume)."""
    cls, kind, settings, vocabulary = vocabulary_plan(config)
    given = [
        flag
        for flag, value, default in (
            ("include_hangul", config.include_hangul, "none"),
            ("pre_tokenize", config.pre_tokenize, "words"),
        )
        if value != default
    ]
    if vocabulary is not None and given:
        logger.warning(
            "%s ignored: the vocabulary %s is given, not trained.",
            " and ".join(f"{flag}={getattr(config, flag)!r}" for flag in given)
            + (" is" if len(given) == 1 else " are"),
            vocabulary,
        )
    if vocabulary is None:
        vocabulary = output / cls.vocabulary_file
        if chief and not vocabulary.is_file():
            _train_vocabulary(config, kind, settings, vocabulary, files)
        wait_for(vocabulary)
        if kind == "wordpiece" and config.strip_accents is None and has_syllables(vocabulary):
            # Trained without accent stripping because the corpus is Korean
            # (`keep_syllables`): tokenize as it was trained, on resume too.
            settings["strip_accents"] = False
    return cls(vocabulary, **settings)


def has_syllables(vocabulary):
    """Whether a vocab.txt holds a precomposed Hangul syllable: accent
    stripping (NFD) leaves none, so one trained with it never does."""
    from bertzoo.tokenizers.train import HANGUL_SYLLABLE_RANGE

    lo, hi = HANGUL_SYLLABLE_RANGE
    text = Path(vocabulary).read_text(encoding="utf-8")
    return any(lo <= ord(c) <= hi for c in text)


def example_objective(objective):
    """The sentence objective the examples are built for: ELECTRA's are
    single segments, as MLM-only ones."""
    return "none" if objective == "electra" else objective


def model_batches(dataset, objective):
    """ELECTRA's model takes the masked-LM labels inside its input dict."""
    if objective != "electra":
        return dataset
    return dataset.map(tf.autograph.experimental.do_not_convert(electra_batch))


@dataclasses.dataclass
class EvalSet:
    """The held-out evaluation: its examples, the share of them cut at the
    length limit, and their batches (masks drawn once)."""

    examples: object
    truncated: float
    batches: object


def warn_small_eval(config, examples, batch):
    """One warning when the evaluation sees fewer than MIN_EVAL_EXAMPLES
    held-out examples, saying how to get more."""
    seen = min(examples, batch * config.eval_batches)
    if seen >= MIN_EVAL_EXAMPLES:
        return
    if examples < MIN_EVAL_EXAMPLES:
        more = (
            f"hold out more documents with --eval-fraction (now {config.eval_fraction:g}) "
            "or give more text"
        )
    else:
        more = f"raise --eval-batches (now {config.eval_batches})"
    logger.warning(
        "The held-out evaluation has %d examples, fewer than %d: its accuracy and loss are "
        "noisy; %s.",
        seen,
        MIN_EVAL_EXAMPLES,
        more,
    )


def warn_one_sentence_documents(objective, summary):
    """One warning before training when a sentence-pair objective (NSP,
    SOP) meets a corpus most of whose documents hold one sentence: such a
    document's pair takes its second segment from another document (the
    reference's rule), always with the same label, so the sentence task is
    learnt from that label alone. From the corpus's counts: with D
    documents and S sentences, at least 2D - S documents hold one sentence
    (each of the others holds two or more)."""
    objective = example_objective(objective)
    documents, sentences = int(summary["documents"]), int(summary["sentences"])
    single = 2 * documents - sentences
    if objective not in ("nsp", "sop") or documents == 0 or 2 * single <= documents:
        return single
    logger.warning(
        "At least %d of the corpus's %d documents hold one sentence (%d sentences in all): "
        "objective %s pairs such a document with another document's text under one label, "
        "so its accuracy says nothing about the model. A blank line ends a document: "
        "separate documents, not sentences, with blank lines, or train masked LM only "
        "(--objective none; with one document per line, --corpus-layout documents).",
        single,
        documents,
        sentences,
        objective,
    )
    return single


def eval_batches(config, examples, masker, objective):
    """The evaluation batches of `examples` at the last (longest) phase's
    length. Masks are drawn once (cached): the initial and final numbers,
    and those of a resumed run, are on the same predictions."""
    truncated = round(examples.truncated / max(1, len(examples)), 4)
    logger.info(
        "Held-out examples at length %d: %d, %.1f%% cut at the length limit (the reference's "
        "truncate_seq_pair).",
        config.seq_len[-1],
        len(examples),
        100 * truncated,
    )
    batch = min(config.batch_size, len(examples))
    warn_small_eval(config, len(examples), batch)
    batches = (
        make_pretraining_dataset(examples, batch, masker, seed=config.seed + 11, shuffle=False)
        .take(config.eval_batches)
        .cache()
    )  # the same masks for every evaluation
    # Each batch padded only to its longest sequence's bucket.
    batches = model_batches(batching.trim_dataset(batches, config.seq_len[-1]), objective)
    return EvalSet(examples, truncated, batches)


# === The prepared corpus ===


def check_prepared_settings(config):
    """`--prepared` brings its own corpus and tokenizer: the flags that
    would give others are refused (before anything is written)."""
    if not config.prepared:
        return
    clashes = [
        flag
        for flag, value in (
            ("--corpus", config.corpus),
            ("--vocab", config.vocab),
            ("--lowercase", config.lowercase),
            ("--strip-accents", config.strip_accents),
        )
        if value not in (None, (), [])
    ]
    if clashes:
        raise PretrainError(
            f"--prepared {config.prepared} brings its corpus and the tokenizer it was prepared "
            f"with; drop {', '.join(clashes)} (or prepare the corpus again with them)."
        )


def _prepare_settings(config):
    return PrepareSettings(
        layout=config.corpus_layout,
        shard_bytes=max(1, int(config.shard_mb * (1 << 20))),
        workers=config.prepare_workers,
        seed=config.seed,
    )


def _reusable(directory, tokenizer, settings, resuming):
    """The finished preparation in `directory`, when it was made from these
    inputs (unchanged), settings and tokenizer; else None. A resumed run
    whose corpus changed is refused: its batches would not be the ones it
    started with."""
    if manifest_lib.read_manifest(directory) is None:
        return None
    prepared = open_prepared(directory)
    recorded = prepared.document["settings"]
    if any(recorded.get(k) != v for k, v in settings.identity().items()):
        return None
    try:
        prepared.check_tokenizer(tokenizer)
        prepared.check_inputs_unchanged()
    except CorpusChangedError as e:
        if resuming:
            raise PretrainError(
                f"{e} The run's checkpoints were trained on the corpus as it was; rerun with "
                "--no-resume to start over on the corpus as it is."
            ) from None
        return None
    except ValueError:  # another tokenizer (a retrained vocabulary)
        return None
    return prepared


def prepare_run_corpus(run, resuming):
    """(prepared corpus, tokenizer): `--prepared`'s, or the run's corpus
    (given or built-in) prepared once into `PREPARED_DIR` with the run's
    vocabulary, reused while its inputs, settings and tokenizer stay."""
    config = run.config
    if config.prepared:
        prepared = open_prepared(config.prepared, check_inputs="warn")
        return prepared, prepared.tokenizer()
    files = corpus_files(config, run.output, run.chief)
    tokenizer = prepare_tokenizer(config, run.output, files, run.chief)
    directory = run.output / PREPARED_DIR
    if run.chief:
        settings = _prepare_settings(config)
        if _reusable(directory, tokenizer, settings, resuming) is None:
            logger.info("Preparing the corpus into %s (once; reused on resume).", directory)
            prepare_corpus(files, tokenizer, directory, settings)
    wait_for(directory / manifest_lib.MANIFEST_FILE)
    return open_prepared(directory), tokenizer


def resolve_packing(config, objective):
    """The packing of single-segment examples: full sentences across
    documents by default (objective none, electra); None for sentence
    pairs, and for `doc_sentences`."""
    single = example_objective(objective) == "none"
    if config.packing == "full_sentences" and not single:
        raise PretrainError(
            f"--packing full_sentences makes single-segment sequences; objective {objective!r} "
            "trains on sentence pairs. Use --objective none (or electra), or --packing auto."
        )
    if single and config.packing in ("auto", "full_sentences"):
        return "full_sentences"
    return None


class PreparedData:
    """The run's data from a prepared corpus: the tokenizer, the maskers of
    the phases, the held-out documents, each phase's stream of masked
    batches from an exact position, and the evaluation set."""

    def __init__(self, run, prepared, tokenizer, objective, workers=(1, 0), checkpoints=None):
        """`workers`: (number of workers, this one's index) of a TensorFlow
        multi-worker run, each of which then streams its own shards (on the
        fly only); `checkpoints`: the run's `CheckpointManager` (needed
        then)."""
        config = run.config
        self.run, self.config, self.prepared, self.tokenizer = run, config, prepared, tokenizer
        self.objective = objective
        self.streamed = not (config.data or config.data_mode == "static")
        # Readers of the corpus: one per worker when streaming on the fly.
        self.readers, self.reader = (int(workers[0]), int(workers[1])) if self.streamed else (1, 0)
        self.positions = None
        if self.readers > 1:
            check_readers(config, prepared, self.readers)
            self.positions = ReaderPositions(run.output, self.readers, self.reader, checkpoints)
        self.packing = resolve_packing(config, objective)
        self.maskers = [
            MaskedLMMasker(tokenizer, seq, p, kind=config.masking, mask_rate=mask_rate(config))
            for seq, p in zip(config.seq_len, max_predictions(config))
        ]
        self.held_out = resolve_held_out(prepared, config.eval_fraction, config.seed + 3)
        self.eval_documents = held_out_count(prepared, self.held_out)
        total = prepared.document["summary"]["documents"]
        self.train_documents = total - self.eval_documents
        if not self.eval_documents:
            logger.warning(
                "No held-out documents (%d document(s), eval_fraction=%g): the initial and final "
                "metrics are measured on training documents. Separate documents with blank lines.",
                total,
                config.eval_fraction,
            )
        warn_one_sentence_documents(objective, prepared.document["summary"])
        self._streams = {}

    def settings(self, phase, seq_len=None, seed=None):
        config = self.config
        return StreamSettings(
            batch_size=config.batch_size,
            seq_len=seq_len or config.seq_len[phase],
            objective=example_objective(self.objective),
            seed=config.seed + 1000 * phase if seed is None else seed,
            short_seq_prob=config.short_seq_prob,
            packing=self.packing,
            held_out=self.held_out,
        )

    def eval_set(self):
        """Held-out documents, collected from the shards in order until they
        hold enough tokens for the evaluation batches, as examples at the
        last phase's length."""
        config = self.config
        seq = config.seq_len[-1]
        settings = self.settings(len(config.seq_len) - 1, seq_len=seq, seed=config.seed + 7)
        budget = EVAL_TOKEN_MARGIN * config.eval_batches * config.batch_size * seq
        examples, _ = held_out_examples(
            self.prepared, self.tokenizer, settings, settings.seed, budget
        )
        return eval_batches(config, examples, self.maskers[-1], self.objective)

    def _records(self, phase):
        """Static masking: the phase's masked TFRecords, written once from
        the shards into the output (or the given `--data` directory)."""
        config, run = self.config, self.run
        if config.data:
            return Path(config.data[phase])
        directory = run.output / DATA_DIR / f"seq{config.seq_len[phase]}"
        if run.chief and manifest_lib.read_manifest(directory) is None:
            settings = self.settings(phase)
            write_prepared_records(
                self.prepared,
                directory,
                self.tokenizer,
                self.maskers[phase],
                RecordSettings(
                    seq_len=settings.seq_len,
                    objective=settings.objective,
                    dupe_factor=config.dupe_factor,
                    seed=settings.seed,
                    short_seq_prob=settings.short_seq_prob,
                    packing=settings.packing,
                    held_out=self.held_out,
                ),
            )
        wait_for(directory / "pretraining_metadata.json")
        return directory

    def phase_dataset(self, phase, start_batch, position=None):
        """The masked batches of phase `phase` from batch `start_batch` of
        its stream (`position`: the `StreamPosition` a checkpoint recorded
        there; None at the phase's start)."""
        config = self.config
        if not self.streamed:
            directory = self._records(phase)
            meta = read_metadata(directory)
            if config.data_service:
                return self._served(phase, directory, meta, start_batch)
            return read_pretraining_dataset(
                directory,
                config.batch_size,
                config.seq_len[phase],
                masker=None if meta["masked"] else self.maskers[phase],
                vocabulary_size=self.tokenizer.vocabulary_size,
                seed=config.seed + 1000 * phase,
                repeat=True,
                start_batch=start_batch,
            )
        settings = self.settings(phase)
        if self.readers > 1:  # this worker's share of every global batch
            settings = dataclasses.replace(
                settings,
                batch_size=config.batch_size // self.readers,
                num_readers=self.readers,
                reader_index=self.reader,
            )
        stream = ExampleStream(self.prepared, self.tokenizer, self.maskers[phase], settings)
        if isinstance(position, dict):
            position = StreamPosition.from_dict(position)
        if position is None:
            position = stream.position_after(start_batch) if start_batch else StreamPosition()
        self._streams[phase] = [stream, start_batch, position]
        return stream.dataset(position)

    def _served(self, phase, directory, meta, start_batch):
        """The phase's records through the tf.data service: one job per
        run and phase, shared by every trainer host."""
        config = self.config
        key = f"{Path(directory).resolve()}|{config.seed}|{phase}"
        job = "bertzoo-pretrain-" + hashlib.sha256(key.encode()).hexdigest()[:16]
        return records_dataset_via_service(
            directory,
            config.batch_size,
            config.seq_len[phase],
            None if meta["masked"] else self.maskers[phase],
            config.data_service,
            job_name=job,
            seed=config.seed + 1000 * phase,
            start_batch=start_batch,
            vocabulary_size=self.tokenizer.vocabulary_size,
        )

    def _walk(self, phase, batches):
        """The stream's position after `batches` batches of phase `phase`
        (walked from the last one recorded, so it costs the shards in
        between)."""
        stream, done, position = self._streams[phase]
        position = stream.position_after(batches - done, position)
        self._streams[phase] = [stream, batches, position]
        return position

    def position(self, phase, batches):
        """The checkpoint's record of where phase `phase`'s data stands after
        `batches` batches: the stream position; with several readers, their
        number (each records its own position, `record_position`)."""
        record = {"input_version": INPUT_VERSION}
        if self.readers > 1:
            record["readers"] = self.readers
        elif phase in self._streams:
            record["stream"] = self._walk(phase, batches).as_dict()
        return record

    def record_position(self, phase, batches, step):
        """Several readers, at checkpoint step `step` (on every worker): this
        reader's position after `batches` batches of phase `phase`, written
        to its file; the chief then waits for every reader's."""
        self.positions.record(step, phase, self._walk(phase, batches))
        if self.run.chief:
            self.positions.wait_for_all(step)

    def restored_position(self, restored, phase, start_batch, step, checkpoint):
        """Where phase `phase`'s stream resumes, at batch `start_batch` (global
        step `step`) after `restored` (the state of `checkpoint`): the
        recorded position when the checkpoint is of this phase (this
        reader's own, with several), else None. A checkpoint of a run with
        another number of readers is refused."""
        if self.streamed and restored.get("input_version", 1) >= INPUT_VERSION:
            recorded = int(restored.get("readers", 1))
            if recorded != self.readers:
                raise PretrainError(
                    f"{checkpoint} was written by a run of {recorded} worker(s) reading "
                    f"{'its own' if recorded > 1 else 'one stream of'} shards; this run has "
                    f"{self.readers}. Resume it with {recorded} worker(s), or rerun with "
                    "--no-resume to start over."
                )
        if restored.get("phase") != phase or not start_batch:
            return None
        if self.readers > 1:
            return self.positions.read(step, phase, checkpoint)
        return restored.get("stream")

    def describe(self, phase):
        """The phase's data, for its log line."""
        if not self.streamed:
            return f"masked records {self._records(phase)}"
        summary = self.prepared.document["summary"]
        packing = f", {self.packing} packing" if self.packing else ""
        readers = ""
        if self.readers > 1:
            readers = f", worker {self.reader} of {self.readers} reading its own shards"
        return (
            f"streamed from {len(self.prepared)} prepared shard(s) of {summary['documents']} "
            f"documents{packing}{readers}"
        )

    def facts(self):
        """What the run's metrics say of its data."""
        return {
            "train_documents": self.train_documents,
            "eval_documents": self.eval_documents,
            "eval_held_out": self.eval_documents > 0,
            "packing": self.packing,
            "prepared": str(self.prepared.directory),
        }


def checkpoint_input_version(path):
    """The input version a checkpoint's state records (1: the in-memory
    path, before prepared shards)."""
    try:
        state = json.loads((Path(path) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return INPUT_VERSION  # unreadable: restoring reports it
    return int(state.get("input_version", 1)) if isinstance(state, dict) else INPUT_VERSION
