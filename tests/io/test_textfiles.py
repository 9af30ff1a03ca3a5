"""Text input files (bertzoo/io/textfiles.py) on messy input: which files
paths and globs name (brackets, links, duplicates, directories, nothing),
and lines read in bounded memory (an enormous line without a newline,
binary junk, CRLF, invalid UTF-8, .gz, damaged .gz)."""

import gzip
import io
import os
import random
import tracemalloc

import pytest

from bertzoo.data.corpus import CorpusError, expand_files
from bertzoo.errors import BertzooError
from bertzoo.io import textfiles
from bertzoo.io.textfiles import (
    InputFileNotFoundError,
    InputFilesError,
    LineCounts,
    decode_line,
    expand_inputs,
    read_lines,
    read_raw_lines,
)
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.corpus_stream import expand_paths

pytestmark = pytest.mark.backend_independent


def _files(directory, *names):
    for name in names:
        (directory / name).write_text(f"{name}\n", encoding="utf-8")
    return [directory / name for name in names]


def _error(call, cls, match):
    with pytest.raises(cls, match=match) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, BertzooError)
    return message


# ------------------------------------------------------------------ paths


def test_order_given_each_pattern_sorted_each_file_once(tmp_path):
    a, b, c = _files(tmp_path, "a.txt", "b.txt", "c.txt.gz")
    assert expand_inputs([str(tmp_path / "c.*"), str(tmp_path / "[ba].txt")]) == [c, a, b]
    # A file named twice, or again through a pattern, stays at its first place.
    assert expand_inputs([b, b, str(tmp_path / "*.txt"), str(b)]) == [b, a]
    assert expand_inputs(a) == expand_inputs(str(a)) == [a]  # one path, not a list
    assert expand_inputs((p for p in [c, a])) == [c, a]  # any iterable


def test_a_literal_name_with_glob_characters_is_that_file(tmp_path):
    bracket, plain = _files(tmp_path, "wiki[1].txt", "wiki1.txt")
    assert expand_inputs([str(bracket)]) == [bracket]
    star = _files(tmp_path, "a*b.txt")[0]
    assert expand_inputs([str(star)]) == [star]  # not a.txt, ab.txt, ...
    bracket.unlink()
    assert expand_inputs([str(bracket)]) == [plain]  # now a pattern


def test_links(tmp_path):
    target = _files(tmp_path, "target.txt")[0]
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    assert expand_inputs([link]) == [link]
    assert list(read_lines(link, 100, LineCounts())) == ["target.txt"]
    # The file and a link to it are one file: read once.
    assert expand_inputs([link, target]) == [link]
    assert expand_inputs([str(tmp_path / "*.txt")]) == [link]
    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "nowhere.txt")
    message = _error(lambda: expand_inputs([dangling]), InputFileNotFoundError, "does not exist")
    assert str(dangling) in message


def test_bad_inputs_are_one_line_errors_naming_the_path(tmp_path):
    _files(tmp_path, "ok.txt")
    (tmp_path / "sub").mkdir()
    # Nothing at all.
    for nothing in ([], (), None):
        _error(lambda n=nothing: expand_inputs(n), InputFilesError, r"No input files given: pass")
    # A pattern that matches nothing: a FileNotFoundError too.
    pattern = str(tmp_path / "*.csv")
    message = _error(
        lambda: expand_inputs([tmp_path / "ok.txt", pattern]),
        InputFileNotFoundError,
        "matches no file; give a pattern that matches some, or existing files",
    )
    assert f"'{pattern}'" in message
    with pytest.raises(FileNotFoundError):
        expand_inputs([pattern])
    # A missing file.
    message = _error(
        lambda: expand_inputs([tmp_path / "missing.txt"]),
        InputFileNotFoundError,
        r"does not exist; give existing files or glob patterns \(\.gz too\)",
    )
    assert str(tmp_path / "missing.txt") in message
    # A directory, given or matched: not a FileNotFoundError.
    for given in ([tmp_path / "sub"], [str(tmp_path / "su?")]):
        with pytest.raises(InputFilesError, match=r"sub is a directory; give its files") as e:
            expand_inputs(given)
        assert not isinstance(e.value, FileNotFoundError)
        assert str(tmp_path / "sub" / "*.txt") in str(e.value)
    # Not a regular file.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _error(lambda: expand_inputs([fifo]), InputFilesError, "fifo is not a regular file")
    # An empty name, a value that is not a path.
    _error(lambda: expand_inputs([""]), InputFilesError, "empty name")
    _error(lambda: expand_inputs([3]), InputFilesError, "path or a glob pattern, got int")


def test_the_callers_error_classes_and_words(tmp_path):
    """Each caller names its files and gets its own classes, which derive
    from the shared ones (`except CorpusError` keeps working)."""
    (tmp_path / "sub").mkdir()
    missing = [tmp_path / "missing.txt"]
    for expand, cls, what in (
        (expand_files, CorpusError, "Corpus file"),
        (expand_paths, TokenizerError, "Training file"),
    ):
        with pytest.raises(cls, match=f"{what} .*missing.txt does not exist") as e:
            expand(missing)
        assert isinstance(e.value, InputFileNotFoundError | FileNotFoundError)
        with pytest.raises(cls, match=f"{what} .*sub is a directory") as e:
            expand([tmp_path / "sub"])
        assert isinstance(e.value, InputFilesError)
        with pytest.raises(cls, match=f"No {what.lower()}s given"):
            expand([])


# ------------------------------------------------------------------ lines


def _read(path, max_line_bytes=100, **options):
    counts = LineCounts()
    return list(read_lines(path, max_line_bytes, counts, **options)), counts


def test_an_enormous_line_without_a_newline_is_read_in_bounded_memory(tmp_path):
    """A 50 MB line with no newline: never held whole, in a plain file or a
    .gz; the memory peak is about twice max_line_bytes (the buffered
    reader joins its pieces of the first max_line_bytes) plus a read buffer:
    2.1 MB here."""
    size, limit = 50 << 20, 1 << 20
    line = b"word " * (size // 5)
    plain = tmp_path / "one.txt"
    plain.write_bytes(line)
    packed = tmp_path / "one.txt.gz"
    packed.write_bytes(gzip.compress(line + b"\nnext line\n", compresslevel=1, mtime=0))
    del line
    for path, mode, expected in (
        (plain, "cut", ["word " * (limit // 5) + "w"]),
        (plain, "skip", []),
        (packed, "skip", ["next line"]),
        (packed, "cut", [("word " * (limit // 5) + "w"), "next line"]),
    ):
        counts = LineCounts()
        tracemalloc.start()
        try:
            # Only the lengths are kept while measuring.
            got = [len(t) for t in read_lines(path, limit, counts, long_lines=mode)]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert got == [len(t) for t in expected], (path.name, mode)
        assert peak < 4 << 20, (path.name, mode, peak)  # not ~50 MB
        assert counts.too_long == 1 and counts.lines == 1 + (path == packed)
        assert counts.bytes == size + (len(b"\nnext line\n") if path == packed else 0)
    assert _read(plain, 10, long_lines="cut")[0] == ["word word "]


def test_long_lines_are_skipped_or_cut_at_a_character_boundary(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(("short\n" + "가" * 50 + "\n" + "x" * 10 + "\nafter").encode())
    assert _read(path, 10, long_lines="skip")[0] == ["short", "x" * 10, "after"]
    lines, counts = _read(path, 10, long_lines="cut")
    # 10 bytes = 3 syllables and a third of one: the partial one goes.
    assert lines == ["short", "가" * 3, "x" * 10, "after"]
    assert counts.too_long == 1 and counts.lines == 4 and counts.bytes == path.stat().st_size
    with pytest.raises(ValueError, match="long_lines must be one of"):
        _read(path, long_lines="drop")
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(InputFilesError, match="max_line_bytes must be a positive integer"):
            _read(path, bad)


def test_crlf_and_lone_carriage_returns(tmp_path):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\ntwo\r\n\r\nin\rside\nlast\r")
    lines, counts = _read(path)
    # \n ends a line and \r\n too; a lone \r inside a line is text.
    assert lines == ["one", "two", "", "in\rside", "last"]
    assert counts.lines == 5 and counts.bytes == path.stat().st_size
    # The limit counts the \r of a \r\n (it is checked before line ends go).
    path.write_bytes(b"one\r\nab\r\n")
    lines, counts = _read(path, 3)
    assert lines == ["ab"] and counts.too_long == 1
    assert _read(path, 4)[0] == ["one", "ab"]


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes("좋아요\n".encode() + b"caf\xe9 au lait\n" + b"cut \xed\x95\n" + b"ok\n")
    lines, counts = _read(path)
    assert lines == ["좋아요", "caf\ufffd au lait", "cut \ufffd", "ok"]
    assert counts.invalid_utf8 == 2 and counts.binary == 0
    # Dropping binary junk leaves mostly-text lines alone.
    assert _read(path, drop_binary=True)[0] == lines


def test_binary_junk(tmp_path):
    rng = random.Random(0)
    junk = bytes(rng.randrange(256) for _ in range(2000)).replace(b"\n", b"")
    path = tmp_path / "junk.bin"
    path.write_bytes(
        b"text\n" + b"with\x00nul\n" + junk + b"\n" + bytes(range(128, 256)) + b"\nend"
    )
    lines, counts = _read(path, 5000, drop_binary=True)
    assert lines == ["text", "end"]
    assert counts.binary == 3 and counts.invalid_utf8 == 0 and counts.lines == 5
    # Kept (replaced and counted) when not asked to drop it.
    lines, counts = _read(path, 5000)
    assert len(lines) == 5 and lines[1] == "with\x00nul" and counts.invalid_utf8 == 2
    assert counts.binary == 0
    assert decode_line(b"\x00", LineCounts(), drop_binary=True) is None


def test_gz_reads_as_the_plain_file_and_damage_is_a_one_line_error(tmp_path):
    data = "줄 하나\r\n".encode() * 3000 + b"caf\xe9\n" + b"z" * 500
    plain, packed = tmp_path / "a.txt", tmp_path / "a.txt.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data, mtime=0))
    assert _read(packed, 200) == _read(plain, 200)
    # Truncated, or not gzip at all.
    (tmp_path / "cut.txt.gz").write_bytes(packed.read_bytes()[: packed.stat().st_size // 2])
    (tmp_path / "junk.gz").write_bytes(b"not gzip at all\n" * 10)
    for name in ("cut.txt.gz", "junk.gz"):
        path = tmp_path / name
        message = _error(
            lambda p=path: _read(p, what="corpus file", error=textfiles.InputFilesError),
            InputFilesError,
            f"Corpus file {path} is not a valid gzip file: ",
        )
        assert message.endswith(".")
    # A plain file is never taken for gzip.
    (tmp_path / "gz.txt").write_bytes(gzip.compress(b"x\n", mtime=0))
    lines, counts = _read(tmp_path / "gz.txt", drop_binary=True)
    assert "x" not in lines and counts.binary >= 1


def test_a_given_stream_is_read_and_closed(tmp_path):
    """`stream`: a caller's view of the file's bytes (corpus preparation
    passes a hashed byte range)."""
    stream = io.BufferedReader(io.BytesIO(b"a\nb\n"))
    counts = LineCounts()
    assert list(read_raw_lines(tmp_path / "x.txt", 10, counts, stream=stream)) == [b"a", b"b"]
    assert stream.closed and counts.lines == 2
    packed = io.BytesIO(gzip.compress(b"c\r\nd"))
    assert list(read_raw_lines("x.gz", 10, LineCounts(), stream=packed)) == [b"c", b"d"]
    assert packed.closed
    # A reader closed early closes its file too.
    path = tmp_path / "many.txt"
    path.write_bytes(b"line\n" * 100)
    lines = read_raw_lines(path, 10, LineCounts())
    assert next(lines) == b"line"
    lines.close()
