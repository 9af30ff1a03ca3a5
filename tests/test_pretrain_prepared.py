"""The pre-training run on a prepared corpus: `--corpus` prepared once into
the output and never read again, the exact data position in checkpoints
(a resumed run trains the batches of an uninterrupted one, across shard and
epoch boundaries), `--prepared DIR`, held-out documents, full-sentence
packing, and bad input before anything is published."""

import json
import logging
import os
import shutil

import numpy as np
import pytest

import bertzoo
from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.training import pretrain_data, workers
from bertzoo.training.pretrain import PretrainConfig, PretrainError, run_pretraining
from tests.data.prepared_corpus import mixed_documents, write_documents

# bert_tiny at 32 tokens; shards of ~6 KB, so 40 steps of 8 cross several
# shards and (with a 30 KB corpus) an epoch.
SMALL = dict(
    preset="bert_tiny",
    vocab_size=600,
    seq_len=(32,),
    steps=(40,),
    batch_size=8,
    learning_rate=3e-3,
    dropout=0.0,
    checkpoint_every=10,
    keep_checkpoints=3,
    log_every=10,
    eval_batches=2,
    shard_mb=6000 / (1 << 20),
    prepare_workers=1,
    verbose=0,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    return write_documents(d / "corpus.txt", mixed_documents(70, seed=4))


def _weights(directory):
    return bertzoo.BertBackbone.from_preset(directory).get_weights()


def _max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def _forbid(monkeypatch, what):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{what} was called: the raw corpus is read again")

    return refuse


@pytest.mark.slow
def test_corpus_is_prepared_once_and_a_resume_trains_the_uninterrupted_batches(
    tmp_path, corpus, monkeypatch
):
    straight = tmp_path / "straight"
    config = PretrainConfig(**SMALL, corpus=(str(corpus),), output=str(straight))
    metrics = run_pretraining(config)
    prepared = json.loads((straight / "prepared" / "prepared.json").read_text())
    assert len(prepared["shards"]) >= 4, "the test needs a corpus of several shards"
    assert metrics["prepared"] == str(straight / "prepared")
    assert metrics["train_documents"] + metrics["eval_documents"] == 70
    assert 0 < metrics["eval_documents"] < 10 and metrics["eval_held_out"]
    state = json.loads((straight / "checkpoints" / "ckpt-000000040" / "state.json").read_text())
    assert state["input_version"] == 2 and state["stream"]["batch"] == 40
    # 40 batches of 8 ran past the first epoch's shards into the next.
    assert state["stream"]["epoch"] >= 1, state

    # From here on the raw corpus is never read: not prepared, not tokenized,
    # not used for a vocabulary.
    monkeypatch.setattr(pretrain_data, "prepare_corpus", _forbid(monkeypatch, "prepare_corpus"))
    monkeypatch.setattr(
        "bertzoo.tokenizers.train.train_wordpiece", _forbid(monkeypatch, "train_wordpiece")
    )
    monkeypatch.setattr("bertzoo.data.corpus.read_corpus", _forbid(monkeypatch, "read_corpus"))

    # A run stopped after its checkpoint at step 20 (mid-shard, mid-epoch):
    # the same command resumes there and ends with the uninterrupted weights.
    resumed = tmp_path / "resumed"
    shutil.copytree(straight, resumed)
    for step in (30, 40):
        shutil.rmtree(resumed / "checkpoints" / f"ckpt-{step:09d}")
    again = run_pretraining(PretrainConfig(**SMALL, corpus=(str(corpus),), output=str(resumed)))
    assert again["resumed_from_step"] == 20 and again["steps"] == 40
    diff = _max_difference(_weights(straight / "preset"), _weights(resumed / "preset"))
    assert diff < 1e-5, diff  # measured 0.0; float reassociation allowance
    assert again["final_loss"] == pytest.approx(metrics["final_loss"], rel=1e-5)

    # A corpus that changed under a resumed run is refused in one line.
    text = corpus.read_bytes()
    try:
        corpus.write_bytes(text + b"\nA sentence added after preparation.\n")
        for step in (30, 40):
            shutil.rmtree(resumed / "checkpoints" / f"ckpt-{step:09d}", ignore_errors=True)
        with pytest.raises(PretrainError, match=r"changed after it was prepared.*--no-resume"):
            run_pretraining(PretrainConfig(**SMALL, corpus=(str(corpus),), output=str(resumed)))
    finally:
        corpus.write_bytes(text)


@pytest.mark.slow
def test_a_prepared_directory_is_trained_from_as_it_is(tmp_path, corpus):
    tokenizer = bertzoo.BertTokenizer(str(_vocabulary(tmp_path)), lowercase=True)
    directory = tmp_path / "prepared"
    prepare_corpus([corpus], tokenizer, directory, PrepareSettings(shard_bytes=6000, workers=1))
    before = {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}
    single = dict(SMALL, objective="none", steps=(12,))
    metrics = run_pretraining(
        PretrainConfig(**single, prepared=str(directory), output=str(tmp_path / "run"))
    )
    assert metrics["steps"] == 12 and metrics["prepared"] == str(directory)
    # MLM only: full-sentence packing by default.
    assert metrics["objective"] == "none" and metrics["packing"] == "full_sentences"
    assert metrics["vocabulary_size"] == tokenizer.vocabulary_size
    assert not (tmp_path / "run" / "prepared").exists()
    assert {p.name: p.stat().st_mtime_ns for p in directory.iterdir()} == before
    # The reference's chunking within documents, on request.
    chunked = run_pretraining(
        PretrainConfig(
            **{**single, "packing": "doc_sentences"},
            prepared=str(directory),
            output=str(tmp_path / "chunked"),
        )
    )
    assert chunked["packing"] is None and chunked["steps"] == 12


def _vocabulary(tmp_path):
    """A small WordPiece vocabulary trained on the test corpus."""
    from bertzoo.tokenizers.train import train_wordpiece

    text = write_documents(tmp_path / "vocab_corpus.txt", mixed_documents(70, seed=4))
    train_wordpiece([str(text)], 600, output=tmp_path / "vocab.txt")
    return tmp_path / "vocab.txt"


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(prepared="P", vocab="V"), r"--prepared .* drop --vocab"),
        (dict(prepared="P", corpus=("c.txt",)), r"--prepared .* drop --corpus"),
        (dict(packing="full_sentences", objective="nsp"), r"full_sentences makes single-segment"),
        (dict(packing="rows"), r"packing='rows' is not valid. Valid: auto, full_sentences"),
        (dict(shard_mb=0), r"shard_mb must be a positive number of MB"),
        (dict(prepared="missing-dir"), r"--prepared: .*missing-dir is not a finished prepared"),
    ],
)
def test_bad_data_settings_are_refused_before_anything_is_written(
    tmp_path, overrides, message, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    with pytest.raises(PretrainError, match=message):
        run_pretraining(PretrainConfig(**{**SMALL, **overrides}, output=str(out)))
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("bad", ["empty_glob", "directory"])
@pytest.mark.backend_independent
def test_bad_corpus_paths_are_one_line_errors(tmp_path, bad):
    (tmp_path / "folder").mkdir()
    corpus = {"empty_glob": str(tmp_path / "nothing-*.txt"), "directory": str(tmp_path / "folder")}
    out = tmp_path / "run"
    with pytest.raises(PretrainError) as info:
        run_pretraining(PretrainConfig(**SMALL, corpus=(corpus[bad],), output=str(out)))
    assert "\n" not in str(info.value) and corpus[bad] in str(info.value)
    assert not out.exists()


@pytest.mark.slow
def test_junk_and_an_enormous_line_are_counted_and_skipped(tmp_path, corpus, caplog):
    messy = tmp_path / "messy.txt"
    junk = bytes(range(256)) * 64  # binary: NULs and control bytes
    huge = b"x" * (3 << 20)  # one 3 MB line without a newline, in the middle
    messy.write_bytes(
        corpus.read_bytes() + b"\n" + junk + b"\n\n" + huge + b"\n\n" + corpus.read_bytes()
    )
    caplog.set_level(logging.INFO)
    out = tmp_path / "run"
    metrics = run_pretraining(
        PretrainConfig(**{**SMALL, "steps": (4,)}, corpus=(str(messy),), output=str(out))
    )
    assert metrics["steps"] == 4
    summary = json.loads((out / "prepared" / "prepared.json").read_text())["summary"]
    assert summary["dropped_too_long"] == 1 and summary["dropped_binary"] >= 1, summary
    assert "dropped 1 too-long" in caplog.text
    assert os.path.getsize(messy) > 3 << 20


@pytest.mark.slow
def test_static_records_served_by_the_tf_data_service(tmp_path, corpus):
    """--data-mode static writes masked records from the shards; with
    --data-service a dispatcher and a worker on loopback make the batches."""
    from bertzoo.data import service

    dispatcher = service.start_dispatcher(0)
    address = dispatcher.target.split("://")[-1]
    worker = service.start_worker(address, 0, host="localhost")
    try:
        out = tmp_path / "run"
        config = PretrainConfig(
            **{**SMALL, "steps": (12,)},
            corpus=(str(corpus),),
            data_mode="static",
            data_service=f"grpc://{address}",
            output=str(out),
        )
        metrics = run_pretraining(config)
    finally:
        worker.stop()
        dispatcher.stop()
    assert metrics["steps"] == 12 and metrics["final_loss"] < metrics["initial_loss"]
    meta = json.loads((out / "data" / "seq32" / "pretraining_metadata.json").read_text())
    shards = json.loads((out / "prepared" / "prepared.json").read_text())["shards"]
    assert meta["masked"] and len(meta["shards"]) == len([s for s in shards if s["documents"]])
    # The on-the-fly stream runs Python: refused with the service.
    with pytest.raises(PretrainError, match="--data-service serves masked records"):
        run_pretraining(
            PretrainConfig(**SMALL, data_service="grpc://d0:5050", output=str(tmp_path / "x"))
        )


# === Multi-worker runs: a reader per worker ===


def _checkpoint(manager, step):
    """A checkpoint directory as `CheckpointManager.checkpoints` lists it."""
    from bertzoo.training.checkpoint import STATE_FILE, WEIGHTS_FILE

    path = manager.directory / f"ckpt-{step:09d}"
    path.mkdir(parents=True)
    (path / WEIGHTS_FILE).write_bytes(b"")
    (path / STATE_FILE).write_text("{}")
    return path


@pytest.mark.backend_independent
def test_reader_positions_are_kept_for_the_checkpoints_and_read_back(tmp_path):
    from bertzoo.data.shards import StreamPosition
    from bertzoo.training.checkpoint import CheckpointManager

    manager = CheckpointManager(tmp_path / "checkpoints", keep=2)
    readers = [workers.ReaderPositions(tmp_path, 2, r, manager) for r in range(2)]

    def position(step, reader):
        return StreamPosition(epoch=0, shard=reader, example=3 * step, batch=step)

    for step in (4, 8, 12):
        for r, reader in enumerate(readers):
            reader.record(step, 0, position(step, r))
        readers[0].wait_for_all(step, seconds=1)  # all there: no wait
        _checkpoint(manager, step)
    shutil.rmtree(manager.directory / "ckpt-000000004")  # pruned by the chief
    readers[1].record(16, 1, position(16, 1))  # before checkpoint 16 is written
    files = sorted(p.name for p in (tmp_path / "positions" / "reader-1").iterdir())
    assert files == ["step-000000008.json", "step-000000012.json", "step-000000016.json"]
    assert len(list((tmp_path / "positions" / "reader-0").iterdir())) == 3  # prunes at its next
    ckpt = manager.directory / "ckpt-000000008"
    assert readers[1].read(8, 0, ckpt) == position(8, 1).as_dict()

    # The chief waits for every worker's position before it checkpoints.
    with pytest.raises(TimeoutError, match=r"reader-0/step-000000016.json .* by worker 0"):
        readers[0].wait_for_all(16, seconds=0.2)
    # Another phase's, or a missing file: one line naming the file and the way out.
    with pytest.raises(PretrainError, match=r"records .*'phase': 1.*--no-resume"):
        readers[1].read(16, 0, ckpt)
    (tmp_path / "positions" / "reader-0" / "step-000000008.json").unlink()
    with pytest.raises(PretrainError) as info:
        readers[0].read(8, 0, ckpt)
    message = str(info.value)
    assert "\n" not in message and "reader-0/step-000000008.json is missing" in message
    assert "worker 0" in message and str(ckpt) in message and "--no-resume" in message
    # A run resumed at step 8 writes the positions past it again.
    readers[1].prune(newest=8, after=8)
    files = sorted(p.name for p in (tmp_path / "positions" / "reader-1").iterdir())
    assert files == ["step-000000008.json"]


@pytest.mark.backend_independent
def test_a_multi_worker_run_needs_a_shard_per_worker_and_its_own_checkpoints():
    import types

    prepared = types.SimpleNamespace(
        directory="out/prepared", document={"shards": [{"documents": 3}, {"documents": 0}]}
    )
    own = PretrainConfig(**SMALL)
    workers.check_readers(own, prepared, 1)
    with pytest.raises(PretrainError) as info:
        workers.check_readers(own, prepared, 2)
    message = str(info.value)
    assert "\n" not in message and "each of the 2 workers streams shards of its own" in message
    assert "out/prepared has 1 shard(s) with documents" in message
    assert f"smaller --shard-mb (now {SMALL['shard_mb']:g})" in message
    given = PretrainConfig(**SMALL, prepared="corpus/prepared")
    with pytest.raises(
        PretrainError, match="prepare corpus/prepared again with a smaller --shard-mb"
    ):
        workers.check_readers(given, prepared, 3)

    # A checkpoint resumes with the number of readers that wrote it.
    data = types.SimpleNamespace(streamed=True, readers=2, positions=None)
    restored = {"input_version": 2, "phase": 0, "stream": {}}  # a single process's
    with pytest.raises(PretrainError, match=r"ckpt-8 was written by a run of 1 worker.*has 2"):
        pretrain_data.PreparedData.restored_position(data, restored, 0, 8, 8, "ckpt-8")
    single = types.SimpleNamespace(streamed=True, readers=1, positions=None)
    with pytest.raises(PretrainError, match=r"run of 2 worker\(s\) .*Resume it with 2"):
        pretrain_data.PreparedData.restored_position(
            single, {"input_version": 2, "readers": 2}, 0, 8, 8, "ckpt-8"
        )
    stream = {"epoch": 0, "shard": 1, "example": 2, "batch": 8}
    restored = {"input_version": 2, "phase": 0, "stream": stream}
    assert pretrain_data.PreparedData.restored_position(single, restored, 0, 8, 8, "c") == stream
    assert pretrain_data.PreparedData.restored_position(single, restored, 1, 8, 8, "c") is None
