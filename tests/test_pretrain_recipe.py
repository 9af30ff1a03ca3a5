"""The pre-training run (`bertzoo.training.pretrain`, `recipes/pretrain.py`):
a shrunk default run end to end, kill -9 and resume, static data, the Korean
tutorial of docs/korean.md (run verbatim), and bad settings."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from bertzoo.training.pretrain import PretrainConfig, PretrainError, run_pretraining
from tests.conftest import FIXTURES, edited_by_hand, subprocess_env

ROOT = Path(__file__).resolve().parent.parent

# Every test here runs under both backends (CI runs the suite twice); the
# recipe subprocesses inherit this run's KERAS_BACKEND (`subprocess_env`),
# so kill -9 resume, static data and the Korean tutorial train under JAX too.
RECIPE = ROOT / "recipes" / "pretrain.py"

# A run small enough for CI: bert_tiny on the built-in corpus, two phases.
SMALL = dict(
    preset="bert_tiny",
    vocab_size=2000,
    seq_len=(32, 64),
    steps=(150, 20),
    batch_size=16,
    learning_rate=3e-3,
    dropout=0.0,
    checkpoint_every=50,
    log_every=5,
    eval_batches=4,
    verbose=0,
)


def _env():
    return subprocess_env("2")


def _scalars(log_dir, tag):
    """(step, value) pairs of a TensorBoard scalar, in step order."""
    out = []
    for path in Path(log_dir).rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == tag:
                    out.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(out)


def _event_tags(log_dir):
    tags = set()
    for path in Path(log_dir).rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.add(value.tag)
    return tags


@pytest.mark.jax
@pytest.mark.slow
def test_small_default_run_learns_and_writes_a_preset(tmp_path):
    out = tmp_path / "run"
    metrics = run_pretraining(PretrainConfig(**SMALL, output=str(out)))

    # Chance is ~1/2000. 170 small steps reach the frequent-word plateau
    # (measured 0.046 accuracy, loss 8.28 -> 6.81); the default run's 700
    # steps go past it (0.18).
    assert metrics["initial_masked_lm_accuracy"] < 0.01
    assert metrics["final_masked_lm_accuracy"] > metrics["initial_masked_lm_accuracy"] + 0.03
    assert metrics["final_loss"] < metrics["initial_loss"] - 1.0
    assert metrics["steps"] == 170 and metrics["resumed_from_step"] == 0
    assert metrics["objective"] == "nsp" and metrics["examples_per_second"] > 0
    assert json.loads((out / "metrics.json").read_text()) == metrics
    # The held-out examples' share cut at the length limit is recorded: the
    # built-in corpus's paragraphs are long, so at 64 tokens some are cut.
    assert metrics["eval_examples"] > 0 and 0 < metrics["truncated"]["eval"] < 1, metrics

    # The preset directory loads (weights + vocabulary) and is the trained model.
    backbone = bertzoo.BertBackbone.from_preset(out / "preset")
    assert backbone.vocabulary_size == metrics["vocabulary_size"] <= 2000
    tokenizer = bertzoo.BertTokenizer.from_preset(out / "preset")
    assert tokenizer.lowercase and tokenizer.vocabulary_size == backbone.vocabulary_size
    ids = np.asarray(tokenizer("The if statement is used for conditional execution."))
    assert tokenizer.unk_token_id not in ids
    pre = bertzoo.BertPreprocessor(tokenizer, sequence_length=16)
    features = backbone(pre(["The if statement"]))
    assert features["sequence_output"].shape == (1, 16, backbone.hidden_dim)
    # Not the random initialisation: the embedding table moved.
    fresh = bertzoo.BertBackbone(**{**backbone.get_config(), "name": "fresh"})
    assert not np.allclose(
        backbone.token_embedding.embeddings.numpy(), fresh.token_embedding.embeddings.numpy()
    )

    # TensorBoard: training curves, learning rate, final evaluation.
    tags = _event_tags(out / "logs")
    for tag in (
        "train/loss",
        "train/masked_lm_accuracy",
        "train/nsp_accuracy",
        "train/learning_rate",
        "eval/masked_lm_accuracy",
    ):
        assert tag in tags, (tag, tags)
    # Checkpoints: the newest two (keep=2), the last at the final step.
    names = sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("ckpt-"))
    assert len(names) == 2 and names[-1].endswith("170")

    # Rerunning a finished run resumes at its end: no training, same result.
    again = run_pretraining(PretrainConfig(**SMALL, output=str(out)))
    assert again["resumed_from_step"] == 170 and again["steps"] == 170
    assert again["final_masked_lm_accuracy"] == pytest.approx(
        metrics["final_masked_lm_accuracy"], abs=1e-6
    )


def _recipe_command(out, steps):
    return [
        sys.executable,
        str(RECIPE),
        "--output",
        str(out),
        "--preset",
        "bert_tiny",
        "--vocab-size",
        "2000",
        "--seq-len",
        "32",
        "--steps",
        str(steps),
        "--batch-size",
        "16",
        "--dropout",
        "0",
        "--checkpoint-every",
        "10",
        "--verbose",
        "2",
    ]


@pytest.mark.slow
# TensorFlow pass only: what it adds (kill -9 at a random moment, resume from the
# files) is file-level; JAX resumes are checked by tests/test_compat.py's
# interrupted runs and tests/training/test_checkpoint.py under both backends.
@pytest.mark.backend_independent
def test_recipe_resumes_after_kill_9(tmp_path):
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    steps = 150
    proc = subprocess.Popen(
        _recipe_command(killed, steps),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    checkpoints = killed / "checkpoints"
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            done = (
                [p for p in checkpoints.glob("ckpt-*") if p.is_dir()]
                if checkpoints.is_dir()
                else []
            )
            if any(int(p.name.split("-")[1]) >= 30 for p in done):
                break
            time.sleep(0.2)
        assert proc.poll() is None, (
            "the run ended before it could be killed:\n" + proc.stdout.read().decode()
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    saved = max(int(p.name.split("-")[1]) for p in checkpoints.glob("ckpt-*") if p.is_dir())
    assert 30 <= saved < steps

    # The same command again resumes from the newest checkpoint.
    result = subprocess.run(
        _recipe_command(killed, steps), env=_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = json.loads((killed / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == saved and metrics["steps"] == steps

    # An uninterrupted run of the same command ends with the same weights
    # (dropout 0; same data stream, optimizer state and schedule). Measured
    # difference: 0.0; bar 1e-5 for float reassociation across processes.
    result = subprocess.run(
        _recipe_command(straight, steps), env=_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    a = bertzoo.BertBackbone.from_preset(killed / "preset")
    b = bertzoo.BertBackbone.from_preset(straight / "preset")
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(a.get_weights(), b.get_weights()))
    print(f"resume vs uninterrupted: max abs weight difference {diff}")
    assert diff < 1e-5, diff


@pytest.mark.backend_independent
def test_resume_with_other_settings_is_refused(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints" / "ckpt-000000010").mkdir(parents=True)
    config = PretrainConfig(**SMALL, output=str(out))
    (out / "run_config.json").write_text(json.dumps({**config.to_json(), "learning_rate": 1e-4}))
    with pytest.raises(PretrainError, match=r"learning_rate: 0.0001 -> 0.003.*--no-resume"):
        run_pretraining(config)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(seq_len=(128, 1024), steps=(5, 5)),
            r"seq_len=1024 is longer than the model's 512 position",
        ),
        (dict(seq_len=(128, 512), steps=(5,)), r"one entry per phase"),
        (dict(masking="span"), r"masking='span' is not valid. Valid: token, whole_word, ngram"),
        (dict(precision="fp8"), r"precision='fp8' is not valid"),
        (dict(batch_size=0), r"batch_size must be a positive integer"),
        (dict(warmup_steps=1000), r"warmup_steps=1000 must be in \[0, 170\]"),
        (dict(data=("a",)), r"one TFRecord directory per phase"),
        (dict(gradient_accumulation_steps=4), r"must be a multiple of 4; got steps \[150, 20\]"),
    ],
)
def test_bad_settings(tmp_path, overrides, message):
    with pytest.raises(PretrainError, match=message):
        run_pretraining(PretrainConfig(**{**SMALL, **overrides}, output=str(tmp_path / "run")))


def test_distilbert_preset_trains_mlm_only_and_vocab_must_match(tmp_path):
    config = PretrainConfig(**{**SMALL, "preset": "distilbert_base"}, output=str(tmp_path / "run"))
    from bertzoo.training.pretrain import build_backbone, resolve_objective

    backbone = build_backbone(config, 100)
    assert resolve_objective(config, backbone) == "none"
    assert backbone.vocabulary_size == 100 and backbone.num_segments == 0


@pytest.mark.slow
def test_static_data_written_once_and_read(tmp_path):
    out = tmp_path / "run"
    config = PretrainConfig(
        **{**SMALL, "seq_len": (32,), "steps": (12,), "data_mode": "static", "dupe_factor": 2},
        output=str(out),
    )
    metrics = run_pretraining(config)
    meta = json.loads((out / "data" / "seq32" / "pretraining_metadata.json").read_text())
    assert meta["masked"] and meta["seq_len"] == 32 and meta["max_predictions_per_seq"] == 5
    assert metrics["steps"] == 12
    # Data written for another length is refused.
    wrong = PretrainConfig(
        **{**SMALL, "seq_len": (64,), "steps": (12,), "data": (str(out / "data" / "seq32"),)},
        output=str(tmp_path / "other"),
    )
    with pytest.raises(bertzoo.data.PretrainingDataError, match="written for seq_len=32"):
        run_pretraining(wrong)


@pytest.mark.backend_independent
def test_recipe_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    from recipes.pretrain import main

    status = main(["--output", str(tmp_path / "run"), "--seq-len", "64,1024", "--steps", "5,5"])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "error: seq_len=1024 is longer than the model's 512 position embeddings"
    ), err
    assert not (tmp_path / "run").exists()  # nothing written before the check
    status = main(["--output", str(tmp_path / "run"), "--corpus", str(tmp_path / "missing.txt")])
    assert status == 2 and "missing.txt" in capsys.readouterr().err


@pytest.mark.backend_independent
def test_recipe_help_documents_every_flag(capsys):
    from recipes.pretrain import build_parser

    text = build_parser().format_help()
    for flag in (
        "--preset",
        "--corpus",
        "--vocab",
        "--objective",
        "--masking",
        "--seq-len",
        "--steps",
        "--batch-size",
        "--learning-rate",
        "--optimizer",
        "--precision",
        "--strategy",
        "--tpu",
        "--output",
        "--resume",
        "--data-mode",
        "--jit-compile",
        "--steps-per-execution",
    ):
        assert flag in text, flag


@pytest.mark.slow
def test_albert_style_run_with_lamb_accumulation_and_bfloat16(tmp_path):
    """SOP, n-gram masking, LAMB with gradient accumulation, mixed bfloat16,
    a factorised + shared (ALBERT-shaped) tiny preset directory."""
    preset = tmp_path / "albert_tiny"
    backbone = bertzoo.BertBackbone(
        vocabulary_size=50,
        num_layers=3,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        embedding_dim=16,
        num_groups=1,
        max_sequence_length=64,
    )
    backbone.save_to_preset(preset)
    # An architecture, assembled by hand (so no manifest): the run initialises it.
    edited_by_hand(preset)
    (preset / "model.weights.h5").unlink()
    config = PretrainConfig(
        **{
            **SMALL,
            "preset": str(preset),
            "seq_len": (32,),
            "steps": (12,),
            "optimizer": "lamb",
            "gradient_accumulation_steps": 2,
            "precision": "mixed_bfloat16",
            "masking": "ngram",
            "checkpoint_every": 4,
        },
        output=str(tmp_path / "run"),
    )
    metrics = run_pretraining(config)
    assert metrics["objective"] == "sop" and metrics["steps"] == 12
    assert np.isfinite(metrics["final_loss"])
    trained = bertzoo.BertBackbone.from_preset(tmp_path / "run" / "preset")
    assert (trained.embedding_dim, trained.num_groups, trained.num_layers) == (16, 1, 3)
    assert trained.vocabulary_size == metrics["vocabulary_size"]  # the trained vocabulary's size
    checkpoint = sorted((tmp_path / "run" / "checkpoints").glob("ckpt-*"))[-1]
    assert json.loads((checkpoint / "state.json").read_text())["step"] == 12
    # 12 batches are 6 weight updates, and the schedule spans 6 updates
    # (no warmup: 10% of 12 batches is under one update); logged at batches 5
    # and 10, after updates 2 and 5.
    rates = _scalars(tmp_path / "run" / "logs", "train/learning_rate")
    assert [step for step, _ in rates] == [5, 10]
    assert rates[0][1] == pytest.approx(3e-3 * (1 - 2 / 6), rel=1e-5)
    assert rates[1][1] == pytest.approx(3e-3 * (1 - 5 / 6), rel=1e-5)
    assert "train/sop_accuracy" in _event_tags(tmp_path / "run" / "logs")


@pytest.mark.backend_independent
def test_albert_presets_train_a_sentencepiece_vocabulary(tmp_path):
    from bertzoo.training.pretrain import prepare_tokenizer

    corpus = tmp_path / "ko.txt"
    corpus.write_text(
        (FIXTURES / "korean_corpus.txt").read_text(encoding="utf-8"), encoding="utf-8"
    )
    config = PretrainConfig(
        preset="albert_base",
        vocab_size=1000,
        lowercase=False,
        strip_accents=False,
        output=str(tmp_path / "run"),
    )
    tokenizer = prepare_tokenizer(config, tmp_path / "run", [str(corpus)])
    assert isinstance(tokenizer, bertzoo.tokenizers.SentencePieceTokenizer)
    assert (tmp_path / "run" / "spiece.model").is_file() and tokenizer.vocabulary_size <= 1000
    assert not tokenizer.strip_accents and tokenizer.preset_section()["kind"] == "sentencepiece"
    pieces = tokenizer.detokenize(tokenizer("이 원피스 예뻐요"))
    assert tokenizer.unk_token not in pieces
    assert not any("\u1100" <= ch <= "\u11ff" for piece in pieces for ch in piece)  # no jamo


@pytest.mark.backend_independent
def test_a_rerun_that_trains_no_step_prints_no_null_throughput(tmp_path, capsys, monkeypatch):
    """A finished run rerun resumes at its end and times nothing: the recipe
    leaves examples_per_second out and says why, instead of printing null."""
    from bertzoo.training import runs
    from recipes.pretrain import main

    metrics = {
        "initial_masked_lm_accuracy": 0.1,
        "final_masked_lm_accuracy": 0.2,
        "steps": 170,
        "examples_per_second": None,
    }
    monkeypatch.setattr(
        runs,
        "run_recipe",
        lambda parser, cls, run, argv: (parser.parse_args(argv), metrics, None),
    )
    assert main(["--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "null" not in out and "examples_per_second" in out
    assert "No training step ran: the run was already at step 170;" in out
    metrics["examples_per_second"] = 380.7
    assert main(["--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert '"examples_per_second": 380.7' in out and "No training step ran" not in out
