"""Training RoBERTa's byte-level BPE (vocab.json + merges.txt) and XLM-R's
unigram SentencePiece (sentencepiece.bpe.model) on a corpus, and the
tokenizers built on them: messy text (every Unicode category, emoji, bytes
that are not UTF-8) comes back byte for byte, the merges are applied
exactly as they were learnt, and the word table stays within max_words."""

import collections
import json
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from bertzoo import cli
from bertzoo.tokenizers import train, train_bpe
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer, bytes_to_unicode
from bertzoo.tokenizers.corpus_stream import CorpusStats, read_lines
from bertzoo.tokenizers.fairseq import XLMRobertaTokenizer

# Files and tokenizer ops: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KOREAN = FIXTURES / "korean_documents.txt"
sys.path.insert(0, str(FIXTURES))
import fuzz_text  # noqa: E402

FROM_BYTE = {c: b for b, c in bytes_to_unicode().items()}
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def messy_corpus(path, n=300, seed=1):
    """Fuzz texts (mixed scripts, emoji, controls, private use, surrogates
    written as CESU bytes that are not UTF-8), raw invalid bytes and Korean
    sentences, one per line."""
    lines = [t.replace("\n", " ").replace("\r", " ") for t in fuzz_text.fuzz_texts(n, seed)]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    data += b"\nodd \xff\xfe bytes \xc3 and \xed\xa0\x80 halves\n"
    data += KOREAN.read_bytes()
    path.write_bytes(data)
    return path


def text_of(tokens):
    """Byte-level tokens -> the text they stand for."""
    return bytes(FROM_BYTE[c] for t in tokens for c in t).decode("utf-8")


def reference_bpe(word, ranks):
    """GPT-2's `bpe` (encoder.py): merge the lowest-ranked pair, all its
    occurrences left to right, until no pair is ranked."""
    word = list(word)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                out.append(word[i] + word[i + 1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        word = out
    return word


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bpe")
    corpus = messy_corpus(directory / "corpus.txt")
    stats = CorpusStats()
    path = train_bpe.train_byte_level_bpe(
        [str(corpus)], 1500, directory / "out" / "vocab.json", stats=stats
    )
    lines = list(read_lines([str(corpus)]))
    return ByteLevelBPETokenizer(path), lines, stats


def test_layout_and_files(trained):
    tokenizer, _, stats = trained
    vocabulary = tokenizer.vocabulary
    assert len(vocabulary) == 1500
    assert vocabulary[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and vocabulary[-1] == "<mask>"
    assert vocabulary[4:260] == [bytes_to_unicode()[b] for b in range(256)]
    assert vocabulary[260:-1] == [a + b for a, b in tokenizer.merges]
    assert len(set(vocabulary)) == len(vocabulary)
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id) == (1, 1499)
    assert stats.invalid_utf8 >= 1 and "counted exactly" in stats.word_counts


def test_messy_text_round_trips_and_is_never_unknown(trained):
    tokenizer, lines, _ = trained
    held_out = [t.replace("\n", " ") for t in fuzz_text.fuzz_texts(100, seed=7)]
    held_out = [t.encode("utf-8", "replace").decode("utf-8") for t in held_out]
    texts = [t for t in lines + held_out if "<" not in t]  # special-token strings aside
    tokens = tokenizer.token_strings(tf.constant(texts)).to_list()
    for text, row in zip(texts, tokens):
        assert text_of([t.decode() for t in row]) == text
    ids = tokenizer.tokenize_ids(tf.constant(texts)).flat_values.numpy()
    assert tokenizer.unk_token_id not in set(ids.tolist())


def test_merges_are_applied_exactly_as_learnt(trained):
    """The trainer's own split of every counted piece, GPT-2's reference
    `bpe` over the written merges and the TensorFlow tokenizer agree, piece
    for piece, and so do the ids."""
    tokenizer, lines, _ = trained
    pieces = train_bpe.ByteLevelWords().tokenize_lines(lines)
    counts = collections.Counter(train_bpe.to_byte_characters(p) for p in pieces)
    # Relearnt from the same counts: the written merges, and what training
    # left of each piece.
    relearnt, splits = train_bpe.learn_bpe(counts, 1500 - 261, 2, taken=SPECIALS)
    assert relearnt == tokenizer.merges
    ranks = {pair: i for i, pair in enumerate(tokenizer.merges)}
    distinct = sorted(set(pieces))
    got = tokenizer._run(tokenizer._bpe, tf.constant(distinct)).to_list()
    for piece, row in zip(distinct, got):
        word = train_bpe.to_byte_characters(piece)
        assert [t.decode() for t in row] == splits[word] == reference_bpe(word, ranks), piece
    ids = tokenizer(lines[:50])
    flat = [int(i) for row in ids for i in row]
    index = {t: i for i, t in enumerate(tokenizer.vocabulary)}
    words = train_bpe.ByteLevelWords().tokenize_lines(lines[:50])
    assert flat == [
        index[t] for p in words for t in reference_bpe(train_bpe.to_byte_characters(p), ranks)
    ]


def test_a_merge_never_makes_an_existing_token():
    """ "ab" + "c" after "a" + "bc" would make "abc" twice: the second pair
    is never merged, so every token has one merge and splits stay exact."""
    counts = {"abc": 10, "bc": 9, "ab": 8, "xabc": 1}
    merges, splits = train_bpe.learn_bpe(counts, 10, 1)
    made = [a + b for a, b in merges]
    assert len(made) == len(set(made))
    ranks = {pair: i for i, pair in enumerate(merges)}
    for word, split in splits.items():
        assert reference_bpe(word, ranks) == split


def test_memory_is_bounded_by_max_words(tmp_path, monkeypatch):
    corpus = messy_corpus(tmp_path / "corpus.txt", n=150, seed=3)
    seen = {}
    learn = train_bpe.learn_bpe

    def spy(word_counts, *args, **kwargs):
        seen["words"] = len(word_counts)
        return learn(word_counts, *args, **kwargs)

    monkeypatch.setattr(train_bpe, "learn_bpe", spy)
    stats = CorpusStats()
    path = train_bpe.train_byte_level_bpe(
        [str(corpus)], 800, tmp_path / "vocab.json", max_words=40, stats=stats
    )
    assert seen["words"] <= 40
    assert "kept of more than max_words=40" in stats.word_counts
    tokenizer = ByteLevelBPETokenizer(path)
    lines = [t for t in read_lines([str(corpus)]) if "<" not in t]
    tokens = tokenizer.token_strings(tf.constant(lines)).to_list()
    assert [text_of([t.decode() for t in row]) for row in tokens] == lines


def test_bad_settings_are_one_line_errors(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"vocab_size must be an integer >= 261") as e:
        train_bpe.train_byte_level_bpe([str(corpus)], 100, tmp_path / "vocab.json")
    assert "\n" not in str(e.value)
    with pytest.raises(TokenizerError, match="pre_tokenize must be one of words, morphemes"):
        train_bpe.train_byte_level_bpe([str(corpus)], 300, tmp_path, pre_tokenize="jamo")
    (tmp_path / "blank.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(TokenizerError):
        train_bpe.train_byte_level_bpe([str(tmp_path / "blank.txt")], 300, tmp_path)
    for specials in ({"cls": "[CLS]"}, dict.fromkeys(("cls", "pad", "sep", "unk", "mask"), "x")):
        with pytest.raises(TokenizerError, match="special_tokens must map cls, pad, sep") as e:
            train_bpe.train_byte_level_bpe([str(corpus)], 300, tmp_path, special_tokens=specials)
        assert "\n" not in str(e.value)
    vocabulary = json.loads((FIXTURES / "byte_bpe" / "vocab.json").read_text(encoding="utf-8"))
    with pytest.raises(TokenizerError, match=r"needs its merges \(merges=\)"):
        ByteLevelBPETokenizer(sorted(vocabulary, key=vocabulary.get))


def test_modernbert_special_tokens_take_robertas_places(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world [CLS] hello\n" * 3, encoding="utf-8")
    specials = {"cls": "[CLS]", "pad": "[PAD]", "sep": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}
    path = train_bpe.train_byte_level_bpe(
        [str(corpus)], 270, tmp_path / "vocab.json", special_tokens=specials
    )
    roles = {f"{role}_token": token for role, token in specials.items()}
    tokenizer = ByteLevelBPETokenizer(path, **roles)
    assert tokenizer.vocabulary[:4] == ["[CLS]", "[PAD]", "[SEP]", "[UNK]"]
    assert tokenizer.vocabulary[-1] == "[MASK]" and len(tokenizer.vocabulary) <= 270
    assert tokenizer.vocabulary[4:260] == [bytes_to_unicode()[b] for b in range(256)]


def test_in_memory_tokenizer_equals_the_files(trained):
    """What corpus preparation's workers and serving rebuild: the
    vocabulary and `get_config` (which carries the merges)."""
    tokenizer, lines, _ = trained
    again = ByteLevelBPETokenizer(list(tokenizer.vocabulary), **tokenizer.get_config())
    a, b = tokenizer(lines[:40]), again(lines[:40])
    assert [list(r) for r in a] == [list(r) for r in b]


def test_train_vocab_command(tmp_path, capsys):
    corpus = messy_corpus(tmp_path / "corpus.txt", n=60)
    output = tmp_path / "out" / "vocab.json"
    args = ["train-vocab", str(corpus), "--kind", "byte_level_bpe", "--vocab-size", "700"]
    assert cli.main([*args, "--output", str(output), "--show", "1"]) == 0
    out = capsys.readouterr().out
    assert f"Wrote {output}: 700 tokens (lowercase=False, strip_accents=False)." in out
    assert (output.parent / "merges.txt").is_file()
    assert ByteLevelBPETokenizer(output).vocabulary_size == 700
    for extra, message in (
        ([], "exist; pass --overwrite"),
        (["--lowercase"], "is cased and keeps accents"),
        (["--include-hangul", "common"], "--include-hangul does not apply"),
    ):
        assert cli.main([*args, "--output", str(output), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert cli.main([*args, "--output", str(tmp_path / "vocab.txt")]) == 2
    assert "must name the vocab.json" in capsys.readouterr().err


# --- XLM-R's unigram SentencePiece ---


def test_fairseq_sentencepiece_trains_an_xlmr_tokenizer(tmp_path, capsys):
    corpus = messy_corpus(tmp_path / "corpus.txt", n=20)
    path = train.train_fairseq_sentencepiece([str(corpus)], 1000, tmp_path)
    assert path == tmp_path / "sentencepiece.bpe.model"
    tokenizer = XLMRobertaTokenizer(path)
    vocabulary = tokenizer.vocabulary
    assert tokenizer.vocabulary_size == 1000
    assert vocabulary[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and vocabulary[-1] == "<mask>"
    ids = tokenizer(["서울시는 다음 달부터 요금을 올린다고 밝혔다.", "hello <mask> world"])
    ids = [list(map(int, row)) for row in ids]
    assert 3 not in ids[0] and 999 in ids[1]
    # The command line: --vocab-size counts fairseq's <pad> and <mask>.
    output = tmp_path / "cli" / "x.model"
    command = ["train-vocab", str(KOREAN), "--kind", "fairseq_sentencepiece", "--show", "0"]
    assert cli.main([*command, "--vocab-size", "900", "--output", str(output)]) == 0
    assert "900 tokens" in capsys.readouterr().out
    assert XLMRobertaTokenizer(output).vocabulary_size == 900
    with pytest.raises(TokenizerError, match="vocab_size must be an integer >= 8"):
        train.train_fairseq_sentencepiece([str(corpus)], 5, tmp_path / "y.model")
