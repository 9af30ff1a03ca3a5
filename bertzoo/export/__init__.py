"""Export a fine-tuned task model (a distilled student is one) or a text
embedder where users run it: `export_model(model_dir, out_dir,
format="saved_model" | "onnx" | "litert", int8=False)`, which is what
`python -m bertzoo export MODEL OUT --format ... [--int8]` runs.

- `saved_model`: strings in, the tokenizer inside the graph (task models:
  `bertzoo.serving`; an embedder: `text` -> `embedding`), float32.
- `onnx` (onnxruntime) and `litert` (the LiteRT interpreter): token ids in,
  heads, softmax, pooling and normalisation inside; shipped with the
  tokenizer's files and `run.py`, which turns strings into answers with
  numpy and the runtime only (`bertzoo/export/runner.py`; a QA model's
  windows and answers as bertzoo's serving model gives them, from
  `qa_spans.py`, a copy of `bertzoo.tasks.qa.spans`). `int8`: int8
  weights, activations quantized per call (`convert.py`).

MODEL is a fine-tuned task preset (its `config.json` records the task), or
any other model directory (sentence-transformers, Hugging Face, a bertzoo
backbone preset), exported as a `TextEmbedder` with the pooling and
normalisation it records. Bad combinations are one-line `ExportError`s
before anything is written, and the folder is published atomically with a
checksum manifest; an existing OUT must be empty or, with `overwrite`, an
earlier bertzoo export. Building the graphs needs TensorFlow: under another
Keras backend the export runs in a TensorFlow subprocess.
"""

import importlib.util
import json
from pathlib import Path

from bertzoo.export.sources import EMBEDDER, ExportError, load_source, model_kind
from bertzoo.io.publish import check_target

FORMATS = ("saved_model", "onnx", "litert")
INT8_FORMATS = ("onnx", "litert")
# The packages a format needs at export (conversion and the check run).
PACKAGES = {
    "onnx": ("tf2onnx", "onnx", "onnxruntime"),
    "litert": ("ai_edge_litert",),
}
QA_SETTINGS = ("doc_stride", "max_query_length", "max_answer_length", "null_score_diff_threshold")

__all__ = ["FORMATS", "INT8_FORMATS", "ExportError", "export_model"]


def check_request(model_dir, format="saved_model", int8=False, **settings):
    """The model's kind (`sources.model_kind`), or a one-line
    `ExportError` for a request that cannot be met: an unknown format,
    int8 in a SavedModel, a missing package, a setting the export does
    not use."""
    if format not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, got {format!r}.")
    if int8 and format not in INT8_FORMATS:
        raise ExportError(
            f"--int8 needs --format {' or '.join(INT8_FORMATS)}: a {format} export holds "
            "float32 weights (onnx: ONNX Runtime dynamic quantization; litert: dynamic-range "
            "quantization)."
        )
    kind = model_kind(model_dir)
    given = [k for k in QA_SETTINGS if settings.get(k) is not None]
    if given and kind != "qa":
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ExportError(
            f"{flags} apply to QA models only (this is "
            f"{'a ' + kind + ' model' if kind != EMBEDDER else 'an embedder'})."
        )
    missing = [p for p in PACKAGES.get(format, ()) if importlib.util.find_spec(p) is None]
    if missing:
        raise ExportError(
            f'--format {format} needs {", ".join(missing)}: pip install ".[export]" in the '
            "bertzoo checkout."
        )
    return kind


def export_model(model_dir, out_dir, format="saved_model", int8=False, overwrite=False, **settings):
    """Exports `model_dir` to `out_dir` (see the module docstring); returns
    `out_dir`. `settings`: `sequence_length` (default: the run's recorded
    one, a sentence-transformers directory's, else the model's maximum),
    and for QA models the QA serving settings (default: the run's)."""
    kind = check_request(model_dir, format, int8, **settings)
    out_dir = Path(out_dir)
    check_target(out_dir, "export", overwrite)  # before any work
    import keras

    if keras.backend.backend() != "tensorflow":
        return _export_in_tensorflow(model_dir, out_dir, format, int8, overwrite, settings)
    if format == "saved_model" and kind != EMBEDDER:
        from bertzoo.serving import export_serving

        return export_serving(model_dir, out_dir, overwrite=overwrite, **settings)
    from bertzoo.io.publish import publish_directory

    source = load_source(model_dir, **settings)
    with publish_directory(out_dir, "export", overwrite=overwrite) as staging:
        if format == "saved_model":
            _write_embedder_saved_model(source, Path(staging))
        else:
            from bertzoo.export.artefacts import write_export

            write_export(source, staging, format, int8)
    return out_dir


def _export_in_tensorflow(model_dir, out_dir, format, int8, overwrite, settings):
    from bertzoo.serving import export_in_tensorflow

    arguments = [str(model_dir), str(out_dir), "--format", format]
    arguments += ["--int8"] * bool(int8) + ["--overwrite"] * bool(overwrite)
    export_in_tensorflow(arguments, settings, ExportError)
    return out_dir


def _write_embedder_saved_model(source, staging):
    """A SavedModel whose `serving_default` takes `text` (strings) and
    returns `embedding` (B, H): tokenizer, packing, the encoder, pooling
    and normalisation in one graph; plus `serving.json`."""
    import tensorflow as tf

    from bertzoo.batching import trim_to_bucket
    from bertzoo.io.publish import atomic_write_text
    from bertzoo.serving import SAVED_MODEL_DIR, SIGNATURE_FILE

    embedder = source.model
    preprocessor = embedder.preprocessor

    def serve(text):
        packed = preprocessor.pack(text)
        inputs = trim_to_bucket({k: packed[k] for k in embedder.input}, source.sequence_length)
        return {"embedding": embedder(inputs, training=False)}

    function = tf.function(
        serve, input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False
    )
    module = tf.Module()
    # The variables the graph reads, tracked (the whole Keras model would
    # also do, at half again the saving time).
    module.weights = list(embedder.weights)
    module.tokenizer = preprocessor.tokenizer
    tf.saved_model.save(
        module,
        str(staging / SAVED_MODEL_DIR),
        signatures={"serving_default": function.get_concrete_function()},
    )
    description = {
        "task": EMBEDDER,
        "inputs": ["text"],
        "outputs": ["embedding"],
        "sequence_length": source.sequence_length,
        **source.details,
    }
    atomic_write_text(staging / SIGNATURE_FILE, json.dumps(description, indent=2) + "\n")
