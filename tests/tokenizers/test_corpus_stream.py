"""Streaming a vocabulary's corpus: reading (globs, .gz, cut lines, invalid
UTF-8), bounded word counting (Misra-Gries beyond the cap), seeded line
sampling, and the trainers giving today's result when the corpus fits."""

import collections
import gzip
import logging
import random
from pathlib import Path

import pytest

from bertzoo.tokenizers import train
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.basic import BasicTokenizer
from bertzoo.tokenizers.corpus_stream import (
    BoundedWordCounter,
    CorpusStats,
    expand_paths,
    read_lines,
    sample_lines,
)

pytestmark = pytest.mark.backend_independent

KOREAN = Path(__file__).resolve().parents[1] / "fixtures" / "korean_corpus.txt"
MESSY = [
    "제1조(목적) 이 법은 계약 당사자의 권리를 보호한다.",
    "The café in Zürich 🙂 serves crème brûlée 🙏🏽🔥.",
    "日本語と한국어と English が混ざった文。",
    "",
    "   ",
    "emoji only 😂😂😂 and a URL https://example.com/a?b=c",
]


def _write(path, lines, compress=False):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if compress:
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------ reading


def test_globs_gz_and_order(tmp_path):
    _write(tmp_path / "b.txt", MESSY[:3])
    _write(tmp_path / "a.txt.gz", MESSY[3:], compress=True)
    _write(tmp_path / "c.txt", ["last"])
    stats = CorpusStats()
    lines = list(read_lines([str(tmp_path / "[ab].txt*"), tmp_path / "c.txt"], stats=stats))
    assert lines == MESSY[3:] + MESSY[:3] + ["last"]  # a pattern's matches sorted
    assert stats.files == 3 and stats.lines == 7 and stats.cut_lines == 0
    assert stats.invalid_utf8_lines == 0
    assert stats.bytes == sum(len(line.encode()) + 1 for line in MESSY + ["last"])


def test_bad_paths_are_one_line_errors(tmp_path):
    _write(tmp_path / "ok.txt", ["text"])
    with pytest.raises(TokenizerError, match=r"pattern '.*\*\.csv' matches no file"):
        expand_paths([tmp_path / "ok.txt", str(tmp_path / "*.csv")])
    with pytest.raises(TokenizerError, match=r"is a directory; give its files \(e\.g\."):
        expand_paths([tmp_path])
    with pytest.raises(TokenizerError, match="does not exist"):
        list(read_lines([tmp_path / "ok.txt", tmp_path / "missing.txt"]))
    with pytest.raises(TokenizerError, match="No training files"):
        expand_paths([])
    (tmp_path / "junk.gz").write_bytes(b"not gzip at all\n" * 10)
    with pytest.raises(TokenizerError, match="junk.gz is not a valid gzip file"):
        list(read_lines(tmp_path / "junk.gz"))
    with pytest.raises(TokenizerError, match="max_line_bytes must be a positive integer"):
        list(read_lines(tmp_path / "ok.txt", max_line_bytes=0))
    for message in ("matches no file", "is a directory"):
        assert "\n" not in message


def test_long_lines_are_cut_at_a_character_boundary(tmp_path, caplog):
    hangul = "가" * 1000  # 3 bytes each: 3,000 bytes
    lines = ["short", hangul, "x" * 2000 + "가", "after"]
    path = _write(tmp_path / "long.txt", lines)
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING):
        got = list(read_lines(path, max_line_bytes=100, stats=stats))
    # 100 bytes = 33 whole syllables + 1 byte: the cut drops the partial one.
    assert got == ["short", "가" * 33, "x" * 100, "after"]
    assert "\ufffd" not in "".join(got)
    assert stats.cut_lines == 2 and stats.lines == 4 and stats.invalid_utf8_lines == 0
    assert stats.bytes == path.stat().st_size
    assert "2 line(s) are longer than max_line_bytes=100" in caplog.text
    # A line of exactly the limit is not cut.
    exact = _write(tmp_path / "exact.txt", ["y" * 100, "z"])
    stats = CorpusStats()
    assert list(read_lines(exact, max_line_bytes=100, stats=stats)) == ["y" * 100, "z"]
    assert stats.cut_lines == 0


def test_one_enormous_line_without_a_newline(tmp_path):
    path = tmp_path / "one.txt"
    path.write_bytes(("word " * 400_000).encode())  # 2 MB, no newline
    stats = CorpusStats()
    lines = list(read_lines(path, max_line_bytes=1000, stats=stats))
    assert lines == [("word " * 200)] and stats.cut_lines == 1
    assert stats.bytes == 2_000_000


def test_invalid_utf8_and_binary_junk_are_replaced_and_counted(tmp_path, caplog):
    path = tmp_path / "junk.txt"
    junk = bytes(random.Random(0).randrange(256) for _ in range(3000)).replace(b"\n", b" ")
    path.write_bytes("good 한국어\n".encode() + b"caf\xe9\n" + junk + b"\nend\n")
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING):
        lines = list(read_lines(path, stats=stats))
    assert lines[0] == "good 한국어" and lines[1] == "caf\ufffd" and lines[3] == "end"
    assert stats.invalid_utf8_lines == 2
    assert "2 line(s) are not valid UTF-8" in caplog.text
    vocab = train.train_wordpiece(path, 5000, lowercase=False, strip_accents=False)
    assert "\ufffd" not in vocab and "한" in vocab


# ------------------------------------------------------------ word counting


def _zipf_words(n, vocabulary, seed):
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(vocabulary)]
    return [f"w{i}" for i in rng.choices(range(vocabulary), weights, k=n)]


def test_counting_is_exact_under_the_cap():
    words = _zipf_words(20_000, 3_000, seed=1)
    truth = collections.Counter(words)
    counter = BoundedWordCounter(max_words=len(truth))
    for start in range(0, len(words), 7):
        counter.update(words[start : start + 7])
    assert counter.exact and counter.counts == truth
    assert list(counter.counts) == list(truth)  # the same order: the learner's input


@pytest.mark.parametrize("max_words", [50, 301, 2000])
def test_misra_gries_bounds_beyond_the_cap(max_words):
    words = _zipf_words(30_000, 5_000, seed=max_words)
    truth = collections.Counter(words)
    counter = BoundedWordCounter(max_words)
    largest = 0
    for start in range(0, len(words), 5):
        counter.update(words[start : start + 5])
        largest = max(largest, len(counter.counts))
    assert not counter.exact and largest <= max_words + 5
    bound = counter.undercount_bound
    assert 0 < bound <= len(words) / (counter.keep + 1)
    assert counter.keep == int(max_words * 0.9)
    for word, count in counter.counts.items():
        assert truth[word] - bound <= count <= truth[word]
    assert {w for w, c in truth.items() if c > bound} <= set(counter.counts)
    assert counter.characters == {c for w in truth for c in w}
    assert "at most" in counter.summary() and f"{bound:,}" in counter.summary()


def test_count_words_matches_counting_everything(tmp_path):
    path = _write(tmp_path / "mixed.txt", MESSY * 3 + KOREAN.read_text("utf-8").splitlines())
    tokenizer = BasicTokenizer(lowercase=False, strip_accents=False)
    truth = collections.Counter()
    for line in path.read_text("utf-8").splitlines():
        truth.update(tokenizer.tokenize(line))
    counter = train.count_words(path, tokenizer)
    assert counter.exact and counter.counts == truth and list(counter.counts) == list(truth)


def test_wordpiece_is_unchanged_under_the_cap(tmp_path):
    path = _write(tmp_path / "mixed.txt", MESSY * 3 + KOREAN.read_text("utf-8").splitlines())
    cased = dict(lowercase=False, strip_accents=False, min_frequency=1)
    distinct = len(train.count_words(path, BasicTokenizer(False, False)).counts)
    default = train.train_wordpiece(path, 1200, **cased)
    assert train.train_wordpiece(path, 1200, max_words=distinct, **cased) == default
    smaller = train.train_wordpiece(path, 1200, max_words=distinct // 4, **cased)
    assert smaller != default  # the cap is really applied
    # Every character is kept even when its words are dropped: no [UNK].
    assert {t for t in default if len(t.removeprefix("##")) == 1} <= set(smaller)


def test_wordpiece_stats_and_limits(tmp_path):
    path = _write(tmp_path / "a.txt", MESSY + ["z" * 500])
    stats = CorpusStats()
    train.train_wordpiece(path, 300, max_line_bytes=200, stats=stats, min_frequency=1)
    assert stats.cut_lines == 1 and stats.lines == len(MESSY) + 1
    assert "1 cut at 200 bytes" in stats.summary()
    with pytest.raises(TokenizerError, match="max_words must be an integer >= 2"):
        train.train_wordpiece(path, 300, max_words=1)


# ------------------------------------------------------------- line sampling


def test_sample_lines_is_seeded_uniform_and_in_order():
    lines = [f"line {i}" for i in range(10_000)]
    sample, seen = sample_lines(iter(lines), 500, seed=3)
    assert seen == 10_000 and len(sample) == 500
    assert sample == sorted(sample, key=lambda s: int(s.split()[1]))  # corpus order
    assert sample_lines(iter(lines), 500, seed=3)[0] == sample  # deterministic
    assert sample_lines(iter(lines), 500, seed=4)[0] != sample
    # Uniform: each tenth of the corpus holds about a tenth of the sample
    # (a binomial(500, 0.1): 50 +- 6.7; the bounds are 4 standard deviations).
    tenths = collections.Counter(int(s.split()[1]) // 1000 for s in sample)
    assert all(23 <= tenths[t] <= 77 for t in range(10)), tenths
    assert sample_lines(iter(lines[:40]), 500)[0] == lines[:40]  # fits: all, in order
    with pytest.raises(TokenizerError, match="max_lines"):
        sample_lines(lines, 0)


def test_sentencepiece_unchanged_when_the_corpus_fits(tmp_path):
    path = _write(tmp_path / "k.txt", KOREAN.read_text("utf-8").splitlines() + MESSY)
    cased = dict(lowercase=False, strip_accents=False, hard_vocab_limit=False)
    default = train.train_sentencepiece(path, 600, tmp_path / "default", **cased)
    count = sum(1 for line in read_lines(path) if line)
    exact = train.train_sentencepiece(path, 600, tmp_path / "exact", max_sentences=count, **cased)
    assert exact.read_bytes() == default.read_bytes()
    a = train.train_sentencepiece(path, 600, tmp_path / "a", max_sentences=150, **cased)
    b = train.train_sentencepiece(path, 600, tmp_path / "b", max_sentences=150, **cased)
    assert a.read_bytes() == b.read_bytes() != default.read_bytes()  # seeded sample
    c = train.train_sentencepiece(path, 600, tmp_path / "c", max_sentences=150, seed=1, **cased)
    assert c.read_bytes() != a.read_bytes()


# --------------------------------------------------------------------- CLI


def test_cli_streams_globs_and_reports(tmp_path, capsys):
    from bertzoo import cli

    lines = KOREAN.read_text("utf-8").splitlines() + MESSY
    _write(tmp_path / "a.txt", lines[:150])
    _write(tmp_path / "b.txt.gz", lines[150:] + ["q" * 300], compress=True)
    output = tmp_path / "vocab.txt"
    command = ["train-vocab", str(tmp_path / "*.txt*"), "--output", str(output)]
    command += ["--no-lowercase", "--no-strip-accents", "--show", "0", "--vocab-size", "1500"]
    assert cli.main(command + ["--max-words", "200", "--max-line-bytes", "100"]) == 0
    out = capsys.readouterr().out
    assert f"Read {len(lines) + 1:,} lines" in out and "in 2 file(s); 1 cut at 100 bytes" in out
    assert "kept of more than max_words=200 (Misra-Gries" in out
    words = _zipf_words(4000, 300, seed=5)
    _write(tmp_path / "z.txt", [" ".join(words[i : i + 10]) for i in range(0, 4000, 10)])
    model = tmp_path / "spiece.model"
    command = ["train-vocab", str(tmp_path / "z.txt"), "--output", str(model), "--show", "0"]
    command += ["--kind", "sentencepiece", "--vocab-size", "50", "--max-sentences", "150"]
    assert cli.main(command) == 0
    assert "a uniform sample of 150 of the corpus's 400 non-empty" in capsys.readouterr().out
    assert cli.main(["train-vocab", str(tmp_path / "*.csv"), "--output", str(tmp_path / "v")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "matches no file" in error[0]


# ------------------------------------------------------------------ memory


def _distinct_word_corpus(path, distinct, seed):
    """Lines of mostly distinct words (Hangul, Latin, digits, emoji from a
    fixed alphabet), so the word table grows with the corpus: `distinct`
    words, 2 occurrences each."""
    rng = random.Random(seed)
    syllables = [chr(0xAC00 + 37 * i) for i in range(100)] + list("abcxyz")
    words = [
        rng.choice(["", "e", "😂"]) + "".join(rng.choices(syllables, k=3)) + f"{i}"
        for i in range(distinct)
    ]
    words = words * 2
    rng.shuffle(words)
    return _write(path, [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)])


def _peak(call):
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_is_bounded_by_the_settings_not_the_corpus(tmp_path):
    """tracemalloc peaks (Python allocations) of counting and sampling: a
    corpus with 10x the cap's distinct words peaks near the 1x corpus with
    the same settings, while counting it exactly peaks far higher."""
    cap = 3000
    small = _distinct_word_corpus(tmp_path / "1x.txt", cap, seed=1)
    large = _distinct_word_corpus(tmp_path / "10x.txt", 10 * cap, seed=2)
    assert large.stat().st_size > 9 * small.stat().st_size
    tokenizer = BasicTokenizer(lowercase=False, strip_accents=False)

    def count(path, max_words):
        return lambda: train.count_words(path, tokenizer, max_words=max_words)

    bounded_small = _peak(count(small, cap))
    bounded_large = _peak(count(large, cap))
    exact_large = _peak(count(large, 100 * cap))
    assert bounded_large < 1.3 * bounded_small, (bounded_small, bounded_large)
    assert exact_large > 4 * bounded_small, (bounded_small, exact_large)

    def sample(path, max_lines):
        return lambda: sample_lines(read_lines(path), max_lines, seed=0)

    lines = 200
    sampled_small = _peak(sample(small, lines))
    sampled_large = _peak(sample(large, lines))
    whole_large = _peak(sample(large, 100 * lines))
    assert sampled_large < 1.3 * sampled_small, (sampled_small, sampled_large)
    assert whole_large > 4 * sampled_small, (sampled_small, whole_large)


# ------------------------------------------------------ closeness measures


def test_vocabulary_overlap_and_wordpiece_fit():
    full = ["[PAD]", "[UNK]", "a", "b", "##b", "ab", "한", "##국"]
    assert train.vocabulary_overlap(full, full) == 1.0
    assert train.vocabulary_overlap(full, full[:6] + ["zz"]) == 6 / 8
    tokenizer = BasicTokenizer(lowercase=False, strip_accents=False)
    fit = train.wordpiece_fit(full, ["ab abb", "한국 c", ""], tokenizer)
    # ab -> ab; abb -> ab ##b; 한국 -> 한 ##국; c -> [UNK]: 4 words, 6 tokens.
    assert fit == {"words": 4, "tokens_per_word": 1.5, "unk_rate": 1 / 6}


def test_truncated_gzip_is_a_one_line_error(tmp_path):
    data = gzip.compress(("한국어 text line\n" * 5000).encode(), mtime=0)
    (tmp_path / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(TokenizerError, match=r"cut.txt.gz is not a valid gzip file") as info:
        train.train_wordpiece(tmp_path / "cut.txt.gz", 300)
    assert "\n" not in str(info.value)
