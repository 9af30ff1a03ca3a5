"""Pre-training records served by the tf.data service: a dispatcher and
workers on loopback in this process (a worker in another process in the
command-line test)."""

import collections
import gc
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bertzoo import data
from bertzoo.cli import main
from bertzoo.data import service
from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.data.prepared_records import RecordSettings, write_prepared_records
from bertzoo.data.shards import ExampleStream, StreamSettings, open_prepared
from tests.data.helpers import numbered_documents
from tests.data.prepared_corpus import character_tokenizer, mixed_documents, write_documents

pytestmark = pytest.mark.backend_independent

S, P, B = 32, 5, 8


@pytest.fixture(scope="module")
def examples(numbered_tokenizer):
    docs, _ = numbered_documents(30, 10)
    return data.create_examples(docs, numbered_tokenizer, seq_len=S, objective="sop", seed=0)


@pytest.fixture(scope="module")
def masker(numbered_tokenizer):
    return data.MaskedLMMasker(numbered_tokenizer, S, P, kind="whole_word")


@pytest.fixture(scope="module")
def records(examples, masker, tmp_path_factory):
    """Masked records in 4 files (16, 17, 17, 17 examples)."""
    d = tmp_path_factory.mktemp("records")
    data.write_pretraining_tfrecords(examples, d, num_shards=4, masker=masker, seed=4)
    return d


@pytest.fixture(scope="module")
def unmasked(examples, tmp_path_factory):
    d = tmp_path_factory.mktemp("unmasked")
    data.write_pretraining_tfrecords(examples, d, num_shards=3)
    return d


def start_service(num_workers):
    """-> (the dispatcher's address, the workers, a function that stops
    every server). Servers per test: a worker stops in milliseconds, but
    slowly (seconds) while jobs of earlier tests are still on it."""
    dispatcher = service.start_dispatcher(0)
    address = dispatcher._address
    workers = [service.start_worker(address, 0, host="localhost") for _ in range(num_workers)]

    def stop():
        gc.collect()  # iterators release their jobs while the servers still answer
        for server in [*workers, dispatcher]:
            server.stop()

    return address, workers, stop


@pytest.fixture
def two_workers():
    address, workers, stop = start_service(2)
    yield address, workers
    stop()


@pytest.fixture
def one_worker():
    address, _, stop = start_service(1)
    yield address
    stop()


def rows(batches):
    """The multiset of examples: token ids, mask positions, masked-LM
    labels and weights, sentence label, one tuple per example."""
    out = collections.Counter()
    for x, y, w in batches:
        table = np.concatenate(
            [x["token_ids"], x["mask_positions"], y["mlm"], w["mlm"], y["sentence"][:, None]], 1
        )
        out.update(tuple(r) for r in table.tolist())
    return out


def row_list(batches):
    return [r for x, _, _ in batches for r in np.asarray(x["token_ids"]).tolist()]


def local(records, **kw):
    return list(data.read_pretraining_dataset(records, B, S, drop_remainder=False, **kw))


def test_two_workers_serve_one_epoch_as_the_local_reader_reads_it(records, two_workers):
    address, workers = two_workers
    ds = service.records_dataset_via_service(
        records, B, S, None, address, seed=3, repeat=False, drop_remainder=False
    )
    it = ds.as_numpy_iterator()
    served = [next(it)]
    assert [w._num_tasks() for w in workers] == [1, 1]  # the job runs on both workers
    served += list(it)
    expected = rows(local(records, shuffle=False))
    assert sum(expected.values()) == 67
    assert rows(served) == expected  # every example once, masks as written


def test_endless_stream_has_the_local_readers_static_shapes(records, two_workers):
    address, _ = two_workers
    ds = service.records_dataset_via_service(records, B, S, None, address, seed=3)
    assert ds.element_spec == data.read_pretraining_dataset(records, B, S).element_spec
    it = iter(ds)
    batches = [next(it) for _ in range(20)]  # 160 examples: into the third epoch
    assert {tuple(x["token_ids"].shape) for x, _, _ in batches} == {(B, S)}
    assert set(rows(batches)) <= set(rows(local(records, shuffle=False)))


def test_hosts_sharing_a_job_receive_disjoint_batches(records, two_workers):
    address, _ = two_workers

    def host():
        return iter(
            service.records_dataset_via_service(
                records, B, S, None, address, job_name="run-1", repeat=False, drop_remainder=False
            )
        )

    first, second = host(), host()
    got = {0: [], 1: []}
    live = {0: first, 1: second}
    while live:
        for k, it in list(live.items()):
            try:
                got[k].append(next(it))
            except StopIteration:
                del live[k]
    # One epoch between them (alone, each would receive a whole epoch); which host
    # receives how much depends on timing.
    assert rows(got[0]) + rows(got[1]) == rows(local(records, shuffle=False))


def test_one_worker_in_file_order_is_the_local_read(records, one_worker):
    def served(**kw):
        ds = service.records_dataset_via_service(
            records, B, S, None, one_worker, repeat=False, drop_remainder=False, **kw
        )
        return list(ds.as_numpy_iterator())

    exact = served(shuffle=False, cycle_length=1)
    expected = local(records, shuffle=False)
    assert len(exact) == len(expected)
    for a, b in zip(exact, expected, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    # Shuffled: a function of the seed.
    assert row_list(served(seed=1)) == row_list(served(seed=1)) != row_list(served(seed=2))


def test_start_batch_resumes_at_the_file_of_that_position(records, one_worker):
    ordered = row_list(local(records, shuffle=False))
    # Batch 13 of the stream: record 104 = unit floor(104 * 4 / 67) = 6, file 2 of epoch 1.
    ds = service.records_dataset_via_service(
        records, B, S, None, one_worker, shuffle=False, cycle_length=1, start_batch=13
    )
    got = row_list(ds.take(5).as_numpy_iterator())
    assert got == ordered[33:] + ordered[:6]  # files 2 and 3 (33-66), then epoch 2
    with pytest.raises(ValueError, match="start_batch must be >= 0"):
        service.records_dataset_via_service(records, B, S, None, one_worker, start_batch=-1)


def test_dynamic_masking_on_workers(unmasked, examples, masker, two_workers, one_worker):
    def served(address, **kw):
        ds = service.records_dataset_via_service(
            unmasked, B, S, masker, address, repeat=False, drop_remainder=False, **kw
        )
        return list(ds.as_numpy_iterator())

    batches = served(two_workers[0], seed=7)
    originals, positions = collections.Counter(), set()
    for x, y, w in batches:
        restored = x["token_ids"].copy()
        for r, c in zip(*np.nonzero(w["mlm"]), strict=True):
            restored[r, x["mask_positions"][r, c]] = y["mlm"][r, c]
        assert (w["mlm"].sum(1) > 0).all()  # every example has masked-LM targets
        originals.update(tuple(r) for r in restored.tolist())
        positions.update(tuple(r) for r in x["mask_positions"].tolist())
    assert originals == collections.Counter(tuple(r) for r in examples.token_ids.tolist())
    assert len(positions) > len(examples) // 2  # not one mask pattern repeated per worker
    # The masks are a function of the seed and the batches, not of the worker.
    one = served(one_worker, seed=7)
    assert rows(one) == rows(served(one_worker, seed=7))
    with pytest.raises(data.PretrainingDataError, match="pass masker"):
        service.records_dataset_via_service(unmasked, B, S, None, one_worker)


@pytest.mark.parametrize(
    "address, expected",
    [
        ("grpc://dispatcher-0:5050", "grpc://dispatcher-0:5050"),
        ("10.0.0.2:5050", "grpc://10.0.0.2:5050"),
        ("localhost:1", "grpc://localhost:1"),
    ],
)
def test_addresses(address, expected):
    assert service.parse_address(address) == expected


@pytest.mark.parametrize(
    "address",
    ["dispatcher", "http://d:5050", "d:0", "d:65536", ":5050", "grpc://d", "d:50x", "", None],
)
def test_bad_addresses_are_refused(address):
    with pytest.raises(service.DataServiceError, match="is not grpc://HOST:PORT or HOST:PORT"):
        service.parse_address(address)


def test_bad_settings_are_refused(records):
    ds = tf.data.Dataset.range(3)
    with pytest.raises(service.DataServiceError, match="processing_mode must be one of"):
        service.distribute(ds, "d:5050", processing_mode="dynamic")
    with pytest.raises(service.DataServiceError, match="job_name must be"):
        service.distribute(ds, "d:5050", job_name="")
    with pytest.raises(service.DataServiceError, match="needs a work_dir"):
        service.start_dispatcher(0, fault_tolerant=True)
    with pytest.raises(service.DataServiceError, match="port must be an int in 0-65535"):
        service.start_worker("d:5050", port=-1)
    with pytest.raises(data.PretrainingDataError, match="seq_len=64 was requested"):
        service.records_dataset_via_service(records, B, 64, None, "d:5050")


def test_datasets_that_call_python_are_refused(one_worker):
    def numbers():
        yield from range(3)

    generated = tf.data.Dataset.from_generator(
        numbers, output_signature=tf.TensorSpec([], tf.int64)
    )
    mapped = tf.data.Dataset.range(3).map(lambda v: tf.py_function(lambda t: t, [v], tf.int64))
    for ds in (generated, mapped):
        with pytest.raises(service.DataServiceError, match="prepare-records"):
            service.distribute(ds, one_worker)
    assert service.python_ops(tf.data.Dataset.range(3).map(lambda v: v + 1)) == []


def test_the_stream_over_prepared_shards_is_refused_and_its_records_served(one_worker, tmp_path):
    tokenizer = character_tokenizer()
    corpus = write_documents(tmp_path / "c.txt", mixed_documents(20, seed=3))
    prepare_corpus([corpus], tokenizer, tmp_path / "p", PrepareSettings(workers=1))
    settings = StreamSettings(batch_size=4, seq_len=48, objective="sop")
    stream = ExampleStream(open_prepared(tmp_path / "p"), tokenizer, _masker(tokenizer), settings)
    with pytest.raises(service.DataServiceError, match=r"calls Python \(GeneratorDataset"):
        service.distribute(stream.dataset(), one_worker)
    # What the error says to do: records from the same corpus, served.
    out = tmp_path / "records"
    meta = write_prepared_records(
        open_prepared(tmp_path / "p"), out, tokenizer, _masker(tokenizer), RecordSettings(48)
    )
    ds = service.records_dataset_via_service(out, 4, 48, None, one_worker, repeat=False)
    assert sum(len(x["token_ids"]) for x, _, _ in ds.as_numpy_iterator()) <= meta["num_examples"]
    assert service.python_ops(ds) == []


def _masker(tokenizer):
    return data.MaskedLMMasker(tokenizer, 48, 7)


def test_cli_refuses_bad_input(capsys):
    exposed = "--bind", "0.0.0.0"
    for argv, message in [
        (["worker", "--dispatcher", "http://d:5050", *exposed], "is not grpc://HOST:PORT"),
        (["worker", "--dispatcher", "d:5050", "--port", "70000", *exposed], "port must be an int"),
        (["dispatcher", "--port", "0", "--fault-tolerant", *exposed], "needs a work_dir"),
        # Private by default: TensorFlow's server listens on every interface
        # and runs any graph a client sends, so it starts only when told it may.
        (["dispatcher", "--port", "0"], "cannot listen on loopback only. Start it with --bind"),
        (["worker", "--dispatcher", "d:5050"], "runs any dataset graph a client sends"),
        (["dispatcher", "--port", "0", "--bind", "127.0.0.1"], "cannot listen on one address"),
    ]:
        assert main(["data-service", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["data-service", "worker"])  # --dispatcher is required
    assert "the following arguments are required: --dispatcher" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_servers_in_other_processes_serve_records(records):
    def start(*argv):
        return subprocess.Popen(
            [sys.executable, "-m", "bertzoo", "data-service", *argv, "--bind", "0.0.0.0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    processes = [start("dispatcher", "--port", "0")]
    try:
        line = processes[0].stdout.readline()
        assert "dispatcher listening on port" in line and "of every interface" in line, line
        warning = processes[0].stderr.readline()
        assert warning.startswith("warning: the tf.data service runs any dataset graph"), warning
        assert "behind a firewall" in warning
        port = line.split("port ")[1].split()[0]
        processes.append(
            start("worker", "--dispatcher", f"localhost:{port}", "--host", "localhost")
        )
        assert "worker of grpc://localhost:" in processes[1].stdout.readline()
        ds = service.records_dataset_via_service(
            records, B, S, None, f"grpc://localhost:{port}", repeat=False, drop_remainder=False
        )
        served = rows(ds.as_numpy_iterator())
        gc.collect()  # the iterator releases its job while the dispatcher still answers
        assert served == rows(local(records, shuffle=False))
        for p in reversed(processes):  # Ctrl-C stops a server: exit status 0
            p.send_signal(signal.SIGINT)
            assert p.wait(timeout=120) == 0  # a busy 2-core machine: tens of seconds
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
