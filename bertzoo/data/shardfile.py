"""The tokenized document shard: one file per piece of a prepared corpus.

Layout (little-endian), written in one go and renamed into place:

    b"BZSHARD1"                      8 bytes, magic
    header length H                  8 bytes, uint64
    header                           H bytes, UTF-8 JSON (sorted keys, padded
                                     with spaces to a multiple of 8 bytes)
    tokens                           num_tokens x token_dtype (uint16 when the
                                     vocabulary has at most 65,536 ids, else
                                     int32): every sentence's ids, in order
    sentence lengths                 num_sentences x uint32
    sentences per document           num_documents x uint32

The header holds the array sizes, the token dtype, the piece it came from
(input file, byte range, SHA-256 of those bytes) and the piece's counts
(`stats`). Nothing in it depends on time or on the machine, so the same
piece and settings give a byte-identical file. Readers map the file and take
views of the arrays: opening a shard reads the header only.
"""

import json
import mmap
import struct
from pathlib import Path

import numpy as np

from bertzoo.data.corpus import CorpusError
from bertzoo.io.publish import atomic_path

MAGIC = b"BZSHARD1"
SUFFIX = ".bzshard"


def token_dtype(vocabulary_size):
    """uint16 when every id fits, else int32."""
    return np.dtype("<u2") if vocabulary_size <= 1 << 16 else np.dtype("<i4")


def write_shard(path, tokens, sentence_lengths, document_sentences, header):
    """Writes a shard atomically. `header` is a JSON-able dict; the array
    sizes and dtype are added to it."""
    tokens = np.ascontiguousarray(tokens)
    lengths = np.ascontiguousarray(sentence_lengths, dtype="<u4")
    docs = np.ascontiguousarray(document_sentences, dtype="<u4")
    header = {
        **header,
        "token_dtype": tokens.dtype.str,
        "num_tokens": int(tokens.size),
        "num_sentences": int(lengths.size),
        "num_documents": int(docs.size),
    }
    text = json.dumps(header, sort_keys=True, ensure_ascii=True).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(text)) + text)
        for array in (tokens, lengths, docs):
            f.write(array.tobytes())


# The most a shard's header may take (bertzoo writes a few hundred bytes),
# and the token types it writes.
MAX_HEADER_BYTES = 1 << 20
TOKEN_DTYPES = ("<u2", "<i4")


def read_header(path):
    """The JSON header of a shard (reads only its first bytes, at most
    MAX_HEADER_BYTES of header)."""
    with open(path, "rb") as f:
        start = f.read(16)
        if len(start) < 16 or start[:8] != MAGIC:
            raise CorpusError(f"{path} is not a bertzoo document shard (bad magic).")
        (size,) = struct.unpack("<Q", start[8:])
        if size > MAX_HEADER_BYTES:
            raise CorpusError(
                f"{path} is damaged: its header length is {size:,} bytes, more than the "
                f"{MAX_HEADER_BYTES:,} a shard header may take."
            )
        text = f.read(size)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorpusError(f"{path} has a damaged header: {e}.") from None
    if not isinstance(header, dict):
        raise CorpusError(f"{path} has a damaged header: not a JSON object.")
    return header


def _check_header(path, h):
    """The header's array sizes (whole numbers >= 0) and token type (one
    bertzoo writes), before anything is sized from them."""
    counts = tuple(h.get(k) for k in ("num_tokens", "num_sentences", "num_documents"))
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise CorpusError(f"{path} is damaged: its header's counts {counts} are not whole numbers.")
    if h.get("token_dtype") not in TOKEN_DTYPES:
        raise CorpusError(
            f"{path} is damaged: token_dtype {h.get('token_dtype')!r} is not one bertzoo writes "
            f"({', '.join(TOKEN_DTYPES)})."
        )
    return counts


class Shard:
    """A shard file, mapped: `tokens`, `sentence_offsets` (num_sentences + 1),
    `document_offsets` (into sentences, num_documents + 1), `header`.

    `documents()` yields each document as a list of id arrays (views);
    `document_list()` returns them all (what `create_examples` takes)."""

    def __init__(self, path):
        self.path = Path(path)
        self.header = read_header(self.path)
        h = self.header
        with open(self.path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(16)[8:])
            try:
                buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty mapping: a shard is never empty
                raise CorpusError(f"{path} is empty.") from None
        offset = 16 + size
        counts = _check_header(self.path, h)
        dtype = np.dtype(h["token_dtype"])
        expected = offset + counts[0] * dtype.itemsize + 4 * (counts[1] + counts[2])
        if len(buffer) != expected:
            raise CorpusError(
                f"{path} is truncated or damaged: {len(buffer)} bytes, its header says {expected}."
            )
        self.tokens = np.frombuffer(buffer, dtype, counts[0], offset)
        offset += counts[0] * dtype.itemsize
        lengths = np.frombuffer(buffer, "<u4", counts[1], offset)
        docs = np.frombuffer(buffer, "<u4", counts[2], offset + 4 * counts[1])
        self.sentence_offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        self.document_offsets = np.concatenate([[0], np.cumsum(docs, dtype=np.int64)])
        # The three arrays must describe each other: sentence lengths that
        # add up to the tokens, sentence counts to the sentences (before, a
        # consistent-looking shard whose lengths did not became one long
        # sentence), and no empty sentence or document.
        for what, total, whole, parts in (
            ("sentence lengths", self.sentence_offsets[-1], counts[0], lengths),
            ("documents' sentence counts", self.document_offsets[-1], counts[1], docs),
        ):
            empty = len(parts) > 0 and parts.min() == 0
            if total != whole or empty:
                raise CorpusError(
                    f"{path} is damaged: its {what} add up to {int(total):,} (one is 0: "
                    f"{empty}), where its header has {whole:,}."
                )

    @property
    def num_documents(self):
        return len(self.document_offsets) - 1

    def documents(self):
        s = self.sentence_offsets
        for d in range(self.num_documents):
            first, last = self.document_offsets[d], self.document_offsets[d + 1]
            yield [self.tokens[s[i] : s[i + 1]].astype(np.int32) for i in range(first, last)]

    def document_list(self):
        return list(self.documents())
