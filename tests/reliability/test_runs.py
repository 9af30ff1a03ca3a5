"""A run's output directory and its failures (issue 14): one run per --output
at a time (a lock that kill -9 cannot leave stale), only files bertzoo wrote
are ever removed, a user's file in the way and an unusable --output are
one-line errors before anything is written, NaN/Inf settings are refused and
a NaN loss during training stops the run without a checkpoint or preset of
the broken state, and a run that failed before its first checkpoint does not
block the corrected rerun.

Tests whose outcome cannot depend on the Keras backend are marked
`backend_independent`; the NaN-guard tests also run under JAX."""

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.errors import NonFiniteError, OutputError
from bertzoo.io.rundir import LOCK_FILE, RECORD_FILE, RunDirectory
from bertzoo.tokenizers.train import train_wordpiece
from bertzoo.training import finetune_loop, pretrain
from bertzoo.training.callbacks import Throughput
from bertzoo.training.checkpoint import CheckpointManager, PeriodicCheckpoint
from bertzoo.training.distill import DistillConfig, run_distillation
from bertzoo.training.finetune import FinetuneConfig, run_finetuning
from bertzoo.training.guards import NonFiniteGuard
from bertzoo.training.pretrain import PretrainConfig, run_pretraining
from recipes import distill as distill_recipe
from recipes import finetune as finetune_recipe
from recipes import pretrain as pretrain_recipe
from tests.conftest import command_main, subprocess_env

ROOT = Path(__file__).resolve().parents[2]
backend_independent = pytest.mark.backend_independent
RECIPES = {"pretrain": pretrain_recipe, "finetune": finetune_recipe, "distill": distill_recipe}

WORDS = (
    "the cat sat on a mat while my dog ran to the park and it was very good bad nice awful day film "
    "today"
).split()


def _env():
    return subprocess_env("3")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small corpus, task files, their vocabulary, a tiny backbone preset
    (the fine-tuning init and the distillation teacher) and a tiny student."""
    d = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(0)
    docs = ["\n".join(" ".join(rng.choice(WORDS, 8)) + " ." for _ in range(5)) for _ in range(20)]
    (d / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    for split, n in (("train", 32), ("validation", 16)):
        rows = [
            (" ".join(rng.choice(WORDS[:-6], 5)) + (" good" if i % 2 else " bad"), i % 2)
            for i in range(n)
        ]
        (d / f"{split}.tsv").write_text(
            "sentence\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8"
        )
    preset = d / "preset"
    train_wordpiece(
        [d / "corpus.txt", d / "train.tsv"], 200, min_frequency=1, output=d / "vocab.txt"
    )
    tokenizer = bertzoo.BertTokenizer(d / "vocab.txt", lowercase=True, strip_accents=True)
    tokenizer.save_to_preset(preset)
    backbone = bertzoo.BertBackbone(
        vocabulary_size=tokenizer.vocabulary_size,
        num_layers=1,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=32,
        max_sequence_length=32,
        dropout=0.0,
    )
    backbone.preset_info = {"tokenizer": tokenizer.preset_section()}
    backbone.save_to_preset(preset)
    student = d / "student.json"
    student.write_text(
        json.dumps(
            {
                "backbone": {
                    "num_layers": 1,
                    "num_heads": 2,
                    "hidden_dim": 8,
                    "intermediate_dim": 16,
                    "max_sequence_length": 32,
                }
            }
        )
    )
    return {
        "corpus": d / "corpus.txt",
        "vocab": d / "vocab.txt",
        "train": d / "train.tsv",
        "validation": d / "validation.tsv",
        "preset": preset,
        "student": student,
    }


# Tiny runs: the recipes' flags and the library configs.


def _args(recipe, files, output, *extra):
    output = ["--output", str(output)]
    if recipe == "pretrain":
        return [
            *output,
            "--preset",
            "bert_tiny",
            "--corpus",
            str(files["corpus"]),
            "--vocab",
            str(files["vocab"]),
            "--seq-len",
            "16",
            "--steps",
            "6",
            "--batch-size",
            "4",
            "--learning-rate",
            "1e-3",
            "--dropout",
            "0",
            "--checkpoint-every",
            "2",
            "--log-every",
            "2",
            "--no-jit-compile",
            "--verbose",
            "0",
            *extra,
        ]
    if recipe == "finetune":
        return [
            *output,
            "--task",
            "classification",
            "--glue-task",
            "sst2",
            "--train",
            str(files["train"]),
            "--validation",
            str(files["validation"]),
            "--init",
            str(files["preset"]),
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--sequence-length",
            "16",
            "--learning-rate",
            "1e-3",
            "--no-jit-compile",
            "--verbose",
            "0",
            *extra,
        ]
    return [
        *output,
        "--method",
        "tinybert-general",
        "--teacher",
        str(files["preset"]),
        "--student",
        str(files["student"]),
        "--corpus",
        str(files["corpus"]),
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--sequence-length",
        "16",
        "--learning-rate",
        "1e-3",
        "--verbose",
        "0",
        *extra,
    ]


def _pretrain_config(files, output, **changes):
    settings = dict(
        preset="bert_tiny",
        corpus=(str(files["corpus"]),),
        vocab=str(files["vocab"]),
        seq_len=(16,),
        steps=(6,),
        batch_size=4,
        learning_rate=1e-3,
        dropout=0.0,
        checkpoint_every=2,
        log_every=2,
        eval_batches=1,
        jit_compile=False,
        verbose=0,
        output=str(output),
    )
    return PretrainConfig(**{**settings, **changes})


def _finetune_config(files, output, **changes):
    settings = dict(
        task="classification",
        glue_task="sst2",
        train=str(files["train"]),
        validation=str(files["validation"]),
        init=str(files["preset"]),
        epochs=2,
        batch_size=8,
        sequence_length=16,
        learning_rate=1e-3,
        jit_compile=False,
        verbose=0,
        output=str(output),
    )
    return FinetuneConfig(**{**settings, **changes})


def _distill_config(files, output, **changes):
    settings = dict(
        method="tinybert-general",
        teacher=str(files["preset"]),
        student=str(files["student"]),
        corpus=(str(files["corpus"]),),
        steps=4,
        batch_size=4,
        sequence_length=16,
        learning_rate=1e-3,
        benchmark_batch_size=2,
        benchmark_sequence_length=16,
        verbose=0,
        output=str(output),
    )
    return DistillConfig(**{**settings, **changes})


def _error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error: "), err
    assert not any("Traceback" in line for line in err), err
    return err[-1]


def _listing(directory):
    return sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*"))


# === The lock ===


@backend_independent
def test_a_second_lock_fails_at_once_naming_the_holder(tmp_path):
    out = tmp_path / "out"
    with RunDirectory(out):
        with pytest.raises(
            OutputError, match=rf"{out} is in use by another run \(pid {os.getpid()}\)"
        ):
            RunDirectory(out).lock()
    with RunDirectory(out):  # released with the first
        assert (out / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert (out / LOCK_FILE).exists()  # never deleted


@backend_independent
@pytest.mark.parametrize("link", ["symlink", "hardlink", "dangling symlink"])
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path, link):
    """Anyone who can write a shared runs/ folder could plant the lock file
    as a link to another user's file: the lock must neither follow it nor
    empty the file behind it."""
    out, victim = tmp_path / "out", tmp_path / "someone_elses.txt"
    out.mkdir()
    victim.write_text("precious\n")
    if link == "hardlink":
        os.link(victim, out / LOCK_FILE)
    elif link == "symlink":
        (out / LOCK_FILE).symlink_to(victim)
    else:
        (out / LOCK_FILE).symlink_to(tmp_path / "not_there")
    with pytest.raises(OutputError, match=r"\.bertzoo\.lock is (a symbolic link|not a lock file)"):
        RunDirectory(out).lock()
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "not_there").exists()  # nothing created through the link


# Holds the lock in a child process without importing TensorFlow: `bertzoo`
# is stubbed as a bare package (rundir needs only bertzoo.errors).
_LOCK_HOLDER = f"""
import sys, time, types
package = types.ModuleType("bertzoo"); package.__path__ = [{str(ROOT / "bertzoo")!r}]
sys.modules["bertzoo"] = package
from bertzoo.io.rundir import RunDirectory
RunDirectory(sys.argv[1]).lock()
print("locked", flush=True)
time.sleep(600)
"""


@backend_independent
def test_kill_9_of_the_holder_leaves_no_stale_lock(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(out)], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        with pytest.raises(OutputError, match=rf"in use by another run \(pid {holder.pid}\)"):
            RunDirectory(out).lock()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunDirectory(out) as run:  # a new run proceeds
        run.claim("metrics.json")
        assert (out / LOCK_FILE).read_text().strip() == str(os.getpid())


def _wait_until_locked(proc, out, log, seconds=180):
    """Waits until `proc` holds the lock of `out` (its pid is in the lock file)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"the first run ended (status {proc.returncode}) before it was seen holding the "
                f"lock:\n{log.read_text()[-3000:]}"
            )
        lock = out / LOCK_FILE
        if lock.is_file() and lock.read_text().strip() == str(proc.pid):
            return
        time.sleep(0.05)
    pytest.fail("the first run did not take the lock")


@pytest.mark.slow
@backend_independent
@pytest.mark.parametrize("recipe", ["pretrain", "finetune"])
def test_a_second_recipe_run_on_the_same_output_exits_2_naming_the_first(tmp_path, files, recipe):
    """The first run is stopped (SIGSTOP) while it holds the lock, so the
    second surely meets it; then it goes on and finishes normally."""
    out, log = tmp_path / "out", tmp_path / "first.log"
    command = [sys.executable, str(ROOT / "recipes" / f"{recipe}.py"), *_args(recipe, files, out)]
    with open(log, "w") as f:
        first = subprocess.Popen(command, env=_env(), stdout=f, stderr=subprocess.STDOUT)
    try:
        _wait_until_locked(first, out, log)
        first.send_signal(signal.SIGSTOP)
        # The second command's main, in this process (no second interpreter).
        rc, _, err, _ = command_main(f"recipes.{recipe}", _args(recipe, files, out))
        first.send_signal(signal.SIGCONT)
        assert rc == 2, err[-3000:]
        message = err.strip().splitlines()[-1]
        assert message == (
            f"error: --output {out} is in use by another run (pid {first.pid}); wait for it "
            "to end or choose another --output."
        ), err[-3000:]
        assert first.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
            first.wait()
    assert (out / ("metrics.json")).is_file()


@backend_independent
def test_distillation_refuses_an_output_another_run_holds(tmp_path, files):
    out = tmp_path / "out"
    with RunDirectory(out):
        with pytest.raises(OutputError, match=rf"in use by another run \(pid {os.getpid()}\)"):
            run_distillation(_distill_config(files, out))
    assert _listing(out) == [LOCK_FILE]  # nothing written


# === The record: only what bertzoo wrote is removed ===


@backend_independent
def test_claim_refuses_user_files_and_remove_spares_them(tmp_path):
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "notes.txt").write_text("mine")
    (out / "data").write_text("a file where a folder goes")
    with RunDirectory(out) as run:
        run.claim("checkpoints", "logs/events.out.tfevents.*")
        with pytest.raises(
            OutputError,
            match=rf"^{out / 'data'} exists and was not written by bertzoo; move it "
            "or choose another --output.$",
        ):
            run.claim("metrics.json", "data/seq16")
        assert run.recorded == [
            "checkpoints",
            "logs/events.out.tfevents.*",
        ]  # nothing of the failed claim
        (out / "checkpoints" / "ckpt-1").mkdir(parents=True)
        (out / "logs" / "events.out.tfevents.1").write_text("bertzoo's")
        run.remove("checkpoints", "logs/events.out.tfevents.*", "logs", "data")
        assert _listing(out) == [RECORD_FILE, LOCK_FILE, "data", "logs", "logs/notes.txt"]
        assert run.owns("logs/events.out.tfevents.2") and not run.owns("logs/notes.txt")
        run.clear()
        assert run.recorded == [] and json.loads((out / RECORD_FILE).read_text())["paths"] == []
    with RunDirectory(out, chief=False) as other:  # other workers: nothing
        other.claim("data")
        assert not other.locked and other.recorded == []


@pytest.mark.slow
@backend_independent
def test_no_resume_keeps_user_files_in_data_and_logs(tmp_path, files, capsys):
    out = tmp_path / "run"
    (out / "data").mkdir(parents=True)
    corpus = out / "data" / "my_corpus.txt"  # the user keeps the corpus in output/data/
    corpus.write_bytes(files["corpus"].read_bytes())
    (out / "logs").mkdir()
    (out / "logs" / "notes.txt").write_text("my notes")
    args = _args("pretrain", files, out, "--corpus", str(corpus), "--data-mode", "static")
    assert pretrain_recipe.main(args) == 0, capsys.readouterr().err
    first_events = set((out / "logs").glob("events.out.tfevents.*"))
    assert first_events and (out / "data" / "seq16" / "pretraining_metadata.json").is_file()

    assert pretrain_recipe.main([*args, "--no-resume"]) == 0, capsys.readouterr().err
    assert corpus.read_bytes() == files["corpus"].read_bytes()
    assert (out / "logs" / "notes.txt").read_text() == "my notes"
    events = set((out / "logs").glob("events.out.tfevents.*"))
    assert events and not events & first_events  # its own logs went, new ones came
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 0 and metrics["steps"] == 6  # started over


@backend_independent
@pytest.mark.parametrize(
    "recipe, path", [("pretrain", "vocab.txt"), ("finetune", "best"), ("distill", "report.json")]
)
def test_a_user_file_where_the_run_writes_is_an_error_and_nothing_is_written(
    tmp_path, files, capsys, recipe, path
):
    out = tmp_path / "out"
    out.mkdir()
    (out / path).write_text("the user's")
    extra = ["--vocab-size", "100"] if recipe == "pretrain" else []
    args = _args(recipe, files, out, *extra)
    if recipe == "pretrain":  # no --vocab: the run trains one into output/vocab.txt
        i = args.index("--vocab")
        args = args[:i] + args[i + 2 :]
    assert RECIPES[recipe].main(args) == 2
    assert _error_line(capsys) == (
        f"error: {out / path} exists and was not written by bertzoo; move it or "
        "choose another --output."
    )
    assert _listing(out) == [LOCK_FILE, path] and (out / path).read_text() == "the user's"


# === An unusable --output ===


@backend_independent
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_an_output_that_is_a_file_is_an_error(tmp_path, files, capsys, recipe):
    out = tmp_path / "out"
    out.write_text("a file")
    assert RECIPES[recipe].main(_args(recipe, files, out)) == 2
    assert _error_line(capsys) == (
        f"error: --output {out} is a file; it must name a directory (a new one, or "
        "one a run wrote)."
    )
    assert out.read_text() == "a file"


@backend_independent
@pytest.mark.parametrize("where", ["under a file", "under /proc"])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_an_output_that_cannot_be_written_is_an_error(tmp_path, files, capsys, recipe, where):
    if where == "under a file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    else:
        out = Path("/proc") / f"bertzoo-test-{os.getpid()}" / "out"
        try:
            out.mkdir(parents=True)
        except OSError:
            pass
        else:  # this environment lets us write there
            out.rmdir()
            pytest.skip("/proc is writable here")
    assert RECIPES[recipe].main(_args(recipe, files, out)) == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: --output {out} cannot be created or written ("), line
    assert line.endswith("); choose a writable directory."), line


# === Settings ===


@backend_independent
@pytest.mark.parametrize(
    "recipe, flag",
    [
        ("pretrain", "--learning-rate"),
        ("pretrain", "--mask-rate"),
        ("finetune", "--learning-rate"),
        ("finetune", "--warmup-proportion"),
        ("distill", "--learning-rate"),
        ("distill", "--temperature"),
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_nan_and_inf_settings_are_refused_before_anything_is_written(
    tmp_path, files, capsys, recipe, flag, value
):
    out = tmp_path / "out"
    assert RECIPES[recipe].main(_args(recipe, files, out, f"{flag}={value}")) == 2
    assert _error_line(capsys) == f"error: {flag} must be a finite number, got {float(value)}."
    assert not out.exists()


@backend_independent
@pytest.mark.parametrize(
    "recipe, flag, minimum",
    [
        ("pretrain", "--seq-len", 5),
        ("finetune", "--sequence-length", 3),
        ("distill", "--sequence-length", 4),
    ],
)
def test_a_sequence_length_too_short_for_one_example_is_refused(
    tmp_path, files, capsys, recipe, flag, minimum
):
    out = tmp_path / "out"
    assert RECIPES[recipe].main(_args(recipe, files, out, flag, "2")) == 2
    line = _error_line(capsys)
    assert f"at least {minimum} tokens" in line and "[CLS]" in line, line
    assert not out.exists()


@backend_independent
def test_train_vocab_output_must_name_a_file(tmp_path, files, capsys):
    from bertzoo.cli import main

    directory = tmp_path / "vocab_dir"
    directory.mkdir()
    assert (
        main(
            ["train-vocab", str(files["corpus"]), "--output", str(directory), "--vocab-size", "100"]
        )
        == 2
    )
    assert _error_line(capsys) == (
        f"error: --output {directory} is a directory; it must name the file to write "
        f"(e.g. {directory / 'vocab.txt'})."
    )
    assert _listing(directory) == []


# === NaN / Inf during training (these depend on the backend) ===


def test_the_guard_stops_before_the_checkpoint_and_names_the_steps_of_an_execution(tmp_path):
    """With steps_per_execution=2 Keras reports every second step: the NaN
    met at step 6 (an input of step 6 is NaN) is reported as steps 5-6, and
    the checkpoint callback after the guard does not save that state."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    x = np.ones((8, 2), "float32")
    x[5] = np.nan
    manager = CheckpointManager(tmp_path / "checkpoints")
    callbacks = [NonFiniteGuard(kept="Kept."), PeriodicCheckpoint(manager, 2)]
    with pytest.raises(
        NonFiniteError,
        match=r"^Training stopped at steps 5-6: the training loss became nan\. Kept\.",
    ):
        model.fit(
            x,
            np.zeros((8, 1)),
            batch_size=1,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=callbacks,
        )
    assert [p.name for p in manager.checkpoints()] == ["ckpt-000000002", "ckpt-000000004"]


def test_the_guard_checks_the_weights_at_the_end_of_fit():
    """An update can make the weights NaN after a finite loss: the guard
    stops the run before it evaluates or publishes them."""

    class Break(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 3:
                variable = self.model.trainable_weights[0]
                variable.assign(np.full(variable.shape, np.nan, "float32"))

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(
        NonFiniteError,
        match=r"^Training stopped at step 4: the weight \S+ became NaN or infinite\.",
    ):
        model.fit(
            np.ones((4, 2)),
            np.zeros((4, 1)),
            batch_size=1,
            verbose=0,
            callbacks=[NonFiniteGuard(), Break()],
        )


def _poison_at(step):
    """A `Throughput` callback (the runs make one per `fit`) that sets a
    weight to NaN just before global step `step`."""
    count = itertools.count(1)

    class Poison(Throughput):
        def on_train_batch_begin(self, batch, logs=None):
            if next(count) == step:
                variable = self.model.trainable_weights[0]
                variable.assign(np.full(variable.shape, np.nan, "float32"))

    return Poison


@pytest.mark.slow
def test_nan_during_pretraining_keeps_the_last_checkpoint_and_publishes_nothing(
    tmp_path, files, monkeypatch
):
    out = tmp_path / "run"
    monkeypatch.setattr(pretrain, "Throughput", _poison_at(4))
    with pytest.raises(
        NonFiniteError, match=r"at step 4: the training loss became nan\. The last good checkpoint"
    ):
        run_pretraining(_pretrain_config(files, out))
    checkpoints = CheckpointManager(out / "checkpoints").checkpoints()
    assert [p.name for p in checkpoints] == ["ckpt-000000002"]
    assert json.loads((checkpoints[0] / "state.json").read_text())["step"] == 2
    assert not (out / "preset").exists() and not (out / "metrics.json").exists()


@pytest.mark.slow
def test_nan_during_finetuning_keeps_the_best_epoch_and_its_checkpoint(
    tmp_path, files, monkeypatch
):
    out = tmp_path / "run"
    monkeypatch.setattr(
        finetune_loop, "Throughput", _poison_at(5)
    )  # 32 examples / 8: step 5 is epoch 2's first
    with pytest.raises(
        NonFiniteError,
        match=r"at step 5 \(epoch 2\): the training loss became nan\. The last good "
        r"checkpoint \(epoch 1\) was kept",
    ):
        run_finetuning(_finetune_config(files, out))
    assert json.loads((out / "best" / "finetune.json").read_text())["epoch"] == 1
    # Named by global step: epoch 1's 4 steps.
    assert [p.name for p in CheckpointManager(out / "checkpoints").checkpoints()] == [
        "ckpt-000000004"
    ]
    assert not (out / "metrics.json").exists()


@pytest.mark.slow
def test_nan_during_distillation_publishes_no_student(tmp_path, files):
    out = tmp_path / "run"
    with pytest.raises(
        NonFiniteError,
        match=r"at step \d+ \(tinybert-general\): the training loss became (nan|inf)",
    ):
        run_distillation(_distill_config(files, out, learning_rate=1e30, steps=8))
    assert not (out / "student").exists() and not (out / "report.json").exists()


@pytest.mark.slow
def test_a_run_that_failed_before_its_first_checkpoint_does_not_block_the_corrected_rerun(
    tmp_path, files, capsys
):
    """--learning-rate 1e30 diverges at step 2 (exit 2, one line, no
    checkpoint, no preset); the rerun with another learning rate (other
    settings, same --output) starts over instead of being refused."""
    out = tmp_path / "run"
    args = _args("pretrain", files, out)
    i = args.index("--learning-rate")
    assert pretrain_recipe.main(args[:i] + ["--learning-rate", "1e30"] + args[i + 2 :]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: Training stopped at step 2: the training loss became"), line
    assert not (out / "preset").exists() and not list((out / "checkpoints").glob("ckpt-*"))
    assert pretrain_recipe.main(args) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert (
        metrics["steps"] == 6
        and metrics["resumed_from_step"] == 0
        and np.isfinite(metrics["final_loss"])
    )
