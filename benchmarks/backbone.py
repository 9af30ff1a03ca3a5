"""Forward-pass benchmark: bertzoo vs keras-hub BertBackbone, same config, same run.

    python benchmarks/backbone.py [--preset bert_base] [--batch 8] [--seq 128]
                                  [--repeats 20] [--output benchmarks/results/backbone.json]

TensorFlow backend, each model's forward (training=False) wrapped in
`tf.function(jit_compile=True)`; weights are random (speed does not depend on
them). After warm-up, the models are timed in interleaved rounds (each round
runs every model once) so that machine noise hits all of them alike; the
table reports the median seconds per batch and the ratios against keras-hub's
float32 model.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import bertzoo  # noqa: E402


def keras_hub_backbone(config, dtype):
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        dropout=config.get("dropout", 0.1),
        max_sequence_length=config.get("max_sequence_length", 512),
        num_segments=config.get("num_segments", 2),
        dtype=dtype,
    )


def make_inputs(batch, seq, vocab, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, size=(batch, seq)).astype("int32")
    return {
        "token_ids": tf.constant(ids),
        "segment_ids": tf.constant(
            np.repeat([[0] * (seq // 2) + [1] * (seq - seq // 2)], batch, 0).astype("int32")
        ),
        "padding_mask": tf.constant(np.ones((batch, seq), "int32")),
    }


def matmul_gflops(dtype, n=2048, repeats=5):
    """This machine's XLA matmul rate for `dtype`: the ceiling the models
    below can approach, and what bounds any bfloat16 speed-up."""
    a = tf.cast(tf.random.normal((n, n)), dtype)
    b = tf.cast(tf.random.normal((n, n)), dtype)
    matmul = tf.function(tf.linalg.matmul, jit_compile=True)
    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def compiled_forward(model):
    @tf.function(jit_compile=True)
    def forward(inputs):
        return model(inputs, training=False)["sequence_output"]

    return forward


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="bert_base")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--output", default="benchmarks/results/backbone.json")
    args = parser.parse_args(argv)

    config = json.loads(bertzoo.presets.builtin_presets()[args.preset].read_text())["backbone"]
    inputs = make_inputs(args.batch, args.seq, config["vocabulary_size"])
    candidates = {
        "keras_hub float32": lambda: keras_hub_backbone(config, "float32"),
        "bertzoo float32": lambda: bertzoo.BertBackbone.from_preset(args.preset, dtype="float32"),
        "keras_hub mixed_bfloat16": lambda: keras_hub_backbone(config, "mixed_bfloat16"),
        "bertzoo mixed_bfloat16": lambda: bertzoo.BertBackbone.from_preset(
            args.preset, dtype="mixed_bfloat16"
        ),
    }
    fns = {}
    for name, build in candidates.items():
        fn = compiled_forward(build())
        for _ in range(args.warmup):
            fn(inputs).numpy()
        fns[name] = fn
        print(f"compiled {name}", file=sys.stderr)

    times = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(inputs).numpy()
            times[name].append(time.perf_counter() - start)

    probe = {dtype: matmul_gflops(dtype) for dtype in ("float32", "bfloat16")}
    base = statistics.median(times["keras_hub float32"])
    rows = []
    for name, ts in times.items():
        median = statistics.median(ts)
        rows.append(
            {
                "model": name,
                "median_s": median,
                "sequences_per_s": args.batch / median,
                "speedup_vs_keras_hub_float32": base / median,
            }
        )
    result = {
        "benchmark": "backbone_forward",
        "preset": args.preset,
        "batch": args.batch,
        "seq": args.seq,
        "repeats": args.repeats,
        "backend": keras.backend.backend(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "matmul_gflops": probe,
        "rows": rows,
        "ratios": {
            "bertzoo_float32_vs_keras_hub_float32": base
            / statistics.median(times["bertzoo float32"]),
            "bertzoo_bfloat16_vs_keras_hub_float32": base
            / statistics.median(times["bertzoo mixed_bfloat16"]),
            "bertzoo_bfloat16_vs_keras_hub_bfloat16": statistics.median(
                times["keras_hub mixed_bfloat16"]
            )
            / statistics.median(times["bertzoo mixed_bfloat16"]),
        },
    }
    print(
        f"\n{args.preset} forward, batch {args.batch} x seq {args.seq}, XLA, median of {args.repeats}"
    )
    print(f"{'model':<28}{'s/batch':>10}{'seq/s':>10}{'vs keras_hub fp32':>20}")
    for row in rows:
        print(
            f"{row['model']:<28}{row['median_s']:>10.4f}{row['sequences_per_s']:>10.1f}"
            f"{row['speedup_vs_keras_hub_float32']:>19.2f}x"
        )
    print(
        f"XLA matmul 2048^3: float32 {probe['float32']:.0f} GFLOP/s, "
        f"bfloat16 {probe['bfloat16']:.0f} GFLOP/s"
    )
    for key, value in result["ratios"].items():
        print(f"{key}: {value:.3f}")
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
