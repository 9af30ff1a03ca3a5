"""The one rule for what bertzoo reads from a directory: a file is a plain
file no larger than a stated cap, and a count taken from it is a whole,
finite number no larger than what it describes or a stated cap, checked
before anything is allocated from either (docs/files.md, "Caps").

A hostile directory can recompute its own manifest, so a manifest check
alone stops damage, not malice: every reader of configuration, manifest,
metadata and tokenizer files goes through `read_bounded` (or
`read_bounded_text`). The counts taken from them are bounded where they are
read, by what they describe (a shard's counts by its file's size) or by
`MAX_TOKENS`.

* `read_bounded(path, cap, what, error)`: the bytes of `path`. A FIFO,
  device, socket or directory is refused without blocking (opened with
  `O_NONBLOCK`, then checked with `fstat`), and so is a file over `cap`
  bytes, by its size before it is read; a file that grows while it is read
  stops at `cap + 1` bytes and is refused too.

Errors are the caller's class (`error`), with one line that names the file
and the limit. A missing file stays a `FileNotFoundError`, for the callers
that say what belongs there.
"""

import os
import stat
from pathlib import Path

from bertzoo.errors import BertzooError

# Configuration files: config.json, manifests, prepared.json, records
# metadata, adapters' and exports' JSON. The largest bertzoo writes (the
# manifest of a 62 GB corpus prepared in 64 MB shards) is under 200 KB.
CONFIG_BYTES = 16 << 20
# Tokenizer files: vocab.txt, vocab.json, merges.txt, tokenizer.json, a
# SentencePiece model. A vocabulary at MAX_TOKENS with its merges takes under
# 100 MB (XLM-R's 250,002 pieces: tokenizer.json 17 MB, the model 5 MB).
TOKENIZER_BYTES = 128 << 20
# Tokens in a vocabulary, merges in a byte-level BPE: the bound on a preset's
# vocabulary_size (bertzoo.presets.SIZE_BOUNDS).
MAX_TOKENS = 2_097_152


class UnboundedFileError(BertzooError, ValueError):
    """A file is not a plain file, or is larger than its stated cap."""


def _size_text(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _kind(mode):
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bounded(path, cap, what, error=UnboundedFileError):
    """The bytes of the plain file `path`, refused with `error` (one line)
    when it is not a plain file or holds more than `cap` bytes; `what`
    names the file's role ("tokenizer file", "config file")."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except IsADirectoryError:  # where a directory cannot be opened
        raise error(f"{path} is a directory, where a {what} belongs.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path} is {_kind(st.st_mode)}, where a {what} (a plain file) belongs.")
        if st.st_size > cap:
            raise error(
                f"{path} is {st.st_size:,} bytes, more than the {_size_text(cap)} a {what} "
                "may take: it is damaged or not what its name says."
            )
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise error(f"{path} grew past the {_size_text(cap)} a {what} may take while it was read.")
    return data


def read_bounded_text(path, cap, what, error=UnboundedFileError):
    """`read_bounded` decoded as UTF-8 (a file that is not is `error`)."""
    data = read_bounded(path, cap, what, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}).") from None
