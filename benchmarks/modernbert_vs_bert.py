"""A small ModernBERT-shaped encoder against a BERT of the same size, both
pre-trained by bertzoo for the same steps on the same corpus, then
fine-tuned on the realistic 3-class task of `distill_real.py`.

The two architectures (`SHAPES`): the same depth, width, heads and
vocabulary; BERT's post-norm blocks with biases, GELU feed-forward
(intermediate 4 x width) and learned positions, against ModernBERT's
pre-norm blocks without biases, GeGLU (its intermediate chosen so that
the feed-forward layers hold the same weights), rotary positions and a
local window in two layers of three. Both use the same WordPiece
vocabulary, trained by the pre-training run on the built-in corpus (same
seed), so that only the architecture differs. No tuning for one side:
each pre-trains with what the recipe gives its family by default
(`objective auto`: BERT masked LM + NSP at 15%; ModernBERT masked LM only
at 30% with full-sentence packing), the same steps, batch, sequence
length, learning rate and schedule, and each fine-tunes with the
fine-tuning recipe's defaults (only files, columns and output given).

Reported per model: parameters, pre-training time and examples/s, final
masked-LM accuracy (not comparable across mask rates), fine-tuning time,
validation accuracy. One run, one machine.

    python benchmarks/modernbert_vs_bert.py [--steps 1500]

Writes benchmarks/results/modernbert_vs_bert.json.
"""

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common import RESULTS, cpu_info, versions  # noqa: E402
from distill_real import COLUMNS, files  # noqa: E402

WIDTH, LAYERS, HEADS = 256, 4, 4
SHAPES = {
    "bert": {
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "hidden_dim": WIDTH,
        "intermediate_dim": 4 * WIDTH,
        "num_segments": 2,
        "use_pooler": True,
        "activation": "gelu",
        "dropout": 0.1,
        "max_sequence_length": 512,
        "layer_norm_epsilon": 1e-12,
    },
    "modernbert": {
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "hidden_dim": WIDTH,
        # GeGLU's first projection is twice as wide: 3 x H x I weights
        # against BERT's 2 x H x 4H, equal at I = 8H / 3.
        "intermediate_dim": 8 * WIDTH // 3,
        "num_segments": 0,
        "use_pooler": False,
        "activation": "gelu",
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "max_sequence_length": 8192,
        "layer_norm_epsilon": 1e-5,
        "norm_first": True,
        "use_bias": False,
        "gated_feedforward": True,
        "rope_theta": 160000.0,
        "local_rope_theta": 10000.0,
        "local_attention_window": 128,
        "global_attention_every": 3,
    },
}


def architecture(directory, name, vocabulary_size):
    """A preset directory with only a config.json (the run trains the
    vocabulary and builds the model from scratch)."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "name": f"{name}_small",
        "backbone": {"vocabulary_size": vocabulary_size, **SHAPES[name]},
        "tokenizer": {"kind": "wordpiece", "lowercase": True, "strip_accents": True},
        "metadata": {"model_type": name},
    }
    (directory / "config.json").write_text(json.dumps(document, indent=2))
    return directory


def pretrain(arch, args, output):
    from bertzoo.training.pretrain import PretrainConfig, run_pretraining

    config = PretrainConfig(
        preset=str(arch),
        seq_len=(args.seq_len,),
        steps=(args.steps,),
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=args.steps // 10,
        checkpoint_every=args.steps,
        log_every=100,
        seed=args.seed,
        output=str(output),
        resume=False,
        verbose=0,
    )
    return run_pretraining(config)


def finetune(preset, paths, output):
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    return run_finetuning(
        FinetuneConfig(
            task="classification",
            train=str(paths["train"]),
            validation=str(paths["validation"]),
            text_columns=(COLUMNS[0],),
            label_column=COLUMNS[1],
            init=str(preset),
            output=str(output),
            resume=False,
            verbose=0,
        )
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500, help="pre-training steps, both")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--vocabulary-size", type=int, default=8000)
    parser.add_argument("--train", type=int, default=3001, help="fine-tuning texts")
    parser.add_argument("--validation", type=int, default=1000, help="held-out texts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="keep the runs here (default: a temp dir)")
    args = parser.parse_args()
    import keras

    work = Path(args.work or tempfile.mkdtemp(prefix="modernbert_vs_bert-"))
    work.mkdir(parents=True, exist_ok=True)
    paths, _ = files(args, work)
    results = {}
    for name in SHAPES:
        arch = architecture(work / f"arch_{name}", name, args.vocabulary_size)
        start = time.perf_counter()
        run = pretrain(arch, args, work / name)
        pretrain_seconds = time.perf_counter() - start
        start = time.perf_counter()
        tuned = finetune(work / name / "preset", paths, work / f"finetune_{name}")
        finetune_seconds = time.perf_counter() - start
        from bertzoo import BertBackbone

        params = BertBackbone.from_preset(str(work / name / "preset")).count_params()
        results[name] = {
            "shape": SHAPES[name],
            "backbone_params": int(params),
            "pretraining": {
                # What "auto" resolved to, as the run's metrics record it.
                "objective": run["objective"],
                "mask_rate": run["mask_rate"],
                "packing": run["packing"],
                "vocabulary_size": run["vocabulary_size"],
                "steps": run["steps"],
                "seconds": round(pretrain_seconds, 1),
                "examples_per_second": round(run["examples_per_second"], 1),
                "final_masked_lm_accuracy": round(run["final_masked_lm_accuracy"], 4),
            },
            "finetuning": {
                "validation_accuracy": tuned["validation"]["accuracy"],
                "best_epoch": tuned["best_epoch"],
                "epochs": len(tuned["history"]),
                "seconds": round(finetune_seconds, 1),
            },
        }
        print(
            name, json.dumps(results[name]["pretraining"]), results[name]["finetuning"], flush=True
        )
        keras.backend.clear_session()
    report = {
        "benchmark": "modernbert_vs_bert",
        "settings": {k: v for k, v in vars(args).items() if k != "work"},
        "results": results,
        "accuracy_difference_modernbert_minus_bert": round(
            results["modernbert"]["finetuning"]["validation_accuracy"]
            - results["bert"]["finetuning"]["validation_accuracy"],
            4,
        ),
        "cpu": cpu_info(),
        "versions": versions("keras", "tensorflow", "jax"),
        "load_average_1min_end": round(os.getloadavg()[0], 2),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "modernbert_vs_bert.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("accuracy_difference_modernbert_minus_bert",)}))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
