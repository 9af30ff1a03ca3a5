"""A prepared corpus (`bertzoo.data.prepare`) -> pre-training examples,
streaming, in either of two modes:

* on the fly in `tf.data` (`ExampleStream`): each shard's documents become
  examples exactly as `create_examples` makes them for one input file (NSP or
  SOP pairs within the shard, as the reference pairs within a file), shards
  are visited in a seeded order that changes every epoch, and batches are
  masked dynamically as `make_pretraining_dataset` masks them (batch b of
  the stream with the seed pair (seed, b); each reader of a multi-reader
  run with a seed of its own). Only one shard's examples are in
  memory at a time.
* written once as masked TFRecords per shard (`write_prepared_records`), in
  the format `read_pretraining_dataset` reads, for TPUs reading a bucket.

The stream's position is a `StreamPosition` (epoch, index in the epoch's
shard order, example in that shard, batches so far). `ExampleStream
.dataset(start)` begins exactly there, building one shard's examples and
skipping into them; `position_after(start, n)` walks n batches forward by
counting examples shard by shard. Both cost the shards they touch, never the
corpus: a resumed run trains the same batches as an uninterrupted one, and
resuming takes the same time at any corpus size.

For MLM only (objective "none") `packing="full_sentences"` packs whole
consecutive sentences into full sequences, crossing document ends with a
[SEP] between documents (RoBERTa's FULL-SENTENCES).
"""

import collections
import dataclasses
import hashlib
import logging
import os
import random
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertzoo.data import pipeline, shardfile
from bertzoo.data.corpus import CorpusError
from bertzoo.data.examples import PretrainingExamples, create_examples, min_seq_len
from bertzoo.data.prepare import MANIFEST_KIND, PREPARED_FILE
from bertzoo.data.prepare_worker import tokenizer_identity
from bertzoo.io import manifest as manifest_lib
from bertzoo.io.jsonfile import read_json_object
from bertzoo.io.rundir import ReaderLock
from bertzoo.tokenizers import tokenizer_class
from bertzoo.tokenizers.kinds import TokenizerError, check_settings

logger = logging.getLogger("bertzoo.data")

PACKINGS = (None, "full_sentences")


class CorpusChangedError(CorpusError):
    """A corpus file changed after it was prepared."""


_MAPPED_SHARDS = 4  # shards a corpus keeps mapped (the last opened)


class PreparedCorpus:
    """An opened prepared directory: `document` (prepared.json),
    `shard_paths`, `shard(i)` (a mapped `Shard`). With `verify`, its small
    files are verified against the manifest at once and each shard when it
    is first opened. While it is open it holds the directory shared
    (`bertzoo.io.rundir.ReaderLock`): a `prepare` into it is refused, and it
    cannot be opened while one runs."""

    def __init__(self, directory, verify=True):
        self.directory = Path(directory)
        self._reader_lock = ReaderLock(self.directory, CorpusError)
        self._shards = collections.OrderedDict()
        found = manifest_lib.read_manifest(self.directory)
        if found is None or found.get("kind") != MANIFEST_KIND:
            raise CorpusError(
                f"{self.directory} is not a finished prepared corpus (no {manifest_lib.MANIFEST_FILE} "
                "of kind 'prepared'); run `python -m bertzoo prepare` (again) to finish it."
            )
        self.manifest, self.verify = found, verify
        if verify:  # the small files now, each shard when it is opened
            small = [n for n in found["files"] if not n.endswith(shardfile.SUFFIX)]
            manifest_lib.verify_directory(self.directory, names=small, manifest=found)
        self.document = read_json_object(self.directory / PREPARED_FILE, CorpusError)
        self._check_document()
        self.shard_paths = [self.directory / s["name"] for s in self.document["shards"]]

    def _check_document(self):
        """prepared.json is checked before anything is sized from it: every
        name it gives is inside the directory and listed in the manifest
        (so it is verified when read), and every shard's counts are
        non-negative integers that fit the shard file's recorded size (a
        shard holds at least 2 bytes per token and 4 per sentence and per
        document). A hostile directory recomputes its manifest: checksums
        alone cannot stop it."""
        where = self.directory / PREPARED_FILE
        files = self.manifest["files"]
        document = self.document

        def fail(what):
            raise CorpusError(f"{where}: {what}; the directory is damaged or not bertzoo's.")

        def listed(name, what):
            if not manifest_lib.inside(name) or name not in files:
                fail(f"{what} {name!r} is not a file inside the directory its manifest lists")

        shards = document.get("shards") if isinstance(document, dict) else None
        if not isinstance(shards, list) or not all(isinstance(s, dict) for s in shards):
            fail("it has no list of shards")
        tokenizer = document.get("tokenizer")
        listed(tokenizer.get("file") if isinstance(tokenizer, dict) else None, "the vocabulary")
        try:  # its kind and settings, before a tokenizer is built from them
            check_settings(tokenizer_class(tokenizer.get("kind")), tokenizer.get("config"), where)
        except TokenizerError as e:
            raise CorpusError(f"{e} The directory is damaged or not bertzoo's.") from None
        totals = dict.fromkeys(("documents", "sentences", "tokens"), 0)
        for index, shard in enumerate(shards):
            name = shard.get("name")
            listed(name, f"shard {index}")
            counts = {k: shard.get(k) for k in totals}
            if not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()
            ):
                fail(f"shard {name}'s counts {counts} are not whole numbers >= 0")
            least = 16 + 2 * counts["tokens"] + 4 * (counts["sentences"] + counts["documents"])
            if least > files[name]["size"]:
                fail(
                    f"shard {name}'s counts {counts} need at least {least:,} bytes; the shard "
                    f"file has {files[name]['size']:,}"
                )
            for k in totals:
                totals[k] += counts[k]
        summary = document.get("summary")
        if not isinstance(summary, dict) or any(summary.get(k) != v for k, v in totals.items()):
            fail(f"its summary does not add up to its shards' counts {totals}")

    def __len__(self):
        return len(self.shard_paths)

    def shard(self, index):
        """Shard `index`, verified against the manifest as it is opened (so
        opening a corpus costs the same at any size); the last few opened
        stay mapped (a cache of this corpus's own, which goes with it)."""
        cache = self._shards
        if index in cache:
            cache.move_to_end(index)
            return cache[index]
        if self.verify:
            name = self.shard_paths[index].name
            manifest_lib.verify_directory(self.directory, names=[name], manifest=self.manifest)
        cache[index] = shardfile.Shard(self.shard_paths[index])
        if len(cache) > _MAPPED_SHARDS:
            cache.popitem(last=False)
        return cache[index]

    def verify_all(self):
        """Checks every file against the manifest now (reads them all)."""
        manifest_lib.verify_directory(self.directory, manifest=self.manifest, force=True)

    def tokenizer(self):
        """The tokenizer the corpus was prepared with (its vocabulary file
        and settings are in the directory)."""
        record = self.document["tokenizer"]
        cls = tokenizer_class(record["kind"])
        return cls(str(self.directory / record["file"]), **record["config"])

    def check_tokenizer(self, tokenizer):
        want, got = self.document["tokenizer"]["sha256"], tokenizer_identity(tokenizer)["sha256"]
        if want != got:
            raise CorpusError(
                f"{self.directory} was prepared with another vocabulary or tokenizer settings "
                f"(hash {want[:12]}, this tokenizer's {got[:12]}); prepare the corpus again "
                "with this tokenizer or use the one it was prepared with."
            )

    def check_inputs_unchanged(self, missing="error"):
        """Stats every recorded input (no reading): a file whose size or
        modification time differs is a `CorpusChangedError`; so is a file
        that is gone, or with `missing="warn"` a logged warning (the shards
        do not need the corpus: it may stay where it was prepared)."""
        for record in self.document["inputs"]:
            path = record["path"]
            try:
                st = os.stat(path)
            except OSError:
                if missing == "warn":
                    logger.warning(
                        "Corpus file %s, prepared into %s, is not here; the prepared shards "
                        "are used as they are.",
                        path,
                        self.directory,
                    )
                    continue
                raise CorpusChangedError(
                    f"Corpus file {path} was prepared into {self.directory} but is gone; "
                    "restore it or prepare the corpus again."
                ) from None
            if (st.st_size, st.st_mtime_ns) != (record["size"], record["mtime_ns"]):
                raise CorpusChangedError(
                    f"Corpus file {path} changed after it was prepared into {self.directory} "
                    f"(size {record['size']} -> {st.st_size} bytes, or its modification time); "
                    "prepare the corpus again."
                )


def open_prepared(directory, verify=True, check_inputs=False):
    """Opens a prepared directory, verifying its files against the manifest
    (and, with `check_inputs`, that no corpus file changed since: True, or
    "warn" to only log files that are gone)."""
    prepared = PreparedCorpus(directory, verify=verify)
    if check_inputs:
        prepared.check_inputs_unchanged(missing="warn" if check_inputs == "warn" else "error")
    return prepared


def check_inputs_unchanged(directory):
    open_prepared(directory, verify=False).check_inputs_unchanged()


# === Examples ===


def _derive_seed(*parts):
    """One int in [0, 2**62) from a tuple of ints (fits a TF int64 seed)."""
    text = ",".join(str(int(p)) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 2


def pack_full_sentences(documents, tokenizer, seq_len, seed):
    """RoBERTa's FULL-SENTENCES: documents (shuffled with `seed`) are read
    as one stream of sentences, and each sequence `[CLS] ... [SEP]` is
    filled with whole consecutive sentences; a document's end inside a
    sequence adds a [SEP]. A sentence longer than a sequence (a whole
    document, in the documents layout) is split into sequences of its
    consecutive tokens, the last piece packed on: no text is dropped.
    Returns `PretrainingExamples` (objective "none"), in a shuffled order."""
    rng = random.Random(seed)
    order = list(range(len(documents)))
    rng.shuffle(order)
    capacity, sep = seq_len - 2, tokenizer.sep_token_id
    rows, current, doc_of = [], [], []

    def emit():
        if current and current[-1] == sep:
            current.pop()  # the closing [SEP] is added below
        if current:
            rows.append(np.asarray(current, np.int32))
            doc_of.append(d)
        current.clear()

    for d in order:
        for sentence in documents[d]:
            if len(current) + len(sentence) > capacity:
                emit()
            while len(sentence) > capacity:
                current.extend(sentence[:capacity].tolist())
                emit()
                sentence = sentence[capacity:]
            current.extend(sentence.tolist())
        if current and len(current) < capacity:
            current.append(sep)
    emit()
    index = list(range(len(rows)))
    rng.shuffle(index)
    n = len(rows)
    token_ids = np.full((n, seq_len), tokenizer.pad_token_id, np.int32)
    padding_mask = np.zeros((n, seq_len), np.int32)
    for k, i in enumerate(index):
        row = np.concatenate([[tokenizer.cls_token_id], rows[i], [sep]])
        token_ids[k, : len(row)] = row
        padding_mask[k, : len(row)] = 1
    return PretrainingExamples(
        token_ids=token_ids,
        segment_ids=np.zeros((n, seq_len), np.int32),
        padding_mask=padding_mask,
        labels=np.zeros(n, np.int32),
        document_ids=np.asarray(doc_of, np.int32)[index] if n else np.zeros(0, np.int32),
        seq_len=seq_len,
        objective="none",
        vocabulary_size=tokenizer.vocabulary_size,
    )


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """Documents held out of training, for evaluation: document j of shard
    i is held out when a uniform draw keyed by (`seed`, i) falls below
    `fraction` (decided per document, so it needs only each shard's
    document count: no shard is read), plus `extra`, a (shard, document)
    pair held out besides (see `resolve_held_out`)."""

    fraction: float = 0.0
    seed: int = 0
    extra: tuple | None = None

    def mask(self, shard, count):
        """A bool array over the `count` documents of shard `shard`: True
        for the held-out ones."""
        held = np.zeros(count, bool)
        if self.fraction > 0:
            held = np.random.default_rng([self.seed, shard, 0x4E1D]).random(count) < self.fraction
        if self.extra is not None and self.extra[0] == shard:
            held[self.extra[1]] = True
        return held


@dataclasses.dataclass(frozen=True)
class StreamPosition:
    """Where an on-the-fly stream stands: `epoch`, `shard` (index into that
    epoch's shard order), `example` (in that shard's examples), `batch`
    (batches yielded since the stream's beginning; masking is keyed by it)."""

    epoch: int = 0
    shard: int = 0
    example: int = 0
    batch: int = 0

    def as_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        return cls(**{k: int(d[k]) for k in ("epoch", "shard", "example", "batch")})


@dataclasses.dataclass(frozen=True)
class StreamSettings:
    """batch_size, seq_len, objective ("nsp", "sop", "none"), seed (shard
    order, examples and masks), short_seq_prob (as `create_examples`),
    packing (None or "full_sentences", objective "none" only), shuffle
    (shard order per epoch, and the examples within a shard), held_out
    (a `HeldOut`: documents the stream leaves out), num_readers
    and reader_index (input pipelines of a multi-worker or TPU run: reader
    i streams the non-empty shards i, i + n, i + 2n, ..., disjoint from the
    others'; e.g. `tf.distribute.InputContext.num_input_pipelines` and
    `.input_pipeline_id`)."""

    batch_size: int
    seq_len: int = 128
    objective: str = "nsp"
    seed: int = 0
    short_seq_prob: float = 0.1
    packing: str | None = None
    shuffle: bool = True
    num_readers: int = 1
    reader_index: int = 0
    held_out: HeldOut | None = None

    def check(self):
        if self.packing not in PACKINGS:
            raise CorpusError(f"packing must be one of {PACKINGS}, got {self.packing!r}.")
        if self.packing and self.objective != "none":
            raise CorpusError(
                f"packing={self.packing!r} makes single-segment sequences: it needs "
                f"objective 'none', got {self.objective!r}."
            )
        if self.batch_size < 1:
            raise CorpusError(f"batch_size must be >= 1, got {self.batch_size}.")
        if not 0 <= self.reader_index < self.num_readers:
            raise CorpusError(
                f"reader_index must be in [0, num_readers={self.num_readers}), got {self.reader_index}."
            )
        if self.seq_len < min_seq_len(self.objective):
            raise CorpusError(
                f"seq_len={self.seq_len} is too small for objective {self.objective!r} "
                f"(at least {min_seq_len(self.objective)})."
            )


def resolve_held_out(prepared, fraction, seed):
    """The run's `HeldOut`: documents drawn at `fraction`, and at least one
    when the corpus has two or more documents and no draw fell below it
    (the one with the lowest draw). Reads only `prepared.json`."""
    counts = [s["documents"] for s in prepared.document["shards"]]
    held_out = HeldOut(float(fraction), int(seed))
    if fraction <= 0 or sum(counts) < 2:
        return HeldOut(0.0, int(seed))
    lowest = (2.0, None)
    for shard, count in enumerate(counts):
        if not count:
            continue
        draws = np.random.default_rng([seed, shard, 0x4E1D]).random(count)
        if (draws < fraction).any():
            if held_out_count(prepared, held_out) < sum(counts):
                return held_out
            break  # a few documents, all drawn: hold out only the lowest draw
        j = int(np.argmin(draws))
        lowest = min(lowest, (float(draws[j]), (shard, j)), key=lambda t: t[0])
    if lowest[1] is None:
        for shard, count in enumerate(counts):
            if count:
                draws = np.random.default_rng([seed, shard, 0x4E1D]).random(count)
                j = int(np.argmin(draws))
                lowest = min(lowest, (float(draws[j]), (shard, j)), key=lambda t: t[0])
    return HeldOut(0.0, int(seed), extra=lowest[1])


def shard_documents(prepared, index, held_out=None, held=False):
    """The documents of shard `index` (lists of int32 token-id arrays): the
    training ones, or with `held` the held-out ones."""
    documents = prepared.shard(index).document_list()
    if held_out is None:
        return [] if held else documents
    mask = held_out.mask(index, len(documents))
    return [d for d, h in zip(documents, mask, strict=True) if bool(h) == held]


def held_out_count(prepared, held_out):
    """Documents `held_out` takes from the corpus (from prepared.json)."""
    counts = [s["documents"] for s in prepared.document["shards"]]
    return int(sum(held_out.mask(i, c).sum() for i, c in enumerate(counts)))


def documents_examples(documents, tokenizer, settings, seed, dupe_factor=1):
    """Unmasked examples of `documents` as `settings` say: `create_examples`
    (NSP/SOP pairs or single segments within documents), or full-sentence
    packing. No documents (a shard whose documents are all held out): no
    examples."""
    if not documents:
        S = settings.seq_len
        return PretrainingExamples(
            token_ids=np.zeros((0, S), np.int32),
            segment_ids=np.zeros((0, S), np.int32),
            padding_mask=np.zeros((0, S), np.int32),
            labels=np.zeros(0, np.int32),
            document_ids=np.zeros(0, np.int32),
            seq_len=S,
            objective=settings.objective,
            vocabulary_size=tokenizer.vocabulary_size,
        )
    if settings.packing == "full_sentences":
        if dupe_factor == 1:
            return pack_full_sentences(documents, tokenizer, settings.seq_len, seed)
        # Each copy packs the documents in another order (its own seed).
        copies = [
            pack_full_sentences(documents, tokenizer, settings.seq_len, _derive_seed(seed, k))
            for k in range(dupe_factor)
        ]
        fields = ("token_ids", "segment_ids", "padding_mask", "labels", "document_ids")
        return dataclasses.replace(
            copies[0], **{f: np.concatenate([getattr(c, f) for c in copies]) for f in fields}
        )
    return create_examples(
        documents,
        tokenizer,
        seq_len=settings.seq_len,
        objective=settings.objective,
        short_seq_prob=settings.short_seq_prob,
        dupe_factor=dupe_factor,
        seed=seed,
        shuffle=settings.shuffle,
    )


def shard_examples(prepared, index, tokenizer, settings, seed):
    """The unmasked examples of shard `index`'s training documents (with
    `seed`, dupe_factor 1)."""
    documents = shard_documents(prepared, index, settings.held_out)
    return documents_examples(documents, tokenizer, settings, seed)


def held_out_examples(prepared, tokenizer, settings, seed, max_tokens):
    """Examples of the held-out documents (`settings.held_out`; the
    training documents when it holds none out), taken from the shards in
    order until they hold `max_tokens` tokens: memory bounded by the
    evaluation's size, not the corpus."""
    held = settings.held_out is not None and held_out_count(prepared, settings.held_out) > 0
    documents, tokens = [], 0
    for index, record in enumerate(prepared.document["shards"]):
        if tokens >= max_tokens:
            break
        if not record["documents"]:
            continue
        for document in shard_documents(prepared, index, settings.held_out, held=held):
            documents.append(document)
            tokens += sum(len(s) for s in document)
            if tokens >= max_tokens:
                break
    return documents_examples(documents, tokenizer, settings, seed), len(documents)


class ExampleStream:
    """The endless on-the-fly stream of masked batches over a prepared
    corpus (see the module docstring).

        stream = ExampleStream(open_prepared("prepared/"), tokenizer, masker,
                               StreamSettings(batch_size=32, seq_len=128))
        ds = stream.dataset(start)                  # start: a StreamPosition
        position = stream.position_after(steps, start)  # for the checkpoint
    """

    def __init__(self, prepared, tokenizer, masker, settings):
        settings.check()
        pipeline._check_masker(masker, settings.seq_len)
        prepared.check_tokenizer(tokenizer)
        self.prepared, self.tokenizer, self.masker, self.settings = (
            prepared,
            tokenizer,
            masker,
            settings,
        )
        shards = [i for i, s in enumerate(prepared.document["shards"]) if s["documents"] > 0]
        if len(shards) < settings.num_readers:
            raise CorpusError(
                f"{prepared.directory} has {len(shards)} shard(s) with documents, fewer than "
                f"num_readers={settings.num_readers}: prepare it with a smaller --shard-mb."
            )
        self._shards = shards[settings.reader_index :: settings.num_readers]
        self._counts = {}  # (epoch, shard) -> examples, for position_after
        # Batch b is masked with the seed pair (mask_seed, b). Readers of one
        # run draw their own masks: with one seed, batch b of every reader
        # would mask the same positions of rows of the same length.
        self.mask_seed = settings.seed
        if settings.num_readers > 1:
            self.mask_seed = _derive_seed(
                settings.seed, settings.num_readers, settings.reader_index
            )

    def shard_order(self, epoch):
        """The shard indices of `epoch`, in the order the stream visits them."""
        if not self.settings.shuffle:
            return list(self._shards)
        rng = np.random.default_rng([self.settings.seed, epoch])
        return [self._shards[i] for i in rng.permutation(len(self._shards))]

    def examples(self, epoch, shard):
        """Examples of the `shard`-th shard of `epoch`'s order (made anew on
        every call; their number is remembered)."""
        index = self.shard_order(epoch)[shard]
        seed = _derive_seed(self.settings.seed, epoch, index)
        examples = shard_examples(self.prepared, index, self.tokenizer, self.settings, seed)
        self._counts[(epoch, shard)] = len(examples)
        return examples

    def _count(self, epoch, shard):
        """Examples in a shard of an epoch: remembered once the stream (or
        an earlier call) made them."""
        if (epoch, shard) not in self._counts:
            self.examples(epoch, shard)
        return self._counts[(epoch, shard)]

    def _next_shard(self, position):
        shard, epoch = position.shard + 1, position.epoch
        if shard == len(self._shards):
            shard, epoch = 0, epoch + 1
        return StreamPosition(epoch, shard, 0, position.batch)

    def position_after(self, num_batches, start=None):
        """The position `num_batches` batches after `start` (the stream's
        beginning when None). Costs the shards in between, not the corpus."""
        position = start or StreamPosition()
        left = int(num_batches) * self.settings.batch_size
        while True:
            available = self._count(position.epoch, position.shard) - position.example
            if left < available:
                return dataclasses.replace(
                    position,
                    example=position.example + left,
                    batch=position.batch + int(num_batches),
                )
            left -= available
            position = self._next_shard(position)

    def _batches(self, start):
        """Unmasked batches (numpy dicts) from `start` on, endlessly."""
        B = self.settings.batch_size
        position = start
        parts, have, current = [], 0, (None, None)
        empty = 0  # shards in a row without examples
        while True:
            if current[0] != (position.epoch, position.shard):
                key = (position.epoch, position.shard)
                current = (key, self.examples(*key))
                empty = 0 if len(current[1]) else empty + 1
                if empty > len(self._shards):
                    raise CorpusError(
                        f"{self.prepared.directory}: no shard of this reader yields a training "
                        "example (every document is held out)."
                    )
            examples = current[1]
            take = min(B - have, len(examples) - position.example)
            sl = slice(position.example, position.example + take)
            parts.append(
                (
                    examples.token_ids[sl],
                    examples.segment_ids[sl],
                    examples.padding_mask[sl],
                    examples.labels[sl],
                )
            )
            have += take
            position = dataclasses.replace(position, example=position.example + take)
            if position.example == len(examples):
                position = self._next_shard(position)
            if have == B:
                columns = [np.concatenate(c) for c in zip(*parts, strict=True)]
                yield dict(
                    zip(("token_ids", "segment_ids", "padding_mask", "label"), columns, strict=True)
                )
                parts, have = [], 0

    def dataset(self, start=None):
        """The batched `tf.data.Dataset` of (x, y, sample_weight) from
        `start` (a `StreamPosition`, or its dict; None: the beginning)."""
        if isinstance(start, dict):
            start = StreamPosition.from_dict(start)
        start = start or StreamPosition()
        B, S = self.settings.batch_size, self.settings.seq_len
        spec = {
            k: tf.TensorSpec((B, S), tf.int32) for k in ("token_ids", "segment_ids", "padding_mask")
        }
        spec["label"] = tf.TensorSpec((B,), tf.int32)
        batches = tf.data.Dataset.from_generator(
            lambda: self._batches(start), output_signature=spec
        )
        mask_seed = self.mask_seed
        seeds = tf.data.Dataset.counter(start.batch).map(
            lambda b: tf.stack([tf.constant(mask_seed, tf.int64), b])
        )
        objective = self.settings.objective
        ds = tf.data.Dataset.zip((batches, seeds)).map(
            lambda batch, pair: pipeline._mask_batch(batch, self.masker, pair, objective),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return ds.prefetch(tf.data.AUTOTUNE)


def prepared_dataset(directory, tokenizer, masker, settings, start=None):
    """For a training run: the batches of `directory` (a prepared corpus,
    verified, its inputs checked unchanged where they still are) from
    `start` (a `StreamPosition` or its dict). Returns (dataset, stream);
    `stream.position_after(n, start)` is the position to record with a
    checkpoint after n batches."""
    stream = ExampleStream(
        open_prepared(directory, check_inputs="warn"), tokenizer, masker, settings
    )
    return stream.dataset(start), stream
