"""Training checkpoints: resuming equals not stopping, atomic writes, damaged
and foreign checkpoints, and the periodic callback."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo import data
from bertzoo.training import make_optimizer
from bertzoo.training.checkpoint import (
    CheckpointManager,
    PeriodicCheckpoint,
    TrainingCheckpointError,
)

SEQ, PREDICTIONS, BATCH = 16, 3, 4
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(56)]  # 61 tokens
# Same-step results of an uninterrupted and a resumed run: the same float32
# computations in the same order, so equal up to rounding (measured: 0).
ATOL = 1e-6


@pytest.fixture(scope="module")
def stream_factory():
    """start_batch -> the endless, deterministic training stream."""
    tokenizer = bertzoo.BertTokenizer(VOCAB)
    rng = np.random.default_rng(0)
    docs = [
        [rng.integers(5, 61, rng.integers(3, 8)).astype(np.int32) for _ in range(6)]
        for _ in range(10)
    ]
    examples = data.create_examples(docs, tokenizer, seq_len=SEQ, objective="nsp", seed=0)
    masker = data.MaskedLMMasker(tokenizer, SEQ, PREDICTIONS)
    return lambda start_batch=0: data.make_pretraining_dataset(
        examples, BATCH, masker, seed=3, repeat=True, start_batch=start_batch
    )


def build(seed, dropout=0.0, optimizer=None, total_steps=8, **overrides):
    """A fresh tiny pre-trainer, as a new process would build it."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    config = dict(
        vocabulary_size=61,
        num_layers=1,
        num_heads=2,
        hidden_dim=10,
        intermediate_dim=26,
        max_sequence_length=SEQ,
        dropout=dropout,
    )
    model = bertzoo.BertPretrainer(bertzoo.BertBackbone(**{**config, **overrides}), objective="nsp")
    options = dict(name="adamw", learning_rate=1e-2, warmup_steps=2)
    options.update(optimizer or {})
    model.compile(optimizer=make_optimizer(total_steps=total_steps, **options))
    return model


def weights_of(model):
    return [np.array(v) for v in model.weights]


def max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) if x.size else 0.0 for x, y in zip(a, b))


def learning_rate(model):
    return float(np.asarray(model.optimizer.learning_rate))


RESUME_CASES = {  # optimizer options, N, dropout
    "adamw": (dict(name="adamw"), 4, 0.0),
    # LAMB accumulating 2 micro-batches, stopped after 3: mid-accumulation,
    # the accumulators come back.
    "lamb_accumulation": (dict(name="lamb", gradient_accumulation_steps=2), 3, 0.0),
    # The loss-scale state and the dropout SeedGenerator states come back:
    # the resumed run draws the dropout masks the uninterrupted one drew.
    "adamw_loss_scaling_dropout": (dict(name="adamw", loss_scaling=True), 4, 0.2),
}


@pytest.mark.parametrize(
    "case",
    [
        "lamb_accumulation",
        # 10-25 s each, mostly compiling two fresh models (dropout's RNG is
        # slow to compile under JAX).
        pytest.param("adamw", marks=pytest.mark.slow),
        pytest.param("adamw_loss_scaling_dropout", marks=pytest.mark.slow),
    ],
)
def test_resume_equals_uninterrupted_training(case, stream_factory, tmp_path):
    """2N steps straight, checkpointing at N, against a fresh model restored
    from that checkpoint and trained N more steps from batch N."""
    optimizer, n, dropout = RESUME_CASES[case]
    total = 2 * n
    schedule_steps = 4 * n  # the learning rate is still > 0 at the end
    manager = CheckpointManager(tmp_path / "ckpt", keep=5)
    data_position = lambda step: {"data_batch": step}

    straight = build(0, dropout, optimizer, total_steps=schedule_steps)
    straight.fit(
        stream_factory(),
        epochs=1,
        steps_per_epoch=total,
        verbose=0,
        callbacks=[PeriodicCheckpoint(manager, n, state_fn=data_position)],
    )
    expected = weights_of(straight)
    expected_optimizer = [np.array(v) for v in straight.optimizer.variables]
    assert [p.name for p in manager.checkpoints()] == [f"ckpt-{n:09d}", f"ckpt-{total:09d}"]

    # A new process: another seed (other initial weights and RNG states);
    # everything comes from the checkpoint.
    resumed = build(1, dropout, optimizer, total_steps=schedule_steps)
    state = manager.restore(resumed, manager.checkpoints()[0])
    assert state == {"step": n, "format_version": 1, "data_batch": n}
    halfway, halfway_lr = weights_of(resumed), learning_rate(resumed)
    callback = PeriodicCheckpoint(manager, n, start_step=n, state_fn=data_position)
    resumed.fit(
        stream_factory(state["data_batch"]),
        epochs=1,
        steps_per_epoch=n,
        verbose=0,
        callbacks=[callback],
    )

    difference = max_difference(weights_of(resumed), expected)
    print(f"{case}: max |resumed - uninterrupted| = {difference:.3g} (weights)")
    assert difference <= ATOL
    assert (
        max_difference([np.array(v) for v in resumed.optimizer.variables], expected_optimizer)
        <= ATOL
    )
    assert int(resumed.optimizer.iterations) == int(straight.optimizer.iterations) > 0
    # The schedule went on from the restored step.
    assert learning_rate(resumed) == pytest.approx(learning_rate(straight), rel=1e-6)
    assert learning_rate(resumed) > 0 and abs(learning_rate(resumed) - halfway_lr) > 1e-4
    assert max_difference(halfway, expected) > 1e-3  # the second half trained
    assert callback.last_saved_step == total

    # The control: the same restore, continued at the wrong data position
    # (the stream's start), ends elsewhere.
    manager.restore(resumed, manager.checkpoints()[0])
    resumed.fit(stream_factory(0), epochs=1, steps_per_epoch=n, verbose=0)
    assert max_difference(weights_of(resumed), expected) > 1e-3


# === Atomicity, damage, pruning ===


def test_save_layout_pruning_and_leftovers(tmp_path):
    model = build(0)
    manager = CheckpointManager(tmp_path / "run", keep=2)
    assert manager.checkpoints() == [] and manager.latest() is None
    with pytest.raises(FileNotFoundError, match="No checkpoint in .*run"):
        manager.restore(model)
    path = manager.save(model, 1, {"phase": 0, "data_batch": 1})
    assert sorted(os.listdir(path)) == [
        "bertzoo-manifest.json",
        "model.weights.h5",
        "rng_state.json",
        "state.json",
    ]
    assert json.loads((path / "state.json").read_text()) == {
        "step": 1,
        "format_version": 1,
        "phase": 0,
        "data_batch": 1,
    }
    # What a kill -9 mid-save or mid-prune leaves: hidden directories, never
    # listed, removed by the next save.
    for leftover in (".ckpt-000000005.tmp-1234abcd", ".ckpt-000000000.del-1234abcd"):
        (tmp_path / "run" / leftover).mkdir()
        (tmp_path / "run" / leftover / "model.weights.h5").write_bytes(b"partial")
    assert manager.checkpoints() == [path]
    for step in (2, 3, 4):
        manager.save(model, step)
    assert sorted(os.listdir(tmp_path / "run")) == ["ckpt-000000003", "ckpt-000000004"]
    assert manager.latest().name == "ckpt-000000004"
    # Saving a step again replaces it.
    manager.save(model, 4, {"again": True})
    assert json.loads((manager.latest() / "state.json").read_text())["again"] is True
    assert sorted(os.listdir(tmp_path / "run")) == ["ckpt-000000003", "ckpt-000000004"]
    with pytest.raises(ValueError, match="may not set"):
        manager.save(model, 5, {"step": 3})
    with pytest.raises(TypeError):
        manager.save(model, 5, {"bad": object()})
    assert sorted(os.listdir(tmp_path / "run")) == ["ckpt-000000003", "ckpt-000000004"]
    with pytest.raises(ValueError, match="keep"):
        CheckpointManager(tmp_path, keep=0)


def test_a_failed_save_keeps_the_previous_checkpoints(tmp_path, monkeypatch):
    model = build(0)
    manager = CheckpointManager(tmp_path, keep=1)
    manager.save(model, 1)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(model), "save_weights", crash)
    with pytest.raises(OSError, match="disk full"):
        manager.save(model, 2)
    assert os.listdir(tmp_path) == ["ckpt-000000001"]


def test_damaged_newest_checkpoint_falls_back_with_a_warning(tmp_path):
    model = build(0)
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(model, 1)
    saved = weights_of(model)
    for v in model.trainable_variables:
        v.assign(v + 1.0)
    manager.save(model, 2)
    weights = tmp_path / "ckpt-000000002" / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated by hand

    fresh = build(5)
    with pytest.warns(UserWarning, match="ckpt-000000002 cannot be read.*falling back"):
        state = manager.restore(fresh)
    assert state["step"] == 1 and manager.restored_path.name == "ckpt-000000001"
    assert max_difference(weights_of(fresh), saved) == 0.0

    # A damaged state.json counts as damage too; with nothing readable left
    # the error names the directory.
    (tmp_path / "ckpt-000000001" / "state.json").write_text('{"step": ')
    with (
        pytest.warns(UserWarning),
        pytest.raises(TrainingCheckpointError, match=f"No readable checkpoint in {tmp_path}"),
    ):
        manager.restore(fresh)
    with pytest.raises(TrainingCheckpointError, match="ckpt-000000002"):
        manager.restore(fresh, tmp_path / "ckpt-000000002")  # an explicit path: no fallback


def test_other_architecture_or_optimizer_is_a_clear_error(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(build(0), 3)
    with pytest.raises(
        TrainingCheckpointError,
        match=r"model: .*only in the checkpoint: \(10, 26\), \(26,\), \(26, 10\); only in the model: \(10, 30\), \(30,\), \(30, 10\)",
    ):
        manager.restore(build(0, intermediate_dim=30))
    with pytest.raises(
        TrainingCheckpointError,
        match=r"optimizer: 61 tensors in the checkpoint, 91 in the model's optimizer.*only in the checkpoint: none",
    ):
        manager.restore(build(0, optimizer=dict(gradient_accumulation_steps=2)))
    uncompiled = bertzoo.BertPretrainer(
        bertzoo.BertBackbone(
            vocabulary_size=61,
            num_layers=1,
            num_heads=2,
            hidden_dim=10,
            intermediate_dim=26,
            max_sequence_length=SEQ,
        )
    )
    with pytest.raises(ValueError, match="Compile the model"):
        manager.restore(uncompiled)


# === PeriodicCheckpoint ===


def dense_model():
    """Callback tests need any trainable model; this one traces fast."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), loss="mse", steps_per_execution=2)
    return model


def dense_data():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(4, 2)).astype("float32")
    return tf.data.Dataset.from_tensors((x, y)).repeat()


class Recorder:
    def __init__(self):
        self.saved = []

    def save(self, model, step, state=None):
        self.saved.append((step, state))


@pytest.mark.parametrize(
    "start_step, epochs, steps_per_epoch, expected",
    [
        (0, 1, 10, [4, 6, 10]),  # reports at 2, 4, ..., 10: multiples 3, 6, 9 crossed at 4, 6, 10
        (5, 1, 10, [7, 9, 13, 15]),  # reports at 7, 9, ..., 15
        (0, 2, 4, [4, 6, 8]),  # reports at 2, 4 | 6, 8: steps count on over epochs; 8 at the end
    ],
)
def test_periodic_checkpoint_with_steps_per_execution(
    start_step, epochs, steps_per_epoch, expected
):
    model = dense_model()
    recorder = Recorder()
    callback = PeriodicCheckpoint(
        recorder, 3, start_step=start_step, state_fn=lambda step: {"data_batch": step - start_step}
    )
    model.fit(
        dense_data(),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        verbose=0,
        callbacks=[callback],
    )
    assert [step for step, _ in recorder.saved] == expected
    assert [state["data_batch"] for _, state in recorder.saved] == [
        s - start_step for s in expected
    ]
    assert callback.last_saved_step == expected[-1] == callback.step


@pytest.mark.parametrize("enabled", [True, False])
def test_on_save_runs_at_every_checkpoint_step_on_every_worker(enabled):
    # A multi-worker run's workers record their data positions at the
    # chief's checkpoint steps, each step once, before the chief writes.
    model = dense_model()
    events = []

    class Manager:
        def save(self, model, step, state=None):
            events.append(("checkpoint", step))

    callback = PeriodicCheckpoint(
        Manager(), 3, enabled=enabled, on_save=lambda step: events.append(("on_save", step))
    )
    model.fit(dense_data(), epochs=1, steps_per_epoch=10, verbose=0, callbacks=[callback])
    steps = [4, 6, 10]  # steps_per_execution=2: reports at 2, 4, ..., 10
    if enabled:
        assert events == [e for s in steps for e in (("on_save", s), ("checkpoint", s))]
    else:
        assert events == [("on_save", s) for s in steps] and callback.last_saved_step is None


def test_periodic_checkpoint_saves_current_weights_and_disabled_writes_nothing(tmp_path):
    model = dense_model()
    manager = CheckpointManager(tmp_path / "chief", keep=5)
    model.fit(
        dense_data(),
        epochs=1,
        steps_per_epoch=8,
        verbose=0,
        callbacks=[PeriodicCheckpoint(manager, 4)],
    )
    assert [p.name for p in manager.checkpoints()] == ["ckpt-000000004", "ckpt-000000008"]
    final = weights_of(model)
    fresh = dense_model()
    manager.restore(fresh, manager.checkpoints()[0])
    assert max_difference(weights_of(fresh), final) > 1e-3
    manager.restore(fresh)
    assert max_difference(weights_of(fresh), final) == 0.0  # synced state (JAX), not stale
    assert int(fresh.optimizer.iterations) == 8

    worker = CheckpointManager(tmp_path / "worker")
    callback = PeriodicCheckpoint(
        worker, 1, enabled=False, state_fn=lambda step: pytest.fail("called")
    )
    model.fit(dense_data(), epochs=1, steps_per_epoch=4, verbose=0, callbacks=[callback])
    assert (
        not (tmp_path / "worker").exists()
        and callback.last_saved_step is None
        and callback.step == 4
    )
    with pytest.raises(ValueError, match="every_steps"):
        PeriodicCheckpoint(manager, 0)


# === kill -9 ===

_SAVER = """
import sys
import keras
import numpy as np
from bertzoo.training.checkpoint import CheckpointManager

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512), keras.layers.Dense(256)])
model.compile(optimizer=keras.optimizers.AdamW(1e-3), loss="mse")
manager = CheckpointManager(sys.argv[1], keep=2)
start = manager.restore(model)["step"] + 1 if manager.latest() else 1
for step in range(start, 10**6):
    for v in model.trainable_variables:
        v.assign(np.full(v.shape, step, "float32"))  # checkpoint `step` holds the value `step`
    manager.save(model, step, {"value": step})
    print(step, flush=True)
"""


@pytest.mark.slow
def test_kill_at_any_moment_leaves_restorable_checkpoints(tmp_path):
    """A process saving checkpoints back to back is SIGKILLed at arbitrary
    moments, several times: every listed checkpoint is complete and
    consistent, restore needs no fallback, and the saver resumes."""
    directory = tmp_path / "ckpt"
    rng = np.random.default_rng(0)
    env = {**os.environ, "PYTHONPATH": str(Path(bertzoo.__file__).resolve().parents[1])}
    leftovers, newest = 0, 0
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(directory)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        proc.stdout.readline()  # the first save is done
        time.sleep(float(rng.uniform(0.05, 1.0)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        leftovers += any(p.name.startswith(".") for p in directory.iterdir())
        manager = CheckpointManager(directory, keep=2)
        # keep + 1 when the kill fell between publishing the newest and
        # pruning the oldest (the next save prunes it; checked below).
        assert 1 <= len(manager.checkpoints()) <= 3
        assert (
            manager.latest() is not None and int(manager.latest().name[5:]) > newest
        )  # resumed, went on
        newest = int(manager.latest().name[5:])
        for path in manager.checkpoints():
            model = keras.Sequential(
                [keras.Input((256,)), keras.layers.Dense(512), keras.layers.Dense(256)]
            )
            model.compile(optimizer=keras.optimizers.AdamW(1e-3), loss="mse")
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no fallback needed
                state = manager.restore(model, path)
            assert state["value"] == state["step"] == int(path.name.split("-")[1])
            assert all(np.all(np.array(v) == state["step"]) for v in model.trainable_variables)
    print(f"kills that left a temporary directory behind: {leftovers} of 4")
    # The next save prunes to `keep` and removes what kills left behind.
    manager = CheckpointManager(directory, keep=2)
    manager.save(model, newest + 1, {"value": newest + 1})
    assert [int(p.name[5:]) for p in manager.checkpoints()] == [newest, newest + 1]
    assert not any(p.name.startswith(".") for p in directory.iterdir())
