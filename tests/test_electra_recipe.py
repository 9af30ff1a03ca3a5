"""The pre-training run with `objective="electra"`: replaced-token
detection end to end on the built-in corpus, RTD metrics in metrics.json,
the discriminator preset with its generator beside it, exact resume, and
fine-tuning from the result with ELECTRA's classifier head."""

import json
import shutil

import numpy as np
import pytest

import bertzoo
from bertzoo.training.pretrain import PretrainConfig, PretrainError, run_pretraining
from tests.test_pretrain_recipe import SMALL

ELECTRA = {
    **SMALL,
    "objective": "electra",
    # One phase: the phase switch is the masked-LM runs' (test_pretrain_recipe).
    "seq_len": (32,),
    "steps": (70,),
    "checkpoint_every": 20,
    "learning_rate": 5e-3,
}


def _weights(directory):
    return bertzoo.BertBackbone.from_preset(directory).get_weights()


@pytest.mark.slow
def test_electra_run_learns_saves_both_models_and_resumes_exactly(tmp_path):
    out = tmp_path / "run"
    metrics = run_pretraining(PretrainConfig(**ELECTRA, output=str(out)))
    assert metrics["objective"] == "electra" and metrics["steps"] == 70
    for key in ("rtd_accuracy", "rtd_precision", "rtd_recall", "rtd_loss", "mlm_loss"):
        assert f"final_{key}" in metrics and f"initial_{key}" in metrics
    # Measured on held-out text (bert_tiny shape, 70 steps at length 32, TF /
    # JAX): generator loss 7.60 -> 5.86 / 7.63 -> 5.89 and accuracy 0.0 ->
    # 0.052 / 0.060; RTD loss 0.69 -> 0.428 / 0.429, the entropy of the
    # replaced share (15%): this short a run learns the prior, not yet which
    # tokens were replaced (the unit tests and BENCHMARKS.md's longer runs
    # show that).
    assert metrics["final_mlm_loss"] < metrics["initial_mlm_loss"] - 1.5
    assert metrics["final_masked_lm_accuracy"] > 0.04
    assert metrics["final_rtd_loss"] < 0.45 < metrics["initial_rtd_loss"]
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["final_rtd_recall"] == metrics["final_rtd_recall"]

    preset = out / "preset"
    disc = bertzoo.BertBackbone.from_preset(preset)
    gen = bertzoo.BertBackbone.from_preset(preset / "generator")
    assert not disc.use_pooler and disc.preset_info["metadata"]["model_type"] == "electra"
    # The default generator: 1/4 of the discriminator's width (bert_tiny: 128 -> 32).
    assert (gen.hidden_dim, gen.num_heads, gen.embedding_dim) == (32, 1, disc.embedding_dim)
    assert sorted(disc.head_tensors) == [
        "discriminator_predictions.dense.bias",
        "discriminator_predictions.dense.weight",
        "discriminator_predictions.dense_prediction.bias",
        "discriminator_predictions.dense_prediction.weight",
    ]
    assert "generator_lm_head.bias" in gen.head_tensors
    # The shared embeddings were copied into the saved generator.
    np.testing.assert_array_equal(
        disc.token_embedding.embeddings.numpy(), gen.token_embedding.embeddings.numpy()
    )

    # Resume: drop the last checkpoint (step 70), rerun the same settings; the run
    # continues from step 60 (data position, optimizer and sampling state
    # restored) and ends with the uninterrupted run's weights.
    straight = _weights(preset)
    checkpoints = sorted((out / "checkpoints").glob("ckpt-*"))
    shutil.rmtree(checkpoints[-1])
    resumed = run_pretraining(PretrainConfig(**ELECTRA, output=str(out)))
    assert resumed["resumed_from_step"] == 60
    diff = max(float(np.abs(a - b).max()) for a, b in zip(straight, _weights(preset)))
    assert diff < 1e-5, diff  # measured 0.0

    # Fine-tuning from it: ELECTRA's head (no pooler) on the first token.
    classifier = bertzoo.BertClassifier.from_preset(preset, num_classes=3)
    assert classifier.head_style == "electra"
    assert [layer.name for layer in classifier.head_layers()] == [
        "classifier_dense",
        "classifier_head",
    ]


def test_electra_settings_are_checked(tmp_path):
    with pytest.raises(PretrainError, match="generator_size"):
        run_pretraining(PretrainConfig(**{**ELECTRA, "generator_size": 0.0}, output=str(tmp_path)))
    with pytest.raises(PretrainError, match="rtd_weight"):
        run_pretraining(PretrainConfig(**{**ELECTRA, "rtd_weight": -1.0}, output=str(tmp_path)))
    with pytest.raises(PretrainError, match="--generator is for objective electra"):
        run_pretraining(
            PretrainConfig(
                **{**ELECTRA, "objective": "nsp", "generator": "electra_small_generator"},
                output=str(tmp_path),
            )
        )
    assert not any(tmp_path.iterdir())  # nothing written
