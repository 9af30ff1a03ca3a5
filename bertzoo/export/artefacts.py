"""Writing an ONNX or LiteRT export, and checking it before it is published.

The folder (published atomically, with a checksum manifest):

- `model.onnx` or `model.tflite`: the graph over token ids (`convert.py`);
- `export.json`: what it is: task, format, int8, the graph's inputs and
  outputs, sequence length, label names, tokenizer settings, and the check
  below;
- the tokenizer's vocabulary file (`vocab.txt` for WordPiece) and, for
  WordPiece, `tokenizer_tables.json` (`tokenizer_files.py`);
- `run.py`: the runner (`runner.py`), with its tokenizer `wordpiece.py`
  (`bertzoo.tokenizers.python_wordpiece`),
  strings in, answers out; for a QA
  model with `qa_spans.py` (`bertzoo.tasks.qa.spans`: windows and answer
  extraction) and export.json's `qa` settings.

Before publication the export is run through `run.py`'s own code on a few
check texts: its token ids must be bertzoo's, and (float32) its outputs
within `FLOAT32_TOLERANCE` of the Keras model's on the same ids (int8: all
finite; its difference is recorded). Either failing is an `ExportError`,
and nothing is published.
"""

import json
import shutil
from pathlib import Path

import numpy as np

from bertzoo.export import convert, runner, tokenizer_files
from bertzoo.export.sources import OUTPUTS, PER_TOKEN, ExportError
from bertzoo.io.publish import atomic_write_text
from bertzoo.tasks.qa import spans
from bertzoo.tasks.tagging.features import max_words
from bertzoo.tokenizers import python_wordpiece
from bertzoo.tokenizers.base import text_cap

MODEL_FILES = {"onnx": "model.onnx", "litert": "model.tflite"}
RUNTIMES = {"onnx": "onnxruntime", "litert": "ai-edge-litert"}
RUNNER_FILE = "run.py"
# Float32 artefacts compute what Keras computes in another order: measured
# differences are 1e-7 to 1e-6 (MiniLM embeddings, tiny classifiers); a
# conversion that breaks an op is off by far more than this.
FLOAT32_TOLERANCE = 1e-4
CHECK_TEXTS = (
    "bertzoo checks its export.",
    "Une phrase accentuée, un peu plus longue : 東京, Straße and [SEP] inside!",
    "x",
)


def write_export(source, staging, format, int8):
    """Writes the export of `source` into `staging` and checks it."""
    staging = Path(staging)
    model_file = MODEL_FILES[format]
    (convert.to_onnx if format == "onnx" else convert.to_litert)(source, staging / model_file, int8)
    tokenizer = source.tokenizer
    tokenizer._write_vocabulary(staging / tokenizer.vocabulary_file)
    tables = tokenizer_files.tokenizer_tables(tokenizer)
    if tables is not None:
        atomic_write_text(staging / tokenizer_files.TABLES_FILE, json.dumps(tables) + "\n")
    shutil.copyfile(Path(runner.__file__), staging / RUNNER_FILE)
    shutil.copyfile(Path(python_wordpiece.__file__), staging / runner.TOKENIZER_FILE)
    if source.task == "qa":  # run.py's windows and answers: bertzoo's own code
        shutil.copyfile(Path(spans.__file__), staging / runner.SPANS_FILE)
    description = {
        "format": format,
        "int8": bool(int8),
        "model_file": model_file,
        "runtime": RUNTIMES[format],
        "batch": 1 if format == "litert" else None,
        "task": source.task,
        "inputs": source.inputs,
        "outputs": list(OUTPUTS[source.task]),
        "per_token_outputs": list(PER_TOKEN.get(source.task, ())),
        "sequence_length": source.sequence_length,
        # bertzoo's cuts: characters of a text, words of a tagged text.
        "max_text_chars": text_cap(source.sequence_length),
        "max_words": max_words(source.sequence_length),
        "label_names": source.label_names,
        "pair_segment_id": source.pair_segment_id,
        **source.details,
        "tokenizer": tokenizer_files.tokenizer_section(tokenizer),
    }
    _write_description(staging, description)
    description["check"] = check_export(source, staging, int8)
    _write_description(staging, description)
    return description


def _write_description(staging, description):
    atomic_write_text(staging / runner.CONFIG_FILE, json.dumps(description, indent=2) + "\n")


def _packed_check_inputs(source):
    """The check texts packed by bertzoo's own preprocessor, cut to the
    longest (numpy)."""
    from bertzoo.preprocessing import BertPreprocessor, segment_inputs

    preprocessor = BertPreprocessor(
        source.tokenizer,
        source.sequence_length,
        **segment_inputs(2 if "segment_ids" in source.inputs else 0),
    )
    packed = {k: v.numpy() for k, v in preprocessor.pack(list(CHECK_TEXTS)).items()}
    width = int(packed["padding_mask"].sum(axis=1).max())
    return {k: packed[k][:, :width] for k in source.inputs}


def check_export(source, staging, int8):
    """Runs the export in `staging` through the runner on `CHECK_TEXTS`;
    returns what export.json records of it."""
    model = runner.Model(staging, threads=1, check=False)  # its manifest comes last
    inputs = _packed_check_inputs(source)
    if source.tokenizer.kind in tokenizer_files.RUNNER_KINDS:
        encoded = model.encode(list(CHECK_TEXTS))
        for key, value in inputs.items():
            if not np.array_equal(encoded[key], value):
                raise ExportError(
                    f"run.py's tokenizer gives other {key} than bertzoo's on the check texts "
                    f"({encoded[key].tolist()} vs {value.tolist()}); the export was not written."
                )
    got = model.run_ids(inputs)
    expected = convert.reference_outputs(source, inputs)
    mask = inputs["padding_mask"].astype(bool)
    worst = 0.0
    for name in OUTPUTS[source.task]:
        a, b = got[name], expected[name]
        if name in PER_TOKEN.get(source.task, ()):
            a, b = a[mask], b[mask]
        if a.shape != b.shape or not np.all(np.isfinite(a)):
            raise ExportError(
                f"The exported model's {name} is {'not finite' if a.shape == b.shape else a.shape} "
                f"on the check texts (Keras: {b.shape}); the export was not written."
            )
        scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale if a.size else 0.0)
    if not int8 and worst > FLOAT32_TOLERANCE:
        raise ExportError(
            f"The exported model differs from the Keras model by {worst:.2e} (relative) on the "
            f"check texts, over the {FLOAT32_TOLERANCE:g} a float32 conversion keeps; the export "
            "was not written."
        )
    return {
        "texts": list(CHECK_TEXTS),
        "max_difference_to_keras": worst,
        "tolerance": None if int8 else FLOAT32_TOLERANCE,
        "ids_checked": source.tokenizer.kind in tokenizer_files.RUNNER_KINDS,
    }
