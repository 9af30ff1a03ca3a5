"""How close a vocabulary trained in bounded memory is to one trained on all
of a small corpus: WordPiece with the word table capped (`max_words`, the
Misra-Gries summary beyond the cap) against WordPiece on a uniform line
sample of the same table size (the alternative method), and SentencePiece
on a seeded line sample (`max_sentences`).

The corpus, offline and deterministic: the Python manual's help topics
(`bertzoo.data.builtin_corpus`), the docstrings of 50 standard modules
(benchmarks/texts.py), and real Korean: the Korean translations of the
system's message catalogues (/usr/share/locale/ko/LC_MESSAGES/*.mo, read
with `gettext`; software messages, mixed with English terms, numbers and
format strings; recorded as absent when the machine has none) plus
tests/fixtures/korean_corpus.txt. The lines are shuffled with seed 0; every
10th is held out for the fit figures. Cased, no accent stripping (Hangul
kept as syllables).

Figures per run: `overlap` = the share of the full run's tokens the bounded
run has too; `tokens_per_word` and `unk_rate` (share of [UNK] / <unk>
tokens) on the held-out lines; `table_words` = the distinct words the
bounded run held (the memory that matters for WordPiece). `memory`: peak
RSS of counting a corpus grown to 10 and 40 MB (the training lines repeated,
a third of each copy's words given the copy's number, so the distinct words
grow with the size) with max_words=50,000, and of counting 40 MB exactly, each
in a fresh process; `counts_rss_mb` is the resident memory the counts add
(after counting, counts still held, minus after the imports: the peak RSS
is TensorFlow's import, ~0.9 GB, at these sizes).

`parallel_counting`: WordPiece word counting (`corpus_stream.count_words`,
cased) with 1 and 2 processes on a 50 MB real-text corpus
(benchmarks/prepare.py's `build_corpus`), each run in a fresh process and
the two alternating for --parallel-rounds rounds: wall-clock MB/s, the CPU
seconds of the run and its counting processes, peak RSS, the load average
when each run started (the machine may be busy with other work: `ratio`,
2-process over 1-process MB/s, is only a speed-up where a core is free;
the CPU seconds show the cost of the processes themselves), whether the
counts were identical (the corpus is below `max_words`), and one pair of
runs with `max_words` at half the distinct words (the merged bound).

    python benchmarks/vocab_sampling.py   # ~20 minutes on 2 cores
    python benchmarks/vocab_sampling.py --parallel-only   # that section, ~10 minutes
"""

import argparse
import gettext
import json
import logging
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402
from texts import _MODULES, _docstring_sentences  # noqa: E402

from bertzoo.data.builtin_corpus import python_docs_corpus  # noqa: E402
from bertzoo.tokenizers import SentencePieceTokenizer, corpus_stream, train  # noqa: E402
from bertzoo.tokenizers.basic import BasicTokenizer  # noqa: E402
from bertzoo.tokenizers.corpus_stream import BoundedWordCounter, sample_lines  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CASED = dict(lowercase=False, strip_accents=False)


def korean_messages():
    found = set()
    for path in sorted(Path("/usr/share/locale/ko/LC_MESSAGES").glob("*.mo")):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except (OSError, UnicodeDecodeError):
            continue
        for key, text in catalog.items():
            if key and isinstance(text, str) and any("\uac00" <= c <= "\ud7a3" for c in text):
                found.add(" ".join(text.split()))
    return sorted(found)


def corpus_lines():
    english = [s for doc in python_docs_corpus() for s in doc]
    english += sorted(_docstring_sentences(_MODULES))
    korean = korean_messages()
    fixture = (ROOT / "tests" / "fixtures" / "korean_corpus.txt").read_text("utf-8")
    korean += [line for line in fixture.splitlines() if line.strip()]
    lines = english + korean
    random.Random(0).shuffle(lines)
    return lines, {"english_lines": len(english), "korean_lines": len(korean)}


def wordpiece_row(vocab, full, held_out, table_words, seconds):
    fit = train.wordpiece_fit(vocab, held_out, BasicTokenizer(**CASED))
    return {
        "tokens": len(vocab),
        "overlap": round(train.vocabulary_overlap(full, vocab), 4) if full else 1.0,
        "tokens_per_word": round(fit["tokens_per_word"], 4),
        "unk_rate": round(fit["unk_rate"], 5),
        "table_words": table_words,
        "seconds": round(seconds, 1),
        "vocabulary": vocab,
    }


def timed(call, *args, **kwargs):
    start = time.perf_counter()
    result = call(*args, **kwargs)
    return result, time.perf_counter() - start


class HalfKeepCounter(BoundedWordCounter):
    """Misra-Gries keeping half the table at each step (not 90%)."""

    keep_share = 0.5


class PruneOnlyCounter(BoundedWordCounter):
    """Drops the words at or below the threshold without subtracting it
    from the others (the kept counts stay exact until a word is dropped)."""

    def _shrink(self):
        values = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
        t = int(np.partition(values, len(values) - self.keep - 1)[len(values) - self.keep - 1])
        for word in [w for w, c in self.counts.items() if c <= t]:
            del self.counts[word]
        self.shrinks += 1
        self.undercount_bound += t


COUNTERS = {
    "misra_gries": BoundedWordCounter,  # what bertzoo uses
    "misra_gries_keep_half": HalfKeepCounter,
    "prune_only": PruneOnlyCounter,
}


def train_with(counter_class, path, vocab_size, max_words):
    """`train_wordpiece` with another word counter (the alternatives
    measured here); bertzoo's own when `counter_class` is its own."""
    own = corpus_stream.BoundedWordCounter
    corpus_stream.BoundedWordCounter = counter_class
    try:
        return timed(train.train_wordpiece, path, vocab_size, max_words=max_words, **CASED)
    finally:
        corpus_stream.BoundedWordCounter = own


def run_wordpiece(path, lines, held_out, args, line_samples=True):
    counter = train.count_words(path, BasicTokenizer(**CASED))
    distinct = len(counter.counts)
    full, seconds = timed(train.train_wordpiece, path, args.vocab_size, **CASED)
    rows = {"full": wordpiece_row(full, None, held_out, distinct, seconds)}
    for share in args.shares:
        cap = max(2, int(distinct * share))
        for name, counter_class in COUNTERS.items():
            vocab, seconds = train_with(counter_class, path, args.vocab_size, cap)
            rows[f"{name}_{share}"] = wordpiece_row(vocab, full, held_out, cap, seconds)
        if not line_samples:
            continue
        # The alternative at the same table size: a uniform line sample
        # large enough to hold about `cap` distinct words.
        sample = _sample_with_words(lines, cap, args.seed)
        sample_path = path.with_name(f"sample_{share}.txt")
        sample_path.write_text("".join(s + "\n" for s in sample), encoding="utf-8")
        table = len(train.count_words(sample_path, BasicTokenizer(**CASED)).counts)
        vocab, seconds = timed(train.train_wordpiece, sample_path, args.vocab_size, **CASED)
        row = wordpiece_row(vocab, full, held_out, table, seconds)
        row["sampled_lines"] = len(sample)
        rows[f"line_sample_{share}"] = row
    return {"distinct_words": distinct, "runs": rows}


def by_domain(path, lines):
    """The same training lines, Korean ones first, then the English ones:
    a corpus ordered by domain, where words first appear late."""
    korean = [line for line in lines if any("\uac00" <= c <= "\ud7a3" for c in line)]
    english = [line for line in lines if not any("\uac00" <= c <= "\ud7a3" for c in line)]
    ordered = path.with_name("by_domain.txt")
    ordered.write_text("".join(line + "\n" for line in korean + english), encoding="utf-8")
    return ordered, english


def _sample_with_words(lines, words, seed):
    """The largest uniform line sample (halving steps from all) whose
    distinct words are at most `words`."""
    tokenizer = BasicTokenizer(**CASED)
    size = len(lines)
    while size > 1:
        sample, _ = sample_lines(iter(lines), size, seed)
        distinct = {w for line in sample for w in tokenizer.tokenize(line)}
        if len(distinct) <= words:
            return sample
        size = int(size * 0.8)
    return lines[:1]


def run_sentencepiece(path, lines, held_out, args):
    out = Path(tempfile.mkdtemp())
    runs, full_vocab = {}, None
    words = sum(len(line.split()) for line in held_out)
    for share in [1.0, *args.shares]:
        size = max(1, int(len(lines) * share))
        model, seconds = timed(
            train.train_sentencepiece,
            path,
            args.vocab_size,
            out / str(share),
            max_sentences=size,
            hard_vocab_limit=False,
            **CASED,
        )
        tokenizer = SentencePieceTokenizer(model, **CASED)
        rows = tokenizer(held_out).to_list()
        tokens = sum(len(r) for r in rows)
        unknown = sum(r.count(tokenizer.unk_token_id) for r in rows)
        vocab = tokenizer.vocabulary
        full_vocab = vocab if full_vocab is None else full_vocab
        runs["full" if share == 1.0 else f"sample_{share}"] = {
            "sampled_lines": size,
            "overlap": round(train.vocabulary_overlap(full_vocab, vocab), 4),
            "tokens_per_word": round(tokens / words, 4),
            "unk_rate": round(unknown / tokens, 5),
            "seconds": round(seconds, 1),
        }
    return {"runs": runs}


def _by_domain_runs(path, training, held_out, args):
    ordered, _ = by_domain(path, training)
    english = [line for line in held_out if not any("\uac00" <= c <= "\ud7a3" for c in line)]
    result = run_wordpiece(ordered, training, held_out, args, line_samples=False)
    # The late (English) lines' fit per run: what pruning without
    # subtraction starves.
    for row in result["runs"].values():
        fit = train.wordpiece_fit(row.pop("vocabulary"), english, BasicTokenizer(**CASED))
        row["english_tokens_per_word"] = round(fit["tokens_per_word"], 4)
    return result


def grown_corpus(lines, path, megabytes, seed=0):
    """`lines` repeated to about `megabytes` MB, each copy with a third of
    its words given a copy number (as names, numbers and typos keep coming
    in a real corpus): the distinct words grow with the size."""
    rng = random.Random(seed)
    target, written, copy = megabytes * 1_000_000, 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            for line in lines:
                words = [w + str(copy) if rng.random() < 0.33 else w for w in line.split()]
                text = " ".join(words) + "\n"
                f.write(text)
                written += len(text.encode("utf-8"))
            copy += 1
    return path


def count_in_subprocess(path, max_words):
    """Time and resident memory of counting `path`'s words in a fresh
    process: VmRSS after the imports and after counting (the counts still
    held), and the peak (VmHWM)."""
    import subprocess

    code = (
        "import json, time; from bertzoo.tokenizers import train; "
        "from bertzoo.tokenizers.basic import BasicTokenizer\n"
        "def rss(key):\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith(key): return int(line.split()[1]) / 1024\n"
        "base = rss('VmRSS'); t = time.perf_counter()\n"
        f"c = train.count_words({str(path)!r}, BasicTokenizer(False, False), "
        f"max_words={max_words})\n"
        "print(json.dumps(dict(seconds=time.perf_counter() - t, kept=len(c.counts), "
        "total=c.total, shrinks=c.shrinks, bound=c.undercount_bound, base=base, "
        "after=rss('VmRSS'), peak=rss('VmHWM'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_runs(lines, directory, args):
    """Peak RSS of counting corpora of growing size with a fixed cap, and
    of counting the largest exactly (a cap above its distinct words)."""
    rows = {}
    for megabytes in args.memory_mb:
        path = grown_corpus(lines, directory / f"grown_{megabytes}.txt", megabytes)
        row = count_in_subprocess(path, args.memory_cap)
        rows[f"{megabytes}MB_max_words_{args.memory_cap}"] = _rounded(row, path)
    exact = count_in_subprocess(path, 100_000_000)
    rows[f"{args.memory_mb[-1]}MB_exact"] = _rounded(exact, path)
    return rows


def _rounded(row, path):
    size = path.stat().st_size
    return {
        "corpus_bytes": size,
        "rss_after_imports_mb": round(row["base"], 1),
        "rss_after_counting_mb": round(row["after"], 1),  # the counts still held
        "counts_rss_mb": round(row["after"] - row["base"], 1),
        "peak_rss_mb": round(row["peak"], 1),  # TensorFlow's import sets it
        "seconds": round(row["seconds"], 1),
        "mb_per_s": round(size / 1e6 / row["seconds"], 2),
        "words": row["total"],
        "kept_words": row["kept"],
        "misra_gries_steps": row["shrinks"],
        "undercount_bound": row["bound"],
    }


_PARALLEL_CHILD = """
import hashlib, json, os, resource, sys, time
from bertzoo.tokenizers import corpus_stream
from bertzoo.tokenizers.basic import BasicTokenizer
path, workers, max_words = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def hwm_mb():  # this process's peak RSS (getrusage's would carry the forking parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
def cpu_seconds(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime
load = os.getloadavg()
stats = corpus_stream.CorpusStats()
cpu = cpu_seconds(resource.RUSAGE_SELF)
start = time.perf_counter()
c = corpus_stream.count_words(
    path, BasicTokenizer(False, False), max_words, stats=stats, workers=workers
)
seconds = time.perf_counter() - start
counts = json.dumps(list(c.counts.items()), ensure_ascii=False).encode()
print(json.dumps(dict(
    seconds=seconds, workers=stats.workers, exact=c.exact, kept=len(c.counts), total=c.total,
    bound=c.undercount_bound, counts_sha256=hashlib.sha256(counts).hexdigest(),
    loadavg_start=[round(x, 2) for x in load], loadavg_end=[round(x, 2) for x in os.getloadavg()],
    cpu_seconds=cpu_seconds(resource.RUSAGE_SELF) - cpu + cpu_seconds(resource.RUSAGE_CHILDREN),
    peak_rss_mb=hwm_mb(),
    child_peak_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
)))
"""


def count_with_workers(path, workers, max_words):
    """`corpus_stream.count_words` in a fresh process (this module's
    imports aside: no TensorFlow), timed, with the load average then."""
    import subprocess

    command = [sys.executable, "-c", _PARALLEL_CHILD, str(path), str(workers), str(max_words)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    size = path.stat().st_size
    row["mb_per_s"] = round(size / 1e6 / row["seconds"], 3)
    row["seconds"] = round(row["seconds"], 1)
    row["cpu_seconds"] = round(row["cpu_seconds"], 1)  # this process's and its children's
    row["peak_rss_mb"] = round(row["peak_rss_mb"], 1)
    row["child_peak_rss_mb"] = round(row["child_peak_rss_mb"], 1)
    return row


def parallel_runs(directory, args):
    """MB/s of WordPiece word counting (cased, no accent stripping) with 1
    and 2 processes on a real-text corpus of --parallel-mb MB
    (benchmarks/prepare.py's `build_corpus`: the Python manual and Korean
    reviews), the runs alternating, each in a fresh process; and once with
    max_words at half the distinct words (the Misra-Gries regime)."""
    from prepare import build_corpus

    path = build_corpus(directory / "parallel.txt", args.parallel_mb)
    section = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/vocab_sampling.py " + " ".join(sys.argv[1:]),
        "machine": {**cpu_info(), "python": platform.python_version()},
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "corpus_bytes": path.stat().st_size,
        "corpus": "benchmarks/prepare.py build_corpus (Python manual + Korean reviews), seed 0",
        "rounds": [],
    }
    exact_cap = corpus_stream.DEFAULT_MAX_WORDS
    for _ in range(args.parallel_rounds):
        section["rounds"].append(
            {str(w): count_with_workers(path, w, exact_cap) for w in args.parallel_workers}
        )
    one, two = (str(w) for w in args.parallel_workers[:2])
    speeds = {
        w: round(float(np.median([r[w]["mb_per_s"] for r in section["rounds"]])), 3)
        for w in (one, two)
    }
    section["median_mb_per_s"] = speeds
    section["ratio"] = round(speeds[two] / speeds[one], 3)
    digests = {r[w]["counts_sha256"] for r in section["rounds"] for w in (one, two)}
    section["identical_counts"] = len(digests) == 1
    distinct = section["rounds"][0][one]["kept"]
    capped = {w: count_with_workers(path, int(w), distinct // 2) for w in (one, two)}
    section[f"max_words_{distinct // 2}"] = capped
    section["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return section


def _without_vocabularies(result):
    for row in result["runs"].values():
        row.pop("vocabulary")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.25, 0.1])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mb", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--memory-cap", type=int, default=50_000)
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="rerun only the memory figures, into the existing results file",
    )
    parser.add_argument("--parallel-mb", type=float, default=50)
    parser.add_argument("--parallel-workers", type=int, nargs=2, default=[1, 2])
    parser.add_argument("--parallel-rounds", type=int, default=2)
    parser.add_argument(
        "--parallel-only",
        action="store_true",
        help="rerun only the word counting speed with 1 and 2 processes, into the existing "
        "results file",
    )
    parser.add_argument("--output", default=str(RESULTS / "vocab_sampling.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    lines, sources = corpus_lines()
    held_out = lines[::10]
    training = [line for i, line in enumerate(lines) if i % 10]
    path = Path(tempfile.mkdtemp()) / "corpus.txt"
    path.write_text("".join(line + "\n" for line in training), encoding="utf-8")
    if args.parallel_only:
        result = json.loads(Path(args.output).read_text(encoding="utf-8"))
        result["parallel_counting"] = parallel_runs(path.parent, args)
        Path(args.output).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps(result["parallel_counting"], indent=2))
        return
    if args.memory_only:
        result = json.loads(Path(args.output).read_text(encoding="utf-8"))
        result["memory"] = memory_runs(training, path.parent, args)
        result["memory"]["date"] = time.strftime("%Y-%m-%d")
        result["memory"]["command"] = "python benchmarks/vocab_sampling.py " + " ".join(
            sys.argv[1:]
        )
        Path(args.output).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps(result["memory"], indent=2))
        return
    result = {
        "benchmark": "vocab_sampling",
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/vocab_sampling.py " + " ".join(sys.argv[1:]),
        "machine": {**cpu_info(), "python": platform.python_version()},
        "versions": versions("tensorflow", "tensorflow_text", "sentencepiece"),
        "corpus": {
            **sources,
            "training_lines": len(training),
            "training_bytes": path.stat().st_size,
            "held_out_lines": len(held_out),
        },
        "vocab_size": args.vocab_size,
        "wordpiece": _without_vocabularies(run_wordpiece(path, training, held_out, args)),
        "wordpiece_by_domain": _by_domain_runs(path, training, held_out, args),
        "sentencepiece": run_sentencepiece(path, training, held_out, args),
        "memory": memory_runs(training, path.parent, args),
        "parallel_counting": parallel_runs(path.parent, args),
    }
    Path(args.output).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
