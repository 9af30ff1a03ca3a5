"""Forward-pass benchmark: bertzoo vs keras-hub BertBackbone, same config, same
run, and bertzoo on both of TensorFlow's CPU execution paths in both precisions.

    python benchmarks/backbone.py [--preset bert_base] [--batch 8] [--seq 128]
                                  [--repeats 20] [--output benchmarks/results/backbone.json]
    python benchmarks/backbone.py --quick     # smoke run: bert_tiny, tiny shapes, no file

TensorFlow backend, weights random (speed does not depend on them). Each
forward (training=False) is wrapped in `tf.function`, either with
`jit_compile=True` (XLA) or without it (TensorFlow's own kernels, oneDNN on
x86 CPUs). After warm-up, the models are timed in interleaved rounds (each
round runs every model once) so that machine noise hits all of them alike;
the table reports the median seconds per batch and the ratios against
keras-hub's float32 model (XLA, as keras-hub compiles it).

The machine's own bf16 ceiling comes from a 2048^3 matmul in float32 and
bfloat16 on both paths (GFLOP/s, median of interleaved rounds): the
bf16/fp32 matmul ratio per path is the most a bf16 model can gain there.
The goal, judged on the oneDNN path (the one with bf16 kernels on CPUs that
have AVX512-BF16 or AMX): bertzoo's bf16/fp32 forward ratio >= 0.8x the
machine's bf16/fp32 matmul ratio. On a CPU without bf16 instructions the
ratios are printed and the goal is reported as not applicable.
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
from common import cpu_info  # noqa: E402

import bertzoo  # noqa: E402

PATHS = {"XLA": True, "oneDNN": False}
DTYPES = ("float32", "bfloat16")
GOAL_FRACTION = 0.8


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
    ids = rng.integers(min(1000, vocab - 1), vocab, size=(batch, seq)).astype("int32")
    return {
        "token_ids": tf.constant(ids),
        "segment_ids": tf.constant(
            np.repeat([[0] * (seq // 2) + [1] * (seq - seq // 2)], batch, 0).astype("int32")
        ),
        "padding_mask": tf.constant(np.ones((batch, seq), "int32")),
    }


def interleaved_medians(calls, rounds):
    """name -> median seconds of `calls[name]()`, timed in `rounds` rounds
    that each run every call once."""
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def matmul_gflops(n=2048, rounds=5):
    """path -> dtype -> GFLOP/s of an n^3 matmul on this machine: the ceiling
    the models below can approach, and what bounds any bfloat16 speed-up."""
    calls = {}
    for dtype in DTYPES:
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)
        for path, jit in PATHS.items():
            matmul = tf.function(lambda a=a, b=b: tf.linalg.matmul(a, b), jit_compile=jit)
            matmul().numpy()
            calls[(path, dtype)] = lambda f=matmul: f().numpy()
    seconds = interleaved_medians(calls, rounds)
    return {
        path: {dtype: 2 * n**3 / seconds[(path, dtype)] / 1e9 for dtype in DTYPES} for path in PATHS
    }


def compiled_forward(model, jit_compile=True):
    @tf.function(jit_compile=jit_compile)
    def forward(inputs):
        return model(inputs, training=False)["sequence_output"]

    return forward


def bf16_goal(forward_ratio, matmul_ratio, machine):
    """The goal on the oneDNN path, or why it does not apply."""
    has_bf16 = machine["avx512_bf16"] or machine["amx_bf16"]
    goal = {
        "path": "oneDNN",
        "cpu_has_bf16_instructions": has_bf16,
        "forward_bf16_over_fp32": forward_ratio,
        "matmul_bf16_over_fp32": matmul_ratio,
        "target": GOAL_FRACTION * matmul_ratio,
        "met": None,
    }
    if has_bf16:
        goal["met"] = forward_ratio >= GOAL_FRACTION * matmul_ratio
    return goal


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default=None, help="built-in preset (default bert_base)")
    parser.add_argument("--batch", type=int, default=None, help="default 8")
    parser.add_argument("--seq", type=int, default=None, help="default 128")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 20)")
    parser.add_argument("--warmup", type=int, default=None, help="default 3")
    parser.add_argument("--matmul-size", type=int, default=None, help="default 2048")
    parser.add_argument(
        "--no-keras-hub", action="store_true", help="time bertzoo only (keras-hub not needed)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: bert_tiny, batch 2 x seq 32, 3 rounds, 512^3 matmul; "
        "writes no file unless --output is given",
    )
    parser.add_argument("--output", default=None, help="default benchmarks/results/backbone.json")
    args = parser.parse_args(argv)
    defaults = dict(preset="bert_base", batch=8, seq=128, repeats=20, warmup=3, matmul_size=2048)
    if args.quick:
        defaults = dict(preset="bert_tiny", batch=2, seq=32, repeats=3, warmup=1, matmul_size=512)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.output is None and not args.quick:
        args.output = "benchmarks/results/backbone.json"
    return args


def main(argv=None):
    args = parse_args(argv)
    machine = cpu_info()
    config = json.loads(bertzoo.presets.builtin_presets()[args.preset].read_text())["backbone"]
    inputs = make_inputs(args.batch, args.seq, config["vocabulary_size"])

    bertzoo_fp32 = bertzoo.BertBackbone.from_preset(args.preset, dtype="float32")
    bertzoo_bf16 = bertzoo.BertBackbone.from_preset(args.preset, dtype="mixed_bfloat16")
    # Same weights, so that the two precisions' outputs can be compared.
    bertzoo_bf16.set_weights(bertzoo_fp32.get_weights())
    candidates = {}
    if not args.no_keras_hub:
        candidates["keras_hub float32 XLA"] = lambda: (keras_hub_backbone(config, "float32"), True)
    candidates["bertzoo float32 XLA"] = lambda: (bertzoo_fp32, True)
    candidates["bertzoo float32 oneDNN"] = lambda: (bertzoo_fp32, False)
    if not args.no_keras_hub:
        candidates["keras_hub mixed_bfloat16 XLA"] = lambda: (
            keras_hub_backbone(config, "mixed_bfloat16"),
            True,
        )
    candidates["bertzoo mixed_bfloat16 XLA"] = lambda: (bertzoo_bf16, True)
    candidates["bertzoo mixed_bfloat16 oneDNN"] = lambda: (bertzoo_bf16, False)

    fns, outputs = {}, {}
    for name, build in candidates.items():
        model, jit = build()
        fn = compiled_forward(model, jit)
        outputs[name] = tf.cast(fn(inputs), "float32").numpy()
        for _ in range(args.warmup):
            fn(inputs).numpy()
        fns[name] = lambda fn=fn: fn(inputs).numpy()
        print(f"compiled {name}", file=sys.stderr)

    medians = interleaved_medians(fns, args.repeats)
    probe = matmul_gflops(args.matmul_size)
    matmul_ratio = {path: probe[path]["bfloat16"] / probe[path]["float32"] for path in PATHS}
    forward_ratio = {
        path: medians[f"bertzoo float32 {path}"] / medians[f"bertzoo mixed_bfloat16 {path}"]
        for path in PATHS
    }
    reference = outputs["bertzoo float32 oneDNN"]
    agreement = {
        name: float(np.max(np.abs(out - reference)))
        for name, out in outputs.items()
        if name.startswith("bertzoo") and name != "bertzoo float32 oneDNN"
    }
    goal = bf16_goal(forward_ratio["oneDNN"], matmul_ratio["oneDNN"], machine)

    base_name = "bertzoo float32 XLA" if args.no_keras_hub else "keras_hub float32 XLA"
    base = medians[base_name]
    rows = []
    for name, median in medians.items():
        rows.append(
            {
                "model": name,
                "path": name.rsplit(" ", 1)[1],
                "median_s": median,
                "sequences_per_s": args.batch / median,
                "speedup_vs_baseline": base / median,
            }
        )
    ratios = {
        "bertzoo_float32_oneDNN_vs_XLA": medians["bertzoo float32 XLA"]
        / medians["bertzoo float32 oneDNN"],
        "bertzoo_bfloat16_oneDNN_vs_XLA": medians["bertzoo mixed_bfloat16 XLA"]
        / medians["bertzoo mixed_bfloat16 oneDNN"],
    }
    if not args.no_keras_hub:
        ratios.update(
            {
                "bertzoo_float32_vs_keras_hub_float32": base / medians["bertzoo float32 XLA"],
                "bertzoo_bfloat16_vs_keras_hub_float32": base
                / medians["bertzoo mixed_bfloat16 XLA"],
                "bertzoo_bfloat16_vs_keras_hub_bfloat16": medians["keras_hub mixed_bfloat16 XLA"]
                / medians["bertzoo mixed_bfloat16 XLA"],
            }
        )
    result = {
        "benchmark": "backbone_forward",
        "preset": args.preset,
        "batch": args.batch,
        "seq": args.seq,
        "repeats": args.repeats,
        "quick": args.quick,
        "backend": keras.backend.backend(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            **machine,
        },
        "baseline": base_name,
        "matmul_size": args.matmul_size,
        "matmul_gflops": probe,
        "matmul_bf16_over_fp32": matmul_ratio,
        "forward_bf16_over_fp32": forward_ratio,
        "bf16_goal": goal,
        "bf16_max_abs_diff_vs_float32_oneDNN": agreement,
        "rows": rows,
        "ratios": ratios,
    }
    print_report(args, result)
    if args.output:
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.output}")
    return result


def print_report(args, result):
    print(
        f"\n{args.preset} forward, batch {args.batch} x seq {args.seq}, "
        f"median of {args.repeats} interleaved rounds"
    )
    print(f"{'model':<32}{'s/batch':>10}{'seq/s':>10}{'vs ' + result['baseline']:>28}")
    for row in result["rows"]:
        print(
            f"{row['model']:<32}{row['median_s']:>10.4f}{row['sequences_per_s']:>10.1f}"
            f"{row['speedup_vs_baseline']:>27.2f}x"
        )
    n = result["matmul_size"]
    print(f"\nmatmul {n}^3 GFLOP/s   {'float32':>10}{'bfloat16':>10}{'bf16/fp32':>11}")
    for path, rates in result["matmul_gflops"].items():
        print(
            f"  {path:<20}{rates['float32']:>10.0f}{rates['bfloat16']:>10.0f}"
            f"{result['matmul_bf16_over_fp32'][path]:>10.2f}x"
        )
    print("bertzoo forward bf16/fp32 speed-up")
    for path, ratio in result["forward_bf16_over_fp32"].items():
        print(f"  {path:<20}{ratio:>10.2f}x")
    for name, diff in result["bf16_max_abs_diff_vs_float32_oneDNN"].items():
        print(f"max |{name} - bertzoo float32 oneDNN| of sequence_output: {diff:.3g}")
    for key, value in result["ratios"].items():
        print(f"{key}: {value:.3f}")
    goal = result["bf16_goal"]
    line = (
        f"goal: bf16 forward >= {GOAL_FRACTION}x the machine's bf16/fp32 matmul ratio (oneDNN): "
        f"{goal['forward_bf16_over_fp32']:.2f}x vs {goal['target']:.2f}x "
        f"({GOAL_FRACTION} x {goal['matmul_bf16_over_fp32']:.2f}x)"
    )
    if goal["met"] is None:
        print(f"{line}: not applicable, this CPU has no bf16 instructions (avx512_bf16 / amx_bf16)")
    else:
        print(f"{line}: {'met' if goal['met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
