"""TextEmbedder on a ModernBERT sentence-transformers directory against
sentence-transformers' own embeddings: tests/fixtures/
modernbert_sentence_transformers, written by
tests/fixtures/make_modernbert_st_fixture.py (sentence-transformers 6.2,
transformers 5.24) -- a tiny random ModernBERT (a global layer, then two
local ones with a window of 8; rotary positions; GeGLU) over the small
ModernBERT tokenizer, mean pooling and Normalize; messy texts ([MASK] with
the whitespace before it, special-token strings, whitespace runs, NFC,
texts cut at max_seq_length 40, fuzz) and pairs (`[CLS] A [SEP] B [SEP]`).
Bars: cosine >= 1 - 1e-5 and max abs error 1e-5 on unit vectors."""

import json

import numpy as np
import pytest

import bertzoo
from bertzoo.errors import InputError
from tests.conftest import FIXTURES, seed_everything

DIR = FIXTURES / "modernbert_sentence_transformers"
REF = np.load(DIR / "reference.npz")
TEXTS = json.loads(str(REF["texts"]))
PAIRS = json.loads(str(REF["pairs"]))


def _worst(mine, expected):
    cosine = np.sum(mine * expected, -1) / np.linalg.norm(mine, axis=-1)
    cosine /= np.linalg.norm(expected, axis=-1)
    return float(cosine.min()), float(np.abs(mine - expected).max())


@pytest.fixture(scope="module")
def embedder():
    seed_everything()
    return bertzoo.TextEmbedder.from_preset(DIR)


@pytest.mark.slow
def test_modernbert_sentence_transformers_directory(embedder):
    """The directory sentence-transformers 6 saved, embedded. Measured
    (TensorFlow): cosine >= 1 - 1.2e-7, max abs error 3.6e-7."""
    assert (embedder.pooling, embedder.normalize) == ("mean", True)
    assert embedder.preprocessor.sequence_length == 40
    assert type(embedder.preprocessor.tokenizer).__name__ == "ByteLevelBPETokenizer"
    backbone = embedder.backbone
    assert backbone.gated_feedforward and backbone.norm_first and backbone.num_segments == 0
    singles = embedder.embed(TEXTS)
    pairs = embedder.embed(([a for a, _ in PAIRS], [b for _, b in PAIRS]))
    for mine, name in ((singles, "single_embeddings"), (pairs, "pair_embeddings")):
        cosine, error = _worst(mine, REF[name])
        assert cosine >= 1 - 1e-5 and error <= 1e-5, (name, cosine, error)
        np.testing.assert_allclose(np.linalg.norm(mine, axis=-1), 1.0, atol=1e-5)


def test_packed_rows_match_sentence_transformers(embedder):
    """The same texts (2 to 40 tokens; local layers with a window of 8)
    packed into rows of 24 tokens (`packing=24`; texts over 24 in rows of
    their own): the same bars. Measured against the padded path: <= 2.4e-7.
    From token-id dicts: the same vectors. Packing refuses what it cannot
    pack, before any work."""
    packed = embedder.embed(TEXTS, batch_size=64, packing=24)
    cosine, error = _worst(packed, REF["single_embeddings"])
    assert cosine >= 1 - 1e-5 and error <= 1e-5, (cosine, error)
    features = embedder.preprocessor.pack(TEXTS)
    features = {k: features[k].numpy() for k in embedder.input}
    np.testing.assert_array_equal(embedder.predict(features, 64, packing=24), packed)
    with pytest.raises(InputError, match="packing must be False, True or a row length"):
        embedder.embed(TEXTS, packing="yes")
    # Rows longer than the model's positions (before: a raw TensorFlow error).
    positions = embedder.backbone.max_sequence_length
    with pytest.raises(InputError, match=f"rows longer than this model's {positions} positions"):
        embedder.embed(TEXTS, packing=positions + 1)
    features["padding_mask"][0, :2] = 0
    with pytest.raises(InputError, match="padded on the right"):
        embedder.predict(features, packing=True)
    generator = (x for x in [features])
    with pytest.raises(InputError, match="packing=True takes texts or a dict of token-id arrays"):
        embedder.predict(generator, packing=True)
