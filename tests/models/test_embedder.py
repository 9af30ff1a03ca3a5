"""TextEmbedder: strings in, sentence embeddings out, vs sentence-transformers."""

import json

import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.layers import TokenPooling
from bertzoo.models.embedder import sentence_transformers_settings
from tests.conftest import FIXTURES


def test_minilm_embeddings_from_strings(minilm_dir):
    """Strings -> bertzoo tokenizer -> backbone -> mean pooling -> L2, against
    the reference embeddings (HF transformers + sentence-transformers'
    pooling, tests/fixtures/make_hf_reference.py). Bar: cosine >= 0.9999."""
    embedder = bertzoo.TextEmbedder.from_preset(minilm_dir)
    # Read from the directory's sentence-transformers files.
    assert (embedder.pooling, embedder.normalize) == ("mean", True)
    assert embedder.preprocessor.sequence_length == 256
    ref = np.load(FIXTURES / "minilm_reference.npz")
    info = json.loads(str(ref["info"]))
    singles = embedder.embed(info["singles"], batch_size=3)
    pairs = embedder.embed(([a for a, _ in info["pairs"]], [b for _, b in info["pairs"]]))
    for mine, expected in ((singles, ref["single_embeddings"]), (pairs, ref["pair_embeddings"])):
        assert mine.shape == expected.shape
        cosine = np.sum(mine * expected, -1) / np.linalg.norm(mine, axis=-1) / np.linalg.norm(expected, axis=-1)
        assert cosine.min() >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(mine, axis=-1), 1.0, atol=1e-5)
    assert embedder.predict(info["singles"][0], verbose=0).shape == (384,)


def test_pooling_modes():
    seq = np.array([[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]]], "float32")
    mask = np.array([[1, 1, 0]], "int32")

    def pooled(mode, normalize=False):
        return np.asarray(ops.convert_to_numpy(TokenPooling(mode, normalize)(seq, mask)))

    np.testing.assert_allclose(pooled("cls"), [[1.0, -2.0]])
    np.testing.assert_allclose(pooled("mean"), [[2.0, 1.0]])
    np.testing.assert_allclose(pooled("max"), [[3.0, 4.0]])  # padding ignored
    np.testing.assert_allclose(pooled("max", True), [[0.6, 0.8]], rtol=1e-6)
    with pytest.raises(ValueError, match="Valid: cls, mean, max"):
        TokenPooling("sum")


def test_embedder_without_preprocessor_takes_ids():
    from tests.conftest import make_inputs, tiny_backbone

    embedder = bertzoo.TextEmbedder(tiny_backbone(), pooling="cls", normalize=False)
    inputs = make_inputs()
    out = embedder.predict(inputs, verbose=0)
    direct = ops.convert_to_numpy(embedder.backbone(inputs)["sequence_output"])[:, 0]
    np.testing.assert_allclose(out, direct, atol=1e-6)
    with pytest.raises(ValueError, match="has no preprocessor"):
        embedder.embed(["text"])


def test_sentence_transformers_settings_errors(tmp_path):
    assert sentence_transformers_settings(tmp_path) == {}
    (tmp_path / "modules.json").write_text(
        json.dumps([{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}])
    )
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_sqrt_len_tokens": True})
    )
    with pytest.raises(bertzoo.PresetError, match="pooling_mode_mean_sqrt_len_tokens.*not supported"):
        sentence_transformers_settings(tmp_path)
