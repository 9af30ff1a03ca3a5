import keras
import numpy as np
import pytest
from keras import ops

from bertzoo.layers import ACTIVATION_NAMES, BertEmbeddings, BertTransformerBlock, get_activation


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


def test_embeddings_sum_then_layer_norm():
    layer = BertEmbeddings(61, 10, 10, max_sequence_length=32, num_segments=2)
    ids = np.array([[3, 4, 5, 0, 0], [7, 8, 9, 10, 11]], "int32")
    seg = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], "int32")
    out = _np(layer(ids, seg))
    tok = _np(layer.token_embedding.embeddings)[ids]
    pos = _np(layer.position_embeddings)[:5][None]
    sg = _np(layer.segment_embedding.embeddings)[seg]
    s = tok + pos + sg
    expected = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_factorised_embedding_projects_to_hidden():
    layer = BertEmbeddings(61, 6, 10, max_sequence_length=32, num_segments=0)
    ids = np.ones((3, 5), "int32")
    assert tuple(layer(ids).shape) == (3, 5, 10)
    assert tuple(layer.embeddings.shape) == (61, 6)
    assert layer.segment_embedding is None
    assert tuple(layer.projection.kernel.shape) == (6, 10)


def test_embeddings_reject_too_long_sequence():
    layer = BertEmbeddings(61, 6, 6, max_sequence_length=4, num_segments=0)
    with pytest.raises(ValueError, match="longer than the model's max_sequence_length=4"):
        layer(np.ones((1, 5), "int32"))


def test_roberta_positions_count_non_padding_tokens_past_the_padding_id():
    """transformers' create_position_ids_from_input_ids with padding_idx 1:
    cumsum(id != 1) * (id != 1) + 1, so real tokens start at position 2 and
    every padding token (wherever it is) reads row 1."""
    layer = BertEmbeddings(61, 8, 8, max_sequence_length=9, num_segments=1, position_padding_id=1)
    ids = np.array([[0, 5, 6, 2, 1, 1], [0, 7, 1, 8, 2, 1]], "int32")
    out = _np(layer(ids, np.zeros_like(ids)))
    positions = np.array([[2, 3, 4, 5, 1, 1], [2, 3, 1, 4, 5, 1]])
    s = (
        _np(layer.token_embedding.embeddings)[ids]
        + _np(layer.position_embeddings)[positions]
        + _np(layer.segment_embedding.embeddings)[0]
    )
    expected = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    # 9 rows, 2 of them for padding: 7 tokens fit, 8 do not.
    assert layer.max_input_length == 7
    assert tuple(layer(np.full((1, 7), 5, "int32"), np.zeros((1, 7), "int32")).shape) == (1, 7, 8)
    with pytest.raises(ValueError, match="first 2 serve padding .*at most 7 tokens"):
        layer(np.full((1, 8), 5, "int32"), np.zeros((1, 8), "int32"))
    assert BertEmbeddings.from_config(layer.get_config()).position_padding_id == 1


def test_embeddings_require_segments_when_configured():
    layer = BertEmbeddings(61, 6, 6, max_sequence_length=8, num_segments=2)
    with pytest.raises(ValueError, match="segment_ids are required"):
        layer(np.ones((1, 5), "int32"))


def test_block_is_post_layer_norm():
    block = BertTransformerBlock(num_heads=2, hidden_dim=10, intermediate_dim=26, activation="gelu")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7, 10)).astype("float32")
    mask = np.ones((3, 7), "int32")
    out = _np(block(x, mask))

    def ln(v, layer):
        v = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-12)
        return v * _np(layer.gamma) + _np(layer.beta)

    attended = _np(block.self_attention(x, mask))
    h = ln(x + attended, block.attention_layer_norm)
    inner = h @ _np(block.intermediate_dense.kernel) + _np(block.intermediate_dense.bias)
    from math import erf

    gelu = inner * 0.5 * (1 + np.vectorize(erf)(inner / np.sqrt(2)))
    ffn = gelu @ _np(block.output_dense.kernel) + _np(block.output_dense.bias)
    expected = ln(h + ffn, block.output_layer_norm)
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_gelu_variants_differ_as_documented():
    x = np.linspace(-6, 6, 2001).astype("float32")
    exact = _np(get_activation("gelu")(x))
    approx = _np(get_activation("gelu_approximate")(x))
    diff = np.abs(exact - approx).max()
    assert 1e-4 < diff < 5e-4  # REFERENCE: about 4.7e-4
    assert set(ACTIVATION_NAMES) >= {"gelu", "gelu_approximate", "relu"}
    with pytest.raises(ValueError, match="Valid activations: gelu, gelu_approximate"):
        get_activation("gelu_new")


def test_layers_serialize():
    block = BertTransformerBlock(num_heads=2, hidden_dim=10, intermediate_dim=26, dropout=0.2)
    clone = BertTransformerBlock.from_config(block.get_config())
    assert clone.get_config() == block.get_config()
    emb = BertEmbeddings(61, 6, 10, max_sequence_length=32, num_segments=3)
    assert BertEmbeddings.from_config(emb.get_config()).get_config() == emb.get_config()
    assert keras.saving.get_registered_name(BertTransformerBlock) == "bertzoo>BertTransformerBlock"
