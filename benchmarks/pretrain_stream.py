"""The pre-training recipe on corpora of growing size: it prepares the
corpus once into its output and streams from the shards, so memory, time to
first step and time to resume should not grow with the corpus.

    python benchmarks/pretrain_stream.py scale [--mb 50 200 1024]
    python benchmarks/pretrain_stream.py parity --old-tree DIR [--seeds 0 1]
    python benchmarks/pretrain_stream.py algorithm

scale: for each size, a corpus of real text (built as benchmarks/prepare.py
builds it: the Python manual's help topics and the Korean reviews of
tests/fixtures/korean_corpus.txt, documents drawn at random, seed 0; one
vocabulary, WordPiece 8,000 trained on the 50 MB corpus's first 4 MiB, for
every size) and three runs of `recipes/pretrain.py` (bert_tiny, length 128,
batch 32, 20 steps, a checkpoint every 10, in a subprocess with its stdout
lines timestamped):
  first:    --corpus: preparation, then training. Seconds to prepare, from
            the end of preparation to the first step, and in all; peak RSS
            of the largest process (the recipe or a preparation worker).
  resume:   the same command after removing the step-20 checkpoint: seconds
            to the first step after resuming at step 10 (the raw corpus is
            not read), peak RSS.
  prepared: a new output with --prepared (the first run's preparation):
            seconds to the first step.

algorithm: on a small corpus (4 MB, prepared into ~0.5 MB shards), the
examples from the shards against today's in-memory examples
(`create_examples` over all documents, as one input file): NSP label
shares, tokens per example, share cut at the length limit, share of short
targets; and the masking statistics of both streams (masked share, 80/10/10
split), at 128 tokens, 200 batches of 64 each.

parity: masked-LM accuracy of the default run (`python recipes/pretrain.py`:
bert_tiny on the built-in corpus, 700 steps) with this tree (prepared,
streamed) and with another checkout (today's in-memory path, e.g. `git
worktree add /tmp/old 3d23687`), per seed. Each path measures on its own
held-out documents (5% of the same corpus, drawn differently), so the seeds
show the spread to compare the difference with.
"""

import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402
from prepare import build_corpus, train_vocabulary  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "pretrain.py"
RUN = ["--preset", "bert_tiny", "--seq-len", "128", "--steps", "20", "--batch-size", "32"]
RUN += ["--checkpoint-every", "10", "--log-every", "1", "--eval-batches", "2", "--verbose", "2"]


def timed_run(command, env=None):
    """Runs `command`; returns (seconds, [(seconds since start, line)], peak
    RSS MiB of its largest process, waited-for descendants included)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    for line in proc.stdout:
        lines.append((time.perf_counter() - start, line.rstrip()))
    proc.wait()
    seconds = time.perf_counter() - start
    if proc.returncode:
        tail = "\n".join(text for _, text in lines[-30:])
        raise RuntimeError(f"{' '.join(command)} failed:\n{tail}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return seconds, lines, peak


def first_at(lines, needle):
    for at, text in lines:
        if needle in text:
            return at
    return None


def child_run(args):
    """One recipe run, alone in this process's children (so getrusage's
    peak is that run's); prints its figures as JSON."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    seconds, lines, peak = timed_run(json.loads(args.command), env)
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "peak_rss_mib": round(peak, 1),
                "preparing_at": first_at(lines, "Preparing the corpus"),
                "prepared_at": first_at(lines, "Prepared "),
                "resumed_at": first_at(lines, "Resumed from"),
                "first_step_at": first_at(lines, "step 1/20:") or first_at(lines, "step 11/20:"),
            }
        )
    )


def isolated(command):
    """`command` run from a fresh child of this script: its own rusage."""
    wrapper = [sys.executable, __file__, "child", "--command", json.dumps(command)]
    result = subprocess.run(wrapper, check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def worker_peak_mib(prepared):
    """Preparation workers record their peak RSS in the journal (spawned
    workers are not waited for, so rusage misses them)."""
    journal = Path(prepared) / ".prepare-journal.json"
    if not journal.is_file():
        return None
    entries = json.loads(journal.read_text())["shards"].values()
    return round(max(e.get("peak_rss_kib", 0) for e in entries) / 1024, 1)


def scale(args):
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    vocab = work / "vocab.txt"
    if not vocab.is_file():
        train_vocabulary(build_corpus(work / "corpus-50mb.txt", 50), vocab)
    sizes = {}
    for mb in args.mb:
        corpus = work / f"corpus-{mb:g}mb.txt"
        if not corpus.is_file() or corpus.stat().st_size < mb * 2**20:
            build_corpus(corpus, mb)
        out = work / f"run-{mb:g}mb"
        base = [sys.executable, str(RECIPE), *RUN, "--vocab", str(vocab), "--output", str(out)]
        if args.reuse_first:  # the first run's figures and output, from an earlier run
            first = json.loads(Path(args.output).read_text())["scale"]["sizes"][f"{mb:g}MB"]
            first = first["first"]
        else:
            shutil.rmtree(out, ignore_errors=True)
            first = isolated([*base, "--corpus", str(corpus)])
            first["worker_peak_rss_mib"] = worker_peak_mib(out / "prepared")
            first["prepare_s"] = round(first["prepared_at"] - first["preparing_at"], 2)
            first["prepared_to_first_step_s"] = round(
                first["first_step_at"] - first["prepared_at"], 2
            )
        print(mb, "first", json.dumps(first))
        shutil.rmtree(out / "checkpoints" / "ckpt-000000020")
        (out / "metrics.json").unlink()
        resume = isolated([*base, "--corpus", str(corpus)])
        print(mb, "resume", json.dumps(resume))
        other = work / f"run-{mb:g}mb-prepared"
        shutil.rmtree(other, ignore_errors=True)
        command = [sys.executable, str(RECIPE), *RUN, "--output", str(other)]
        prepared = isolated([*command, "--prepared", str(out / "prepared")])
        print(mb, "prepared", json.dumps(prepared))
        sizes[f"{mb:g}MB"] = {
            "corpus_bytes": corpus.stat().st_size,
            "shards": len(json.loads((out / "prepared" / "prepared.json").read_text())["shards"]),
            "first": first,
            "resume": resume,
            "from_prepared": prepared,
        }
        shutil.rmtree(other, ignore_errors=True)
    load = os.getloadavg()[0]
    record("scale", args, {"sizes": sizes, "run": " ".join(RUN), "load_average_at_end": load})


def _example_stats(batches):
    import numpy as np

    ids = np.concatenate([x["token_ids"] for x, _, _ in batches])
    pad = np.concatenate([x["padding_mask"] for x, _, _ in batches])
    labels = np.concatenate([y["sentence"] for _, y, _ in batches])
    lengths = pad.sum(axis=1)
    return {
        "examples": int(len(ids)),
        "nsp_random_share": round(float(np.mean(labels)), 4),
        "mean_tokens": round(float(lengths.mean()), 2),
        "full_share": round(float(np.mean(lengths == ids.shape[1])), 4),
        "short_share(<half)": round(float(np.mean(lengths < ids.shape[1] / 2)), 4),
    }


def _mask_stats(batches, tokenizer):
    import numpy as np

    masked = real = same = randomised = tokens = 0
    for x, y, w in batches:
        sel = w["mlm"] > 0
        at = np.take_along_axis(x["token_ids"], x["mask_positions"], axis=1)
        masked += int(np.sum((at == tokenizer.mask_token_id) & sel))
        same += int(np.sum((at == y["mlm"]) & sel))
        randomised += int(np.sum((at != y["mlm"]) & (at != tokenizer.mask_token_id) & sel))
        real += int(sel.sum())
        tokens += int(x["padding_mask"].sum())
    return {
        "predicted_share_of_tokens": round(real / tokens, 4),
        "mask_share": round(masked / real, 4),
        "kept_share": round(same / real, 4),
        "random_share": round(randomised / real, 4),
    }


def algorithm(args):
    from bertzoo.cli.corpus import load_tokenizer
    from bertzoo.data import MaskedLMMasker, create_examples, make_pretraining_dataset
    from bertzoo.data.corpus import read_corpus, tokenize_documents
    from bertzoo.data.prepare import PrepareSettings, prepare_corpus
    from bertzoo.data.shards import ExampleStream, StreamSettings, open_prepared

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(work / "corpus-4mb.txt", 4)
    vocab = work / "vocab.txt"
    if not vocab.is_file():
        train_vocabulary(build_corpus(work / "corpus-50mb.txt", 50), vocab)
    tokenizer = load_tokenizer(str(vocab), lowercase=True, strip_accents=False)
    out = work / "prepared-4mb"
    shutil.rmtree(out, ignore_errors=True)
    prepare_corpus([corpus], tokenizer, out, PrepareSettings(shard_bytes=512 << 10, workers=2))
    S, B, N = 128, 64, 200
    masker = MaskedLMMasker(tokenizer, S, 20, kind="token")
    settings = StreamSettings(batch_size=B, seq_len=S, objective="nsp", seed=0)
    prepared = open_prepared(out)
    shards = list(ExampleStream(prepared, tokenizer, masker, settings).dataset().take(N))
    shards = [tuple({k: v.numpy() for k, v in part.items()} for part in b) for b in shards]
    documents = tokenize_documents(read_corpus([corpus]), tokenizer)
    examples = create_examples(documents, tokenizer, seq_len=S, objective="nsp", seed=0)
    memory = make_pretraining_dataset(examples, B, masker, seed=0, repeat=True).take(N)
    memory = [tuple({k: v.numpy() for k, v in part.items()} for part in b) for b in memory]
    figures = {
        "corpus_bytes": corpus.stat().st_size,
        "shards": len(prepared),
        "examples": {"shards": _example_stats(shards), "in_memory": _example_stats(memory)},
        "masking": {
            "shards": _mask_stats(shards, tokenizer),
            "in_memory": _mask_stats(memory, tokenizer),
        },
    }
    print(json.dumps(figures, indent=1))
    record("algorithm", args, figures)


def parity(args):
    # Seeds run earlier (same file) are kept: more seeds can be added later.
    output = Path(args.output)
    earlier = json.loads(output.read_text())["parity"]["runs"] if output.is_file() else {}
    runs = {
        name: [r for r in rows if r["seed"] not in args.seeds] for name, rows in earlier.items()
    }
    for tree, name in ((ROOT, "prepared"), (Path(args.old_tree), "in_memory")):
        for seed in args.seeds:
            out = Path(args.work) / f"parity-{name}-{seed}"
            shutil.rmtree(out, ignore_errors=True)
            env = {**os.environ, "PYTHONPATH": str(tree), "TF_CPP_MIN_LOG_LEVEL": "2"}
            command = [sys.executable, str(tree / "recipes" / "pretrain.py"), "--verbose", "0"]
            command += ["--seed", str(seed), "--output", str(out)]
            seconds, _, _ = timed_run(command, env)
            m = json.loads((out / "metrics.json").read_text())
            keys = ("initial_masked_lm_accuracy", "final_masked_lm_accuracy", "final_loss")
            runs.setdefault(name, []).append(
                {"seed": seed, "seconds": round(seconds, 1), **{k: m[k] for k in keys}}
            )
            print(name, json.dumps(runs[name][-1]))
    mean = {
        k: round(sum(r["final_masked_lm_accuracy"] for r in v) / len(v), 4) for k, v in runs.items()
    }
    record("parity", args, {"runs": runs, "mean_final_masked_lm_accuracy": mean})


def record(name, args, figures):
    output = Path(args.output)
    results = {"benchmark": "pretrain_stream"}
    if output.is_file():
        results = json.loads(output.read_text(encoding="utf-8"))
    results[name] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/pretrain_stream.py", *sys.argv[1:]]),
        "machine": cpu_info(),
        "load_average_at_start": args.load_at_start,
        "versions": versions("tensorflow", "keras", "numpy"),
        **figures,
    }
    output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"Wrote {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("scale")
    s.add_argument("--mb", type=float, nargs="+", default=[50, 200, 1024])
    s.add_argument(
        "--reuse-first",
        action="store_true",
        help="keep the first runs' figures and outputs from the results file; rerun resume "
        "and from-prepared only",
    )
    p = sub.add_parser("parity")
    p.add_argument("--old-tree", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a = sub.add_parser("algorithm")
    c = sub.add_parser("child")
    c.add_argument("--command", required=True)
    for q in (s, p, a):
        q.add_argument("--work", default="/tmp/bertzoo_bench_prepare")
        q.add_argument("--output", default=str(RESULTS / "pretrain_stream.json"))
    args = parser.parse_args()
    args.load_at_start = os.getloadavg()[0]
    run = {"scale": scale, "parity": parity, "algorithm": algorithm, "child": child_run}
    run[args.what](args)


if __name__ == "__main__":
    main()
