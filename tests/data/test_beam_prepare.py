"""Preparing a corpus with Apache Beam (bertzoo.data.beam_prepare): the
same bytes as the local pool, resumable, on DirectRunner and the portable
runner's in-process job server. Tests that run Beam skip without
apache-beam (`pip install ".[beam]"`); the missing-extra error is
tested everywhere."""

import gzip
import json
import os
import re
import sys

import pytest

from bertzoo.data import beam_prepare
from bertzoo.data import prepare as prepare_lib
from bertzoo.data.beam_prepare import BeamMissingError, BeamOptionError, prepare_corpus_beam
from bertzoo.data.corpus import CorpusError
from bertzoo.data.prepare import RECORD_PREFIX, PrepareSettings, prepare_corpus
from bertzoo.data.shardfile import Shard
from bertzoo.data.shards import open_prepared
from bertzoo.io import manifest as manifest_lib
from tests.data.prepared_corpus import (
    character_tokenizer,
    korean_sentences,
    mixed_documents,
    write_documents,
)

pytestmark = pytest.mark.backend_independent

SETTINGS = PrepareSettings(shard_bytes=2500, workers=1)
THREADS = ["--direct_num_workers=2", "--direct_running_mode=multi_threading"]
# What the launcher writes for itself (the journal holds each process's RSS).
LAUNCHER_ONLY = {".prepare-journal.json", ".bertzoo.lock"}


@pytest.fixture
def beam():
    return pytest.importorskip("apache_beam")


@pytest.fixture(scope="module")
def tokenizer():
    return character_tokenizer()


def messy_corpus(directory):
    """A plain file of several pieces (English, Korean, emoji, CRLF, a line
    of invalid UTF-8, binary junk) and a .gz file cut into shards while it
    streams."""
    directory.mkdir()
    documents = mixed_documents(40, seed=3)
    documents.insert(5, ["Emoji 😀 here.", "좋아요 정말 예뻐요 👍."])
    text = "\n\n".join("\n".join(d) for d in documents).encode()
    text += "\r\n\r\ncafé au lait.".encode("latin-1") + b"\r\n\x00junk\x00\n"
    text += "끝 문장.\n".encode()
    plain = directory / "mixed.txt"
    plain.write_bytes(text)
    gz = directory / "korean.txt.gz"
    gz.write_bytes(gzip.compress("\n\n".join(korean_sentences()).encode()))
    return [plain, gz]


def output_files(output):
    return {p.name: p.read_bytes() for p in sorted(output.iterdir()) if p.name not in LAUNCHER_ONLY}


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tokenizer):
    """The messy corpus, prepared by the local pool."""
    root = tmp_path_factory.mktemp("beam")
    inputs = messy_corpus(root / "corpus")
    document = prepare_corpus(inputs, tokenizer, root / "local", SETTINGS)
    return inputs, root / "local", document


def test_direct_runner_writes_the_bytes_prepare_corpus_writes(beam, tmp_path, tokenizer, reference):
    inputs, local, document = reference
    s = document["summary"]
    assert s["invalid_utf8_lines"] == 1 and s["dropped_binary"] == 1 and s["unk_tokens"] >= 3
    pieces = {(e["input"], e["piece"]) for e in document["shards"]}
    assert len(pieces) >= 4 and len(document["shards"]) > len(pieces)  # the .gz gives several
    out = tmp_path / "beam"
    got = prepare_corpus_beam(inputs, tokenizer, out, SETTINGS, THREADS)
    assert got == document
    assert output_files(out) == output_files(local)  # shards, prepared.json, manifest, vocab
    assert not list(out.glob(f"{RECORD_PREFIX}*"))  # the records went into the journal
    prepared = open_prepared(out, check_inputs=True)
    prepared.verify_all()
    prepared.check_tokenizer(tokenizer)
    documents = [d for i in range(len(prepared)) for d in prepared.shard(i).documents()]
    assert len(documents) == s["documents"] and sum(map(len, documents)) == s["sentences"]


def test_the_portable_runner_writes_the_same_bytes(beam, tmp_path, tokenizer, reference):
    """The Flink and Spark runners' submission path (a job service, the
    pipeline as a proto, an SDK worker), with Python's job server in
    this process."""
    inputs, local, document = reference
    options = {"runner": "PortableRunner", "job_endpoint": "embed", "environment_type": "LOOPBACK"}
    assert prepare_corpus_beam(inputs, tokenizer, tmp_path / "out", SETTINGS, options) == document
    assert output_files(tmp_path / "out") == output_files(local)


def piece_of(path):
    return path.name.rsplit("-", 1)[0]  # shard-INPUT-PIECE-INDEX.bzshard


def test_resume_keeps_the_pieces_workers_finished(
    beam, tmp_path, tokenizer, reference, monkeypatch
):
    inputs, local, document = reference
    out = tmp_path / "out"
    names = sorted({f"shard-{e['input']:05d}-{e['piece']:05d}" for e in document["shards"]})
    finished = set(names[1::2]) | {names[-1]}  # the .gz piece, and every other plain one
    assert 2 <= len(finished) < len(names)

    # Workers of the other pieces die after writing their shards, before
    # their records, and the launcher is killed before it takes in the
    # records there are: the journal has none of them.
    real = beam_prepare.write_piece_record
    lossy = lambda output, name, entry: real(output, name, entry) if name in finished else None
    monkeypatch.setattr(beam_prepare, "write_piece_record", lossy)

    def killed(output, name):
        raise KeyboardInterrupt

    monkeypatch.setattr(beam_prepare, "read_piece_record", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus_beam(inputs, tokenizer, out, SETTINGS, THREADS)
    monkeypatch.setattr(beam_prepare, "read_piece_record", prepare_lib.read_piece_record)
    assert not (out / manifest_lib.MANIFEST_FILE).exists()
    with pytest.raises(CorpusError, match="not a finished prepared corpus"):
        open_prepared(out)
    assert {p.name[len(RECORD_PREFIX) : -5] for p in out.glob(f"{RECORD_PREFIX}*")} == finished
    shards = sorted(out.glob("*.bzshard"))
    assert {piece_of(p) for p in shards} == set(names)  # every piece wrote its shards
    assert json.loads((out / ".prepare-journal.json").read_text())["shards"] == {}
    for path in shards:
        os.utime(path, ns=(10**9, 10**9))

    # Run again: the recorded pieces are kept; the others are prepared
    # again, and their records lost again: one line says so.
    missing = f"{len(names) - len(finished)} of {len(names) - len(finished)} pieces"
    with pytest.raises(CorpusError, match=f"{missing} .* left no record in {re.escape(str(out))}"):
        prepare_corpus_beam(inputs, tokenizer, out, SETTINGS, THREADS)
    for path in sorted(out.glob("*.bzshard")):
        kept = path.stat().st_mtime_ns == 10**9
        assert kept == (piece_of(path) in finished), path.name
    monkeypatch.undo()

    # Run again: finished, with the bytes of prepare_corpus.
    assert prepare_corpus_beam(inputs, tokenizer, out, SETTINGS, THREADS) == document
    assert output_files(out) == output_files(local)
    assert {piece_of(p) for p in out.glob("*.bzshard") if p.stat().st_mtime_ns == 10**9} == finished
    journal = json.loads((out / ".prepare-journal.json").read_text())["shards"]
    assert sorted(journal) == names and not list(out.glob(f"{RECORD_PREFIX}*"))

    # A finished preparation run again prepares nothing.
    monkeypatch.setattr(beam_prepare, "prepare_piece", lambda task: 1 / 0)
    assert prepare_corpus_beam(inputs, tokenizer, out, SETTINGS, THREADS) == document


def test_a_local_preparation_continues_on_beam(beam, tmp_path, tokenizer, reference, monkeypatch):
    """Same plan, keys and journal: the pieces the local pool finished
    before it was interrupted are kept, Beam prepares the rest."""
    inputs, local, document = reference
    out = tmp_path / "out"
    real, calls = prepare_lib.prepare_piece, []

    def dying(task):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(task[0].name)
        return real(task)

    monkeypatch.setattr(prepare_lib, "prepare_piece", dying)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(inputs, tokenizer, out, SETTINGS)
    monkeypatch.undo()
    for path in out.glob("*.bzshard"):
        os.utime(path, ns=(10**9, 10**9))
    assert prepare_corpus_beam(inputs, tokenizer, out, SETTINGS, THREADS) == document
    assert output_files(out) == output_files(local)
    kept = {piece_of(p) for p in out.glob("*.bzshard") if p.stat().st_mtime_ns == 10**9}
    assert kept == set(calls)


def test_without_apache_beam_the_error_names_the_extra(tmp_path, tokenizer, monkeypatch, capsys):
    from bertzoo.cli import main

    monkeypatch.setitem(sys.modules, "apache_beam", None)  # import fails as if not installed
    path = write_documents(tmp_path / "c.txt", mixed_documents(5))
    with pytest.raises(BeamMissingError) as error:
        prepare_corpus_beam([path], tokenizer, tmp_path / "out", SETTINGS)
    message = str(error.value)
    assert 'pip install apache-beam, or pip install ".[beam]"' in message and "\n" not in message
    assert isinstance(error.value, ImportError)
    assert not (tmp_path / "out").exists()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokenizer.vocabulary) + "\n", encoding="utf-8")
    argv = ["prepare", str(path), "--vocabulary", str(vocab), "--output", str(tmp_path / "out")]
    assert main([*argv, "--engine", "beam"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install apache-beam, or pip install ".[beam]"' in err
    assert not (tmp_path / "out").exists()


def test_command_line(beam, tmp_path, tokenizer, reference, capsys):
    from bertzoo.cli import main

    inputs, local, document = reference
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokenizer.vocabulary) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["prepare", *map(str, inputs), "--vocabulary", str(vocab), "--no-strip-accents"]
    argv += ["--shard-mb", str(SETTINGS.shard_bytes / 2**20)]
    beam_args = ["--engine", "beam", "--beam-option", "direct_num_workers=2"]
    beam_args += ["--beam-option", "direct_running_mode=multi_threading"]
    assert main([*argv, "--output", str(out), *beam_args]) == 0
    assert f"{document['summary']['shards']} shards" in capsys.readouterr().out
    assert output_files(out) == output_files(local)
    # One-line errors, nothing written.
    bad = tmp_path / "bad"
    for extra, message in [
        (
            ["--engine", "beam", "--beam-option", "runer=DataflowRunner"],
            "Unknown Beam pipeline option(s): runer",
        ),
        (["--beam-option", "runner=DirectRunner"], "--beam-option needs --engine beam"),
        (["--engine", "beam", "--workers", "2"], "--workers is the local pool's"),
    ]:
        assert main([*argv, "--output", str(bad), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
        assert not bad.exists()


def test_pipeline_options_and_paths_are_checked_first(beam, tmp_path, tokenizer):
    with pytest.raises(BeamOptionError, match="flags such as --runner"):
        beam_prepare.pipeline_options(["runner=DirectRunner"])
    with pytest.raises(BeamOptionError, match="Unknown Beam pipeline option"):
        beam_prepare.pipeline_options({"num_wrokers": 3})
    options = beam_prepare.pipeline_options({"runner": "DirectRunner"})
    assert beam_prepare.pipeline_options(options) is options
    path = write_documents(tmp_path / "c.txt", mixed_documents(5))
    with pytest.raises(CorpusError, match="gs://bucket/out is a URL"):
        prepare_corpus_beam([path], tokenizer, "gs://bucket/out")
    with pytest.raises(CorpusError, match="matches no file"):
        prepare_corpus_beam([str(tmp_path / "none-*.txt")], tokenizer, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


@pytest.mark.slow
def test_direct_runner_in_worker_processes(beam, tmp_path, tokenizer, reference):
    """The DoFn pickled into other processes (as on a cluster), each
    building the tokenizer once in setup."""
    inputs, local, document = reference
    options = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    assert prepare_corpus_beam(inputs, tokenizer, tmp_path / "out", SETTINGS, options) == document
    assert output_files(tmp_path / "out") == output_files(local)
    header = Shard(sorted((tmp_path / "out").glob("*.bzshard"))[0]).header
    assert header["piece"]["path"] == os.path.abspath(inputs[0])
