"""ELECTRA (replaced-token detection) vs masked-LM pre-training at equal
wall-clock, then fine-tuning both on the built-in sentiment task.

Both runs pre-train the same encoder (default: the ELECTRA-Small
discriminator's shape, 12 layers, 256 wide, 128-wide embeddings, no pooler)
on the built-in corpus with the same vocabulary, sequence length, batch,
learning-rate schedule and seed; only the objective differs: masked LM
(`objective none`, BERT's MLM without NSP) or ELECTRA (`objective electra`,
a 1/4-width generator + the encoder as discriminator, loss MLM + 50 RTD).

Equal wall-clock: a short calibration run of each measures its training
throughput; each main run then gets the number of steps that fills
--minutes. Each result is fine-tuned with the same settings on the
built-in tasks (--tasks; ELECTRA's classifier head on both: the heads do
not differ) and its best validation scores over the epochs are reported.
The built-in validation sets use words their training sets never show
(adjectives, names, places): sentiment needs what pre-training taught about
unseen adjectives; tagging and QA can also be solved from sentence
structure. One run, one machine: the ratio of
the two is the result; the absolute numbers depend on the CPU.

    python benchmarks/electra_vs_mlm.py --minutes 8
Writes benchmarks/results/electra_vs_mlm.json.
"""

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, cpu_info, versions  # noqa: E402

SHAPE = {
    "num_layers": 12,
    "num_heads": 4,
    "hidden_dim": 256,
    "intermediate_dim": 1024,
    "embedding_dim": 128,
    "num_segments": 2,
    "use_pooler": False,
    "activation": "gelu",
    "dropout": 0.1,
    "max_sequence_length": 512,
    "layer_norm_epsilon": 1e-12,
}


def architecture(directory, shape):
    """A preset directory holding only a config.json: an architecture
    (both runs build it from scratch with the corpus vocabulary)."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "name": "electra_small_shaped",
        "backbone": {"vocabulary_size": 8000, **shape},
        "tokenizer": {"kind": "wordpiece", "lowercase": True, "strip_accents": True},
        # Both fine-tune with ELECTRA's classifier head.
        "metadata": {"model_type": "electra"},
    }
    (directory / "config.json").write_text(json.dumps(document, indent=2))
    return directory


def pretrain(arch, objective, steps, args, output):
    from bertzoo.training.pretrain import PretrainConfig, run_pretraining

    config = PretrainConfig(
        preset=str(arch),
        objective=objective,
        seq_len=(args.seq_len,),
        steps=(steps,),
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=min(steps // 10, 1000),
        checkpoint_every=max(steps, 1),
        log_every=50,
        seed=args.seed,
        output=str(output),
        resume=False,
        verbose=0,
    )
    return run_pretraining(config)


def finetune(preset, task, args, output):
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    config = FinetuneConfig(
        task=task,
        init=str(preset),
        output=str(output),
        learning_rate=args.finetune_learning_rate,
        epochs=args.finetune_epochs,
        seed=args.seed,
        resume=False,
        verbose=0,
    )
    return run_finetuning(config)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=8.0, help="pre-training time per run")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--calibration-steps", type=int, default=30)
    parser.add_argument("--finetune-learning-rate", type=float, default=1e-4)
    parser.add_argument("--finetune-epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=SHAPE["num_layers"])
    parser.add_argument(
        "--tasks",
        default="classification,tagging,qa",
        help="built-in fine-tuning tasks (comma-separated)",
    )
    parser.add_argument("--work", default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="reuse finished pre-training runs in --work (their metrics.json) and only fine-tune",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(args.work or tempfile.mkdtemp(prefix="electra_vs_mlm-"))
    arch = architecture(work / "arch", {**SHAPE, "num_layers": args.layers})
    budget = args.minutes * 60
    results = {}
    tasks = [t for t in args.tasks.split(",") if t]
    for name, objective in (("mlm", "none"), ("electra", "electra")):
        done = work / name / "metrics.json"
        if args.reuse and done.is_file():
            run = json.loads(done.read_text())
            steps = run["steps"]
        else:
            calibration = pretrain(
                arch, objective, args.calibration_steps, args, work / f"calibrate_{name}"
            )
            steps_per_second = calibration["examples_per_second"] / args.batch_size
            steps = max(10, int(budget * steps_per_second))
            print(f"{name}: {steps_per_second:.2f} steps/s in calibration -> {steps} steps")
            run = pretrain(arch, objective, steps, args, work / name)
            shutil.rmtree(work / f"calibrate_{name}", ignore_errors=True)
        results[name] = {
            "objective": objective,
            "steps": steps,
            "train_seconds": round(run["train_seconds"], 1),
            "examples_per_second": round(run["examples_per_second"], 1),
            "final_masked_lm_accuracy": round(run["final_masked_lm_accuracy"], 4),
            **{
                k: round(v, 4)
                for k, v in run.items()
                if k.startswith("final_rtd_") and isinstance(v, float)
            },
            "finetune": {},
        }
        for task in tasks:
            tuned = finetune(work / name / "preset", task, args, work / f"finetune_{name}_{task}")
            results[name]["finetune"][task] = {
                "validation": tuned["validation"],
                "best_epoch": tuned["best_epoch"],
            }
        print(name, json.dumps(results[name]), flush=True)

    differences = {}
    for task in tasks:
        scores = {k: v["finetune"][task]["validation"] for k, v in results.items()}
        differences[task] = {
            metric: round(scores["electra"][metric] - scores["mlm"][metric], 4)
            for metric in scores["electra"]
        }
    report = {
        "benchmark": "electra_vs_mlm",
        "shape": {**SHAPE, "num_layers": args.layers},
        "settings": {k: v for k, v in vars(args).items() if k != "work"},
        "results": results,
        "difference_electra_minus_mlm": differences,
        "cpu": cpu_info(),
        "versions": versions("keras", "tensorflow", "jax"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "electra_vs_mlm.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps(
            {k: report[k] for k in ("results", "accuracy_difference_electra_minus_mlm")}, indent=2
        )
    )


if __name__ == "__main__":
    main()
