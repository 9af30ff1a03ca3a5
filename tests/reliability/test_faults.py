"""Fault injection: kill -9 at random moments of every kind of write, and
bytes overwritten at many offsets of every kind of file bertzoo writes.

Each test prints its tally (run with -s to see it): N of N kills left a
loadable directory, N of N corruptions detected. CI runs KILL_TRIALS and
OFFSETS at their CI size; `--full` at the size docs/files.md quotes.
"""

import importlib.util
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.errors import IntegrityError
from bertzoo.io import manifest as manifest_lib
from bertzoo.training.checkpoint import CheckpointManager
from tests.conftest import size

pytestmark = pytest.mark.backend_independent

HERE = Path(__file__).resolve().parent
WORKER = HERE / "kill_worker.py"
# kill -9 per kind of write (two chains of half each): 20 under `--full`, 4
# in CI, which still fail on the bugs they are for (planted, 2026-12-07): a
# preset written straight into its target, not staged and swapped in (2 of
# 4 kills safe; 9 of 20 at full size), complete checkpoints removed as a
# killed run's leftovers (1 of 4; 6 of 20). The export chain's kills land in
# each worker's first export (with two workers at once none completes in
# the 6 s window), so it finds a bug only while that export writes: an
# export written in place failed 2 of 3 CI-size runs, neither full-size run.
KILL_TRIALS = size(ci=4, full=20)
# Overwrite positions per file, first and last byte included: 21 under
# `--full`, 5 in CI, which still fail on the bugs they are for (planted,
# 2026-12-07): a SHA-256 of each file's first 4 KiB only (all three tests
# fail; export: 18 of 30 detected, 68 of 126 at full size), a cache of
# verified files blind to a rewrite of the same size (the preset and
# checkpoint tests fail at either size).
OFFSETS = size(ci=5, full=21)


def _worker_module():
    spec = importlib.util.spec_from_file_location("kill_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def worker():
    return _worker_module()


def _weights(model):
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in model.weights]


def _which(loaded, references):
    """ "A" or "B" when `loaded` holds exactly that reference's weights."""
    got = _weights(loaded)
    for name, reference in references.items():
        expected = _weights(reference)
        if len(got) == len(expected) and all(
            g.shape == e.shape and np.array_equal(g, e) for g, e in zip(got, expected)
        ):
            return name
    return None


def _kill_chain(kind, target, trials, window, seed, check, outcomes):
    """`trials` times: start the worker on `target`, kill -9 it after a
    random delay, then `check(target, saved_any)` -> "safe" or a reason."""
    rng = random.Random(seed)
    saved_any = False
    for _ in range(trials):
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), kind, str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"worker did not start: {line!r}"
            time.sleep(rng.uniform(0.0, window))
        finally:
            proc.send_signal(signal.SIGKILL)
            rest = proc.communicate()[0]
        saved_any = saved_any or "saved" in rest
        # A kill inside a publication leaves its staging folder (removed by
        # the next writer): count them, to show the kills landed mid-write.
        mid_write = bool(_leftovers(target.parent, target.name)) or any(
            p.name.startswith(".") for p in (target.iterdir() if target.is_dir() else ())
        )
        outcomes.append((check(target, saved_any), mid_write))


def _run_kills(kind, tmp_path, window, check):
    """Two chains of trials on two targets at once (the machine has two
    cores); returns the outcomes and how many kills landed mid-write, which
    must be at least half of them (measured on 2 cores at full size: preset
    20 of 20, checkpoint 16 of 20, export 19 of 20)."""
    outcomes, threads = [], []
    for chain in range(2):
        target = tmp_path / f"chain{chain}" / "target"
        target.parent.mkdir(parents=True)
        n = KILL_TRIALS // 2 + (KILL_TRIALS % 2 if chain == 0 else 0)
        t = threading.Thread(
            target=_kill_chain, args=(kind, target, n, window, chain, check, outcomes)
        )
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    mid = sum(m for _, m in outcomes)
    # The kills must test interrupted writes, not only the gaps between them.
    assert mid >= len(outcomes) / 2, f"only {mid} of {len(outcomes)} kills landed mid-write"
    return [o for o, _ in outcomes], mid


def _leftovers(directory, name):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(f".{name}."))


@pytest.mark.slow
def test_kill_during_save_to_preset_never_loses_both_models(tmp_path, worker):
    references = {name: worker.classifier(name) for name in worker.SIZES}
    lock = threading.Lock()

    def check(target, saved_any):
        if not target.exists():
            return "safe" if not saved_any else "lost: no preset after a completed save"
        try:
            with lock:
                loaded = bertzoo.BertClassifier.from_preset(target)
                tokenizer = bertzoo.BertTokenizer.from_preset(target)
        except Exception as e:  # any failure to load is a loss
            return f"lost: {type(e).__name__}: {e}"
        if tokenizer.vocabulary_size != 61:
            return "lost: vocabulary"
        return "safe" if _which(loaded, references) else "lost: weights of neither model"

    outcomes, mid = _run_kills("preset", tmp_path, window=1.5, check=check)
    safe = outcomes.count("safe")
    # The next save removes what killed saves left behind.
    for target in [tmp_path / f"chain{c}" / "target" for c in range(2)]:
        references["A"].save_to_preset(target, tokenizer=bertzoo.BertTokenizer(worker.VOCAB))
        assert _leftovers(target.parent, target.name) == []
    print(
        f"\nsave_to_preset: {safe} of {len(outcomes)} kills safe ({mid} landed mid-save); "
        "leftovers removed by the next save"
    )
    assert safe == len(outcomes) == KILL_TRIALS, [o for o in outcomes if o != "safe"]


@pytest.mark.slow
def test_kill_during_checkpoint_writes_keeps_a_loadable_checkpoint(tmp_path, worker):
    pretrainers = {}
    for name in worker.SIZES:
        keras.utils.set_random_seed(1 if name == "A" else 2)
        p = bertzoo.BertPretrainer(worker.classifier(name).backbone, objective="nsp")
        p.compile(optimizer=bertzoo.training.make_optimizer("adamw", 1e-3, total_steps=10))
        pretrainers[name] = p
    references = {n: p for n, p in pretrainers.items()}
    lock = threading.Lock()

    def check(target, saved_any):
        manager = CheckpointManager(target, keep=2)
        if manager.latest() is None:
            return "safe" if not saved_any else "lost: no checkpoint after a completed save"
        try:
            with lock:
                import json

                name = json.loads((manager.latest() / "state.json").read_text())["model"]
                model = pretrainers[name]
                manager.restore(model)
                found = _which(model, references)
        except Exception as e:
            return f"lost: {type(e).__name__}: {e}"
        return "safe" if found == name else "lost: weights differ from the recorded model"

    # Restoring overwrites the reference weights: keep copies to compare with.
    originals = {n: _weights(p) for n, p in pretrainers.items()}

    def restore_references():
        for n, p in pretrainers.items():
            for v, value in zip(p.weights, originals[n]):
                v.assign(value)

    def checked(target, saved_any):
        result = check(target, saved_any)
        with lock:
            restore_references()
        return result

    outcomes, mid = _run_kills("checkpoint", tmp_path, window=1.5, check=checked)
    safe = outcomes.count("safe")
    print(f"\ncheckpoint writes: {safe} of {len(outcomes)} kills safe ({mid} landed mid-write)")
    for c in range(2):
        target = tmp_path / f"chain{c}" / "target"
        CheckpointManager(target, keep=2).save(pretrainers["A"], 10_000)
        assert not [p for p in target.iterdir() if p.name.startswith(".")]
    assert safe == len(outcomes) == KILL_TRIALS, [o for o in outcomes if o != "safe"]


@pytest.mark.slow
def test_kill_during_export_leaves_a_complete_export(tmp_path):
    def check(target, saved_any):
        if not target.exists():
            return "safe" if not saved_any else "lost: no export after a completed one"
        try:
            manifest = manifest_lib.verify_directory(target)
        except IntegrityError as e:
            return f"lost: {e}"
        if manifest is None or manifest["kind"] != "export":
            return "lost: no export manifest"
        on_disk = set(manifest_lib.list_files(target))
        if on_disk != set(manifest["files"]):
            return f"lost: files of two exports mixed: {sorted(on_disk ^ set(manifest['files']))}"
        return "safe"

    outcomes, mid = _run_kills("export", tmp_path, window=6.0, check=check)
    safe = outcomes.count("safe")
    print(f"\nexport: {safe} of {len(outcomes)} kills safe ({mid} landed mid-export)")
    # The last export loads and answers.
    import tensorflow as tf

    target = tmp_path / "chain0" / "target"
    if target.exists():
        serve = tf.saved_model.load(str(target / "saved_model")).signatures["serving_default"]
        assert serve(text=tf.constant(["w1 w2"]))["probabilities"].shape == (1, 3)
    assert safe == len(outcomes) == KILL_TRIALS, [o for o in outcomes if o != "safe"]


# === Overwritten bytes ===


def _damage(path, offset):
    """XORs up to 4 KiB at `offset`: every byte changes."""
    data = bytearray(path.read_bytes())
    end = min(len(data), offset + 4096)
    data[offset:end] = bytes(b ^ 0x5A for b in data[offset:end])
    path.write_bytes(bytes(data))


def _offsets(size):
    return sorted({round(i * (size - 1) / (OFFSETS - 1)) for i in range(OFFSETS)})


def _corruptions(directory, names, attempt):
    """For each file and offset: damage, `attempt()` -> detected?, repair."""
    tally = {}
    for name in names:
        path = directory / name
        original = path.read_bytes()
        hits = []
        for offset in _offsets(len(original)):
            _damage(path, offset)
            try:
                hits.append(attempt(name))
            finally:
                path.write_bytes(original)
        tally[name] = (sum(hits), len(hits))
    return tally


def _report(what, tally):
    detected = sum(d for d, _ in tally.values())
    total = sum(n for _, n in tally.values())
    detail = ", ".join(f"{k} {d}/{n}" for k, (d, n) in tally.items())
    print(f"\n{what}: {detected} of {total} corruptions detected ({detail})")
    return detected, total


def test_damaged_preset_files_are_an_error_naming_the_file(tmp_path, worker):
    model = worker.classifier("A")
    model.backbone.head_tensors = {"cls.predictions.bias": np.arange(61, dtype="float32")}
    model.save_to_preset(tmp_path / "p", tokenizer=bertzoo.BertTokenizer(worker.VOCAB))
    names = [
        "config.json",
        "model.weights.h5",
        "heads.safetensors",
        "task_head.safetensors",
        "vocab.txt",
    ]
    assert set(names) | {manifest_lib.MANIFEST_FILE} == {p.name for p in (tmp_path / "p").iterdir()}

    def attempt(name):
        for load in (bertzoo.BertClassifier.from_preset, bertzoo.BertTokenizer.from_preset):
            try:
                load(tmp_path / "p")
            except IntegrityError as e:
                if name not in str(e):
                    return False
            else:
                return False
        return True

    detected, total = _report("preset files", _corruptions(tmp_path / "p", names, attempt))
    assert detected == total == 5 * OFFSETS  # 105 of 105 at full size, as docs/files.md says
    # Repaired, it loads again; and the opt-out skips the check.
    assert _which(bertzoo.BertClassifier.from_preset(tmp_path / "p"), {"A": model}) == "A"


def test_damaged_checkpoint_falls_back_to_the_one_before(tmp_path, worker):
    model = bertzoo.BertPretrainer(worker.classifier("A").backbone, objective="nsp")
    model.compile(optimizer=bertzoo.training.make_optimizer("adamw", 1e-3, total_steps=10))
    manager = CheckpointManager(tmp_path / "run", keep=2)
    first = _weights(model)
    manager.save(model, 1)
    for v in model.weights:
        v.assign(v.value + 1.0)
    newest = manager.save(model, 2)
    names = ["model.weights.h5", "state.json", "rng_state.json"]

    def attempt(name):
        with pytest.warns(UserWarning, match=f"{name}.*falling back") as _:
            state = manager.restore(model)
        restored = _weights(model)
        return state["step"] == 1 and all(np.array_equal(a, b) for a, b in zip(restored, first))

    detected, total = _report("checkpoint files", _corruptions(newest, names, attempt))
    assert detected == total == 3 * OFFSETS  # 63 of 63 at full size


def test_damaged_export_is_found_by_verify(tmp_path, worker):
    source = tmp_path / "task"
    worker.classifier("A").save_to_preset(source, tokenizer=bertzoo.BertTokenizer(worker.VOCAB))
    bertzoo.export_serving(source, tmp_path / "export", sequence_length=16)
    names = manifest_lib.list_files(tmp_path / "export")
    assert "model.keras" in names and "saved_model/saved_model.pb" in names

    from bertzoo import cli

    def attempt(name):
        try:
            manifest_lib.verify_directory(tmp_path / "export")
        except IntegrityError as e:
            return name in str(e) and cli.main(["verify", str(tmp_path / "export")]) == 2
        return False

    detected, total = _report("export files", _corruptions(tmp_path / "export", names, attempt))
    assert detected == total == len(names) * OFFSETS == 6 * OFFSETS  # 126 of 126 at full size
    assert cli.main(["verify", str(tmp_path / "export")]) == 0
