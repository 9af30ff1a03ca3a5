"""BertTokenizer: token ids identical to the reference BERT tokenizers.

The reference ids in tests/fixtures/tokenizer_reference.json come from
Hugging Face transformers (tests/fixtures/make_tokenizer_reference.py):
`BertTokenizerLegacy` (reference="hf-python") and `BertTokenizer`, the Rust
`tokenizers` backend (reference="hf-fast"), on 26 hand-written and 400
random Unicode texts, in three modes. The fuzzed comparison with all three
references (google-research/bert too) is test_fidelity.py.
"""

import json
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.tokenizers import BertTokenizer, TokenizerError, basic, unicode
from tests.conftest import FIXTURES

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

MODES = {
    "uncased": dict(lowercase=True),
    "cased": dict(lowercase=False),
    "lower_keep_accents": dict(lowercase=True, strip_accents=False),
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def reference():
    return json.loads((FIXTURES / "tokenizer_reference.json").read_text(encoding="utf-8"))


def _rows(ids):
    if isinstance(ids, tf.RaggedTensor):
        return [list(map(int, r)) for r in ids.to_list()]
    return [list(map(int, r)) for r in ids]


@pytest.mark.parametrize("mode", list(MODES))
def test_matches_reference_tokenizers(minilm_dir, reference, mode):
    texts = reference["texts"]
    for name, key in (("hf-python", "legacy"), ("hf-fast", "fast"), ("google", None)):
        tokenizer = BertTokenizer(minilm_dir / "vocab.txt", reference=name, **MODES[mode])
        mine = _rows(tokenizer(texts))
        # The TF-op tokenizer equals the plain-Python specification everywhere.
        spec = [[tokenizer.token_to_id(p) for p in tokenizer.reference_pieces(t)] for t in texts]
        assert mine == spec, name
        # Each Hugging Face reference, exactly (the fuzzed comparison with all
        # three references is tests/tokenizers/test_fidelity.py).
        if key is not None:
            assert mine == reference["ids"][mode][key], name
    # The two Hugging Face implementations disagree on this set (unassigned
    # code points, final sigma, Unicode versions): one setting cannot match both.
    fast, legacy = reference["ids"][mode]["fast"], reference["ids"][mode]["legacy"]
    assert sum(f != g for f, g in zip(fast, legacy)) > 0


def test_minilm_fixture_ids_and_features(minilm_dir, reference):
    tokenizer = BertTokenizer(minilm_dir / "vocab.txt")
    pieces = tokenizer.detokenize(tokenizer("Café naïve 이 원피스 北京"))
    # Accents stripped; Hangul decomposed to jamo as the reference does;
    # CJK ideographs split one per word.
    assert pieces[:2] == ["cafe", "naive"]
    assert all(not ("\uac00" <= ch <= "\ud7a3") for p in pieces for ch in p)
    assert pieces[-2:] == ["北", "京"]
    # Words over the limit are [UNK]: 200 characters in google-research/bert,
    # 100 in both Hugging Face implementations.
    assert tokenizer.detokenize(tokenizer("x" * 200))[0] != "[UNK]"
    assert tokenizer.detokenize(tokenizer("x" * 201)) == ["[UNK]"]
    for name in ("hf-python", "hf-fast"):
        hf = BertTokenizer(minilm_dir / "vocab.txt", reference=name)
        assert hf.detokenize(hf("x" * 100 + " " + "x" * 101))[-1] == "[UNK]"
        assert hf.detokenize(hf("x" * 101)) == ["[UNK]"]
        assert hf.detokenize(hf("x" * 100)) != ["[UNK]"]


def test_control_char_modes():
    vocab = SPECIALS + ["a", "b", "\ue000"]
    text = "a\ue000b\u200bb"  # private use (Co) and zero-width space (Cf)
    hf = BertTokenizer(vocab, control_chars="hf")
    google = BertTokenizer(vocab, control_chars="google")
    assert hf.detokenize(hf(text)) == ["[UNK]"]  # "abb" is one word, not in vocab
    assert google.detokenize(google(text)) == ["[UNK]"]
    assert hf.reference_pieces("a \ue000 b") == ["a", "b"]
    assert google.reference_pieces("a \ue000 b") == ["a", "\ue000", "b"]
    assert google.detokenize(google("a \ue000 b")) == ["a", "\ue000", "b"]
    with pytest.raises(ValueError, match="control_chars must be one of hf, google"):
        BertTokenizer(vocab, control_chars="tf")
    # The Rust reference has its own cleaning.
    with pytest.raises(ValueError, match="Leave control_chars unset"):
        BertTokenizer(vocab, reference="hf-fast", control_chars="hf")
    with pytest.raises(ValueError, match="reference must be one of google, hf-python, hf-fast"):
        BertTokenizer(vocab, reference="hf")


def test_wordpiece_greedy_longest_match():
    vocab = SPECIALS + ["un", "##aff", "##able", "##a", "##ffable", "aff", "runn", "##ing"]
    tokenizer = BertTokenizer(vocab)
    # Greedy longest-match-first, checked against the plain-Python spec.
    for text in ["unaffable", "running", "runnin", "affable", "un", "una"]:
        assert tokenizer.detokenize(tokenizer(text)) == basic.tokenize_to_pieces(
            text, set(vocab), basic.BasicTokenizer()
        )
    # Longest first: "##a" is in the vocabulary but "##aff" wins.
    assert tokenizer.detokenize(tokenizer("unaffable")) == ["un", "##aff", "##able"]
    assert tokenizer.detokenize(tokenizer("running")) == ["runn", "##ing"]
    # "runn" matches but "##in" cannot be covered: the whole word is [UNK].
    assert tokenizer.detokenize(tokenizer("runnin")) == ["[UNK]"]


def test_shapes_dtypes_and_graph_use():
    tokenizer = BertTokenizer(SPECIALS + ["hello", "world", "!"])
    single = tokenizer("hello world!")
    batch = tokenizer(["hello", "", "world world"])
    if isinstance(batch, tf.RaggedTensor):
        assert batch.dtype == tf.int32
        assert _rows(batch) == [[5], [], [6, 6]]
        assert list(np.asarray(single)) == [5, 6, 7]
    else:  # JAX / torch backends: numpy
        assert [list(r) for r in batch] == [[5], [], [6, 6]]
        assert list(single) == [5, 6, 7]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def graph(x):
        return tokenizer.tokenize_ids(x).to_tensor()

    assert graph(tf.constant(["hello world", "!"])).numpy().tolist() == [[5, 6], [7, 0]]
    ds = tf.data.Dataset.from_tensor_slices(["hello", "world !"]).map(tokenizer)
    assert [list(x.numpy()) for x in ds] == [[5], [6, 7]]


def test_invalid_utf8_bytes_are_dropped_like_replacement_chars():
    tokenizer = BertTokenizer(SPECIALS + ["ab"])
    ids = tokenizer.tokenize_ids(tf.constant([b"a\xffb", b"a\xef\xbf\xbdb"]))
    assert _rows(ids) == [[5], [5]]


def test_save_and_from_preset(tmp_path, minilm_dir):
    tokenizer = BertTokenizer.from_preset(minilm_dir)
    assert tokenizer.vocabulary_size == 30522
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id) == (101, 102, 0)
    assert (tokenizer.lowercase, tokenizer.strip_accents) == (True, True)
    path = tokenizer.save_to_preset(tmp_path)
    assert path.read_text(encoding="utf-8") == (minilm_dir / "vocab.txt").read_text(
        encoding="utf-8"
    )
    with pytest.raises(TokenizerError, match="ships no vocabulary: pass vocabulary="):
        BertTokenizer.from_preset("bert_base")
    with pytest.raises(
        TokenizerError, match="30522 tokens but the model's embedding table has 28996"
    ):
        BertTokenizer.from_preset("bert_base_cased", vocabulary=minilm_dir / "vocab.txt")
    ok = BertTokenizer.from_preset("bert_base", vocabulary=minilm_dir / "vocab.txt")
    assert ok.vocabulary_size == 30522


def test_vocabulary_errors(tmp_path):
    with pytest.raises(TokenizerError, match=r"lacks the special token\(s\) \[MASK\]"):
        BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])
    with pytest.raises(TokenizerError, match="more than once"):
        BertTokenizer(SPECIALS + ["a", "a"])
    with pytest.raises(TokenizerError, match="does not exist"):
        BertTokenizer(tmp_path / "missing.txt")
    bad = tmp_path / "vocab.txt"
    bad.write_bytes(b"[PAD]\n\xff\n")
    with pytest.raises(TokenizerError, match="not UTF-8"):
        BertTokenizer(bad)
    with pytest.raises(TypeError, match="Tokenizers take strings"):
        BertTokenizer(SPECIALS)([1, 2])


def test_shipped_unicode_tables_are_current():
    """The package ships the character classes it would otherwise compute at
    start-up; they must equal what this Python and TensorFlow compute."""
    shipped = json.loads(unicode.TABLES_FILE.read_text(encoding="utf-8"))
    if shipped["unidata_version"] != unicodedata.unidata_version:
        pytest.skip("tables are for another Unicode version (recomputed at run time)")
    assert shipped == unicode.compute_tables()
