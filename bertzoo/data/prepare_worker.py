"""The worker side of `bertzoo.data.prepare`: one piece of a corpus file ->
tokenized document shards, in a spawned process (or in the caller's).

A worker streams its piece's lines (`bertzoo.data.textstream`), gathers
documents, tokenizes their sentences in batches through one graph function
and writes a shard (`bertzoo.data.shardfile`) whenever it holds
`shard_bytes` of text at a document end (a document larger than that is cut
at a sentence end, and counted). A plain file's piece is planned at about
`shard_bytes` and gives one shard; a `.gz` file is one piece, cut into
shards while it streams. Memory: one shard's ids plus one batch of text.
"""

import dataclasses
import hashlib
import json
import os
import resource
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertzoo.data import shardfile, textstream
from bertzoo.io import manifest as manifest_lib
from bertzoo.io import textfiles
from bertzoo.io.children import die_with_parent
from bertzoo.tokenizers import tokenizer_class

FORMAT_VERSION = 1
COUNTS = (
    "text_bytes",
    "lines",
    "documents",
    "sentences",
    "tokens",
    "unk_tokens",
    "empty_lines",
    "dropped_too_long",
    "dropped_binary",
    "invalid_utf8_lines",
    "split_documents",
)
# A shard's line counts: {its stats name: the `textfiles.LineCounts` field}.
_LINE_COUNTS = {
    "lines": "lines",
    "dropped_too_long": "too_long",
    "dropped_binary": "binary",
    "invalid_utf8_lines": "invalid_utf8",
}
# Text handed to one tokenizer call at most (with `batch_sentences`).
_BATCH_BYTES = 1 << 22


# === The tokenizer, handed to worker processes ===


def tokenizer_spec(tokenizer):
    """A picklable description that rebuilds `tokenizer` in a worker."""
    source = getattr(tokenizer, "proto", None) or list(tokenizer.vocabulary)
    return {"kind": tokenizer.kind, "source": source, "config": tokenizer.get_config()}


def tokenizer_identity(tokenizer):
    """{"kind", "vocabulary_size", "sha256", "config"}: what decides the
    ids (the hash covers the vocabulary and the settings)."""
    digest = hashlib.sha256("\n".join(tokenizer.vocabulary).encode("utf-8"))
    config = tokenizer.get_config()
    digest.update(json.dumps(config, sort_keys=True).encode("utf-8"))
    if "merges" in config:  # a byte-level BPE's: recorded by their count (the hash has them)
        config = {**config, "merges": len(config["merges"])}
    return {
        "kind": tokenizer.kind,
        "vocabulary_size": tokenizer.vocabulary_size,
        "sha256": digest.hexdigest(),
        "config": config,
    }


_worker_tokenizer = {}


def build_tokenizer(spec):
    """-> (tokenizer, its `tokenize_ids` as one graph function), made once
    per process and tokenizer (eager op-by-op dispatch costs about as much
    as the tokenization itself)."""
    key = hashlib.sha256(repr(spec).encode()).hexdigest()
    if key not in _worker_tokenizer:
        _worker_tokenizer.clear()
        tokenizer = tokenizer_class(spec["kind"])(spec["source"], **spec["config"])
        graph = tf.function(
            tokenizer.tokenize_ids,
            input_signature=[tf.TensorSpec([None], tf.string)],
            autograph=False,
        )
        _worker_tokenizer[key] = (tokenizer, graph)
    return _worker_tokenizer[key]


# === Progress, shared with the main process ===

_progress_counter = None
_unreported = [0]  # bytes read by this process and not yet added to the counter


def init_worker(counter):
    """Pool initializer: `counter` (a `multiprocessing.Value`, or anything
    with `value` and `get_lock()`; None: no progress) receives bytes read."""
    global _progress_counter
    _progress_counter = counter
    _unreported[0] = 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def init_spawned_worker(counter):
    """The initializer of a spawned preparation worker: `init_worker`, and
    the worker ends when the preparing process dies (`bertzoo.io.children`)."""
    die_with_parent()
    init_worker(counter)


def _report(n, flush=False):
    _unreported[0] += n
    if _progress_counter is not None and (flush or _unreported[0] >= 1 << 20):
        with _progress_counter.get_lock():
            _progress_counter.value += _unreported[0]
    if flush or _unreported[0] >= 1 << 20:
        _unreported[0] = 0


# === Documents -> one shard's arrays ===


class _ShardBuilder:
    """Gathers documents of sentences, tokenizes them in batches and keeps
    the ids of one shard (the only buffer that grows with the shard)."""

    def __init__(self, tokenizer_and_graph, settings):
        self.tokenizer, self.tokenize = tokenizer_and_graph
        self.settings = settings
        self.dtype = shardfile.token_dtype(self.tokenizer.vocabulary_size)
        self.pending, self.pending_docs, self.pending_bytes = [], [], 0
        self.token_parts, self.length_parts, self.doc_sentences = [], [], []
        self.counts = dict.fromkeys(COUNTS, 0)
        self.text_bytes = 0  # text added so far (UTF-8 bytes)
        self.buffered_tokens = 0
        self.peak_buffer_bytes = 0

    def add_document(self, sentences, size):
        if not sentences:
            return
        self.pending.extend(sentences)
        self.pending_docs.append(len(sentences))
        self.pending_bytes += size
        self.text_bytes += size
        if len(self.pending) >= self.settings.batch_sentences or self.pending_bytes > _BATCH_BYTES:
            self.flush()

    def flush(self):
        if not self.pending:
            return
        ragged = self.tokenize(tf.constant(self.pending, tf.string))
        ids = ragged.flat_values.numpy()
        lengths = ragged.row_lengths().numpy()
        self.peak_buffer_bytes = max(
            self.peak_buffer_bytes,
            self.buffered_tokens * self.dtype.itemsize + self.pending_bytes + ids.nbytes,
        )
        k = 0
        for n in self.pending_docs:  # sentences that tokenize to nothing are dropped
            kept = int(np.count_nonzero(lengths[k : k + n]))
            if kept:
                self.doc_sentences.append(kept)
            k += n
        self.token_parts.append(ids.astype(self.dtype))
        self.length_parts.append(lengths[lengths > 0].astype("<u4"))
        self.buffered_tokens += len(ids)
        self.counts["unk_tokens"] += int(np.count_nonzero(ids == self.tokenizer.unk_token_id))
        self.pending, self.pending_docs, self.pending_bytes = [], [], 0

    def arrays(self):
        self.flush()
        tokens = np.concatenate(self.token_parts) if self.token_parts else np.zeros(0, self.dtype)
        lengths = np.concatenate(self.length_parts) if self.length_parts else np.zeros(0, "<u4")
        docs = np.asarray(self.doc_sentences, "<u4")
        self.counts.update(tokens=len(tokens), sentences=len(lengths), documents=len(docs))
        return tokens, lengths, docs


# === One piece -> its shards ===


class _PieceWriter:
    """Feeds documents to a `_ShardBuilder` and writes a shard whenever it
    holds `limit` bytes of text (None: one shard for the piece)."""

    def __init__(self, piece, tokenizer, settings, output, line_counts):
        self.piece, self.tokenizer, self.settings = piece, tokenizer, settings
        self.output, self.lines = Path(output), line_counts
        self.limit = settings.shard_bytes if piece.end is None else None
        self.entries = []
        self.lines_at_cut = dataclasses.asdict(line_counts)
        self.builder = _ShardBuilder(tokenizer, settings)
        self.builder.counts["split_documents"] = piece.split

    def add_document(self, sentences, size, split=False):
        """Adds a document (`split`: the first part of one larger than a
        shard, counted); a shard that would grow past the limit is written
        first, so a shard holds at most `limit` bytes of text (or one
        sentence, if longer)."""
        if self.limit is not None and self.builder.text_bytes + size > self.limit:
            if self.builder.text_bytes:
                self.write()
        self.builder.add_document(sentences, size)
        self.builder.counts["split_documents"] += bool(split and sentences)
        if self.limit is not None and self.builder.text_bytes >= self.limit:
            self.write()

    def finish(self):
        """Writes the last shard: always for a piece without one, else if it
        holds text or lines were read since the last one (their counts)."""
        if (
            self.builder.text_bytes
            or not self.entries
            or dataclasses.asdict(self.lines) != self.lines_at_cut
        ):
            self.write()

    def write(self):
        """Writes the current shard (and starts the next)."""
        builder, index = self.builder, len(self.entries)
        tokens, lengths, docs = builder.arrays()
        now = dataclasses.asdict(self.lines)
        stats = builder.counts
        for name, field in _LINE_COUNTS.items():
            stats[name] = now[field] - self.lines_at_cut[field]
        stats.update(text_bytes=builder.text_bytes)
        self.lines_at_cut = now
        header = {
            "format_version": FORMAT_VERSION,
            "piece": dataclasses.asdict(self.piece),
            "index_in_piece": index,
            "stats": stats,
            "peak_buffer_bytes": builder.peak_buffer_bytes,
        }
        path = self.output / f"{self.piece.name}-{index:05d}{shardfile.SUFFIX}"
        shardfile.write_shard(path, tokens, lengths, docs, header)
        self.entries.append(
            {
                "name": path.name,
                "size": path.stat().st_size,
                "sha256": manifest_lib.sha256_file(path),
                "stats": stats,
                "peak_buffer_bytes": builder.peak_buffer_bytes,
            }
        )
        self.builder = _ShardBuilder(self.tokenizer, self.settings)


def prepare_piece(task):
    """Worker entry: (piece, tokenizer spec, settings, output dir) -> the
    piece's journal entry {"piece_sha256", "shards": [...]}. Writes
    `output/<piece.name>-NNNNN.bzshard` files."""
    piece, spec, settings, output = task
    counts, holder = textfiles.LineCounts(), []
    writer = _PieceWriter(piece, build_tokenizer(spec), settings, output, counts)
    document, size = [], 0
    for line in textstream.iter_lines(piece, settings.max_line_bytes, counts, holder, _report):
        text = line.strip()
        n = len(text.encode("utf-8"))
        if not text:
            writer.builder.counts["empty_lines"] += 1
        if settings.layout == "documents" or not text:
            writer.add_document(document, size)
            document, size = ([text], n) if settings.layout == "documents" and text else ([], 0)
            continue
        if writer.limit is not None and document and size + n > writer.limit:
            writer.add_document(document, size, split=True)  # larger than a shard
            document, size = [], 0
        document.append(text)
        size += n
    writer.add_document(document, size)
    _report(0, flush=True)
    writer.finish()
    return {
        "piece_sha256": holder[0].digest.hexdigest(),
        "shards": writer.entries,
        # This process's peak RSS so far (diagnostics; not in the shards).
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
