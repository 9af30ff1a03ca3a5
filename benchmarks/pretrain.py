"""Pre-training benchmarks, side by side in one run.

    python benchmarks/pretrain.py [--batch 8] [--seq 128] [--predictions 20]
                                  [--repeats 10] [--output benchmarks/results/pretrain.json]

(a) input pipeline: 128-token sequences per second through tokenize ->
    pair (NSP examples) -> mask (dynamic, whole-word), on the Korean test
    corpus repeated, with a WordPiece vocabulary trained from it.
(b) training step: bertzoo `BertPretrainer` (MLM logits at the masked
    positions only, NSP head) vs keras-hub `BertMaskedLM` on the same
    BERT-base config, the same batch and the same optimizer (AdamW 1e-4),
    both `jit_compile=True`, TensorFlow backend, random weights. After
    warm-up, interleaved rounds; median seconds per step.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import bertzoo  # noqa: E402
from bertzoo.data import (  # noqa: E402
    MaskedLMMasker,
    create_examples,
    make_pretraining_dataset,
    tokenize_documents,
)
from bertzoo.tokenizers import train_wordpiece  # noqa: E402
from bertzoo.training import make_optimizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "korean_corpus.txt"


def pipeline_throughput(seq, predictions, copies=100, tmp="/tmp/bertzoo_bench_corpus.txt"):
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    vocab = train_wordpiece([CORPUS], vocab_size=1000, lowercase=False, strip_accents=False)
    tokenizer = bertzoo.BertTokenizer(vocab, lowercase=False, strip_accents=False)
    # Documents of 10 sentences, the corpus repeated `copies` times.
    documents = [lines[i : i + 10] for i in range(0, len(lines), 10)] * copies
    sentences = sum(len(d) for d in documents)
    start = time.perf_counter()
    ids = tokenize_documents(documents, tokenizer)
    t_tokenize = time.perf_counter() - start
    start = time.perf_counter()
    examples = create_examples(ids, tokenizer, seq_len=seq, objective="nsp", seed=0)
    t_pair = time.perf_counter() - start
    masker = MaskedLMMasker(tokenizer, seq, predictions, kind="whole_word")
    ds = make_pretraining_dataset(examples, 256, masker, seed=0, drop_remainder=False)
    start = time.perf_counter()
    n = sum(int(x["token_ids"].shape[0]) for x, _, _ in ds)
    t_mask = time.perf_counter() - start
    total = t_tokenize + t_pair + t_mask
    return {
        "sentences": sentences,
        "sequences": n,
        "tokenize_sentences_per_s": sentences / t_tokenize,
        "pair_examples_per_s": n / t_pair,
        "mask_batch_sequences_per_s": n / t_mask,
        "end_to_end_sequences_per_s": n / total,
    }


def make_batch(batch, seq, predictions, vocab, seed=0):
    rng = np.random.default_rng(seed)
    x = {
        "token_ids": rng.integers(1000, vocab, (batch, seq)).astype("int32"),
        "segment_ids": np.repeat([[0] * (seq // 2) + [1] * (seq - seq // 2)], batch, 0).astype(
            "int32"
        ),
        "padding_mask": np.ones((batch, seq), "int32"),
        "mask_positions": np.sort(
            rng.choice(np.arange(1, seq - 1), (batch, predictions)), axis=1
        ).astype("int32"),
    }
    mask_ids = rng.integers(1000, vocab, (batch, predictions)).astype("int32")
    return (
        x,
        mask_ids,
        np.ones((batch, predictions), "float32"),
        rng.integers(0, 2, batch).astype("int32"),
    )


def build_models(config, batch):
    import keras_hub

    hub_backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        dropout=0.1,
        max_sequence_length=config["max_sequence_length"],
        num_segments=config["num_segments"],
    )
    hub = keras_hub.models.BertMaskedLM(backbone=hub_backbone, preprocessor=None)
    hub.compile(
        optimizer=make_optimizer("adamw", 1e-4, total_steps=10_000, warmup_steps=100),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=True,
    )
    ours = bertzoo.BertPretrainer(bertzoo.BertBackbone(**config), objective="nsp")
    ours.compile(
        optimizer=make_optimizer("adamw", 1e-4, total_steps=10_000, warmup_steps=100),
        jit_compile=True,
    )
    return {"keras_hub BertMaskedLM": hub, "bertzoo BertPretrainer": ours}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="bert_base")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--output", default="benchmarks/results/pretrain.json")
    args = parser.parse_args(argv)

    pipeline = pipeline_throughput(args.seq, args.predictions)
    print(f"pipeline: {pipeline}", file=sys.stderr)

    config = json.loads(bertzoo.presets.builtin_presets()[args.preset].read_text())["backbone"]
    x, mask_ids, weights, labels = make_batch(
        args.batch, args.seq, args.predictions, config["vocabulary_size"]
    )
    models = build_models(config, args.batch)
    steps = {
        "keras_hub BertMaskedLM": lambda m: m.train_on_batch(x, mask_ids, sample_weight=weights),
        "bertzoo BertPretrainer": lambda m: m.train_on_batch(
            x,
            {"mlm": mask_ids, "sentence": labels},
            sample_weight={"mlm": weights, "sentence": np.ones_like(labels, "float32")},
        ),
    }
    for name, model in models.items():
        for _ in range(args.warmup):
            steps[name](model)
        print(f"compiled {name}", file=sys.stderr)
    times = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():
            start = time.perf_counter()
            steps[name](model)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["keras_hub BertMaskedLM"])
    rows = [
        {
            "model": name,
            "median_s_per_step": statistics.median(ts),
            "sequences_per_s": args.batch / statistics.median(ts),
            "speedup_vs_keras_hub": base / statistics.median(ts),
        }
        for name, ts in times.items()
    ]
    result = {
        "benchmark": "pretrain",
        "preset": args.preset,
        "batch": args.batch,
        "seq": args.seq,
        "predictions": args.predictions,
        "repeats": args.repeats,
        "backend": keras.backend.backend(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "pipeline": pipeline,
        "train_step": rows,
        "ratio_bertzoo_vs_keras_hub": base / statistics.median(times["bertzoo BertPretrainer"]),
    }
    print(
        f"\n{args.preset} training step, batch {args.batch} x seq {args.seq}, {args.predictions} predictions, XLA"
    )
    for row in rows:
        print(
            f"{row['model']:<26}{row['median_s_per_step']:>9.3f} s/step{row['sequences_per_s']:>8.2f} seq/s"
            f"{row['speedup_vs_keras_hub']:>7.2f}x"
        )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
