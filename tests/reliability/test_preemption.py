"""Preemption (issue 30): SIGTERM, what spot and TPU VMs send, or SIGINT
(Ctrl-C) during training saves the step under way and stops the run with one
line and exit status 128 + the signal; the rerun resumes at that step and
ends with the weights of an uninterrupted run.

Each chain test prints its tally (run with -s to see it): N of N signals
saved the last completed step and resumed right after it. TRIALS signals
per recipe: 3 in CI, 10 under `--full`."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.tokenizers.train import train_wordpiece
from bertzoo.training import make_optimizer
from bertzoo.training.preemption import (
    Interrupted,
    Preempted,
    StopAtStep,
    StopSignals,
    interruptible,
)
from bertzoo.training.runs import recipe_exit, run_recipe
from tests.conftest import size, subprocess_env

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORKER = HERE / "preempt_worker.py"
# SIGTERMs per recipe (each a restart of the run): 10 under `--full`, 3 in CI,
# the fewest that keep trial 3's second SIGTERM during the save (`double`).
# At 3 the chains still fail on the bugs they were written for (planted,
# 2026-12-07): a stop that names the step before the one under way, a
# second signal that interrupts the save, pre-training's stop checkpoint
# not written, a mid-epoch resume that skips a batch (fine-tuning,
# distillation). CI's stops all fall in the first epoch (the seeded steps
# 3, 4, 5; 1, 3, 4 for distillation); the full size's reach the second: a
# resume that drops the finished epochs' history failed only there
# (tests/test_finetune_recipe.py catches that one in CI).
TRIALS = size(ci=3, full=10)
TOLERANCE = 1e-5

WORDS = (
    "the cat sat on a mat while my dog ran to the park and it was very good bad nice awful day film "
    "today"
).split()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small corpus, task files, their vocabulary and a tiny backbone
    preset (the fine-tuning init)."""
    d = tmp_path_factory.mktemp("preemption")
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
    train_wordpiece(
        [d / "corpus.txt", d / "train.tsv"], 200, min_frequency=1, output=d / "vocab.txt"
    )
    tokenizer = bertzoo.BertTokenizer(d / "vocab.txt", lowercase=True, strip_accents=True)
    tokenizer.save_to_preset(d / "preset")
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
    backbone.save_to_preset(d / "preset")
    return d


# Tiny runs with dropout 0: 40 pre-training steps (checkpoints every 10),
# 3 fine-tuning epochs of 16 steps.
STEPS = {"pretrain": 40, "finetune": 48}


def _args(recipe, d):
    if recipe == "pretrain":
        return [
            "--preset", "bert_tiny", "--corpus", str(d / "corpus.txt"), "--vocab",
            str(d / "vocab.txt"), "--seq-len", "16", "--steps", str(STEPS["pretrain"]),
            "--batch-size", "4", "--learning-rate", "1e-3", "--dropout", "0",
            "--checkpoint-every", "10", "--log-every", "1", "--eval-batches", "1",
            "--no-jit-compile", "--verbose", "2",
        ]  # fmt: skip
    return [
        "--task", "classification", "--glue-task", "sst2", "--train", str(d / "train.tsv"),
        "--validation", str(d / "validation.tsv"), "--init", str(d / "preset"), "--epochs", "3",
        "--batch-size", "2", "--sequence-length", "16", "--learning-rate", "1e-3",
        "--dropout", "0", "--no-jit-compile", "--verbose", "0",
    ]  # fmt: skip


def _final_weights(output, step):
    """{dataset path: array} of the model and optimizer variables in the
    checkpoint of `step`."""
    found = {}
    path = Path(output) / "checkpoints" / f"ckpt-{step:09d}" / "model.weights.h5"
    with h5py.File(path, "r") as f:
        f.visititems(
            lambda name, obj: (
                found.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
            )
        )
    return found


def _noise(line):
    """TensorFlow's C++ start-up lines (absl), which no flag silences."""
    return line.startswith(("I0000", "W0000", "WARNING: All log messages"))


class _Chain:
    """Reads the worker's lines and sends SIGTERM at random steps: 1 to 3
    steps after the last stop, `TRIALS` times."""

    def __init__(self, proc, rng, trials=TRIALS):
        self.proc, self.rng, self.most = proc, rng, trials
        self.target = rng.randint(1, 3)
        self.sent = 0
        self.lines = []
        self.trials = []  # per trial: {"sent_at", "trained", "stopped", "rc", "resumed", "lines"}

    def run(self, deadline):
        trial = None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError("the chain took too long:\n" + "\n".join(self.lines[-30:]))
            if re.fullmatch(r"trial \d+", line):
                trial = {"sent_at": None, "trained": [], "stopped": None, "lines": []}
                self.trials.append(trial)
                continue
            if trial is None:
                continue
            trial["lines"].append(line)
            if m := re.fullmatch(r"trial \d+ rc (\d+)", line):
                trial["rc"] = int(m.group(1))
            elif m := re.fullmatch(r"trained step (\d+)", line):
                step = int(m.group(1))
                trial["trained"].append(step)
                if trial["sent_at"] is None and self.sent < self.most and step >= self.target:
                    trial["sent_at"] = step
                    self.sent += 1
                    os.kill(self.proc.pid, signal.SIGTERM)
            elif m := re.search(r"Stopped by (\w+) after (step|epoch) (\d+)", line):
                # A signal that lands during an epoch's validation stops the
                # run "after epoch E": its checkpoint names the step.
                saved = re.search(r"ckpt-(\d+)", line)
                step = int(m.group(3)) if m.group(2) == "step" or not saved else int(saved.group(1))
                trial["stopped"] = (m.group(1), step, line)
                self.target = step + self.rng.randint(1, 3)
            elif m := re.search(r"Resumed from \S*ckpt-(\d+)", line):
                trial["resumed"] = int(m.group(1))
        return self.proc.wait()


def _chain(recipe, files, tmp_path, double=(3,), trials=TRIALS, args=None):
    """Runs the worker: an uninterrupted reference run, then the chain of
    trials with a SIGTERM at `TRIALS` random steps (a second one during the
    save of trials `double`); returns (chain, the output, the reference)."""
    spec = {
        "recipe": recipe,
        "args": args or _args(recipe, files),
        "output": str(tmp_path / "chain"),
        "reference": str(tmp_path / "reference"),
        "double": list(double),
        "trials": 3 * trials,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "spec.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env("3"),
        cwd=tmp_path,
    )
    chain = _Chain(proc, random.Random(f"{recipe}-30"), trials)
    rc = chain.run(time.monotonic() + 400)
    log = "\n".join(chain.lines[-40:])
    assert rc == 0, log
    assert "reference rc 0" in chain.lines, log
    assert not any("Traceback" in line or "Exception ignored" in line for line in chain.lines), log
    return chain, tmp_path / "chain", tmp_path / "reference"


def _check_trials(chain, recipe, trials=TRIALS):
    """Every signalled trial: exit status 143, one stop line naming the last
    step it trained (at or after the step the signal was sent at), and the
    next trial resumed from that step's checkpoint and trained the step
    after it. Returns how many did."""
    good, signalled = 0, [t for t in chain.trials if t["sent_at"] is not None]
    for trial, following in zip(chain.trials, chain.trials[1:]):
        if trial["sent_at"] is None:
            continue
        log = "\n".join(trial["lines"][-15:] + following["lines"][:15])
        assert trial["rc"] == 143, log
        stops = [line for line in trial["lines"] if "Stopped by" in line]
        assert len(stops) == 1 and trial["stopped"] and trial["stopped"][0] == "SIGTERM", log
        step = trial["stopped"][1]
        assert step == trial["trained"][-1] >= trial["sent_at"], log
        assert f"ckpt-{step:09d} written" in trial["stopped"][2], log
        assert following.get("resumed") == step, log
        if following["trained"]:  # (nothing to train: stopped after the last step)
            assert following["trained"][0] == step + 1, log
        good += 1
    assert chain.trials[-1]["rc"] == 0
    print(
        f"\n{recipe}: {good} of {len(signalled)} SIGTERMs saved the last completed step and "
        "resumed right after it"
    )
    assert len(signalled) >= trials, [t["sent_at"] for t in chain.trials]
    return good


def _check_same_weights(output, reference, total, recipe):
    got, expected = _final_weights(output, total), _final_weights(reference, total)
    assert sorted(got) == sorted(expected)
    diff = max(float(np.max(np.abs(got[k] - expected[k]))) for k in got)
    print(f"{recipe}: final weights and optimizer state vs uninterrupted: max |diff| {diff:.3g}")
    assert diff <= TOLERANCE


@pytest.mark.slow
@pytest.mark.backend_independent
def test_sigterm_at_random_steps_of_pretraining_loses_nothing(files, tmp_path):
    chain, output, reference = _chain("pretrain", files, tmp_path)
    _check_trials(chain, "pretrain")
    _check_same_weights(output, reference, STEPS["pretrain"], "pretrain")
    # The checkpoints of preemptions record the stream's position, as the
    # periodic ones do.
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["steps"] == STEPS["pretrain"]
    double = chain.trials[2]
    assert any(line.startswith("second SIGTERM while writing") for line in double["lines"])


@pytest.mark.slow
@pytest.mark.backend_independent
def test_sigterm_at_random_steps_of_finetuning_loses_nothing(files, tmp_path):
    chain, output, reference = _chain("finetune", files, tmp_path)
    _check_trials(chain, "finetune")
    _check_same_weights(output, reference, STEPS["finetune"], "finetune")
    # Mid-epoch stops: the epoch's loss and validation are those of the
    # uninterrupted run.
    got = json.loads((output / "metrics.json").read_text())["history"]
    expected = json.loads((reference / "metrics.json").read_text())["history"]
    for a, b in zip(got, expected, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5), (got, expected)
    assert any(
        re.search(r"batch \d+ of 16\)", t["stopped"][2]) for t in chain.trials if t["stopped"]
    )


@pytest.fixture(scope="module")
def distill_args(files):
    """Task distillation flags: a classifier teacher fine-tuned on the task
    files, a smaller student, 2 + 2 epochs of 14 steps, no early stop."""
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    teacher = files / "teacher"
    run_finetuning(
        FinetuneConfig(
            task="classification",
            train=str(files / "train.tsv"),
            validation=str(files / "validation.tsv"),
            text_columns=("sentence",),
            label_column="label",
            init=str(files / "preset"),
            output=str(teacher),
            learning_rate=3e-3,
            epochs=2,
            batch_size=4,
            sequence_length=16,
            dropout=0.0,
            verbose=0,
        )
    )
    student = files / "student.json"
    shape = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, dropout=0.0)
    student.write_text(json.dumps({"backbone": {**shape, "max_sequence_length": 32}}))
    return [
        "--method", "tinybert-task", "--teacher", str(teacher / "best"), "--student",
        str(student), "--train", str(files / "train.tsv"), "--validation",
        str(files / "validation.tsv"), "--text-column", "sentence", "--label-column", "label",
        "--batch-size", "2", "--sequence-length", "16", "--learning-rate", "1e-3",
        "--epochs", "2", "--prediction-epochs", "2", "--patience", "5", "--augment", "0",
        "--benchmark-batch-size", "2", "--benchmark-sequence-length", "16", "--verbose", "0",
    ]  # fmt: skip


@pytest.mark.backend_independent
@pytest.mark.slow
@pytest.mark.parametrize("trials", [pytest.param(TRIALS, id=f"{TRIALS}-trials")])
def test_sigterm_at_random_steps_of_task_distillation_loses_nothing(
    files, distill_args, tmp_path, trials
):
    """Task distillation saves the step under way (mid-epoch, either stage)
    and the rerun trains the rest of the epoch on the same batches: the
    student, its optimizer state and the epochs' history are those of an
    uninterrupted run."""
    args, double = list(distill_args), (3,)
    if trials < TRIALS:  # the quick version: one epoch per stage, one signal at a time
        args[args.index("--epochs") + 1] = args[args.index("--prediction-epochs") + 1] = "1"
        double = ()
    chain, output, reference = _chain(
        "distill", files, tmp_path, double=double, trials=trials, args=args
    )
    _check_trials(chain, "distill", trials)
    expected = json.loads((reference / "report.json").read_text())
    got = json.loads((output / "report.json").read_text())
    total = sum(s["steps_per_epoch"] * s["epochs"] for s in expected["stages"].values())
    _check_same_weights(output, reference, total, "distill")
    for stage in ("intermediate", "prediction"):
        for a, b in zip(got["history"][stage], expected["history"][stage], strict=True):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-5), (stage, a, b)
    assert got["student_metric"] == pytest.approx(expected["student_metric"], abs=1e-6)
    stops = [t["stopped"][2] for t in chain.trials if t["stopped"]]
    where = r"Stage 2[ab]: .*, (epoch \d, batch \d+ of \d+|end of epoch \d)\)"
    assert all(re.search(where, s) for s in stops), stops


# === One line, exit status ===


@pytest.mark.slow
@pytest.mark.backend_independent
@pytest.mark.parametrize("recipe", ["pretrain", "finetune"])
def test_ctrl_c_prints_one_line_and_exits_130(files, tmp_path, recipe):
    """Ctrl-C (SIGINT to the process group) during training: one line on
    stderr, no traceback, exit status 130, and a checkpoint of the step."""
    args = _args(recipe, files)
    if recipe == "finetune":
        args += ["--verbose", "2"]  # a log line per epoch
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "recipes" / f"{recipe}.py"), *args, "--output", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env("3"),
        start_new_session=True,
    )
    lines, sent = [], threading.Event()
    timer = threading.Timer(300, proc.kill)
    timer.start()
    try:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            started = "step 5/" in line if recipe == "pretrain" else "epoch 1/3:" in line
            if started and not sent.is_set():
                sent.set()
                os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait()
    finally:
        timer.cancel()
    text = "\n".join(lines)
    assert sent.is_set(), text
    assert rc == 130, text
    assert not any(w in text for w in ("Traceback", "Exception ignored", "KeyboardInterrupt")), text
    stops = [line for line in lines if "Stopped by" in line]
    assert len(stops) == 1 and lines[-1] == stops[0], text
    assert re.fullmatch(
        r"Stopped by SIGINT after (step|epoch) \d+ of \d+.*: checkpoint \S+ckpt-\d+ written; "
        r"rerun the same command to resume there\.",
        stops[0],
    ), stops[0]
    others = [line for line in lines if line != stops[0] and not _noise(line)]
    assert all(re.match(r"(INFO|WARNING) bertzoo", line) for line in others), others


# === The pieces, in-process ===


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer=make_optimizer("adamw", 1e-2, total_steps=20), loss="mse")
    return model


class _SignalAt(keras.callbacks.Callback):
    """Sends this process `signum` (`times` times) during step `step`."""

    def __init__(self, step, signum=signal.SIGTERM, times=1):
        super().__init__()
        self.step, self.signum, self.times = step, signum, times

    def on_train_batch_begin(self, batch, logs=None):
        if batch + 1 == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)


@pytest.mark.backend_independent
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_the_step_under_way_and_stops(signum):
    x, y = np.ones((40, 4), "float32"), np.ones((40, 1), "float32")
    saved = []

    def save(model, step, logs):
        os.kill(os.getpid(), signum)  # a second signal during the save changes nothing
        saved.append(step)
        return f"checkpoint {step} written"

    before = signal.getsignal(signum)
    with StopSignals() as signals:
        stop = StopAtStep(signals, 100, 110, save)
        with pytest.raises(Preempted) as caught:
            _model().fit(
                x, y, batch_size=4, epochs=1, verbose=0, callbacks=[_SignalAt(3, signum), stop]
            )
    assert signal.getsignal(signum) is before  # restored
    assert saved == [103] and signals.count == 2
    name = signal.Signals(signum).name
    assert str(caught.value) == (
        f"Stopped by {name} after step 103 of 110: checkpoint 103 written; "
        "rerun the same command to resume there."
    )
    assert caught.value.exit_status == 128 + signum


@pytest.mark.backend_independent
def test_a_signal_outside_training_is_one_line_and_later_ones_are_ignored(capsys):
    """Outside the training loops (reading data, publishing), the first
    signal stops the run where it is; the next ones do not interrupt the
    clean-up."""
    cleaned = []

    def run(config):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # during the clean-up: ignored
            cleaned.append(True)

    class Parser:
        def parse_args(self, argv):
            return None

    import bertzoo.training.runs as runs

    real, runs.config_from_args = runs.config_from_args, lambda cls, args: None
    try:
        args, result, error = run_recipe(Parser(), None, run)
    finally:
        runs.config_from_args = real
    assert cleaned == [True] and result is None
    assert recipe_exit(error) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "Stopped by SIGTERM outside the training steps; every file written is complete; rerun "
        "the same command to go on from the last checkpoint."
    ]


@pytest.mark.backend_independent
def test_interruptible_restores_the_handlers():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted), interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.slow
@pytest.mark.backend_independent
def test_corpus_distillation_saves_the_step_and_the_rerun_resumes_it(files, tmp_path, monkeypatch):
    """Distillation on a corpus: a signal saves the step under way, with one
    line saying so, nothing published; the rerun resumes after it and
    publishes the student an uninterrupted run publishes, then removes the
    checkpoint."""
    from bertzoo.training import distill_corpus
    from bertzoo.training.distill import DistillConfig, run_distillation

    class SignalAtStep2(StopAtStep):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    student = tmp_path / "student.json"
    student.write_text(
        json.dumps(
            {
                "backbone": {
                    "num_layers": 1,
                    "num_heads": 2,
                    "hidden_dim": 8,
                    "intermediate_dim": 16,
                    "max_sequence_length": 32,
                    "dropout": 0.0,
                }
            }
        )
    )

    def config(output):
        return DistillConfig(
            method="tinybert-general",
            teacher=str(files / "preset"),
            student=str(student),
            corpus=(str(files / "corpus.txt"),),
            steps=6,
            batch_size=4,
            sequence_length=16,
            learning_rate=1e-3,
            benchmark_batch_size=2,
            benchmark_sequence_length=16,
            verbose=0,
            output=str(output),
        )

    reference = run_distillation(config(tmp_path / "reference"))
    with monkeypatch.context() as m:
        m.setattr(distill_corpus, "StopAtStep", SignalAtStep2)
        with pytest.raises(Preempted) as caught:
            run_distillation(config(tmp_path / "run"))
    checkpoint = tmp_path / "run" / "checkpoints" / "ckpt-000000002"
    assert str(caught.value) == (
        f"Stopped by SIGTERM after step 2 of 6: checkpoint {checkpoint} written; rerun the same "
        "command to resume there."
    )
    assert caught.value.exit_status == 143
    assert checkpoint.is_dir()
    assert not (tmp_path / "run" / "student").exists()
    assert not (tmp_path / "run" / "report.json").exists()

    resumed = run_distillation(config(tmp_path / "run"))
    got = resumed["stages"]["tinybert-general"]
    assert got == pytest.approx(reference["stages"]["tinybert-general"], rel=1e-4, abs=1e-6)
    assert resumed["student_metric"] == pytest.approx(reference["student_metric"], abs=1e-5)
    diff = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(
            bertzoo.BertBackbone.from_preset(tmp_path / "run" / "student").get_weights(),
            bertzoo.BertBackbone.from_preset(tmp_path / "reference" / "student").get_weights(),
            strict=True,
        )
    )
    print(f"\ncorpus distillation, resumed vs uninterrupted student: max |diff| {diff:.3g}")
    assert diff <= TOLERANCE
    assert not list((tmp_path / "run" / "checkpoints").glob("ckpt-*"))
