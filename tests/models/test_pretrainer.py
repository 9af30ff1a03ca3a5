"""BertPretrainer: tied masked-only MLM head, NSP/SOP head, reference loss,
metrics, checkpoint heads and training with fit."""

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from bertzoo.convert.common import CheckpointError
from bertzoo.models.pretrainer import BertPretrainer, masked_lm_loss
from tests.conftest import TINY, tiny_backbone

B, S, P, V = 3, 7, 4, TINY["vocabulary_size"]  # distinct sizes
HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf_variants"


def make_batch(batch=B, seq=S, preds=P, vocab=V, seed=0, pad_last=True):
    """(x, y, sample_weight) in the data pipeline's format."""
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(5, vocab, (batch, seq)).astype("int32"),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype("int32"),
        "padding_mask": np.ones((batch, seq), "int32"),
        "mask_positions": np.stack(
            [rng.choice(np.arange(1, seq), preds, replace=False) for _ in range(batch)]
        ).astype("int32"),
    }
    y = {
        "mlm": rng.integers(5, vocab, (batch, preds)).astype("int32"),
        "sentence": rng.integers(0, 2, (batch,)).astype("int32"),
    }
    w = np.ones((batch, preds), "float32")
    if pad_last:
        w[:, -1] = 0.0  # padded predictions
        x["mask_positions"][:, -1] = 0
    return x, y, {"mlm": w}


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def softmax_ce(logits, labels):
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, labels[..., None], -1)[..., 0]


@pytest.mark.parametrize("embedding_dim", [None, 6], ids=["bert", "albert_factorised"])
def test_mlm_logits_match_numpy_recomputation(embedding_dim):
    backbone = tiny_backbone(embedding_dim=embedding_dim, num_groups=2)
    model = BertPretrainer(backbone, objective="nsp")
    head = model.mlm_head
    rng = np.random.default_rng(3)
    head.bias.assign(rng.normal(size=(V,)).astype("float32"))
    head.layer_norm.gamma.assign(1 + 0.1 * rng.normal(size=head.layer_norm.gamma.shape))
    x, _, _ = make_batch()
    out = model(x)
    E = embedding_dim or TINY["hidden_dim"]
    assert tuple(out["mlm"].shape) == (B, P, V)  # only the masked positions
    assert tuple(out["sentence"].shape) == (B, 2)
    assert out["mlm"].dtype == "float32"

    seq = keras.ops.convert_to_numpy(
        backbone({k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")})["sequence_output"]
    )
    gathered = np.take_along_axis(seq, x["mask_positions"][:, :, None], axis=1)  # (B,P,H)
    kernel = keras.ops.convert_to_numpy(head.dense.kernel)
    assert kernel.shape == (TINY["hidden_dim"], E)  # ALBERT: Dense(E)
    h = gelu_tanh(gathered @ kernel + keras.ops.convert_to_numpy(head.dense.bias))
    h = layer_norm(
        h,
        keras.ops.convert_to_numpy(head.layer_norm.gamma),
        keras.ops.convert_to_numpy(head.layer_norm.beta),
        backbone.layer_norm_epsilon,
    )
    table = keras.ops.convert_to_numpy(backbone.token_embedding.embeddings)
    assert table.shape == (V, E)
    expected = h @ table.T + keras.ops.convert_to_numpy(head.bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out["mlm"]), expected, atol=2e-5)

    pooled = backbone({k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")})[
        "pooled_output"
    ]
    expected_nsp = keras.ops.convert_to_numpy(pooled) @ keras.ops.convert_to_numpy(
        model.sentence_head.kernel
    ) + keras.ops.convert_to_numpy(model.sentence_head.bias)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out["sentence"]), expected_nsp, atol=1e-5)


@pytest.mark.parametrize(
    "overrides, objective",
    [({}, "nsp"), ({"embedding_dim": 6, "num_groups": 1}, "sop"), ({}, "none")],
)
def test_tied_head_adds_only_transform_bias_and_sentence_parameters(overrides, objective):
    backbone = tiny_backbone(**overrides)
    model = BertPretrainer(backbone, objective=objective)
    H, E = TINY["hidden_dim"], overrides.get("embedding_dim", TINY["hidden_dim"])
    head = H * E + E + 2 * E + V  # Dense(E), LayerNorm(E), output bias
    sentence = 0 if objective == "none" else 2 * H + 2
    assert model.count_params() == backbone.count_params() + head + sentence
    # No V x E matrix of its own: the only (V, E) weight is the backbone's table.
    vxe = [w for w in model.weights if tuple(w.shape) == (V, E)]
    assert len(vxe) == 1 and vxe[0] is backbone.token_embedding.embeddings
    head_shapes = sorted(tuple(w.shape) for w in model.mlm_head.weights)
    assert head_shapes == sorted([(H, E), (E,), (E,), (E,), (V,)])


def test_loss_is_the_reference_normalisation():
    model = BertPretrainer(tiny_backbone(), objective="nsp")
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(B, P, V)).astype("float32") * 3
    sentence_logits = rng.normal(size=(B, 2)).astype("float32")
    labels = rng.integers(0, V, (B, P)).astype("int32")
    sentence = np.array([0, 1, 1], "int32")
    weights = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], "float32")
    loss = model.compute_loss(
        y={"mlm": labels, "sentence": sentence},
        y_pred={"mlm": logits, "sentence": sentence_logits},
        sample_weight={"mlm": weights},
    )
    ce = softmax_ce(logits, labels)
    mlm = (ce * weights).sum() / (weights.sum() + 1e-5)
    nsp = softmax_ce(sentence_logits, sentence).mean()
    np.testing.assert_allclose(float(loss), mlm + nsp, rtol=1e-6)
    # Padding predictions do not count, whatever their logits say.
    logits2 = logits.copy()
    logits2[weights == 0] = 100.0
    np.testing.assert_allclose(float(masked_lm_loss(labels, logits2, weights)), mlm, rtol=1e-6)
    # All-zero weights: 0 / 1e-5, not NaN.
    assert float(masked_lm_loss(labels, logits, np.zeros_like(weights))) == 0.0


def test_fit_memorises_a_fixed_batch_and_reports_metrics():
    backbone = tiny_backbone(num_layers=2)
    model = BertPretrainer(backbone, objective="sop")
    # XLA compile time dominates this tiny model on TF; JAX always jits.
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2), jit_compile=keras.backend.backend() == "jax"
    )
    x, y, w = make_batch(batch=8, seq=12, preds=5, seed=1)
    ds = tf.data.Dataset.from_tensors((x, y, w)).repeat()
    # One step per epoch: epoch 0's metrics come from the untrained forward.
    history = model.fit(ds, steps_per_epoch=1, epochs=50, verbose=0).history
    assert set(history) == {"loss", "masked_lm_accuracy", "sop_accuracy"}
    acc = history["masked_lm_accuracy"]
    assert acc[0] < 0.2  # ~ chance (1/61)
    assert max(acc[-3:]) > 0.9
    assert history["sop_accuracy"][-1] == 1.0
    assert history["loss"][-1] < history["loss"][0] / 4


def test_masked_lm_accuracy_ignores_padding_predictions():
    model = BertPretrainer(tiny_backbone(), objective="none")
    model.compile(optimizer="sgd")
    x, y, w = make_batch()
    logits = keras.ops.convert_to_numpy(model(x)["mlm"])
    y = {"mlm": logits.argmax(-1).astype("int32")}  # every prediction right...
    y["mlm"][:, -1] = (y["mlm"][:, -1] + 1) % V  # ...except the padded ones
    result = model.evaluate(tf.data.Dataset.from_tensors((x, y, w)), verbose=0, return_dict=True)
    assert result["masked_lm_accuracy"] == 1.0


def test_mlm_only_backbone_without_segments_or_pooler():
    backbone = tiny_backbone(num_segments=0, use_pooler=False)
    with pytest.raises(ValueError, match="use_pooler=False"):
        BertPretrainer(backbone, objective="nsp")
    with pytest.raises(ValueError, match="objective"):
        BertPretrainer(backbone, objective="mlm")
    model = BertPretrainer(backbone, objective="none")
    x, _, _ = make_batch()
    out = model(x)  # segment_ids present and ignored
    assert set(out) == {"mlm"}
    x2 = dict(x, segment_ids=np.ones_like(x["segment_ids"]))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(out["mlm"]), keras.ops.convert_to_numpy(model(x2)["mlm"])
    )
    with pytest.raises(ValueError, match="loss"):
        model.compile(optimizer="sgd", loss="mse")


def test_config_round_trip():
    model = BertPretrainer(tiny_backbone(embedding_dim=6), objective="sop", name="pt")
    clone = BertPretrainer.from_config(model.get_config())
    assert clone.objective == "sop" and clone.name == "pt"
    assert clone.backbone.embedding_dim == 6
    assert clone.count_params() == model.count_params()


def _bert_heads(H, E, vocab, rng):
    r = lambda *s: rng.normal(size=s).astype("float32")
    return {
        "cls.predictions.transform.dense.weight": r(E, H),  # (out, in)
        "cls.predictions.transform.dense.bias": r(E),
        "cls.predictions.transform.LayerNorm.weight": r(E),
        "cls.predictions.transform.LayerNorm.bias": r(E),
        "cls.predictions.bias": r(vocab),
        "cls.predictions.decoder.weight": r(vocab, E),  # tied: not loaded
        "cls.seq_relationship.weight": r(2, H),
        "cls.seq_relationship.bias": r(2),
    }


def _albert_heads(H, E, vocab, rng):
    r = lambda *s: rng.normal(size=s).astype("float32")
    return {
        "predictions.dense.weight": r(E, H),
        "predictions.dense.bias": r(E),
        "predictions.LayerNorm.weight": r(E),
        "predictions.LayerNorm.bias": r(E),
        "predictions.bias": r(vocab),
        "predictions.decoder.bias": r(vocab),
        "sop_classifier.classifier.weight": r(2, H),
        "sop_classifier.classifier.bias": r(2),
    }


def _check_heads(model, tensors, dense_w, dense_b, ln_w, ln_b, bias, cls_w, cls_b):
    n = keras.ops.convert_to_numpy
    head = model.mlm_head
    np.testing.assert_array_equal(n(head.dense.kernel), tensors[dense_w].T)
    np.testing.assert_array_equal(n(head.dense.bias), tensors[dense_b])
    np.testing.assert_array_equal(n(head.layer_norm.gamma), tensors[ln_w])
    np.testing.assert_array_equal(n(head.layer_norm.beta), tensors[ln_b])
    np.testing.assert_array_equal(n(head.bias), tensors[bias])
    if cls_w is not None:
        np.testing.assert_array_equal(n(model.sentence_head.kernel), tensors[cls_w].T)
        np.testing.assert_array_equal(n(model.sentence_head.bias), tensors[cls_b])


def test_heads_initialised_from_bert_hf_names():
    backbone = tiny_backbone()
    tensors = _bert_heads(10, 10, V, np.random.default_rng(0))
    backbone.head_tensors = tensors
    model = BertPretrainer(backbone, objective="nsp")
    assert len(model.head_weights_loaded) == 7
    _check_heads(
        model,
        tensors,
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias",
        "cls.predictions.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    )
    # An SOP pretrainer keeps the MLM head but not the NSP classifier.
    sop = BertPretrainer(backbone, objective="sop")
    assert "cls.seq_relationship.weight" not in sop.head_weights_loaded
    assert len(sop.head_weights_loaded) == 5


def test_heads_initialised_from_albert_hf_names_with_shape_checks():
    backbone = tiny_backbone(embedding_dim=6, num_groups=1)
    tensors = _albert_heads(10, 6, V, np.random.default_rng(1))
    backbone.head_tensors = tensors
    model = BertPretrainer(backbone, objective="sop")
    _check_heads(
        model,
        tensors,
        "predictions.dense.weight",
        "predictions.dense.bias",
        "predictions.LayerNorm.weight",
        "predictions.LayerNorm.bias",
        "predictions.bias",
        "sop_classifier.classifier.weight",
        "sop_classifier.classifier.bias",
    )
    # A head for E=10 does not fit an E=6 model: a clear error naming the tensor.
    backbone.head_tensors = _albert_heads(10, 10, V, np.random.default_rng(1))
    with pytest.raises(CheckpointError, match="predictions.dense.weight"):
        BertPretrainer(backbone, objective="sop")
    # Half a head is an error too.
    partial = dict(tensors)
    del partial["predictions.bias"]
    backbone.head_tensors = partial
    with pytest.raises(CheckpointError, match="predictions.bias"):
        BertPretrainer(backbone, objective="sop")


@pytest.mark.parametrize(
    "name, objective, prefix",
    [
        ("bert_pretraining", "nsp", "cls.predictions.transform.dense.weight"),
        ("albert_pretraining", "sop", "predictions.dense.weight"),
    ],
)
def test_heads_from_real_converted_checkpoints(name, objective, prefix):
    """The small transformers checkpoints in tests/fixtures keep their heads."""
    backbone = bertzoo.BertBackbone.from_preset(str(HF / name))
    assert prefix in backbone.head_tensors
    model = BertPretrainer(backbone, objective=objective)
    assert len(model.head_weights_loaded) == 7
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.mlm_head.dense.kernel),
        np.asarray(backbone.head_tensors[prefix]).T,
    )
