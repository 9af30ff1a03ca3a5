"""The memory planner (`bertzoo.plan`) against the peak XLA assigns to the
compiled step (`bertzoo.planner.measure_peak`: JAX `memory_analysis()` of the
jitted training or predict step, lowered on shapes only, on this machine's
CPU).

The planner's tensor counts were fitted on the "calibration" rows (bert_tiny,
bert_mini and a few 2-layer configurations that vary one width at a time);
the "validation" rows are other presets, lengths, batches, modes and
gradient accumulation, never used in the fit. Mixed-precision rows are
listed apart: XLA on CPU keeps bfloat16 activations as float32, so the CPU
measures float32 sizes there, while the planner gives the 16-bit sizes of a
GPU or TPU.

Also prints the planner's BERT-base fine-tuning table for a 12 GiB GPU
(float32, Adam) beside the original BERT repository's README.

    KERAS_BACKEND=jax python benchmarks/plan_calibration.py
    python benchmarks/plan_calibration.py --only ModernBERT --only "no attention"
Writes benchmarks/results/plan_calibration.json. `--only LABEL` re-measures
the rows whose label contains LABEL and keeps the other rows' measurements
from the last results file (each row records the date and machine it was
measured on); every row's plan is recomputed by the current planner.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402

from bertzoo.planner.architecture import backbone_config  # noqa: E402


def custom(layers, hidden, heads, intermediate, **extra):
    return {
        "vocabulary_size": 30522,
        "num_layers": layers,
        "num_heads": heads,
        "hidden_dim": hidden,
        "intermediate_dim": intermediate,
        **extra,
    }


# modernbert_base's switches (pre-LN, no biases, GeGLU, rotary positions, no
# dropout) at small widths, as tests/test_planner.py's: layer 0 global,
# layer 1 local with a 16-token window (banded up to 256 tokens, in blocks
# beyond).
MODERNBERT_LABEL = "L2 H128 A4 F192 ModernBERT, window 16"
MODERNBERT_SMALL = {
    **backbone_config("modernbert_base"),
    "vocabulary_size": 1000,
    "num_layers": 2,
    "num_heads": 4,
    "hidden_dim": 128,
    "intermediate_dim": 192,
    "max_sequence_length": 1024,
    "local_attention_window": 16,
    "global_attention_every": 2,
}

# (set, label, preset, seq_len, batches, mode, precision, gradient accumulation)
GRID = [
    *[
        ("calibration", "bert_tiny", "bert_tiny", s, (4, 8), "finetune", "float32", 1)
        for s in (64, 128, 256, 512)
    ],
    *[
        ("calibration", "bert_mini", "bert_mini", s, (4, 8), "finetune", "float32", 1)
        for s in (64, 128, 256, 512)
    ],
    (
        "calibration",
        "L2 H128 A2 F256",
        custom(2, 128, 2, 256),
        128,
        (4, 8),
        "finetune",
        "float32",
        1,
    ),
    (
        "calibration",
        "L2 H128 A2 F1024",
        custom(2, 128, 2, 1024),
        128,
        (4, 8),
        "finetune",
        "float32",
        1,
    ),
    (
        "calibration",
        "L2 H128 A4 F512",
        custom(2, 128, 4, 512),
        128,
        (4, 8),
        "finetune",
        "float32",
        1,
    ),
    (
        "calibration",
        "L2 H128 A2 F512 no dropout",
        custom(2, 128, 2, 512, dropout=0.0),
        128,
        (4, 8),
        "finetune",
        "float32",
        1,
    ),
    (
        "calibration",
        "L2 H128 A2 F512 no attention dropout",
        custom(2, 128, 2, 512, attention_dropout=0.0),
        128,
        (4, 8),
        "finetune",
        "float32",
        1,
    ),
    *[
        ("calibration", MODERNBERT_LABEL, MODERNBERT_SMALL, s, (4, 8), "finetune", "float32", 1)
        for s in (128, 512)
    ],
    ("calibration", "bert_tiny", "bert_tiny", 128, (4, 8), "pretrain", "float32", 1),
    ("calibration", "bert_tiny", "bert_tiny", 512, (4, 8), "inference", "float32", 1),
    *[
        ("validation", "bert_small", "bert_small", s, (8, 32), "finetune", "float32", 1)
        for s in (64, 128, 256, 512)
    ],
    *[
        ("validation", "bert_medium", "bert_medium", s, (16,), "finetune", "float32", 1)
        for s in (128, 384)
    ],
    *[
        ("validation", "bert_base", "bert_base", s, (6, 16), "finetune", "float32", 1)
        for s in (64, 128, 256, 320, 384, 512)
    ],
    ("validation", "bert_base", "bert_base", 128, (32,), "pretrain", "float32", 1),
    ("validation", "bert_base", "bert_base", 512, (8,), "pretrain", "float32", 1),
    ("validation", "bert_base", "bert_base", 128, (64,), "inference", "float32", 1),
    ("validation", "bert_base", "bert_base", 512, (16,), "inference", "float32", 1),
    (
        "validation",
        "bert_small + accumulation 4",
        "bert_small",
        128,
        (32,),
        "finetune",
        "float32",
        4,
    ),
    ("validation", "albert_base", "albert_base", 256, (16,), "finetune", "float32", 1),
    ("validation", "electra_small", "electra_small", 512, (16,), "finetune", "float32", 1),
    ("validation", "distilbert_base", "distilbert_base", 256, (16,), "finetune", "float32", 1),
    ("validation", "tinybert_4l_312d", "tinybert_4l_312d", 128, (64,), "finetune", "float32", 1),
    (
        "calibration",
        "bert_tiny, no attention dropout",
        custom(2, 128, 2, 512, attention_dropout=0.0),
        512,
        (8,),
        "finetune",
        "float32",
        1,
    ),
    ("validation", "bert_large", "bert_large", 128, (8,), "finetune", "float32", 1),
    *[
        ("validation", MODERNBERT_LABEL, MODERNBERT_SMALL, s, batches, "finetune", "float32", 1)
        for s, batches in ((256, (4, 8)), (1024, (4,)))
    ],
    ("validation", MODERNBERT_LABEL, MODERNBERT_SMALL, 128, (8,), "pretrain", "float32", 1),
    (
        "validation",
        MODERNBERT_LABEL + ", dropout 0.1 (attention too)",
        {**MODERNBERT_SMALL, "dropout": 0.1, "attention_dropout": 0.1},
        512,
        (8,),
        "finetune",
        "float32",
        1,
    ),
    *[
        (
            "validation",
            "ettin_encoder_17m (ModernBERT)",
            "ettin_encoder_17m",
            s,
            b,
            "finetune",
            "float32",
            1,
        )
        for s, b in ((128, (8, 16)), (512, (4, 8)), (1024, (2, 4)), (2048, (1, 2)))
    ],
    (
        "validation",
        "ettin_encoder_17m (ModernBERT)",
        "ettin_encoder_17m",
        512,
        (8,),
        "pretrain",
        "float32",
        1,
    ),
    (
        "mixed precision on CPU",
        "bert_small",
        "bert_small",
        256,
        (16,),
        "finetune",
        "mixed_bfloat16",
        1,
    ),
]

# The original BERT repository's README (google-research/bert, "Out-of-memory
# issues"): BERT-base, float32, Adam, on a 12 GB GPU.
CLASSIC = {64: 64, 128: 32, 256: 16, 320: 14, 384: 12, 512: 6}


def _rows_of(grid):
    """(set, label, preset, seq_len, batch, mode, precision, accumulation)
    for each batch of each grid entry."""
    for group, label, preset, seq, batches, mode, precision, accumulate in grid:
        for batch in batches:
            yield group, label, preset, seq, batch, mode, precision, accumulate


def _row(entry, measured, measured_on):
    """A results row: the measurement and the current planner's peak."""
    from bertzoo.planner import plan

    group, label, preset, seq, batch, mode, precision, accumulate = entry
    predicted = plan(
        preset,
        seq_len=seq,
        mode=mode,
        precision=precision,
        gradient_accumulation=accumulate,
        num_classes=3,
    ).peak_bytes(batch // accumulate)
    return {
        "set": group,
        "model": label,
        "mode": mode,
        "precision": precision,
        "seq_len": seq,
        "batch": batch,
        "accumulation": accumulate,
        "measured_mib": measured,
        "predicted_mib": round(predicted / 2**20, 1),
        "error": round(predicted / (measured * 2**20) - 1, 4),
        "measured_on": measured_on,
    }


def run_grid(grid, previous=None, only=()):
    """Measures every row of `grid` (with `only`: the rows whose label
    contains one of them; the others keep their measurement from the
    `previous` results)."""
    from bertzoo.planner import measure_peak

    today = f"{time.strftime('%Y-%m-%d')}, {cpu_info()['model']}"
    key = ("model", "mode", "precision", "seq_len", "batch", "accumulation")
    kept = {tuple(r[k] for k in key): r for r in (previous or {}).get("rows", [])}
    rows = []
    for entry in _rows_of(grid):
        group, label, preset, seq, batch, mode, precision, accumulate = entry
        if only and not any(part in label for part in only):
            old = kept.get((label, mode, precision, seq, batch, accumulate))
            if old is None:
                raise SystemExit(
                    f"No earlier measurement of {label} {mode} {seq} x {batch}: run without --only."
                )
            rows.append(
                _row(
                    entry,
                    old["measured_mib"],
                    old.get("measured_on", f"{previous['date']}, {previous['machine']['model']}"),
                )
            )
            if "compile_seconds" in old:
                rows[-1]["compile_seconds"] = old["compile_seconds"]
            continue
        start = time.perf_counter()
        measured = measure_peak(
            preset, seq, batch // accumulate, mode, precision, accumulate, num_classes=3
        )
        rows.append(_row(entry, round(measured / 2**20, 1), today))
        rows[-1]["compile_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(rows[-1]), flush=True)
    return rows


def classic_table():
    from bertzoo.planner import plan

    return [
        {
            "seq_len": s,
            "original_readme": b,
            "planner": plan("bert_base", seq_len=s, memory="12GiB", optimizer="adam").max_batch,
            "planner_no_attention_dropout": plan(
                {**backbone_config("bert_base"), "attention_dropout": 0.0},
                seq_len=s,
                memory="12GiB",
            ).max_batch,
        }
        for s, b in CLASSIC.items()
    ]


def markdown(rows):
    lines = [
        "| set | model | mode | seq | batch | measured MiB | planned MiB | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        batch = (
            f"{r['batch']} ({r['accumulation']} x {r['batch'] // r['accumulation']})"
            if r["accumulation"] > 1
            else r["batch"]
        )
        lines.append(
            f"| {r['set']} | {r['model']} | {r['mode']} | {r['seq_len']} | {batch} | "
            f"{r['measured_mib']:,} | {r['predicted_mib']:,} | {r['error']:+.1%} |"
        )
    return "\n".join(lines)


def figure(rows, out):
    """Planned vs measured peak, log-log, with the 15% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
    styles = {
        "calibration": ("o", "tab:blue"),
        "validation": ("s", "tab:green"),
        "mixed precision on CPU": ("x", "tab:red"),
    }
    for group, (marker, color) in styles.items():
        chosen = [r for r in rows if r["set"] == group]
        ax.scatter(
            [r["measured_mib"] / 1024 for r in chosen],
            [r["predicted_mib"] / 1024 for r in chosen],
            marker=marker,
            color=color,
            label=f"{group} ({len(chosen)})",
        )
    low = min(r["measured_mib"] for r in rows) / 1024 / 1.5
    high = max(r["measured_mib"] for r in rows) / 1024 * 1.5
    line = [low, high]
    ax.plot(line, line, color="black", linewidth=0.8)
    ax.fill_between(
        line,
        [x * 0.85 for x in line],
        [x * 1.15 for x in line],
        alpha=0.12,
        color="gray",
        label="within 15%",
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="measured peak, GiB (XLA memory_analysis)",
        ylabel="planned peak, GiB (bertzoo.plan)",
    )
    ax.set_title("bertzoo.plan vs the compiled JAX step (CPU)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="calibration rows only")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="LABEL",
        help="re-measure only the rows whose label contains LABEL (repeatable)",
    )
    args = parser.parse_args()
    grid = [g for g in GRID if g[0] == "calibration"] if args.quick else GRID
    out = RESULTS / "plan_calibration.json"
    previous = json.loads(out.read_text()) if args.only and out.exists() else None
    rows = run_grid(grid, previous, args.only)
    checked = [r for r in rows if r["set"] != "mixed precision on CPU"]
    worst = max(abs(r["error"]) for r in checked)
    result = {
        "what": "bertzoo.plan predicted peak vs XLA memory_analysis of the compiled JAX step",
        "date": time.strftime("%Y-%m-%d"),
        "machine_note": "each row's measured_on: the date and CPU it was measured on "
        "(--only re-measures some rows and keeps the others)",
        "machine": cpu_info(),
        "versions": versions("keras", "jax", "jaxlib"),
        "rows": rows,
        "worst_abs_error_float32": worst,
        "classic_12gib_table": classic_table(),
    }
    RESULTS.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(rows))
    if not args.quick:
        picture = Path(__file__).resolve().parent / "figures" / "plan_calibration.png"
        figure(rows, picture)
        print("wrote", picture)
    print("worst |error| (float32 rows):", f"{worst:.1%}")
    print(json.dumps(result["classic_12gib_table"], indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
