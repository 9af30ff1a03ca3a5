"""Corpus preparation and the on-the-fly stream from its shards.

    python benchmarks/prepare.py [--mb 20] [--workers 1 2] [--shard-mb 4]
                                 [--output benchmarks/results/prepare.json]

The corpus is real text available offline, built at --mb megabytes: the
Python manual's help topics (`bertzoo.data.builtin_corpus`, English
technical prose, one document per section) and the Korean reviews of
tests/fixtures/korean_corpus.txt (the only Korean text shipped on the
machine), documents drawn at random (seeded) from both pools, 1 Korean
document in 3, one sentence per line, blank lines between documents. A
WordPiece vocabulary of 8,000 is trained on a sample (uncased, accents
kept so Hangul stays whole).

(a) preparation: `prepare_corpus` in a child process per --workers value
    (1: in that process; 2: two spawned workers): MB/s of raw text (wall
    clock, including the workers' start) and peak RSS of the main process
    and of its worker processes (getrusage).
(b) the on-the-fly input pipeline from the shards (`ExampleStream`, NSP
    examples, whole-word dynamic masking, batches of 256): sequences per
    second at 128 and 512 tokens, after one warm-up batch, and the time
    from opening the directory to the first batch at a recorded position
    (what a resumed run pays; the same at any corpus size).

(c) objective "none": the share of padding with one document's chunks
    (as `create_examples` makes them) and with full-sentence packing.

Each --mb run is added to the results file under its size, so sizes can be
compared (peak RSS should stay flat).
"""

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KOREAN = ROOT / "tests" / "fixtures" / "korean_corpus.txt"


def build_corpus(path, megabytes, seed=0):
    from bertzoo.data.builtin_corpus import python_docs_corpus

    english = [d for d in python_docs_corpus() if len(d) >= 2]
    korean = [s.strip() for s in KOREAN.read_text(encoding="utf-8").splitlines() if s.strip()]
    rng = random.Random(seed)
    target, size = int(megabytes * 2**20), 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            if rng.random() < 1 / 3:
                k = rng.randrange(len(korean) - 8)
                doc = korean[k : k + rng.randint(2, 8)]
            else:
                doc = english[rng.randrange(len(english))]
            text = "\n".join(doc) + "\n\n"
            f.write(text)
            size += len(text.encode("utf-8"))
    return path


def train_vocabulary(corpus, path):
    from bertzoo.tokenizers import train_wordpiece

    sample = corpus.with_suffix(".sample.txt")
    with open(corpus, encoding="utf-8") as f, open(sample, "w", encoding="utf-8") as out:
        out.write(f.read(4 << 20))
    train_wordpiece([sample], 8000, lowercase=True, strip_accents=False, output=path)
    return path


def child_prepare(args):
    """Runs one preparation here and prints its figures as JSON."""
    import resource

    from bertzoo.cli.corpus import load_tokenizer
    from bertzoo.data.prepare import PrepareSettings, prepare_corpus

    tokenizer = load_tokenizer(args.vocab, lowercase=True, strip_accents=False)
    settings = PrepareSettings(shard_bytes=int(args.shard_mb * 2**20), workers=args.child)
    start = time.perf_counter()
    document = prepare_corpus([args.corpus], tokenizer, args.out, settings)
    seconds = time.perf_counter() - start
    kib = lambda who: resource.getrusage(who).ru_maxrss / 1024
    # Spawned workers are not waited for at the end, so getrusage's children
    # miss them: each piece's journal entry records its worker's peak RSS.
    journal = json.loads((Path(args.out) / ".prepare-journal.json").read_text())
    worker_kib = max(e["peak_rss_kib"] for e in journal["shards"].values())
    print(
        json.dumps(
            {
                "workers": args.child,
                "seconds": round(seconds, 2),
                "mb_per_s": round(os.path.getsize(args.corpus) / 2**20 / seconds, 2),
                "peak_rss_main_mib": round(kib(resource.RUSAGE_SELF), 1),
                "peak_rss_worker_mib": round(worker_kib / 1024, 1) if args.child > 1 else None,
                "summary": document["summary"],
            }
        )
    )


def stream_throughput(prepared_dir, seq_len, batches=40):
    from bertzoo.data import MaskedLMMasker
    from bertzoo.data.shards import ExampleStream, StreamSettings, open_prepared

    prepared = open_prepared(prepared_dir)
    tokenizer = prepared.tokenizer()
    masker = MaskedLMMasker(tokenizer, seq_len, round(seq_len * 0.15), kind="whole_word")
    settings = StreamSettings(batch_size=256, seq_len=seq_len, objective="nsp", seed=0)
    stream = ExampleStream(prepared, tokenizer, masker, settings)
    it = iter(stream.dataset())
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    rate = batches * 256 / (time.perf_counter() - start)
    # Resume from a recorded position, as a restarted run does: open the
    # directory (verifying its small files), rebuild the tokenizer, make
    # the stream, first batch (verifies and reads one shard).
    middle = stream.position_after(batches)
    start = time.perf_counter()
    reopened = open_prepared(prepared_dir, check_inputs=True)
    fresh = ExampleStream(reopened, reopened.tokenizer(), masker, settings)
    next(iter(fresh.dataset(middle)))
    return {
        "seq_len": seq_len,
        "sequences_per_s": round(rate, 1),
        "resume_to_first_batch_s": round(time.perf_counter() - start, 2),
    }


def padding_shares(prepared_dir, seq_len, batches=20):
    """Objective "none": the share of padding in the batches, one
    document's chunks (create_examples) vs full-sentence packing."""
    import numpy as np

    from bertzoo.data import MaskedLMMasker
    from bertzoo.data.shards import ExampleStream, StreamSettings, open_prepared

    prepared = open_prepared(prepared_dir)
    tokenizer = prepared.tokenizer()
    masker = MaskedLMMasker(tokenizer, seq_len, round(seq_len * 0.15))
    shares = {}
    for packing in (None, "full_sentences"):
        settings = StreamSettings(256, seq_len, objective="none", packing=packing)
        ds = ExampleStream(prepared, tokenizer, masker, settings).dataset().take(batches)
        masks = [x["padding_mask"] for x, _, _ in ds.as_numpy_iterator()]
        shares[packing or "chunks"] = round(1 - float(np.mean(masks)), 3)
    return {"seq_len": seq_len, "padding_share": shares}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shard-mb", type=float, default=4)
    parser.add_argument("--work", default="/tmp/bertzoo_bench_prepare")
    parser.add_argument("--output", default=str(RESULTS / "prepare.json"))
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--vocab", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return child_prepare(args)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(work / f"corpus-{args.mb:g}mb.txt", args.mb)
    vocab = train_vocabulary(corpus, work / "vocab.txt")
    runs = []
    for workers in args.workers:
        out = work / f"prepared-{workers}"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        command = [sys.executable, __file__, "--child", str(workers), "--corpus", str(corpus)]
        command += ["--vocab", str(vocab), "--out", str(out), "--shard-mb", str(args.shard_mb)]
        result = subprocess.run(command, check=True, capture_output=True, text=True)
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]))
    streams = [stream_throughput(work / f"prepared-{args.workers[-1]}", s) for s in (128, 512)]
    print(json.dumps(streams))
    padding = [padding_shares(work / f"prepared-{args.workers[-1]}", s) for s in (128, 512)]
    print(json.dumps(padding))
    run = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/prepare.py", *sys.argv[1:]]),
        "machine": cpu_info(),
        "load_average_at_start": os.getloadavg()[0],
        "versions": versions("tensorflow", "tensorflow_text", "numpy"),
        "corpus": {
            "megabytes": args.mb,
            "bytes": corpus.stat().st_size,
            "how": "Python manual help topics (English) + tests/fixtures/korean_corpus.txt "
            "(Korean), documents drawn at random, seed 0",
            "vocabulary": "WordPiece 8000, uncased, accents kept, trained on the first 4 MiB",
        },
        "shard_mb": args.shard_mb,
        "preparation": runs,
        "stream": streams,
        "objective_none_padding": padding,
    }
    output = Path(args.output)
    results = {"benchmark": "prepare", "runs": {}}
    if output.is_file():
        results = json.loads(output.read_text(encoding="utf-8"))
    results["runs"][f"{args.mb:g}MB"] = run
    output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
