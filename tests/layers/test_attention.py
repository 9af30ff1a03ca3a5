import numpy as np
import pytest
from keras import ops

from bertzoo.layers import BertSelfAttention

B, S, H, N = 3, 7, 10, 2


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, S, H)).astype("float32")
    mask = np.ones((B, S), "int32")
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    return x, mask


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


def test_scores_shape_and_scaling():
    layer = BertSelfAttention(num_heads=N, hidden_dim=H)
    x, mask = _inputs()
    out, scores = layer(x, mask, return_attention_scores=True)
    assert out.shape == (B, S, H)
    assert scores.shape == (B, N, S, S)
    # Scores are QK^T / sqrt(head_dim), before any masking.
    q = (x @ _np(layer.query.kernel) + _np(layer.query.bias)).reshape(B, S, N, H // N)
    k = (x @ _np(layer.key.kernel) + _np(layer.key.bias)).reshape(B, S, N, H // N)
    expected = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(H // N)
    np.testing.assert_allclose(_np(scores), expected, atol=1e-5, rtol=1e-5)


def test_masked_softmax_of_scores_is_what_the_fused_path_uses():
    layer = BertSelfAttention(num_heads=N, hidden_dim=H)
    x, mask = _inputs(1)
    _, scores = layer(x, mask, return_attention_scores=True)
    fused = _np(layer(x, mask))  # default path: keras.ops.dot_product_attention
    # Rebuild the output from softmax(masked scores) by hand.
    logits = np.where(mask[:, None, None, :].astype(bool), _np(scores), -1e30)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert np.all(probs[1, :, :, 5:] == 0) and np.all(probs[2, :, :, 3:] == 0)
    v = (x @ _np(layer.value.kernel) + _np(layer.value.bias)).reshape(B, S, N, H // N)
    context = np.einsum("bnts,bsnh->btnh", probs, v).reshape(B, S, H)
    expected = context @ _np(layer.attention_output.kernel) + _np(layer.attention_output.bias)
    np.testing.assert_allclose(fused, expected, atol=1e-5, rtol=1e-5)


def test_explicit_and_fused_paths_agree():
    layer = BertSelfAttention(num_heads=N, hidden_dim=H, attention_dropout=0.0)
    x, mask = _inputs(2)
    fused = _np(layer(x, mask))
    explicit, _ = layer(x, mask, return_attention_scores=True)
    np.testing.assert_allclose(fused, _np(explicit), atol=1e-6)


def test_attention_dropout_only_in_training():
    layer = BertSelfAttention(num_heads=N, hidden_dim=H, attention_dropout=0.5)
    x, mask = _inputs(3)
    inference = _np(layer(x, mask, training=False))
    np.testing.assert_allclose(inference, _np(layer(x, mask, training=False)))
    trained = _np(layer(x, mask, training=True))
    assert not np.allclose(inference, trained)


def test_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="hidden_dim=10 must be divisible by num_heads=3"):
        BertSelfAttention(num_heads=3, hidden_dim=10)
