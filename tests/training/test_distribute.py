"""Distribution strategies (`bertzoo.training.distribute`).

The training comparisons run in subprocesses (`distribute_worker.py`):
logical CPU devices (TensorFlow) and the XLA host device count (JAX) must be
set before the framework initialises its devices, and a multi-worker run
needs one process per worker. Each runs only under its own parent backend
(CI runs the suite once per backend). Every comparison starts from the same
initial weights (checked exactly) and trains a tiny pretrainer (vocab 64,
2 layers, hidden 16, seq 16, NSP) for 4 AdamW steps of global batch 8 on the
same fixed synthetic batches; in every row each example has 3 real masked
tokens, so every replica's MLM normaliser is equal and the replicas' mean of
means is the global mean. Training moves the weights by up to 2.5e-3, so the
1e-5 tolerances are far below what any real difference would show.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from bertzoo.training.distribute import (
    STRATEGIES,
    Distribution,
    DistributionError,
    make_distribution,
)

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().with_name("distribute_worker.py")
BACKEND = keras.backend.backend()
TIMEOUT = 240  # seconds per group of subprocesses (they take 30-60 s on 2 cores)
WEIGHT_ATOL = 1e-5
LOSS_ATOL = 1e-5

tf_only = pytest.mark.skipif(BACKEND != "tensorflow", reason="runs under KERAS_BACKEND=tensorflow")
jax_only = pytest.mark.skipif(BACKEND != "jax", reason="runs under KERAS_BACKEND=jax")


# === Subprocess helpers ===


def _env(backend, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TPU_NAME", "XLA_FLAGS")}
    path = [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update(KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="2")
    env.update(extra)
    return env


def _run_workers(jobs, timeout=TIMEOUT, script=WORKER):
    """Starts every {name: (args, env, log_path)} job (`script` with args)
    at once and waits for all, killing those still running after `timeout`
    s. Returns {name: None on success, else its exit status and the tail of
    its output}."""
    procs = {}
    for name, (args, env, log) in jobs.items():
        with open(log, "w") as out:
            procs[name] = subprocess.Popen(
                [sys.executable, str(script), *args],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    deadline = time.monotonic() + timeout
    timed_out = False
    for proc in procs.values():
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for proc in procs.values():  # only the processes started here
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failures = {}
    for name, proc in procs.items():
        args, _, log = jobs[name]
        failures[name] = None
        if proc.returncode != 0:
            status = (
                f"killed after {timeout} s" if proc.returncode < 0 else f"exit {proc.returncode}"
            )
            tail = Path(log).read_text(errors="replace")[-4000:]
            failures[name] = f"--- worker {name}: {' '.join(args)} ({status}) ---\n{tail}"
    return failures


def _check(failures, *names):
    """Fails the test if any of the workers `names` failed, with the output
    of every failed worker (a multi-worker failure often shows in the peer)."""
    bad = [failures[n] for n in names if failures[n]]
    if bad:
        pytest.fail("distribute_worker failed:\n" + "\n".join(f for f in failures.values() if f))


class Run:
    """One run of the worker's output."""

    def __init__(self, data, name):
        self.paths = list(data[f"{name}/paths"])
        self.init = [data[f"{name}/init/{i}"] for i in range(len(self.paths))]
        self.final = [data[f"{name}/final/{i}"] for i in range(len(self.paths))]
        self.history = json.loads(str(data[f"{name}/history"]))
        self.info = json.loads(str(data[f"{name}/info"]))


def _load(path, *names):
    with np.load(path) as data:
        return {name: Run(data, name) for name in names}


def _max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def assert_same_training(a, b, weight_atol=WEIGHT_ATOL, loss_atol=LOSS_ATOL):
    """Same start, same updates: weights and the per-step logs agree."""
    assert a.paths == b.paths
    assert _max_diff(a.init, b.init) == 0.0  # the comparison is meaningful
    assert _max_diff(a.final, a.init) > 1e-3  # training moved the weights
    diff = _max_diff(a.final, b.final)
    assert diff < weight_atol, f"trained weights differ by {diff:.3g}"
    assert a.info["iterations"] == b.info["iterations"] == 4
    assert sorted(a.history) == sorted(b.history) == ["loss", "masked_lm_accuracy", "nsp_accuracy"]
    np.testing.assert_allclose(a.history["loss"], b.history["loss"], rtol=0, atol=loss_atol)
    for name in ("masked_lm_accuracy", "nsp_accuracy"):
        np.testing.assert_allclose(a.history[name], b.history[name], rtol=0, atol=1e-6)
    return diff


# === TensorFlow: MirroredStrategy and MultiWorkerMirroredStrategy ===


def _free_ports(n):
    """`n` loopback ports free a moment ago (another process may take one
    before a worker binds it: `_run_cluster` then retries)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _cluster_jobs(tmp, attempt):
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    jobs = {}
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        args = ["--out", str(tmp / f"worker{index}.npz"), "--run", "run=multi_worker"]
        # Each worker builds only its own rows (its input pipeline).
        args += ["--run", "per_worker=multi_worker,data=function"]
        log = tmp / f"worker{index}-{attempt}.log"
        jobs[f"worker{index}"] = (args, _env("tensorflow", TF_CONFIG=tf_config), log)
    return jobs


PORT_TAKEN = ("Could not start gRPC server", "Address already in use")


def _port_taken(failures):
    return any(f and any(p in f for p in PORT_TAKEN) for f in failures.values())


@pytest.fixture(scope="module")
def tf_runs(tmp_path_factory):
    """Three processes at once (~60 CPU-seconds in all): one with 2
    logical CPUs trains default vs mirrored, without and with global
    gradient clipping, then tries strategy 'tpu'; two are the workers of a
    multi_worker cluster on loopback."""
    if BACKEND != "tensorflow":
        pytest.skip("runs under KERAS_BACKEND=tensorflow")
    tmp = tmp_path_factory.mktemp("tf_runs")
    mirrored = [
        "--cpu-devices", "2", "--out", str(tmp / "mirrored.npz"), "--tpu-error",
        "--run", "single=default", "--run", "mirrored=mirrored",
        # (no XLA for this reference: its compilation costs ~8 s)
        "--run", "single_clip=default,clip=1.0,jit=0", "--run", "mirrored_clip=mirrored,clip=1.0",
    ]  # fmt: skip
    jobs = {"mirrored": (mirrored, _env("tensorflow"), tmp / "mirrored.log")}
    failures = _run_workers({**jobs, **_cluster_jobs(tmp, 0)})
    # A port chosen free can be taken by another process before a worker's
    # gRPC server binds it (the workers then fail to start): new ports.
    for attempt in range(1, 3):
        if not _port_taken(failures):
            break
        failures.update(_run_workers(_cluster_jobs(tmp, attempt)))
    results = {"failures": failures}
    if not results["failures"]["mirrored"]:
        results.update(
            _load(tmp / "mirrored.npz", "single", "mirrored", "single_clip", "mirrored_clip")
        )
        with np.load(tmp / "mirrored.npz") as data:
            results["tpu_error"] = json.loads(str(data["tpu_error"]))
    for index in range(2):
        if not results["failures"][f"worker{index}"]:
            runs = _load(tmp / f"worker{index}.npz", "run", "per_worker")
            results[f"worker{index}"] = runs["run"]
            results[f"per_worker{index}"] = runs["per_worker"]
    return results


@pytest.mark.slow
@tf_only
def test_mirrored_matches_default_strategy(tf_runs):
    _check(tf_runs["failures"], "mirrored")
    single, mirrored = tf_runs["single"], tf_runs["mirrored"]
    assert single.info["num_replicas"] == 1 and single.info["weight_devices"] == 1
    assert mirrored.info["num_replicas"] == 2
    assert mirrored.info["weight_devices"] == 2  # really mirrored on CPU:0 and CPU:1
    assert mirrored.info["num_workers"] == 1 and mirrored.info["is_chief"]
    # XLA compiles the default run; Keras cannot compile a 2-replica step
    # (see Distribution.resolve_jit_compile), so mirrored runs without XLA.
    assert single.info["jit_compile"] is True and mirrored.info["jit_compile"] is False
    # Measured: weights 8.4e-8, loss 2e-6 (float32 summation order, XLA vs not).
    assert_same_training(single, mirrored)


@pytest.mark.slow
@tf_only
def test_mirrored_with_global_clipnorm_matches_default_strategy(tf_runs):
    # Keras 3.15 alone clips each replica's gradient by its own norm before
    # the all-reduce (measured 1.9e-3 weight difference); bertzoo's
    # optimizers all-reduce first (measured 8.3e-8).
    _check(tf_runs["failures"], "mirrored")
    assert_same_training(tf_runs["single_clip"], tf_runs["mirrored_clip"])


@pytest.mark.slow
@tf_only
def test_tpu_without_a_tpu_fails_clearly(tf_runs):
    # tpu=None without $TPU_NAME means the TPU VM's own TPU ("local"): no
    # network, fails in ~0.2 s here. (A TPU *name* needs the GCE metadata
    # server, and an unreachable grpc:// address blocks: neither is tested.)
    _check(tf_runs["failures"], "mirrored")
    error = tf_runs["tpu_error"]
    assert error is not None and error["type"] == "DistributionError"
    assert "tpu='local'" in error["message"] and "--tpu" in error["message"]
    assert "grpc://" in error["message"]


@pytest.mark.slow
@tf_only
def test_multi_worker_matches_single_process(tf_runs):
    _check(tf_runs["failures"], "mirrored", "worker0", "worker1")
    workers = [tf_runs["worker0"], tf_runs["worker1"]]
    for index, worker in enumerate(workers):
        info = worker.info
        assert (info["num_workers"], info["worker_index"], info["num_replicas"]) == (2, index, 2)
        assert info["is_chief"] == (index == 0)  # no "chief" job: worker 0
        assert info["jit_compile"] is False  # XLA has no CPU collectives
    # The workers hold one model: measured 0.0 difference.
    assert_same_training(workers[0], workers[1], weight_atol=1e-7, loss_atol=1e-7)
    # Each worker reads the whole dataset with AutoShardPolicy.DATA and keeps
    # its half of every global batch of 8 (worker 0 examples 0-3, worker 1
    # examples 4-7 of batch 1, ...), so the cluster trains on the same global
    # batches as one process: measured 5.8e-8 (weights), 2e-6 (loss).
    assert_same_training(tf_runs["single"], workers[0])


@pytest.mark.slow
@tf_only
def test_multi_worker_per_worker_input_pipelines_match_single_process(tf_runs):
    # `strategy.distribute_datasets_from_function`: each worker builds only
    # its half of every global batch, batched per replica (what the
    # pre-training recipe's workers do with their own shards). Given to fit,
    # the cluster trains on the global batches of one process: measured
    # 1.2e-7 (weights). (The same per-worker dataset given to fit with
    # auto-sharding OFF is rebatched: measured 3.8e-3, distribute_worker.py.)
    _check(tf_runs["failures"], "mirrored", "worker0", "worker1")
    workers = [tf_runs["per_worker0"], tf_runs["per_worker1"]]
    assert_same_training(workers[0], workers[1], weight_atol=1e-7, loss_atol=1e-7)
    assert_same_training(tf_runs["single"], workers[0])


# === The pre-training recipe on two workers ===

PRETRAIN_WORKER = WORKER.with_name("pretrain_worker.py")


def _pretrain_cluster(tmp, name, config):
    """Runs `run_pretraining(PretrainConfig(**config))` as the two workers of
    a multi_worker cluster on loopback (new ports when one was taken);
    returns each worker's output (pretrain_worker.py)."""
    (tmp / f"{name}.json").write_text(json.dumps(config))
    for attempt in range(3):
        cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
        jobs = {}
        for index in range(2):
            task = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            args = [
                "--config",
                str(tmp / f"{name}.json"),
                "--out",
                str(tmp / f"{name}-{index}.json"),
            ]
            env = _env("tensorflow", TF_CONFIG=json.dumps(task))
            jobs[f"worker{index}"] = (args, env, tmp / f"{name}-{index}-{attempt}.log")
        failures = _run_workers(jobs, script=PRETRAIN_WORKER)
        if not _port_taken(failures):
            break
    _check(failures, "worker0", "worker1")
    return [json.loads((tmp / f"{name}-{i}.json").read_text()) for i in range(2)]


@pytest.mark.slow
@tf_only
def test_multi_worker_pretraining_reads_disjoint_shards_and_resumes_each_worker(tmp_path):
    import shutil

    import bertzoo
    from bertzoo.data.prepare import PrepareSettings, prepare_corpus
    from tests.data.prepared_corpus import character_tokenizer, mixed_documents, write_documents

    corpus = write_documents(tmp_path / "corpus.txt", mixed_documents(30, seed=4))
    prepared = tmp_path / "prepared"
    settings = PrepareSettings(shard_bytes=600, workers=1)  # 15 shards
    prepare_corpus([corpus], character_tokenizer(), prepared, settings)
    shards = json.loads((prepared / "prepared.json").read_text())["shards"]
    filled = [i for i, shard in enumerate(shards) if shard["documents"]]
    straight = tmp_path / "straight"
    config = dict(
        preset="bert_tiny", prepared=str(prepared), output=str(straight), strategy="multi_worker",
        seq_len=[32], steps=[8], batch_size=8, learning_rate=3e-3, dropout=0.0,
        checkpoint_every=4, keep_checkpoints=3, log_every=4, eval_batches=1, verbose=0,
    )  # fmt: skip
    workers = _pretrain_cluster(tmp_path, "straight", config)

    # Each worker streamed only its own shards (w, w + 2, ... of those with
    # documents), in batches of 4: its half of every global batch of 8.
    owned = []
    for index, worker in enumerate(workers):
        assert worker["metrics"]["steps"] == 8 and worker["metrics"]["num_replicas"] == 2
        assert {(r, n) for r, n, *_ in worker["shards"]} == {(index, 2)}
        owned.append({shard for *_, shard in worker["shards"]})
        assert owned[index] <= set(filled[index::2])
    assert owned[0] and owned[1] and not owned[0] & owned[1]
    # The chief's checkpoint says how many readers; each worker's position
    # at every checkpoint step is in a file of its own.
    state = json.loads((straight / "checkpoints" / "ckpt-000000004" / "state.json").read_text())
    assert state["readers"] == 2 and "stream" not in state
    recorded = {}
    for index in range(2):
        folder = straight / "positions" / f"reader-{index}"
        assert sorted(p.name for p in folder.iterdir()) == [
            "step-000000004.json",
            "step-000000008.json",
        ]
        recorded[index] = json.loads((folder / "step-000000004.json").read_text())["stream"]
        assert recorded[index]["batch"] == 4  # this reader's batches of 4
    # The resume below starts past the first shard: walking from the
    # stream's beginning would build the examples of the shards before.
    assert all((p["epoch"], p["shard"]) != (0, 0) for p in recorded.values()), recorded

    # Stopped after the checkpoint at step 4: the same command resumes each
    # worker at its own recorded position and ends with the weights of the
    # uninterrupted run.
    resumed = tmp_path / "resumed"
    shutil.copytree(straight, resumed)
    shutil.rmtree(resumed / "checkpoints" / "ckpt-000000008")
    again = _pretrain_cluster(tmp_path, "resumed", dict(config, output=str(resumed)))
    for index, worker in enumerate(again):
        assert worker["metrics"]["resumed_from_step"] == 4 and worker["metrics"]["steps"] == 8
        start = recorded[index]
        assert worker["shards"][0][2:4] == [start["epoch"], start["shard"]], worker["shards"]
    weights = [
        bertzoo.BertBackbone.from_preset(d / "preset").get_weights() for d in (straight, resumed)
    ]
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(*weights, strict=True))
    assert diff < WEIGHT_ATOL, diff


# === JAX: DataParallel over 2 host devices ===


@pytest.mark.slow
@jax_only
def test_jax_data_parallel_matches_single_device(tmp_path):
    args = [
        "--out", str(tmp_path / "runs.npz"),
        "--run", "single=default,clip=1.0", "--run", "parallel=data_parallel,clip=1.0",
    ]  # fmt: skip
    env = _env("jax", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    failures = _run_workers({"jax": (args, env, tmp_path / "log.txt")})
    _check(failures, "jax")
    runs = _load(tmp_path / "runs.npz", "single", "parallel")
    single, parallel = runs["single"], runs["parallel"]
    assert single.info["num_replicas"] == 1 and single.info["weight_devices"] == 1
    assert parallel.info["num_replicas"] == 2
    assert parallel.info["weight_devices"] == 2  # replicated over both host devices
    assert single.info["jit_compile"] and parallel.info["jit_compile"]
    # JAX computes the loss and clips the gradient over the whole global
    # batch, so global_clipnorm=1.0 is exact here. Measured: 3.7e-9, loss 1e-6.
    assert_same_training(single, parallel)


# === In-process: names, errors, batch sizes ===


@pytest.mark.backend_independent  # refused before the backend is asked
def test_unknown_strategy_lists_the_valid_ones():
    with pytest.raises(ValueError, match="Unknown distribution strategy 'horovod'") as info:
        make_distribution("horovod")
    for name in STRATEGIES:
        assert name in str(info.value)


def test_default_distribution():
    distribution = make_distribution()
    assert (distribution.name, distribution.backend) == ("default", BACKEND)
    assert (distribution.num_replicas, distribution.num_workers, distribution.worker_index) == (
        1,
        1,
        0,
    )
    assert distribution.is_chief
    with distribution.scope():
        layer = keras.layers.Dense(2)
        layer.build((None, 3))
    if BACKEND == "tensorflow":
        import tensorflow as tf

        assert distribution.strategy is tf.distribute.get_strategy()
    if BACKEND == "jax":
        assert distribution.strategy is None and keras.distribution.distribution() is None


def test_check_batch_size():
    distribution = Distribution("mirrored", BACKEND, num_replicas=4)
    distribution.check_batch_size(12)
    with pytest.raises(ValueError, match=r"global batch size 10 .* 4 replicas .*'mirrored'"):
        distribution.check_batch_size(10)
    for bad in (0, -8, 2.0, True):
        with pytest.raises(ValueError, match="positive integer"):
            distribution.check_batch_size(bad)
    make_distribution().check_batch_size(7)


@pytest.mark.backend_independent  # the backend is an argument here
def test_resolve_jit_compile():
    assert Distribution("default", "tensorflow").resolve_jit_compile(True) is True
    assert Distribution("mirrored", "tensorflow", num_replicas=1).resolve_jit_compile(True) is True
    assert Distribution("mirrored", "tensorflow", num_replicas=2).resolve_jit_compile(True) is False
    assert (
        Distribution("multi_worker", "tensorflow", num_replicas=2).resolve_jit_compile(True)
        is False
    )
    assert Distribution("tpu", "tensorflow", num_replicas=8).resolve_jit_compile(True) is False
    assert Distribution("data_parallel", "jax", num_replicas=8).resolve_jit_compile(True) is True
    assert Distribution("default", "tensorflow").resolve_jit_compile(False) is False
    # None (the recipes' default): XLA on GPUs only; JAX always compiles.
    import tensorflow as tf

    on_gpu = bool(tf.config.list_logical_devices("GPU"))
    assert Distribution("default", "tensorflow").resolve_jit_compile(None) is on_gpu
    assert Distribution("tpu", "tensorflow", num_replicas=8).resolve_jit_compile(None) is False
    assert Distribution("default", "jax").resolve_jit_compile(None) is True


@tf_only
def test_mirrored_in_process():
    distribution = make_distribution("mirrored")  # 1 CPU device here
    assert distribution.num_replicas == 1 and distribution.is_chief
    assert distribution.strategy.num_replicas_in_sync == 1
    data_parallel = make_distribution("data_parallel")  # TensorFlow: mirrored
    assert type(data_parallel.strategy).__name__ == "MirroredStrategy"


@tf_only
@pytest.mark.parametrize(
    "tf_config, match",
    [
        (None, "needs the TF_CONFIG environment variable"),
        ("{'cluster': ", "TF_CONFIG is not valid JSON"),
        ('{"task": {"type": "worker", "index": 0}}', "no cluster with a 'worker'"),
        ('{"cluster": {"worker": ["localhost:1"]}}', "does not name a job"),
        (
            '{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "ps", "index": 0}}',
            "does not name a job",
        ),
        (
            '{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 1}}',
            "out of range",
        ),
    ],
)
def test_multi_worker_needs_a_valid_tf_config(monkeypatch, tf_config, match):
    # Checked before the strategy is created (which would configure this
    # process's collective ops for good).
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(DistributionError, match=match) as info:
        make_distribution("multi_worker")
    assert '"cluster": {"worker"' in str(info.value)  # says what TF_CONFIG must hold
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)


@tf_only
def test_multi_worker_after_tensorflow_started_fails_clearly(monkeypatch):
    import tensorflow as tf

    tf.constant(1.0) + 1  # TensorFlow's runtime is up, as in a program that ran ops
    cluster = {"worker": ["localhost:1", "localhost:2"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    )
    # MultiWorkerMirroredStrategy raises before it changes anything.
    with pytest.raises(DistributionError, match="before any TensorFlow op runs"):
        make_distribution("multi_worker")


@jax_only
def test_jax_strategies_replace_the_global_distribution():
    first = make_distribution("data_parallel")
    devices = keras.distribution.list_devices()
    assert first.num_replicas == len(devices) and first.strategy is None
    assert keras.distribution.distribution() is first.distribution
    assert isinstance(first.distribution, keras.distribution.DataParallel)
    second = make_distribution("mirrored")  # JAX: the same as data_parallel
    assert keras.distribution.distribution() is second.distribution is not first.distribution
    make_distribution("default")
    assert keras.distribution.distribution() is None


@jax_only
def test_jax_unsupported_strategies_fail_clearly():
    with pytest.raises(
        DistributionError, match="TensorFlow only.*keras.distribution.initialize.*data_parallel"
    ):
        make_distribution("multi_worker")
    with pytest.raises(DistributionError, match="found no TPU devices"):
        make_distribution("tpu")  # no TPU (libtpu) on a CI machine
    assert keras.distribution.distribution() is None
