import gzip
import io
import json
import logging
import os
import tracemalloc

import numpy as np
import pytest

from bertzoo.data import corpus as corpus_lib
from bertzoo.data import prepare as prepare_lib
from bertzoo.data.corpus import CorpusError
from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.data.shardfile import Shard
from bertzoo.data.shards import CorpusChangedError, open_prepared
from bertzoo.errors import BertzooError, IntegrityError, OutputError
from bertzoo.io import manifest as manifest_lib
from tests.data.prepared_corpus import (
    character_tokenizer,
    korean_sentences,
    mixed_documents,
    write_documents,
)

pytestmark = pytest.mark.backend_independent


@pytest.fixture(scope="module")
def tokenizer():
    return character_tokenizer()


def shard_documents(output):
    """Every document of a prepared directory, shards in order, as lists."""
    doc = json.loads((output / prepare_lib.PREPARED_FILE).read_text())
    return [
        [s.tolist() for s in d]
        for entry in doc["shards"]
        for d in Shard(output / entry["name"]).documents()
    ]


def reference_documents(paths, tokenizer):
    docs = corpus_lib.tokenize_documents(corpus_lib.read_corpus(paths), tokenizer)
    return [[s.tolist() for s in d] for d in docs]


def shard_bytes_of(output):
    return {p.name: p.read_bytes() for p in sorted(output.glob("*.bzshard"))}


def test_shards_hold_the_documents_tokenize_documents_makes(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(120))
    size = path.stat().st_size
    out = tmp_path / "out"
    doc = prepare_corpus([path], tokenizer, out, PrepareSettings(shard_bytes=size // 6, workers=1))
    assert 5 <= len(doc["shards"]) <= 8  # cut at about shard_bytes, at blank lines
    assert shard_documents(out) == reference_documents([path], tokenizer)
    s = doc["summary"]
    assert s["split_documents"] == 0 and s["bytes"] == size
    assert s["documents"] == 120 and s["empty_lines"] == 119
    assert s["tokens"] == sum(e["tokens"] for e in doc["shards"])
    # Pieces tile the file exactly; the input's size, mtime and hash are recorded.
    bounds = [(e["start"], e["end"]) for e in doc["shards"]]
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    (record,) = doc["inputs"]
    assert record["size"] == size and record["mtime_ns"] == path.stat().st_mtime_ns
    assert len(record["sha256"]) == 64
    # The manifest lists every shard and prepared.json, and they verify.
    manifest = manifest_lib.verify_directory(out, force=True)
    assert manifest["kind"] == "prepared"
    assert sorted(manifest["files"]) == sorted(
        [e["name"] for e in doc["shards"]] + ["prepared.json", "vocab.txt"]
    )
    # uint16 ids: the vocabulary fits.
    assert Shard(out / doc["shards"][0]["name"]).tokens.dtype == np.uint16


def test_same_inputs_give_byte_identical_shards(tmp_path, tokenizer):
    paths = [
        write_documents(tmp_path / "a.txt", mixed_documents(40, seed=1)),
        write_documents(tmp_path / "b.txt", mixed_documents(30, seed=2)),
    ]
    settings = PrepareSettings(shard_bytes=3000, workers=1)
    prepare_corpus([str(tmp_path / "*.txt")], tokenizer, tmp_path / "one", settings)
    prepare_corpus(paths, tokenizer, tmp_path / "two", settings)
    first, second = shard_bytes_of(tmp_path / "one"), shard_bytes_of(tmp_path / "two")
    assert first == second and len(first) > 4
    # Names come from input order and piece index.
    assert "shard-00001-00000-00000.bzshard" in first and "shard-00000-00001-00000.bzshard" in first


@pytest.mark.slow
def test_two_spawned_workers_give_the_same_shards_as_one(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(80))
    gz = tmp_path / "k.txt.gz"
    gz.write_bytes(gzip.compress("\n\n".join(korean_sentences()).encode()))
    settings = PrepareSettings(shard_bytes=4000, workers=1)
    prepare_corpus([path, gz], tokenizer, tmp_path / "one", settings)
    settings = PrepareSettings(shard_bytes=4000, workers=2)
    doc = prepare_corpus([path, gz], tokenizer, tmp_path / "two", settings)
    assert shard_bytes_of(tmp_path / "one") == shard_bytes_of(tmp_path / "two")
    assert doc["summary"]["shards"] > 3


def test_messy_input_is_counted_and_skipped(tmp_path, tokenizer, caplog):
    clean = ["Hello world.", "좋아요 정말 예뻐요.", "Emoji 😀 here."]
    raw = b"\r\n".join(s.encode() for s in clean) + b"\r\n\r\n"  # CRLF, then a document end
    raw += "café au lait.".encode("latin-1") + b"\n"  # mojibake: invalid UTF-8
    raw += b"\x00\x01\x02binary\x00junk\n"  # NUL bytes
    raw += b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8 x\n"  # mostly undecodable
    raw += "끝 문장.".encode() + b"\n\n"
    raw += b"a" * (5 << 20)  # a 5 MB line without a newline, at the end
    path = tmp_path / "messy.txt"
    path.write_bytes(raw)
    gz = tmp_path / "more.txt.gz"
    gz.write_bytes(gzip.compress("마지막 문서.\n둘째 문장.\n".encode()))
    caplog.set_level(logging.INFO, logger="bertzoo.data")
    doc = prepare_corpus(
        [path, gz],
        tokenizer,
        tmp_path / "out",
        PrepareSettings(shard_bytes=1 << 20, max_line_bytes=1 << 20, workers=1),
    )
    s = doc["summary"]
    assert s["dropped_too_long"] == 1 and s["dropped_binary"] == 2
    assert s["invalid_utf8_lines"] == 1 and s["split_documents"] == 0
    assert s["documents"] == 3 and s["sentences"] == 3 + 2 + 2
    assert s["unk_tokens"] >= 2 and 0 < s["unk_share"] < 0.2  # the emoji, the é
    expected = [
        clean,
        ["caf\ufffd au lait.", "끝 문장."],
        ["마지막 문서.", "둘째 문장."],
    ]
    tokenized = corpus_lib.tokenize_documents(expected, tokenizer)
    assert shard_documents(tmp_path / "out") == [[s.tolist() for s in d] for d in tokenized]
    assert "2 binary lines" in caplog.text and "1 too-long" in caplog.text


def test_a_document_larger_than_a_shard_is_split_and_counted(tmp_path, tokenizer):
    big = [f"sentence number {i} of a very long document." for i in range(400)]
    path = write_documents(tmp_path / "c.txt", [["short one.", "two."], big, ["tail."]])
    doc = prepare_corpus(
        [path], tokenizer, tmp_path / "out", PrepareSettings(shard_bytes=4000, workers=1)
    )
    assert doc["summary"]["split_documents"] >= 3
    assert doc["summary"]["sentences"] == 403  # nothing lost at the cuts


def test_a_gz_file_is_cut_into_shards_while_it_streams(tmp_path, tokenizer):
    documents = mixed_documents(150)
    big = [f"sentence {i} of one document larger than a shard." for i in range(300)]
    documents.insert(70, big)
    plain = write_documents(tmp_path / "c.txt", documents)
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    shard = 6000
    doc = prepare_corpus(
        [gz], tokenizer, tmp_path / "out", PrepareSettings(shard_bytes=shard, workers=1)
    )
    names = [e["name"] for e in doc["shards"]]
    assert len(names) >= plain.stat().st_size // shard - 2  # cut while streaming
    assert names[:2] == ["shard-00000-00000-00000.bzshard", "shard-00000-00000-00001.bzshard"]
    s = doc["summary"]
    assert s["split_documents"] >= 2 and s["sentences"] == sum(len(d) for d in documents)
    assert s["documents"] == len(documents) + s["split_documents"]
    assert s["bytes"] == gz.stat().st_size
    for name in names:  # each shard holds about shard_bytes of text, never much more
        header = Shard(tmp_path / "out" / name).header
        assert header["stats"]["text_bytes"] < shard + 200
    # Joined back at the cuts, the documents are those of the plain file.
    got = shard_documents(tmp_path / "out")
    assert sum(len(d) for d in got) == sum(len(d) for d in reference_documents([plain], tokenizer))
    flat = lambda docs: [s for d in docs for s in d]
    assert flat(got) == flat(reference_documents([plain], tokenizer))


def test_documents_layout(tmp_path, tokenizer):
    path = tmp_path / "d.txt"
    path.write_text("one doc here.\n\nanother doc.\nthird.\n", encoding="utf-8")
    doc = prepare_corpus(
        [path], tokenizer, tmp_path / "out", PrepareSettings(layout="documents", workers=1)
    )
    assert doc["summary"]["documents"] == 3 and doc["summary"]["empty_lines"] == 1
    assert shard_documents(tmp_path / "out") == reference_documents_layout(path, tokenizer)


def reference_documents_layout(path, tokenizer):
    docs = corpus_lib.read_corpus(path, layout="documents")
    return [[s.tolist() for s in d] for d in corpus_lib.tokenize_documents(docs, tokenizer)]


def test_resume_keeps_finished_shards(tmp_path, tokenizer, monkeypatch):
    path = write_documents(tmp_path / "c.txt", mixed_documents(90))
    settings = PrepareSettings(shard_bytes=2500, workers=1)
    fresh = tmp_path / "fresh"
    prepare_corpus([path], tokenizer, fresh, settings)
    out = tmp_path / "out"

    # Interrupted after three shards: nothing is published yet.
    real, calls = prepare_lib.prepare_piece, []

    def dying(task):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(task[0].name)
        return real(task)

    monkeypatch.setattr(prepare_lib, "prepare_piece", dying)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus([path], tokenizer, out, settings)
    monkeypatch.setattr(prepare_lib, "prepare_piece", real)
    assert not (out / manifest_lib.MANIFEST_FILE).exists()
    with pytest.raises(BertzooError, match="not a finished prepared corpus"):
        open_prepared(out)
    finished = {n: (out / f"{n}-00000.bzshard").stat().st_mtime_ns for n in calls}
    assert len(finished) == 3

    # A finished shard damaged meanwhile is prepared again; the others are kept.
    damaged = sorted(finished)[0]
    (out / f"{damaged}-00000.bzshard").write_bytes(b"BZSHARD1 damaged")
    rewritten = []
    monkeypatch.setattr(
        prepare_lib, "prepare_piece", lambda task: rewritten.append(task[0].name) or real(task)
    )
    prepare_corpus([path], tokenizer, out, settings)
    assert damaged in rewritten and not set(rewritten) & (set(finished) - {damaged})
    for name, mtime in finished.items():
        if name != damaged:
            assert (out / f"{name}-00000.bzshard").stat().st_mtime_ns == mtime
    assert shard_bytes_of(out) == shard_bytes_of(fresh)
    assert (out / "prepared.json").read_bytes() != b""
    # A finished preparation rerun does nothing.
    rewritten.clear()
    prepare_corpus([path], tokenizer, out, settings)
    assert rewritten == []


def test_other_settings_prepare_again(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(30))
    out = tmp_path / "out"
    prepare_corpus([path], tokenizer, out, PrepareSettings(shard_bytes=2000, workers=1))
    doc = prepare_corpus([path], tokenizer, out, PrepareSettings(shard_bytes=100_000, workers=1))
    assert len(doc["shards"]) == 1 and len(list(out.glob("*.bzshard"))) == 1


def test_preparing_and_training_from_one_directory_exclude_each_other(tmp_path, tokenizer):
    """A training run holds the prepared directory shared while it reads it:
    a `prepare` into it is refused in one line, the shards untouched (before,
    it rewrote them and killed the run at step ~220, unable to resume); and
    while a `prepare` writes it, it cannot be opened for training."""
    from bertzoo.io.rundir import RunDirectory

    path = write_documents(tmp_path / "c.txt", mixed_documents(30))
    out = tmp_path / "out"
    settings = PrepareSettings(shard_bytes=2000, workers=1)
    prepare_corpus([path], tokenizer, out, settings)
    before = shard_bytes_of(out)
    reading = open_prepared(out)
    other = PrepareSettings(shard_bytes=100_000, workers=1)
    with pytest.raises(OutputError, match="is being read by a training run") as e:
        prepare_corpus([path], tokenizer, out, other)
    assert "\n" not in str(e.value) and shard_bytes_of(out) == before
    assert len(reading) == len(before) and reading.shard(0).num_documents > 0
    import pickle

    copy = pickle.loads(pickle.dumps(reading._reader_lock))  # as sent to another process
    assert copy.fd is None
    del copy  # releases nothing of this process
    assert reading.shard(1).num_documents > 0
    with pytest.raises(OutputError, match="is being read by a training run"):
        prepare_corpus([path], tokenizer, out, other)
    del reading  # the run ends: its lock goes with it
    with RunDirectory(out), pytest.raises(CorpusError, match="is being written by another run"):
        open_prepared(out)
    assert len(prepare_corpus([path], tokenizer, out, other)["shards"]) == 1


def test_memory_is_bounded_by_the_settings_not_the_corpus(tmp_path, tokenizer):
    shard = 20_000
    peaks = {}
    for scale in (10, 20):
        path = write_documents(tmp_path / f"c{scale}.txt", mixed_documents(60 * scale))
        assert path.stat().st_size > scale * shard * 0.9
        tracemalloc.start()
        doc = prepare_corpus(
            [path],
            tokenizer,
            tmp_path / f"out{scale}",
            PrepareSettings(shard_bytes=shard, workers=1),
        )
        peaks[scale] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(doc["shards"]) >= scale * 0.8
        # Each worker's buffers (text batch + the piece's ids) stay within
        # a few times shard_bytes.
        buffers = [
            Shard(tmp_path / f"out{scale}" / e["name"]).header["peak_buffer_bytes"]
            for e in doc["shards"]
        ]
        assert max(buffers) < 8 * shard  # char-level: 1 token per byte
    # Twice the corpus, about the same peak (Python and NumPy allocations).
    assert peaks[20] < 1.3 * peaks[10] + (1 << 20)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: [str(d / "nothing-*.txt")], "matches no file"),
        (lambda d: [str(d / "sub")], "is a directory"),
        (lambda d: [str(d / "missing.txt")], "missing.txt does not exist"),
        (lambda d: [], "No corpus files"),
    ],
)
def test_bad_inputs_are_one_line_errors_before_anything_is_written(
    tmp_path, tokenizer, make, message
):
    (tmp_path / "sub").mkdir()
    out = tmp_path / "out"
    with pytest.raises(corpus_lib.CorpusError, match=message) as e:
        prepare_corpus(make(tmp_path), tokenizer, out)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_a_corpus_of_junk_is_an_error_and_nothing_is_published(tmp_path, tokenizer):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x00\x01\x02" * 100 + b"\n" + bytes(range(128, 256)) + b"\n")
    with pytest.raises(corpus_lib.CorpusError, match="empty.*2 binary") as e:
        prepare_corpus([path], tokenizer, tmp_path / "out", PrepareSettings(workers=1))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out" / manifest_lib.MANIFEST_FILE).exists()


def test_bad_outputs(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(3))
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        prepare_corpus([path], tokenizer, tmp_path / "file")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="did not write.*notes.txt"):
        prepare_corpus([path], tokenizer, tmp_path / "mine")
    with pytest.raises(corpus_lib.CorpusError, match="layout must be"):
        prepare_corpus([path], tokenizer, tmp_path / "x", PrepareSettings(layout="lines"))


@pytest.mark.parametrize("name", ["vocab.txt", "mine.bzshard", "shard-00000-00000-00000.bzshard"])
def test_a_users_files_named_as_bertzoo_names_its_own_are_refused_and_kept(
    tmp_path, tokenizer, name
):
    """A `vocab.txt` or a `.bzshard` in a directory that is not a
    preparation of bertzoo's is the user's: refused in one line, never
    overwritten (vocab.txt was) or deleted (a user's mine.bzshard was)."""
    path = write_documents(tmp_path / "c.txt", mixed_documents(3))
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_bytes(b"the user's own bytes")
    with pytest.raises(OutputError) as error:
        prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    assert f"did not write ({name})" in str(error.value) and "\n" not in str(error.value)
    assert sorted(p.name for p in out.iterdir()) == [name]
    assert (out / name).read_bytes() == b"the user's own bytes"


def test_in_its_own_output_a_preparation_owns_only_its_shard_names(tmp_path, tokenizer):
    """A finished preparation may be prepared again over itself; a file of
    the user's put among its shards (not a shard name bertzoo writes) stops
    it, and stays."""
    path = write_documents(tmp_path / "c.txt", mixed_documents(12))
    out = tmp_path / "out"
    prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1, batch_sentences=64))
    (out / "mine.bzshard").write_bytes(b"keep")
    with pytest.raises(OutputError, match=r"did not write \(mine.bzshard\)"):
        prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    assert (out / "mine.bzshard").read_bytes() == b"keep"
    open_prepared(out)


def test_changed_inputs_are_detected_by_stat(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(10))
    out = tmp_path / "out"
    prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    open_prepared(out, check_inputs=True)
    with open(path, "ab") as f:
        f.write(b"one more line.\n")
    with pytest.raises(CorpusChangedError, match=f"{path.name} changed after it was prepared") as e:
        open_prepared(out, check_inputs=True)
    assert "\n" not in str(e.value)
    path.unlink()
    with pytest.raises(CorpusChangedError, match="is gone"):
        open_prepared(out, check_inputs=True)


def test_a_damaged_shard_fails_verification(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(10))
    out = tmp_path / "out"
    doc = prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    shard = out / doc["shards"][0]["name"]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    prepared = open_prepared(out)  # opening reads only the small files
    with pytest.raises(IntegrityError, match=shard.name):
        prepared.shard(0)  # each shard is verified as it is opened
    with pytest.raises(IntegrityError, match=shard.name):
        prepared.verify_all()
    (out / "prepared.json").write_text("{}")
    with pytest.raises(IntegrityError, match="prepared.json"):
        open_prepared(out)


def test_progress_bar_on_a_terminal_and_log_lines_otherwise(tmp_path, tokenizer, caplog):
    path = write_documents(tmp_path / "c.txt", mixed_documents(40))

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    prepare_corpus(
        [path],
        tokenizer,
        tmp_path / "a",
        PrepareSettings(shard_bytes=2000, workers=1),
        progress_stream=terminal,
    )
    assert "\rpreparing [" in terminal.getvalue() and "MB/s ETA" in terminal.getvalue()
    assert "100.0%" in terminal.getvalue()
    caplog.set_level(logging.INFO, logger="bertzoo.data")
    prepare_corpus(
        [path], tokenizer, tmp_path / "b", PrepareSettings(workers=1), progress_stream=io.StringIO()
    )
    assert "preparing: 100.0%" in caplog.text and "MB/s" in caplog.text
    assert "Prepared" in caplog.text and "[UNK]" in caplog.text


def test_header_records_the_piece(tmp_path, tokenizer):
    path = write_documents(tmp_path / "c.txt", mixed_documents(5))
    doc = prepare_corpus([path], tokenizer, tmp_path / "out", PrepareSettings(workers=1))
    header = Shard(tmp_path / "out" / doc["shards"][0]["name"]).header
    assert header["piece"]["path"] == str(path) and header["stats"]["documents"] == 5
    assert os.path.getsize(path) == header["piece"]["end"]


def test_command_line_prepare_and_records(tmp_path, tokenizer, capsys):
    from bertzoo.cli import main
    from bertzoo.data import read_pretraining_dataset

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokenizer.vocabulary) + "\n", encoding="utf-8")
    write_documents(tmp_path / "a.txt", mixed_documents(30, seed=1))
    write_documents(tmp_path / "b.txt", mixed_documents(30, seed=2))
    out = tmp_path / "prepared"
    argv = ["prepare", str(tmp_path / "*.txt"), "--vocabulary", str(vocab), "--output", str(out)]
    argv += ["--shard-mb", "0.004", "--workers", "1", "--no-strip-accents"]
    assert main(argv) == 0
    assert "shards" in capsys.readouterr().out
    prepared = open_prepared(out, check_inputs=True)
    assert prepared.tokenizer().vocabulary == tokenizer.vocabulary  # rebuilt from the directory
    prepared.check_tokenizer(tokenizer)
    records = tmp_path / "records"
    argv = ["prepare-records", str(out), "--output", str(records), "--sequence-length", "40"]
    argv += ["--max-predictions", "6", "--objective", "sop", "--dupe-factor", "2"]
    assert main(argv) == 0
    assert "examples" in capsys.readouterr().out
    assert next(iter(read_pretraining_dataset(records, 4, 40)))[0]["token_ids"].shape == (4, 40)
    # Bad input: exit status 2 and one line, nothing written.
    argv = ["prepare", str(tmp_path / "none-*.txt"), "--vocabulary", str(vocab)]
    assert main([*argv, "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "matches no file" in err
    assert not (tmp_path / "x").exists()
    assert main([*argv[:1], str(tmp_path), *argv[2:], "--output", str(tmp_path / "x")]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value, message",
    [
        # 0 and -1 used to become one byte: a shard per sentence.
        ("--shard-mb", "0", "--shard-mb must be a number of MiB > 0, got 0."),
        ("--shard-mb", "-1", "--shard-mb must be a number of MiB > 0, got -1."),
        ("--shard-mb", "nan", "--shard-mb must be a number of MiB > 0, got nan."),
        ("--max-line-mb", "inf", "--max-line-mb must be a number of MiB > 0, got inf."),
        # 600 MiB lines passed 6 GiB: the cap is 16 MiB.
        ("--max-line-mb", "600", "max_line_bytes must be at most 16,777,216 (16 MiB"),
    ],
)
def test_size_flags_out_of_bounds_are_one_line_before_anything_is_read(
    tmp_path, capsys, flag, value, message
):
    from bertzoo.cli import main

    write_documents(tmp_path / "a.txt", mixed_documents(3, seed=1))
    out = tmp_path / "prepared"
    # A vocabulary that does not exist: the flags are refused before it is read.
    argv = ["prepare", str(tmp_path / "a.txt"), "--vocabulary", str(tmp_path / "no_vocab.txt")]
    assert main([*argv, "--output", str(out), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not out.exists()
    with pytest.raises(BertzooError, match="max_line_bytes must be at most 16,777,216"):
        PrepareSettings(max_line_bytes=(16 << 20) + 1).check()
    PrepareSettings(max_line_bytes=16 << 20).check()


def test_worker_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    per = prepare_lib.BYTES_PER_WORKER
    assert prepare_lib._worker_count(None, [per // 4] * 3) == 1  # small: in this process
    assert prepare_lib._worker_count(None, [per] * 3) == 3
    assert prepare_lib._worker_count(None, [per] * 20) == 8
    assert prepare_lib._worker_count(4, [10] * 2) == 2  # never more than the pieces
    assert prepare_lib._worker_count(2, [10] * 5) == 2


@pytest.mark.slow
def test_a_killed_preparation_resumes_with_its_finished_shards(tmp_path, tokenizer, monkeypatch):
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import FIXTURES

    path = write_documents(tmp_path / "c.txt", mixed_documents(300) * 12)
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(
        "from bertzoo.data.prepare import PrepareSettings, prepare_corpus\n"
        "from tests.data.prepared_corpus import character_tokenizer\n"
        "if __name__ == '__main__':\n"
        f"    prepare_corpus([{str(path)!r}], character_tokenizer(), {str(out)!r},\n"
        "                   PrepareSettings(shard_bytes=20_000, workers=2))\n"
    )
    root = str(FIXTURES.parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=root,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = out / prepare_lib.JOURNAL_FILE
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if journal.is_file() and len(json.loads(journal.read_text())["shards"]) >= 3:
            break
        time.sleep(0.01)
    os.killpg(child.pid, signal.SIGKILL)  # the main process and its workers
    child.wait()
    assert not (out / manifest_lib.MANIFEST_FILE).exists(), "finished before the kill"
    kept = json.loads(journal.read_text())["shards"]
    names = [shard["name"] for e in kept.values() for shard in e["shards"]]
    mtimes = {n: (out / n).stat().st_mtime_ns for n in names}
    real, ran = prepare_lib.prepare_piece, []
    monkeypatch.setattr(prepare_lib, "prepare_piece", lambda t: ran.append(t[0].name) or real(t))
    doc = prepare_corpus([path], tokenizer, out, PrepareSettings(shard_bytes=20_000, workers=1))
    assert not set(ran) & set(kept) and len(ran) == len(doc["shards"]) - len(kept) > 0
    assert mtimes == {n: (out / n).stat().st_mtime_ns for n in names}
    fresh = tmp_path / "fresh"
    prepare_corpus([path], tokenizer, fresh, PrepareSettings(shard_bytes=20_000, workers=1))
    assert shard_bytes_of(out) == shard_bytes_of(fresh)


def test_a_corpus_gone_from_this_machine_is_only_logged_for_training(tmp_path, tokenizer, caplog):
    path = write_documents(tmp_path / "c.txt", mixed_documents(10))
    out = tmp_path / "out"
    prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    path.unlink()
    caplog.set_level(logging.WARNING, logger="bertzoo.data")
    open_prepared(out, check_inputs="warn")
    assert "c.txt, prepared into" in caplog.text and "is not here" in caplog.text
    path.write_text("other text\n")
    with pytest.raises(CorpusChangedError, match="changed after"):
        open_prepared(out, check_inputs="warn")


def test_a_sentencepiece_corpus_is_prepared_and_its_tokenizer_rebuilt(tmp_path):
    from bertzoo.tokenizers import SentencePieceTokenizer
    from tests.conftest import FIXTURES

    tokenizer = SentencePieceTokenizer(FIXTURES / "sentencepiece" / "spiece.model")
    path = write_documents(tmp_path / "c.txt", mixed_documents(20))
    out = tmp_path / "out"
    doc = prepare_corpus([path], tokenizer, out, PrepareSettings(workers=1))
    assert (
        doc["tokenizer"]["kind"] == "sentencepiece" and doc["tokenizer"]["file"] == "spiece.model"
    )
    assert shard_documents(out) == reference_documents([path], tokenizer)
    rebuilt = open_prepared(out).tokenizer()
    assert rebuilt.proto == tokenizer.proto and rebuilt.get_config() == tokenizer.get_config()
    open_prepared(out).check_tokenizer(rebuilt)
