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


def test_local_attention_sees_only_its_window_and_global_sees_all():
    """A window of 6: query i sees keys i-3 .. i+3. Changing token 9 moves
    the local layer's outputs at positions 6 .. 12 only; a global layer's
    move everywhere. The explicit path agrees with the fused one."""
    seq = 16
    x = np.random.default_rng(3).normal(size=(2, seq, 12)).astype("float32")
    changed = x.copy()
    changed[:, 9] += 1.0
    mask = np.ones((2, seq), "int32")
    local = BertSelfAttention(num_heads=N, hidden_dim=12, rope_theta=50.0, attention_window=6)
    moved = np.abs(_np(local(changed, mask)) - _np(local(x, mask))).max(axis=(0, 2))
    assert np.all(moved[6:13] > 1e-4) and np.all(moved[:6] == 0) and np.all(moved[13:] == 0)
    explicit, scores = local(x, mask, return_attention_scores=True)
    np.testing.assert_allclose(_np(explicit), _np(local(x, mask)), atol=1e-6)
    assert scores.shape == (2, N, seq, seq)
    full = BertSelfAttention(num_heads=N, hidden_dim=12, rope_theta=50.0)
    moved = np.abs(_np(full(changed, mask)) - _np(full(x, mask))).max(axis=(0, 2))
    assert np.all(moved > 1e-4)


def test_rotary_scores_depend_on_relative_positions_only():
    """RoPE: the same query and key vectors give a score that depends on
    their distance, not on where the pair sits; without rotation all are
    equal."""
    layer = BertSelfAttention(num_heads=N, hidden_dim=12, rope_theta=100.0, use_bias=False)
    x = np.tile(10 * np.random.default_rng(4).normal(size=(1, 1, 12)), (1, 12, 1)).astype("float32")
    _, scores = layer(x, np.ones((1, 12), "int32"), return_attention_scores=True)
    assert layer.query.bias is None and layer.attention_output.bias is None
    scores = _np(scores)[0, 0]  # (T, S): one vector at every position
    for distance in (1, 3, 5):
        diagonal = np.diagonal(scores, offset=distance)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-4)
    assert np.ptp(np.diagonal(scores)) < 1e-4 and np.ptp(scores) > 1e-2


def test_rotary_needs_an_even_head_size():
    with pytest.raises(ValueError, match="even head size, got hidden_dim / num_heads = 5"):
        BertSelfAttention(num_heads=2, hidden_dim=10, rope_theta=100.0)


# === Local attention in blocks (issue 34) ===
# The blocked form must equal the banded S x S one at every position,
# padding included. Measured: TensorFlow 0 (bit-equal), JAX <= 1.4e-9 on
# these inputs; bar 1e-6.
BLOCKED_TOLERANCE = 1e-6


def _paths(layer, x, mask):
    outputs = {}
    for path in ("banded", "blocked"):
        layer.local_attention_path = path
        outputs[path] = _np(layer(x, mask))
    layer.local_attention_path = "auto"
    return outputs


@pytest.mark.parametrize(
    "window, seq",
    [(2, 9), (7, 23), (16, 5), (16, 33)],
)
def test_blocked_local_attention_equals_banded(window, seq):
    """Windows even and odd (block = window // 2), lengths shorter than a
    block, odd, and not a multiple of the block; rows fully real, padded
    after a few tokens (tails longer than the window: queries there see no
    key), and all padding; and no padding mask at all."""
    rng = np.random.default_rng(window * 100 + seq)
    x = rng.normal(size=(4, seq, 12)).astype("float32")
    mask = np.ones((4, seq), "int32")
    mask[1, max(1, seq // 3) :] = 0
    mask[2, seq - 1 :] = 0
    mask[3] = 0
    layer = BertSelfAttention(num_heads=N, hidden_dim=12, rope_theta=50.0, attention_window=window)
    for padding in (mask, None):
        outputs = _paths(layer, x, padding)
        np.testing.assert_allclose(outputs["blocked"], outputs["banded"], atol=BLOCKED_TOLERANCE)
    # The window is honoured: a layer that sees everything differs.
    layer.attention_window = None
    if seq > window // 2 + 1:
        assert np.abs(_np(layer(x, mask)) - outputs["banded"]).max() > 1e-3


def test_blocked_local_attention_with_attention_dropout():
    """Training with attention dropout runs the explicit softmax on the
    blocks: a token outside a query's window still cannot move it, and
    without training the blocks equal the band."""
    seq = 30
    x = np.random.default_rng(5).normal(size=(2, seq, 12)).astype("float32")
    mask = np.ones((2, seq), "int32")
    layer = BertSelfAttention(
        num_heads=N, hidden_dim=12, attention_dropout=0.5, rope_theta=50.0, attention_window=6
    )
    layer.local_attention_path = "blocked"
    changed = x.copy()
    changed[:, 20] += 1.0
    seed = layer.dropout_layer.seed_generator.state
    start = ops.convert_to_numpy(seed).copy()
    dropped = _np(layer(x, mask, training=True))
    seed.assign(start)  # the same dropout mask again
    moved = np.abs(_np(layer(changed, mask, training=True)) - dropped).max(axis=(0, 2))
    assert np.all(moved[17:24] > 1e-4), moved
    assert np.all(moved[:17] == 0) and np.all(moved[24:] == 0), moved
    assert np.abs(dropped - _np(layer(x, mask))).max() > 1e-3  # dropout did act
    outputs = _paths(layer, x, mask)
    np.testing.assert_allclose(outputs["blocked"], outputs["banded"], atol=BLOCKED_TOLERANCE)


def test_local_layers_choose_blocks_past_the_measured_length(monkeypatch):
    """With "auto", banded up to BLOCKED_MIN_LENGTH tokens, blocks beyond it;
    scores requested: the banded form (they are S x S)."""
    from bertzoo.layers import attention
    from bertzoo.layers.local_attention import BLOCKED_MIN_LENGTH

    calls = []
    blocked = attention.blocked_sliding_window_attention
    monkeypatch.setattr(
        attention,
        "blocked_sliding_window_attention",
        lambda *args: calls.append(1) or blocked(*args),
    )
    layer = BertSelfAttention(num_heads=N, hidden_dim=12, rope_theta=50.0, attention_window=8)
    for seq, expected in ((BLOCKED_MIN_LENGTH, 0), (BLOCKED_MIN_LENGTH + 1, 1)):
        calls.clear()
        x = np.random.default_rng(seq).normal(size=(1, seq, 12)).astype("float32")
        layer(x, np.ones((1, seq), "int32"))
        assert len(calls) == expected, seq
    calls.clear()
    _, scores = layer(x, np.ones((1, seq), "int32"), return_attention_scores=True)
    assert not calls and scores.shape == (1, N, seq, seq)
    BertSelfAttention(num_heads=N, hidden_dim=12)(x)  # a global layer: never blocks
    assert not calls
    layer.local_attention_path = "block"
    with pytest.raises(ValueError, match="'auto', 'banded' or 'blocked', got 'block'"):
        layer(x)


def test_blocked_local_attention_with_unknown_length_under_tf_function(monkeypatch):
    """A graph traced with the sequence length unknown (TensorFlow's
    `reduce_retracing`) runs the blocks with computed padding; the result is
    the banded one."""
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("shapes unknown when traced: TensorFlow graphs only")
    import tensorflow as tf

    from bertzoo.layers import attention

    calls = []
    blocked = attention.blocked_sliding_window_attention
    monkeypatch.setattr(
        attention,
        "blocked_sliding_window_attention",
        lambda *args: calls.append(1) or blocked(*args),
    )
    layer = BertSelfAttention(num_heads=N, hidden_dim=12, rope_theta=50.0, attention_window=7)
    traced = tf.function(
        lambda x, m: layer(x, m),
        input_signature=[tf.TensorSpec((None, None, 12)), tf.TensorSpec((None, None), tf.int32)],
    )
    for seq in (5, 23):
        x = np.random.default_rng(seq).normal(size=(2, seq, 12)).astype("float32")
        mask = np.ones((2, seq), "int32")
        mask[1, 3:] = 0
        layer.local_attention_path = "banded"
        expected = _np(layer(x, mask))
        layer.local_attention_path = "auto"
        np.testing.assert_allclose(traced(x, mask).numpy(), expected, atol=BLOCKED_TOLERANCE)
    assert calls == [1]  # traced once, in blocks
