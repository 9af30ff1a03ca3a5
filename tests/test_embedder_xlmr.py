"""TextEmbedder on an XLM-R sentence-transformers directory, as multilingual
embedding models ship, against sentence-transformers' own embeddings:
tests/fixtures/xlmr_sentence_transformers, written by
tests/fixtures/make_xlmr_st_fixture.py (sentence-transformers 6.2,
transformers 5.24) -- a tiny random XLM-R over the small XLM-R tokenizer,
messy texts (special-token strings, whitespace runs, texts cut at
max_seq_length, fuzz) and pairs (`<s> A </s></s> B </s>`, one segment).
Bars: cosine >= 1 - 1e-5 and max abs error 1e-4 on unit vectors."""

import json
import shutil

import numpy as np
import pytest

import bertzoo
from bertzoo.embedder import sentence_transformers_settings
from tests.conftest import FIXTURES

DIR = FIXTURES / "xlmr_sentence_transformers"
REF = np.load(DIR / "reference.npz")
TEXTS = json.loads(str(REF["texts"]))
PAIRS = json.loads(str(REF["pairs"]))


def _st6_layout(tmp_path):
    """The same model with the files sentence-transformers 6 writes
    (`pooling_mode`, the length in tokenizer_config.json)."""
    out = tmp_path / "st6_layout"
    shutil.copytree(DIR, out, ignore=shutil.ignore_patterns("st6"))
    (out / "sentence_bert_config.json").unlink()
    for path in (DIR / "st6").rglob("*"):
        if path.is_file():
            target = out / path.relative_to(DIR / "st6")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return out


def _worst(mine, expected):
    cosine = np.sum(mine * expected, -1) / np.linalg.norm(mine, axis=-1)
    cosine /= np.linalg.norm(expected, axis=-1)
    return float(cosine.min()), float(np.abs(mine - expected).max())


# Marked jax: the JAX pass's one check of the XLM-R (fairseq SentencePiece)
# tokenizer, end to end through an XLM-R model (tests/tokenizers/test_fairseq.py
# runs in the TensorFlow pass only).
@pytest.mark.jax
@pytest.mark.slow
def test_xlmr_sentence_transformers_directory():
    """The released layout, embedded. Measured (TensorFlow): cosine
    >= 1 - 1.2e-7, max abs error 1.2e-7."""
    embedder = bertzoo.TextEmbedder.from_preset(DIR)
    assert (embedder.pooling, embedder.normalize) == ("mean", True)
    assert embedder.preprocessor.sequence_length == 24  # max_seq_length, not the 40 positions
    assert type(embedder.preprocessor.tokenizer).__name__ == "XLMRobertaTokenizer"
    assert embedder.backbone.num_segments == 1
    singles = embedder.embed(TEXTS)
    pairs = embedder.embed(([a for a, _ in PAIRS], [b for _, b in PAIRS]))
    for mine, name in ((singles, "single_embeddings"), (pairs, "pair_embeddings")):
        cosine, error = _worst(mine, REF[name])
        assert cosine >= 1 - 1e-5 and error <= 1e-4, (name, cosine, error)
        np.testing.assert_allclose(np.linalg.norm(mine, axis=-1), 1.0, atol=1e-5)


@pytest.mark.backend_independent
def test_sentence_transformers_6_layout(tmp_path):
    """The files sentence-transformers 6 writes for the same model give the
    same settings (its embeddings then are the released layout's)."""
    released = sentence_transformers_settings(DIR)
    st6 = sentence_transformers_settings(_st6_layout(tmp_path))
    assert released == {
        "normalize": True,
        "pooling": "mean",
        "sequence_length": 24,
        "lowercase": False,
    }
    assert st6 == {"normalize": True, "pooling": "mean", "lowercase": False, "tokenizer_length": 24}
    embedder = bertzoo.TextEmbedder.from_preset(_st6_layout(tmp_path / "again"), load_weights=False)
    assert (embedder.pooling, embedder.normalize) == ("mean", True)
    assert embedder.preprocessor.sequence_length == 24
