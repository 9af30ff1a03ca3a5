"""Token tagging tokenizes pre-split words as Hugging Face does with
`is_split_into_words=True`: RoBERTa's byte-level BPE puts a prefix space
before every word ("Ġword", `add_prefix_space=True`, as transformers'
token-classification example loads it), XLM-R's SentencePiece a "▁".
The reference is tests/fixtures/split_words.json, written by
tests/fixtures/make_split_words_fixtures.py (transformers 5.24, tokenizers
0.23.3) over the tokenizers of tests/fixtures/byte_bpe and tests/fixtures/xlmr.
"""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.tasks.tagging import TAGGING
from bertzoo.tasks.tagging.features import tagging_features
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer
from bertzoo.tokenizers.fairseq import XLMRobertaTokenizer
from tests.conftest import FIXTURES

REF = json.loads((FIXTURES / "split_words.json").read_text(encoding="utf-8"))
SENTENCES = REF["sentences"]


KINDS = ["byte_level_bpe", "fairseq_sentencepiece"]


def _tokenizer(kind, **kwargs):
    if kind == "byte_level_bpe":
        return ByteLevelBPETokenizer(FIXTURES / "byte_bpe" / "vocab.json", **kwargs)
    return XLMRobertaTokenizer(FIXTURES / "xlmr" / "sentencepiece.bpe.model")


@pytest.fixture(scope="module")
def tokenizers():
    """Each kind's tokenizer, built once (XLM-R's takes seconds)."""
    return {kind: _tokenizer(kind) for kind in KINDS}


@pytest.mark.backend_independent
@pytest.mark.parametrize("kind", KINDS)
def test_each_word_gets_the_reference_ids(kind, tokenizers):
    tokenizer = tokenizers[kind]
    words = [w for sentence in SENTENCES for w in sentence]
    got = tokenizer.tokenize_word_ids(tf.constant(words)).to_list()
    want = [ids for row in REF[kind] for ids in row["words"]]
    differing = [(w, g, e) for w, g, e in zip(words, got, want, strict=True) if g != e]
    assert not differing, differing[:5]
    if kind == "byte_level_bpe":
        # The same whatever the tokenizer's own add_prefix_space, and in a graph.
        own = _tokenizer(kind, add_prefix_space=True)
        assert own.tokenize_word_ids(tf.constant(words)).to_list() == got
        graph = tf.function(
            tokenizer.tokenize_word_ids, input_signature=[tf.TensorSpec([None], tf.string)]
        )
        assert graph(tf.constant(words[:40])).to_list() == got[:40]
        # A whole text still starts bare, as RoBERTa's tokenizer has it.
        assert tokenizer.tokenize_ids(tf.constant(["Hello"])).to_list()[0] == [43, 464, 507]
        assert got[words.index("Hello")] == [224, 43, 464, 507]


@pytest.mark.backend_independent
@pytest.mark.parametrize("kind", KINDS)
def test_tagging_features_pack_as_the_reference(kind, tokenizers):
    """Token ids equal `tok(words, is_split_into_words=True, truncation=True,
    max_length=L)`; each word's label goes on its first token (the
    encoding's first position of that word id), and packed lengths count
    every word's tokens."""
    tokenizer = tokenizers[kind]
    length = REF["max_length"]
    sentences = [SimpleNamespace(words=s, tags=None, line=1) for s in SENTENCES]
    features, _, starts, _ = tagging_features(tokenizer, sentences, None, length)
    lengths = TAGGING.packed_lengths(SimpleNamespace(examples=sentences), tokenizer)
    for row, (sentence, ref) in enumerate(zip(SENTENCES, REF[kind], strict=True)):
        n = len(ref["packed"])
        assert features["token_ids"][row, :n].tolist() == ref["packed"], sentence
        assert (features["token_ids"][row, n:] == tokenizer.pad_token_id).all()
        assert features["padding_mask"][row].sum() == n
        first, want = 1, []
        for ids in ref["words"]:
            want.append(first if ids and first <= length - 2 else -1)
            first += len(ids)
        got = starts[row, : len(sentence)].tolist()
        assert got == want, sentence
        assert lengths[row] == 2 + sum(len(ids) for ids in ref["words"])
    assert np.all(starts[:, max(map(len, SENTENCES)) :] == -1)
