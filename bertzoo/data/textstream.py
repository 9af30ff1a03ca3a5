"""Raw corpus files -> pieces -> checked lines, in bounded memory.

Which files the inputs name is `bertzoo.data.corpus.expand_files`
(`bertzoo.io.textfiles.expand_inputs`), checked before anything is written.

* `plan_pieces`: each plain file is cut into pieces of about `shard_bytes`
  at document boundaries (a blank line in the "sentences" layout, any line
  end in the "documents" layout). A document larger than `shard_bytes` is
  cut at a line (sentence) end and counted in `split_documents`. A `.gz`
  file is one piece (finding boundaries would mean decompressing it twice).
  Planning reads only the bytes near each cut.
* `iter_lines`: the lines of one piece, read by `bertzoo.io.textfiles`
  through a bounded buffer: a line over `max_line_bytes` is skipped (and
  counted) without ever being held whole; NUL bytes or mostly-undecodable
  lines count as binary junk and are dropped; other invalid UTF-8 is
  replaced by U+FFFD and counted (a `textfiles.LineCounts`). The bytes
  read are hashed (SHA-256) and counted as they stream by.
"""

import dataclasses
import hashlib
import io
import os

from bertzoo.data.corpus import CorpusFilesError
from bertzoo.io import textfiles
from bertzoo.io.textfiles import is_gzip

_CHUNK = textfiles.READ_BUFFER


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of the input file `input_index` (end None: to the
    end, for .gz). `split`: 1 when the piece begins inside a document that
    was too large for one shard."""

    input_index: int
    piece_index: int
    path: str
    start: int
    end: int | None
    split: int = 0

    @property
    def name(self):
        return f"shard-{self.input_index:05d}-{self.piece_index:05d}"


def _line_end(f):
    """Reads to the end of the current line. -> (bytes read, blank)."""
    read, blank = 0, True
    while True:
        chunk = f.readline(_CHUNK)
        if not chunk:
            return read, blank
        read += len(chunk)
        if chunk.strip():
            blank = False
        if chunk.endswith(b"\n"):
            return read, blank


def _next_cut(f, target, shard_bytes, layout):
    """The cut at or after `target`: (offset, split). "sentences": the end
    of the first blank line within `shard_bytes` after `target`; without
    one, the document there is larger than a shard and is cut at the end of
    the line `target` falls in (split 1). "documents": that line's end."""
    f.seek(target)
    first = pos = target + _line_end(f)[0]  # finish the line `target` falls in
    while layout == "sentences":
        read, blank = _line_end(f)
        if not read:
            break
        pos += read
        if blank:
            return pos, 0
        if pos - target > shard_bytes:
            return first, 1
    return pos, 0


def plan_pieces(paths, shard_bytes, layout):
    """-> list of `Piece`s covering every input, in input order."""
    pieces = []
    for i, path in enumerate(paths):
        size = os.path.getsize(path)
        if is_gzip(path) or size <= shard_bytes:
            pieces.append(Piece(i, 0, str(path), 0, None if is_gzip(path) else size))
            continue
        with open(path, "rb") as f:
            start, split, k = 0, 0, 0
            while start < size:
                cut, next_split = size, 0
                if start + shard_bytes < size:
                    cut, next_split = _next_cut(f, start + shard_bytes, shard_bytes, layout)
                    cut = min(cut, size)
                pieces.append(Piece(i, k, str(path), start, cut, split))
                start, split, k = cut, next_split, k + 1
    return pieces


class _HashingRange(textfiles.ByteRange):
    """Bytes [start, end) of a file, hashed and counted as they are read."""

    def __init__(self, path, start, end, progress=None):
        super().__init__(path, start, end)
        self.digest = hashlib.sha256()
        self.bytes_read = 0
        self._progress = progress

    def on_read(self, data):
        self.digest.update(data)
        self.bytes_read += len(data)
        if self._progress is not None:
            self._progress(len(data))


def iter_lines(piece, max_line_bytes, counts, stream_holder, progress=None):
    """Yields the decoded lines of `piece` (without line ends; lines that
    were dropped are not yielded). `stream_holder` (a list) receives the
    `_HashingRange`, whose `digest` covers the piece's bytes when done."""
    raw = _HashingRange(piece.path, piece.start, piece.end, progress)
    stream_holder.append(raw)
    yield from textfiles.read_lines(
        piece.path,
        max_line_bytes,
        counts,
        drop_binary=True,
        long_lines="skip",
        stream=io.BufferedReader(raw, _CHUNK),
        what="corpus file",
        error=CorpusFilesError,
    )
