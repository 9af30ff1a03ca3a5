"""Text input files: which files a list of paths and globs names, and their
lines read in memory bounded by settings, not by the input.

* `expand_inputs`: paths and glob patterns -> the files, in the order given
  (each pattern's matches sorted), each file once. A name with glob
  characters that exists (`wiki[1].txt`) is that file. No inputs, a pattern
  that matches nothing, a missing file, a directory where a file belongs
  and anything else that is not a regular file are one-line errors naming
  the path and what is valid, raised before any file is read.
* `read_raw_lines`: the lines of a file (decompressed when its name ends in
  `.gz`) as bytes without their line end (`\\n`, and any `\\r` before it).
  A line longer than `max_line_bytes` is counted and either skipped or cut
  there (at a UTF-8 character boundary); it is never held whole: reading
  it takes about twice `max_line_bytes` plus one read buffer (2.1 MB for a
  50 MB line at 1 MiB, plain or `.gz`; tests/io/test_textfiles.py).
* `decode_line`: UTF-8 decoding that replaces invalid bytes by U+FFFD and
  counts the line; optionally it drops binary junk (NUL bytes, or a line
  that is mostly undecodable) and counts it.
* `read_lines`: the two together.
* `line_ranges` and `ByteRange`: a plain file cut into byte ranges that
  begin at line starts (each line in exactly one range), and one range read
  as a stream (`read_raw_lines(..., stream=...)`), so several processes can
  read one file.

The counts go into a `LineCounts`. Errors are raised as the caller's
classes (`error`, `not_found`), which derive from `InputFilesError` and
`InputFileNotFoundError` here.
"""

import dataclasses
import glob
import gzip
import io
import os
import zlib
from pathlib import Path

from bertzoo.errors import BertzooError

READ_BUFFER = 1 << 16  # the rest of an over-long line is skipped in pieces this size
LONG_LINES = ("skip", "cut")


class InputFilesError(BertzooError, ValueError):
    """Input files cannot be used: none given, a pattern that matches no
    file, a directory or other non-file where a file belongs, or a file
    that cannot be read (a damaged `.gz`)."""


class InputFileNotFoundError(InputFilesError, FileNotFoundError):
    """An input file does not exist, or a pattern matches no file."""


def _is_glob(name):
    return any(c in name for c in "*?[")


def expand_inputs(
    inputs, what="input file", *, error=InputFilesError, not_found=InputFileNotFoundError
):
    """A path, a glob pattern or a list of them -> a list of `Path`s: in
    the order given, each pattern's matches sorted, a file named twice (or
    through a link) kept at its first place only.

    Args:
        inputs: a str or path-like, or an iterable of them.
        what: what a file is to the caller ("corpus file"), for messages.
        error, not_found: the exception classes to raise (subclasses of
            `InputFilesError` and `InputFileNotFoundError`).
    """
    if isinstance(inputs, str | os.PathLike):
        inputs = [inputs]
    inputs = list(inputs or [])
    what_cap = what[:1].upper() + what[1:]
    if not inputs:
        raise error(f"No {what}s given: pass text files or glob patterns (.gz too).")
    paths, seen = [], set()
    for item in inputs:
        if not isinstance(item, str | os.PathLike):
            raise error(f"A {what} must be a path or a glob pattern, got {type(item).__name__}.")
        name = os.fspath(item)
        if not name:
            raise error(f"An empty name was given as a {what}; give a path or a glob pattern.")
        # A file whose name has glob characters (wiki[1].txt) is that file.
        literal = not _is_glob(name) or os.path.lexists(name)
        matches = [name] if literal else sorted(glob.glob(name))
        if not matches:
            raise not_found(
                f"The {what} pattern '{name}' matches no file; give a pattern that matches "
                "some, or existing files (quote the pattern so the shell does not expand it)."
            )
        for match in matches:
            path = Path(match)
            if path.is_dir():
                raise error(
                    f"{what_cap} {path} is a directory; give its files (e.g. '{path / '*.txt'}')."
                )
            if not path.exists():  # a dangling link too
                raise not_found(
                    f"{what_cap} {path} does not exist; give existing files or glob patterns "
                    "(.gz too)."
                )
            if not path.is_file():
                raise error(f"{what_cap} {path} is not a regular file; give text files (.gz too).")
            st = path.stat()
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                paths.append(path)
    return paths


@dataclasses.dataclass
class LineCounts:
    """What reading met; filled in as the lines are read."""

    lines: int = 0  # every line, kept or not
    bytes: int = 0  # read (decompressed for .gz), line ends and skipped bytes included
    too_long: int = 0  # longer than max_line_bytes: skipped or cut
    binary: int = 0  # dropped as binary junk (only when asked to)
    invalid_utf8: int = 0  # kept, with invalid bytes replaced by U+FFFD


def is_gzip(path):
    return str(path).endswith(".gz")


# The longest line any reader accepts. Tokenizing a line holds about 54
# bytes per byte of it (measured: a 50 MB line took 2.7 GiB), and a sequence
# keeps a few thousand characters of it at most: 16 MiB bounds one line's
# cost near 1 GiB.
MAX_LINE_BYTES_CAP = 16 << 20


def check_max_line_bytes(max_line_bytes, error=InputFilesError):
    if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int):
        raise error(f"max_line_bytes must be a positive integer, got {max_line_bytes!r}.")
    if max_line_bytes < 1:
        raise error(f"max_line_bytes must be a positive integer, got {max_line_bytes}.")
    if max_line_bytes > MAX_LINE_BYTES_CAP:
        raise error(
            f"max_line_bytes must be at most {MAX_LINE_BYTES_CAP:,} (16 MiB: tokenizing a line "
            f"holds about 54 bytes per byte of it), got {max_line_bytes:,}."
        )
    return max_line_bytes


def cut_at_character(raw):
    """`raw` without a trailing incomplete UTF-8 sequence (a cut line ends
    at a character boundary, not in a replacement character)."""
    end = len(raw)
    start = end
    while start > 0 and end - start < 4 and raw[start - 1] & 0xC0 == 0x80:
        start -= 1
    if start == 0:
        return raw
    lead = raw[start - 1]
    need = (
        2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 0
    )
    if need and end - (start - 1) < need:
        return raw[: start - 1]
    return raw


def _lines(f, max_line_bytes, counts, long_lines):
    while True:
        raw = f.readline(max_line_bytes + 1)
        if not raw:
            return
        counts.lines += 1
        counts.bytes += len(raw)
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            counts.too_long += 1
            raw = cut_at_character(raw[:max_line_bytes]) if long_lines == "cut" else None
            while rest := f.readline(READ_BUFFER):  # the rest, a buffer at a time
                counts.bytes += len(rest)
                if rest.endswith(b"\n"):
                    break
            if raw is not None:
                yield raw
            continue
        yield raw.rstrip(b"\r\n")


def read_raw_lines(
    path,
    max_line_bytes,
    counts,
    *,
    long_lines="skip",
    stream=None,
    what="input file",
    error=InputFilesError,
):
    """Yields the lines of `path` as bytes, without line ends.

    Args:
        path: the file; decompressed when its name ends in `.gz`.
        max_line_bytes: a longer line (its `\n` aside; a `\r` before
            it counts) is counted in `counts.too_long` and skipped
            (`long_lines="skip"`) or cut to its first `max_line_bytes`
            bytes, less a partial character (`"cut"`).
        counts: a `LineCounts`, updated as lines are read.
        stream: a binary stream of the file's bytes to read instead of
            opening `path` (e.g. a byte range of it); closed at the end.
        what, error: for the one-line error raised when the file cannot be
            read (a damaged `.gz`, an I/O error).
    """
    check_max_line_bytes(max_line_bytes, error)
    if long_lines not in LONG_LINES:
        raise ValueError(f"long_lines must be one of {LONG_LINES}, got {long_lines!r}.")
    what_cap = what[:1].upper() + what[1:]
    f = raw = None
    try:
        raw = open(path, "rb", buffering=READ_BUFFER) if stream is None else stream
        f = gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip(path) else raw
        yield from _lines(f, max_line_bytes, counts, long_lines)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        if not is_gzip(path):
            raise
        raise error(f"{what_cap} {path} is not a valid gzip file: {e}.") from None
    except OSError as e:
        raise error(f"{what_cap} {path} cannot be read: {e}.") from None
    finally:
        for stream_ in (f, raw):
            if stream_ is not None:
                stream_.close()


class ByteRange(io.RawIOBase):
    """Bytes [start, end) of a file as a raw stream (end None: to the end
    of the file); wrap it in `io.BufferedReader` to read lines."""

    def __init__(self, path, start=0, end=None):
        self._file = open(path, "rb")  # noqa: SIM115 (closed in close())
        self._file.seek(start)
        self._left = None if end is None else max(0, end - start)

    def readable(self):
        return True

    def readinto(self, buffer):
        n = len(buffer) if self._left is None else min(len(buffer), self._left)
        data = self._file.read(n)
        buffer[: len(data)] = data
        if self._left is not None:
            self._left -= len(data)
        self.on_read(data)
        return len(data)

    def on_read(self, data):
        """Called with each chunk read (a subclass hashes or counts them)."""

    def close(self):
        self._file.close()
        super().close()


def open_range(path, start=0, end=None):
    """A buffered binary stream of bytes [start, end) of `path`."""
    return io.BufferedReader(ByteRange(path, start, end), READ_BUFFER)


def line_ranges(path, target_bytes):
    """[(start, end)] byte ranges that cover `path` in order, each beginning
    at a line start and, but for the last, at least `target_bytes` long (a
    cut falls at the first line end at or after each `target_bytes`). Only
    the bytes of the lines where the cuts fall are read (a buffer at a
    time, however long the line). An empty file has no ranges."""
    if isinstance(target_bytes, bool) or not isinstance(target_bytes, int) or target_bytes < 1:
        raise ValueError(f"target_bytes must be a positive integer, got {target_bytes!r}.")
    size = os.path.getsize(path)
    ranges, start = [], 0
    with open(path, "rb") as f:
        while start < size:
            end = start + target_bytes
            if end < size:
                # The cut follows the line end of the line holding byte end - 1.
                f.seek(end - 1)
                end -= 1
                while chunk := f.readline(READ_BUFFER):
                    end += len(chunk)
                    if chunk.endswith(b"\n"):
                        break
            end = min(end, size)
            ranges.append((start, end))
            start = end
    return ranges


def decode_line(raw, counts, drop_binary=False):
    """`raw` as text: invalid UTF-8 replaced by U+FFFD (the line counted in
    `counts.invalid_utf8`). With `drop_binary`, a line with a NUL byte or
    more replacement characters than half its other characters is binary
    junk: counted in `counts.binary`, and None is returned."""
    if drop_binary and b"\x00" in raw:
        counts.binary += 1
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = raw.decode("utf-8", errors="replace")
    if drop_binary and text.count("\ufffd") * 2 > len(text.strip()):
        counts.binary += 1  # mostly undecodable: not text
        return None
    counts.invalid_utf8 += 1
    return text


def read_lines(path, max_line_bytes, counts, *, drop_binary=False, **options):
    """Yields the decoded lines of `path` (`read_raw_lines` then
    `decode_line`; `options` are `read_raw_lines`'s). Dropped lines are
    not yielded."""
    for raw in read_raw_lines(path, max_line_bytes, counts, **options):
        text = decode_line(raw, counts, drop_binary)
        if text is not None:
            yield text
