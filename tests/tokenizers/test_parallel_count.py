"""Counting a vocabulary's words in several processes: byte ranges cut at
line starts, per-range Misra-Gries summaries merged in corpus order; exact
(and so the same vocabulary) up to max_words distinct words, within the
reported bound beyond; errors in a process are one-line errors here."""

import collections
import gzip
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bertzoo.io import textfiles
from bertzoo.tokenizers import corpus_stream
from bertzoo.tokenizers.basic import BasicTokenizer
from bertzoo.tokenizers.kinds import TokenizerError

pytestmark = pytest.mark.backend_independent

ROOT = Path(__file__).resolve().parents[2]
KOREAN = ROOT / "tests" / "fixtures" / "korean_corpus.txt"
CASED = BasicTokenizer(lowercase=False, strip_accents=False)
MESSY = [
    "제1조(목적) 이 법은 계약 당사자의 권리를 보호한다.",
    "The café in Zürich 🙂 serves crème brûlée 🙏🏽🔥.",
    "日本語と한국어と English が混ざった文。",
    "",
    "   ",
    "emoji only 😂😂😂 and a URL https://example.com/a?b=c",
]


# This module imports no TensorFlow (`train` is imported in the tests that
# need it), so the processes that unpickle `_DyingTokenizer` start quickly.


@pytest.fixture
def small_ranges(monkeypatch):
    """Ranges of a few KB, so a small corpus is cut into several."""
    monkeypatch.setattr(corpus_stream, "MIN_RANGE_BYTES", 4096)


def _messy_bytes(seed):
    """Korean, English, CJK, emoji; CRLF and LF line ends, invalid UTF-8,
    blank lines and over-long lines, in a seeded order."""
    rng = random.Random(seed)
    korean = KOREAN.read_text("utf-8").splitlines()
    lines = [line.encode() for line in korean + MESSY * 20]
    lines += [b"caf\xe9 au lait \xff\xfe broken", b"\xed\xa0\x80 surrogate bytes", b"x" * 900]
    lines += ["가나다".encode() * 120]  # 1,080 bytes: cut at 512, inside no character
    rng.shuffle(lines)
    return b"".join(line + rng.choice([b"\n", b"\r\n"]) for line in lines)


def _messy_corpus(directory):
    directory.mkdir()
    (directory / "a.txt").write_bytes(_messy_bytes(1) * 3)  # ~100 KB: several ranges
    (directory / "b.txt.gz").write_bytes(gzip.compress(_messy_bytes(2), mtime=0))
    (directory / "c.txt").write_bytes(_messy_bytes(3)[:5000] + b"no final line end")
    return [str(directory / "*.txt*")]


def _stats(stats):
    return (stats.files, stats.lines, stats.bytes, stats.cut_lines, stats.invalid_utf8_lines)


# ---------------------------------------------------------------- ranges


def test_line_ranges_cover_the_file_at_line_starts(tmp_path):
    rng = random.Random(0)
    for trial in range(200):
        lines = [b"y" * rng.randrange(0, 30) for _ in range(rng.randrange(0, 20))]
        data = b"\r\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        path = tmp_path / f"{trial}.txt"
        path.write_bytes(data)
        target = rng.randrange(1, 40)
        ranges = textfiles.line_ranges(path, target)
        assert [start for start, _ in ranges[1:]] == [end for _, end in ranges[:-1]]
        assert (ranges[0][0], ranges[-1][1]) == (0, len(data)) if data else ranges == []
        for start, end in ranges[:-1]:
            assert data[end - 1 : end] == b"\n" and end - start >= target
        pieces = []
        for start, end in ranges:
            with textfiles.open_range(path, start, end) as stream:
                pieces.append(stream.read())
        assert b"".join(pieces) == data


def test_plan_keeps_gz_whole_and_follows_the_corpus_order(tmp_path, small_ranges):
    paths = corpus_stream.expand_paths(_messy_corpus(tmp_path / "c"))
    ranges = corpus_stream.plan_ranges(paths, workers=4)
    assert [p.file_index for p in ranges] == sorted(p.file_index for p in ranges)
    by_file = collections.defaultdict(list)
    for part in ranges:
        by_file[Path(part.path).name].append(part)
    assert len(by_file["a.txt"]) == 4 and by_file["a.txt"][-1].end == paths[0].stat().st_size
    assert [(p.start, p.end, p.last) for p in by_file["b.txt.gz"]] == [(0, None, True)]
    assert [p.last for p in by_file["a.txt"]] == [False, False, False, True]


# ---------------------------------------------------------------- merging


def _zipf_words(n, vocabulary, seed):
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(vocabulary)]
    return [f"w{i}" for i in rng.choices(range(vocabulary), weights, k=n)]


def _merged(chunks, max_words):
    merged = corpus_stream.BoundedWordCounter(max_words)
    for chunk in chunks:
        part = corpus_stream.BoundedWordCounter(max_words)
        for start in range(0, len(chunk), 6):
            part.update(chunk[start : start + 6])
        merged.merge(part)
    return merged


def test_merge_is_exact_and_in_corpus_order_under_the_cap():
    words = _zipf_words(20_000, 2_000, seed=1)
    truth = collections.Counter(words)
    merged = _merged([words[:7000], words[7000:7001], words[7001:]], len(truth))
    assert merged.exact and merged.counts == truth and merged.total == len(words)
    assert list(merged.counts) == list(truth)  # first-seen order: the learner's input


@pytest.mark.parametrize("max_words", [40, 300])
def test_merge_keeps_the_misra_gries_bound(max_words):
    words = _zipf_words(40_000, 5_000, seed=max_words)
    truth = collections.Counter(words)
    cuts = [0, 9000, 9500, 26000, len(words)]
    merged = _merged([words[a:b] for a, b in zip(cuts, cuts[1:])], max_words)
    assert not merged.exact and len(merged.counts) <= max_words
    bound = merged.undercount_bound
    kept = sum(merged.counts.values())
    assert 0 < bound <= (len(words) - kept) / (merged.keep + 1)
    for word, count in merged.counts.items():
        assert truth[word] - bound <= count <= truth[word]
    assert {w for w, c in truth.items() if c > bound} <= set(merged.counts)
    assert merged.characters == {c for w in truth for c in w} and merged.total == len(words)


# ------------------------------------------------------------ in processes


def test_two_workers_give_the_same_vocabulary(tmp_path, small_ranges):
    from bertzoo.tokenizers import train

    files = _messy_corpus(tmp_path / "corpus")
    settings = dict(lowercase=False, strip_accents=False, min_frequency=1, max_line_bytes=512)
    one, two = corpus_stream.CorpusStats(), corpus_stream.CorpusStats()
    train.train_wordpiece(files, 1500, output=tmp_path / "1.txt", stats=one, **settings)
    train.train_wordpiece(files, 1500, output=tmp_path / "2.txt", stats=two, workers=2, **settings)
    assert (tmp_path / "1.txt").read_bytes() == (tmp_path / "2.txt").read_bytes()
    assert (one.workers, two.workers) == (
        1,
        2,
    ) and "counted exactly, in 2 processes" in two.word_counts
    assert _stats(one) == _stats(two) and one.cut_lines == 8 and one.invalid_utf8_lines >= 8
    # The counts themselves, and their order (what the learner is given).
    serial = corpus_stream.count_words(files, CASED, max_line_bytes=512)
    parallel = corpus_stream.count_words(files, CASED, max_line_bytes=512, workers=3)
    assert parallel.exact and list(parallel.counts.items()) == list(serial.counts.items())
    assert parallel.characters == serial.characters and parallel.total == serial.total


def test_beyond_the_cap_the_merged_counts_keep_the_bound(tmp_path, small_ranges):
    words = _zipf_words(60_000, 6_000, seed=7)
    path = tmp_path / "zipf.txt"
    path.write_text("".join(" ".join(words[i : i + 12]) + "\n" for i in range(0, 60_000, 12)))
    truth = collections.Counter(words)
    max_words = 200
    counter = corpus_stream.count_words(path, CASED, max_words, workers=3)
    bound = counter.undercount_bound
    assert not counter.exact and len(counter.counts) <= max_words and counter.total == len(words)
    assert 0 < bound <= len(words) / (counter.keep + 1)
    for word, count in counter.counts.items():
        assert truth[word] - bound <= count <= truth[word]
    assert {w for w, c in truth.items() if c > bound} <= set(counter.counts)
    # Deterministic: the ranges' own summaries merged in order, here.
    again = corpus_stream.BoundedWordCounter(max_words)
    ranges = corpus_stream.plan_ranges([path], 3)
    assert len(ranges) == 3
    for part in ranges:
        again.merge(corpus_stream.count_range(part, CASED, max_words, 1 << 20)[0])
    assert list(again.counts.items()) == list(counter.counts.items())
    assert again.undercount_bound == bound


def test_an_error_in_a_process_is_a_one_line_error_here(tmp_path, small_ranges):
    files = _messy_corpus(tmp_path / "corpus")
    (tmp_path / "corpus" / "d.txt.gz").write_bytes(b"not gzip at all\n" * 10)
    with pytest.raises(TokenizerError, match=r"d\.txt\.gz is not a valid gzip file") as info:
        corpus_stream.count_words(files, CASED, workers=2)
    assert "\n" not in str(info.value)
    (tmp_path / "empty.txt").write_bytes(b"\n \n")
    with pytest.raises(TokenizerError, match=r"Training file .*empty\.txt is empty\."):
        corpus_stream.count_words(
            [tmp_path / "corpus" / "a.txt", tmp_path / "empty.txt"], CASED, workers=2
        )
    with pytest.raises(TokenizerError, match="workers must be an integer >= 1"):
        corpus_stream.count_words(files, CASED, workers=0)


class _DyingTokenizer:
    """Ends its process on the first line it sees, as the kernel's
    out-of-memory killer would."""

    def tokenize(self, line):
        os._exit(9)


def test_a_process_that_dies_is_reported(tmp_path, small_ranges):
    files = _messy_corpus(tmp_path / "corpus")
    with pytest.raises(TokenizerError, match=r"ended without a result \(exit code 9") as info:
        corpus_stream.count_words(files, _DyingTokenizer(), workers=2)
    assert "\n" not in str(info.value)
    assert "a.txt (bytes " in str(info.value)  # the range (of those that died first)


def test_the_counting_processes_import_no_tensorflow():
    """What a counting process imports: the modules its target and task
    unpickle from (here, in a fresh interpreter)."""
    part = corpus_stream.CountRange(0, "x.txt", 0, 10, True)
    task = pickle.dumps((corpus_stream._count_range_process, (part, CASED, 10, 100)))
    code = (
        "import pickle, sys\n"
        f"pickle.loads({task!r})\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'tensorflow_text') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_cli_and_the_pretraining_recipe_pass_workers(tmp_path, small_ranges, capsys, monkeypatch):
    from bertzoo import cli
    from bertzoo.training.pretrain import PretrainConfig, prepare_tokenizer

    files = _messy_corpus(tmp_path / "corpus")
    output = tmp_path / "vocab.txt"
    command = ["train-vocab", *files, "--output", str(output), "--show", "0", "--workers", "2"]
    assert cli.main(command + ["--no-lowercase", "--vocab-size", "1500"]) == 0
    assert "counted exactly, in 2 processes" in capsys.readouterr().out
    (tmp_path / "corpus" / "d.txt.gz").write_bytes(b"not gzip at all\n" * 10)
    assert cli.main(command + ["--overwrite"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "d.txt.gz is not a valid gzip file" in error[0]

    seen = []
    original = corpus_stream.count_words

    def spy(*args):
        seen.append(args[-1])
        return original(*args)

    monkeypatch.setattr(corpus_stream, "count_words", spy)
    corpus = tmp_path / "ko.txt"
    corpus.write_bytes(KOREAN.read_bytes())
    for workers in (2, None):
        config = PretrainConfig(vocab_size=1000, lowercase=False, prepare_workers=workers)
        prepare_tokenizer(config, tmp_path / f"run{workers}", [str(corpus)])
    assert seen == [2, None]
