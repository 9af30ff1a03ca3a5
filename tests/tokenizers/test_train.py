"""Vocabulary training: WordPiece and SentencePiece, on a small English text
and on tests/fixtures/korean_corpus.txt (292 everyday sentences)."""

import collections
import logging
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.tokenizers import train
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.basic import BasicTokenizer, tokenize_to_pieces
from bertzoo.tokenizers.sentencepiece import SentencePieceTokenizer, model_pieces
from bertzoo.tokenizers.wordpiece import BertTokenizer

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

KOREAN = Path(__file__).resolve().parents[1] / "fixtures" / "korean_corpus.txt"
KOREAN_LINES = [line for line in KOREAN.read_text(encoding="utf-8").splitlines() if line.strip()]
ENGLISH = """\
The Cat sat on the mat. The cat was happy!
Cats and dogs are friends; dogs chase cats, cats chase mice.
A café in Zürich serves crème brûlée.
Running, jumping and swimming are good sports.
The runner was running faster than the other runners.
"""
SENTENCE = "이 원피스 예뻐요"
RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ALBERT_FIRST = [
    "<pad>",
    "<unk>",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "(",
    ")",
    '"',
    "-",
    ".",
    "–",
    "£",
    "€",
]


def is_jamo(char):
    return 0x1100 <= ord(char) <= 0x11FF or 0x3130 <= ord(char) <= 0x318F


def as_lists(ids):
    """TF ragged (TensorFlow backend) or list of numpy arrays (JAX) -> lists."""
    if isinstance(ids, tf.RaggedTensor):
        return ids.to_list()
    return [np.asarray(row).tolist() for row in ids]


@pytest.fixture
def english(tmp_path):
    path = tmp_path / "english.txt"
    path.write_text(ENGLISH, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def korean_cased_vocab(tmp_path_factory):
    output = tmp_path_factory.mktemp("wp") / "vocab.txt"
    vocab = train.train_wordpiece(KOREAN, 1000, lowercase=False, strip_accents=False, output=output)
    return vocab, output


@pytest.fixture(scope="module")
def korean_uncased_vocab():
    return train.train_wordpiece(KOREAN, 1000)  # lowercase=True, strip_accents follows it


# ----------------------------------------------------------------- WordPiece


def test_wordpiece_layout(english, tmp_path):
    output = tmp_path / "out" / "vocab.txt"
    vocab = train.train_wordpiece(english, 120, output=output, min_frequency=2)
    assert vocab[:5] == RESERVED  # [PAD] is id 0: the backbone masks id 0
    assert len(vocab) <= 120 and len(set(vocab)) == len(vocab)
    assert output.read_text(encoding="utf-8") == "".join(t + "\n" for t in vocab)
    assert [p.name for p in output.parent.iterdir()] == ["vocab.txt"]  # no temp file left
    basic = BasicTokenizer(lowercase=True)
    chars = {c for line in ENGLISH.splitlines() for word in basic.tokenize(line) for c in word}
    assert chars == set("thecatsonmwhpy!dgrf;,iuzvbjnl.")  # lowercased, accents stripped
    for char in chars:
        assert char in vocab and "##" + char in vocab
    assert "cats" in vocab and "running" in vocab  # frequent words learnt whole
    assert train.train_wordpiece(english, 120, min_frequency=2) == vocab  # deterministic
    tokenizer = BertTokenizer(output)
    for line in ENGLISH.splitlines():
        assert tokenizer.unk_token_id not in as_lists(tokenizer([line]))[0], line


def test_wordpiece_custom_reserved_and_cased(english):
    vocab = train.train_wordpiece(
        english,
        200,
        lowercase=False,
        reserved_tokens=["<pad>", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[X]"],
    )
    assert vocab[:6] == ["<pad>", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[X]"]
    assert "C" in vocab and "é" in vocab  # cased: strip_accents follows lowercase


def test_wordpiece_errors(english, tmp_path, caplog):
    with pytest.raises(TokenizerError, match="does not exist"):
        train.train_wordpiece(tmp_path / "missing.txt", 100)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="empty.txt is empty"):
        train.train_wordpiece([english, empty], 100)
    with pytest.raises(TokenizerError, match="need at least 59"):  # 5 + 27 + 27
        train.train_wordpiece(english, 50, max_characters=27)
    with pytest.raises(TokenizerError, match="max_characters must be None or an integer >= 1"):
        train.train_wordpiece(english, 50, max_characters=0)
    with pytest.raises(TokenizerError, match="positive integer"):
        train.train_wordpiece(english, 0)
    with pytest.raises(TokenizerError, match="distinct"):
        train.train_wordpiece(english, 100, reserved_tokens=["[PAD]", "[PAD]"])
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café crème\nplain line\nnaïve\n".encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="bertzoo.tokenizers.train"):
        vocab = train.train_wordpiece(latin1, 100, lowercase=False, strip_accents=False)
    assert "2 line(s) are not valid UTF-8" in caplog.text
    assert "\ufffd" not in vocab  # BasicTokenizer drops U+FFFD, as BertTokenizer will


def test_wordpiece_keeps_the_most_frequent_characters_when_they_do_not_fit(
    english, tmp_path, caplog
):
    # A crawl's long tail: the English text, plus 400 rare characters
    # (CJK ideographs, emoji, mojibake, Cyrillic) seen once each, inside words.
    rare = [chr(0x4E00 + 7 * i) for i in range(300)] + [chr(0x1F300 + i) for i in range(60)]
    rare += list("ÃƒÂ©â€™Ã¤Ã¶Ã¼ÃŸ") + [chr(0x0400 + i) for i in range(30)]
    rare = list(dict.fromkeys(rare))
    path = tmp_path / "crawl.txt"
    lines = ENGLISH.splitlines() + [f"word{c}x" for c in rare]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cased = dict(lowercase=False, strip_accents=False, min_frequency=1)
    with caplog.at_level(logging.WARNING, logger="bertzoo.tokenizers.train"):
        vocab = train.train_wordpiece(path, 600, **cased)  # 5 + 2 x 400+ do not fit
    assert len(vocab) <= 600 and len(set(vocab)) == len(vocab)
    singles = {t.removeprefix("##") for t in vocab if len(t.removeprefix("##")) == 1}
    seen = collections.Counter(c for c in ENGLISH if not c.isspace())
    assert {c for c, n in seen.items() if n >= 2} <= singles  # the frequent ones are kept
    assert len(singles) == (600 - 5) // 4  # half of the vocabulary
    assert "Keeping the 148 most frequent" in caplog.text
    assert "become [UNK]" in caplog.text
    left_out = [c for c in rare if c not in singles]
    assert left_out
    # No learnt piece holds a character left out.
    assert not any(c in token for token in vocab for c in left_out)
    tokenizer = BertTokenizer(vocabulary=vocab, lowercase=False, strip_accents=False)
    ids = as_lists(tokenizer([f"the {left_out[0]} cat", "the cat"]))
    unk = vocab.index("[UNK]")
    assert unk in ids[0] and unk not in ids[1]
    # An explicit cap, below what fits.
    capped = train.train_wordpiece(path, 600, max_characters=40, **cased)
    assert len({t.removeprefix("##") for t in capped if len(t.removeprefix("##")) == 1}) == 40


def test_korean_wordpiece_cased_keeps_syllables(korean_cased_vocab):
    vocab, path = korean_cased_vocab
    assert vocab[:5] == RESERVED and len(vocab) == 981
    tokenizer = BertTokenizer(vocabulary=path, lowercase=False, strip_accents=False)
    ids = as_lists(tokenizer([SENTENCE, "가방이 예뻐서 샀어요"]))
    pieces = [tokenizer.detokenize(row) for row in ids]
    # Exact pieces of this deterministic training: "예뻐요" is frequent in the
    # corpus and learnt whole; "예뻐서" (once) splits into syllables.
    assert pieces == [
        ["이", "원피스", "예뻐요"],
        ["가", "##방", "##이", "예", "##뻐", "##서", "샀어요"],
    ]
    basic = BasicTokenizer(lowercase=False, strip_accents=False)
    assert pieces[0] == tokenize_to_pieces(SENTENCE, set(vocab), basic)
    # Structure: syllables, no jamo, nothing unknown, in the whole corpus.
    for row in as_lists(tokenizer(KOREAN_LINES)):
        assert tokenizer.unk_token_id not in row
        assert not any(is_jamo(c) for token in tokenizer.detokenize(row) for c in token)


def test_korean_wordpiece_uncased_defaults_give_jamo(korean_cased_vocab, korean_uncased_vocab):
    """The uncased defaults strip accents through NFD, which decomposes every
    Hangul syllable into jamo: the vocabulary and the pieces are jamo."""
    tokenizer = BertTokenizer(korean_uncased_vocab)  # lowercase=True, strip_accents=None
    pieces = tokenizer.detokenize(as_lists(tokenizer([SENTENCE]))[0])
    assert pieces == [
        "\u110b\u1175",
        "\u110b\u116f\u11ab\u1111\u1175\u1109\u1173",
        "\u110b\u1168\u1108\u1165\u110b\u116d",
    ]  # 이 / 원피스 / 예뻐요 as jamo
    assert all(is_jamo(c) for piece in pieces for c in piece.removeprefix("##"))
    assert tokenizer.unk_token_id not in as_lists(tokenizer([SENTENCE]))[0]
    cased = BertTokenizer(korean_cased_vocab[1], lowercase=False, strip_accents=False)
    assert cased.detokenize(as_lists(cased([SENTENCE]))[0]) == ["이", "원피스", "예뻐요"]
    # The jamo alphabet is much smaller than the syllable one.
    assert not any(0xAC00 <= ord(c) <= 0xD7A3 for t in korean_uncased_vocab for c in t)
    assert len(korean_uncased_vocab) < len(korean_cased_vocab[0])


# ------------------------------------------------------------- SentencePiece


@pytest.fixture(scope="module")
def korean_spm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("spm")
    path = train.train_sentencepiece(KOREAN, 500, directory, lowercase=False, strip_accents=False)
    return path


def test_sentencepiece_albert_layout_and_determinism(english, tmp_path):
    path = train.train_sentencepiece(english, 60, tmp_path / "a" / "spiece.model")
    assert path == tmp_path / "a" / "spiece.model"
    assert [p.name for p in path.parent.iterdir()] == ["spiece.model"]  # no temp file left
    pieces = model_pieces(path.read_bytes())
    assert len(pieces) == 60 and pieces[:13] == ALBERT_FIRST
    # The corpus went through the tokenizer's preprocessing: lowercased,
    # accents stripped, before sentencepiece saw it.
    assert not any(c.isupper() or c in "éèüû" for p in pieces[13:] for c in p)
    again = train.train_sentencepiece(english, 60, tmp_path / "b")  # a directory
    assert again == tmp_path / "b" / "spiece.model"
    assert again.read_bytes() == path.read_bytes()
    tokenizer = SentencePieceTokenizer(path)
    assert tokenizer.pad_token_id == 0 and tokenizer.mask_token_id == 4
    ids = as_lists(tokenizer(ENGLISH.splitlines()))
    assert all(tokenizer.unk_token_id not in row for row in ids)


def test_sentencepiece_errors(english, tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        train.train_sentencepiece(tmp_path / "missing.txt", 100, tmp_path)
    assert not (tmp_path / "spiece.model").exists()


def test_korean_sentencepiece_keeps_syllables(korean_spm):
    tokenizer = SentencePieceTokenizer(korean_spm, lowercase=False, strip_accents=False)
    assert tokenizer.vocabulary_size == 500 and tokenizer.vocabulary[:13] == ALBERT_FIRST
    pieces = tokenizer.detokenize(tokenizer(SENTENCE))
    assert pieces == ["▁", "이", "▁원피스", "▁예뻐", "요"]
    for row in as_lists(tokenizer(KOREAN_LINES)):  # character_coverage=1.0
        assert tokenizer.unk_token_id not in row
        assert not any(is_jamo(c) for token in tokenizer.detokenize(row) for c in token)


def test_korean_sentencepiece_strip_accents_recomposes(korean_spm, tmp_path):
    """Unlike WordPiece, ALBERT's accent stripping (NFKD) does not turn Korean
    into jamo for good: the model's nmt_nfkc normaliser composes the jamo
    back into syllables before segmentation, in training and encoding."""
    path = train.train_sentencepiece(KOREAN, 500, tmp_path)  # ALBERT defaults
    tokenizer = SentencePieceTokenizer(path)
    assert tokenizer.detokenize(tokenizer(SENTENCE)) == ["▁", "이", "▁원피스", "▁예뻐", "요"]
    assert not any(is_jamo(c) for p in tokenizer.vocabulary for c in p)
