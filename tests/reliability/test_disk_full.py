"""A full disk (issue 30): ENOSPC while a checkpoint, a preset or a file is
written is a one-line `DiskFullError` with nothing lost (the previous version
kept, the partial copy removed) and a clean exit: no "Exception ignored"
tracebacks from h5py, no segfault at exit.

On a real full file system where the test can mount a small tmpfs (in a
private mount namespace: `unshare -m` as root, else a user namespace); with
ENOSPC simulated in a patched write otherwise (both run where they can)."""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.errors import BertzooError, DiskFullError
from bertzoo.io import manifest as manifest_lib
from bertzoo.io.diskfull import close_files_written_under, is_disk_full
from bertzoo.io.publish import atomic_write_text, publish_directory
from bertzoo.training import finetune_loop, make_optimizer
from bertzoo.training.checkpoint import CheckpointManager
from recipes import finetune as finetune_recipe
from tests.conftest import subprocess_env
from tests.reliability.test_preemption import files  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.backend_independent


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def _leftovers(directory):
    """Hidden staging entries bertzoo left in `directory`."""
    return sorted(p.name for p in Path(directory).iterdir() if p.name.startswith("."))


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile(optimizer=make_optimizer("adamw", 1e-2, total_steps=20), loss="mse")
    model.fit(np.ones((4, 4)), np.ones((4, 3)), verbose=0)
    return model


# === Simulated: an OSError(ENOSPC) from a patched write ===


def test_a_full_disk_during_a_checkpoint_keeps_the_earlier_one(tmp_path, monkeypatch):
    manager, model = CheckpointManager(tmp_path, keep=2), _model()
    manager.save(model, 1, {"position": 1})
    monkeypatch.setattr(model, "save_weights", _enospc)
    with pytest.raises(DiskFullError) as caught:
        manager.save(model, 2, {"position": 2})
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, BertzooError)
    assert message.startswith(
        f"No space left on the device while writing checkpoint {tmp_path / 'ckpt-000000002'} ("
    )
    assert message.endswith(
        "free there): the earlier checkpoint ckpt-000000001 is kept, and the partial copy was "
        "removed. Free some space and rerun the same command to resume."
    )
    assert caught.value.errno == errno.ENOSPC  # an OSError too
    assert [p.name for p in manager.checkpoints()] == ["ckpt-000000001"]
    assert _leftovers(tmp_path) == []
    manifest_lib.verify_directory(tmp_path / "ckpt-000000001")
    assert manager.restore(_model())["position"] == 1


def test_a_full_disk_during_a_publication_keeps_the_target(tmp_path):
    target = tmp_path / "preset"
    with publish_directory(target, "preset") as staging:
        (staging / "config.json").write_text('{"v": 1}')
    with pytest.raises(DiskFullError, match=r"^No space left on the device while writing the "):
        with publish_directory(target, "preset") as staging:
            (staging / "config.json").write_text('{"v": 2}')
            _enospc()
    assert json.loads((target / "config.json").read_text()) == {"v": 1}
    manifest_lib.verify_directory(target)
    assert _leftovers(tmp_path) == []


def test_a_full_disk_during_a_file_write_keeps_the_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    atomic_write_text(path, "old\n")
    monkeypatch.setattr(Path, "write_text", _enospc)
    with pytest.raises(DiskFullError) as caught:
        atomic_write_text(path, "new\n")
    assert str(caught.value).startswith(f"No space left on the device while writing {path} (")
    assert f"{path} is unchanged, and the partial copy was removed" in str(caught.value)
    monkeypatch.undo()
    assert path.read_text() == "old\n" and _leftovers(tmp_path) == []


def test_other_errors_pass_unchanged(tmp_path, monkeypatch):
    manager, model = CheckpointManager(tmp_path), _model()
    monkeypatch.setattr(
        model, "save_weights", lambda *a: (_ for _ in ()).throw(PermissionError("denied"))
    )
    with pytest.raises(PermissionError, match="denied"):
        manager.save(model, 1)
    assert _leftovers(tmp_path) == []


def test_disk_full_is_recognised_in_library_errors():
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(
        RuntimeError("Can't decrement id ref count (file write failed: errno = 28,")
    )
    try:
        try:
            _enospc()
        except OSError as e:
            raise ValueError("wrapped") from e
    except ValueError as e:
        assert is_disk_full(e)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


@pytest.mark.slow
def test_finetuning_that_fills_the_disk_at_its_best_epoch_exits_2_with_one_line(
    files,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    """best/ of epoch 1 is published; epoch 2's publication hits a full
    disk: one line, exit 2, best/ still epoch 1's and loadable."""
    calls = []
    real = finetune_loop.atomic_write_text

    def write(path, text):
        calls.append(path)
        if len(calls) == 2:
            _enospc()
        return real(path, text)

    monkeypatch.setattr(finetune_loop, "atomic_write_text", write)
    monkeypatch.setattr(finetune_loop, "evaluate", lambda *a: {"accuracy": 0.5 + len(calls)})
    out = tmp_path / "run"
    args = [
        "--task", "classification", "--glue-task", "sst2", "--train", str(files / "train.tsv"),
        "--validation", str(files / "validation.tsv"), "--init", str(files / "preset"),
        "--epochs", "2", "--batch-size", "8", "--sequence-length", "16", "--no-jit-compile",
        "--verbose", "0", "--output", str(out),
    ]  # fmt: skip
    assert finetune_recipe.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: No space left on the device while writing the preset {out}")
    assert err[-1].endswith(f"{out / 'best'} is unchanged, and the partial copy was removed. "
                            "Free some space and rerun.")  # fmt: skip
    assert not any("Traceback" in line for line in err)
    assert json.loads((out / "best" / "finetune.json").read_text())["epoch"] == 1
    bertzoo.models.task_model_from_preset(out / "best")
    assert [name for name in _leftovers(out) if name.startswith(".best")] == []


# === Real: a small tmpfs ===


def _namespace():
    """The command prefix that gives a private mount namespace where tmpfs
    can be mounted, or a reason why there is none."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return None, "needs Linux and unshare(1) to mount a private tmpfs"
    tried = []
    for prefix in (["unshare", "-m"], ["unshare", "-r", "-m"]):
        probe = subprocess.run(
            [*prefix, "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=1M tmpfs $d"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return prefix, None
        tried.append(f"{' '.join(prefix)}: {probe.stderr.strip()[:80]}")
    return None, "cannot mount a tmpfs here (" + "; ".join(tried) + ")"


# A tmpfs of 16 MB holds two checkpoints of bert_tiny (6 MB each, with the
# optimizer state) beside the run's other files: the third fills it.
_SCRIPT = """
set -u
mount -t tmpfs -o size=16M tmpfs "$MNT"
"$PYTHON" "$RECIPE" --output "$MNT/run" "$@" > "$REPORT/first.out" 2> "$REPORT/first.err"
echo $? > "$REPORT/first.rc"
ls -A "$MNT/run/checkpoints" > "$REPORT/checkpoints.txt"
mount -o remount,size=64M tmpfs "$MNT"
"$PYTHON" "$RECIPE" --output "$MNT/run" "$@" > "$REPORT/second.out" 2> "$REPORT/second.err"
echo $? > "$REPORT/second.rc"
cp "$MNT/run/metrics.json" "$REPORT/" 2>/dev/null || true
"""


@pytest.mark.slow
def test_pretraining_on_a_full_tmpfs_stops_with_one_line_and_resumes(files, tmp_path):  # noqa: F811
    prefix, reason = _namespace()
    if prefix is None:
        pytest.skip(reason)
    report, mnt = tmp_path / "report", tmp_path / "mnt"
    report.mkdir()
    mnt.mkdir()
    args = [
        "--preset", "bert_tiny", "--corpus", str(files / "corpus.txt"), "--vocab",
        str(files / "vocab.txt"), "--seq-len", "16", "--steps", "30", "--batch-size", "4",
        "--learning-rate", "1e-3", "--dropout", "0", "--checkpoint-every", "10",
        "--log-every", "10", "--eval-batches", "1", "--no-jit-compile", "--verbose", "0",
    ]  # fmt: skip
    env = {
        **subprocess_env("3"),
        "MNT": str(mnt),
        "REPORT": str(report),
        "RECIPE": str(ROOT / "recipes" / "pretrain.py"),
        "PYTHON": sys.executable,
    }
    done = subprocess.run(
        [*prefix, "sh", "-c", _SCRIPT, "sh", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    err = (report / "first.err").read_text()
    lines = [line for line in err.splitlines() if not line.startswith(("I0000", "W0000", "WARN"))]
    rc = int((report / "first.rc").read_text())
    assert rc == 2, err  # before: 139 (a segfault), after a raw h5py OSError
    assert "Exception ignored" not in err and "Traceback" not in err, err
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [lines[-1]], err
    assert errors[0].startswith(
        f"error: No space left on the device while writing checkpoint "
        f"{mnt / 'run' / 'checkpoints' / 'ckpt-000000030'} ("
    ), errors[0]
    assert (
        "the earlier checkpoint ckpt-000000020 is kept, and the partial copy was removed"
        in (errors[0])
    )
    # Nothing partial left; the two earlier checkpoints complete.
    assert (report / "checkpoints.txt").read_text().split() == [
        "ckpt-000000010",
        "ckpt-000000020",
    ]
    # With space again, the rerun resumes at step 20 and finishes.
    assert int((report / "second.rc").read_text()) == 0, (report / "second.err").read_text()
    metrics = json.loads((report / "metrics.json").read_text())
    assert metrics["steps"] == 30 and metrics["resumed_from_step"] == 20


@pytest.mark.slow
def test_an_hdf5_file_left_open_by_a_full_disk_is_closed_cleanly(tmp_path):
    """What the guard does for h5py (in a subprocess on a 1 MB tmpfs):
    without it the process prints "Exception ignored" and segfaults at
    exit."""
    prefix, reason = _namespace()
    if prefix is None:
        pytest.skip(reason)
    code = (
        "import os, shutil, sys, keras\n"
        "from bertzoo.io.diskfull import close_files_written_under\n"
        "inputs = keras.Input((1000,))\n"
        "model = keras.Model(inputs, keras.layers.Dense(1000)(inputs))\n"
        "staging = os.path.join(sys.argv[1], 'staging')\n"
        "os.makedirs(staging)\n"
        "try:\n"
        "    model.save_weights(os.path.join(staging, 'model.weights.h5'))\n"
        "except OSError as e:\n"
        "    print('closed', close_files_written_under(staging), flush=True)\n"
        "    shutil.rmtree(staging)\n"
    )
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(
        [
            *prefix,
            "sh",
            "-c",
            f'mount -t tmpfs -o size=1M tmpfs "{mnt}" && exec "{sys.executable}" -c "$0" "{mnt}"',
            code,
        ],  # fmt: skip
        env=subprocess_env("3"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "closed 1" in done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]


def test_closing_ignores_files_outside_the_staging_folder(tmp_path):
    import h5py

    path = tmp_path / "kept.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.ones(3)
        assert close_files_written_under(tmp_path / "staging") == 0
        assert f.id.valid
    os.remove(path)
