"""Serving models: raw strings in, task answers out, tokenizer in the graph.

`export_serving(task_preset_dir, out_dir)` writes, atomically (the folder
appears complete or not at all, with a checksum manifest; an existing
`out_dir` must be empty or, with `overwrite=True`, an earlier export):

- `out_dir/saved_model/`: a TF SavedModel whose `serving_default` signature
  takes string tensors and needs neither bertzoo nor Keras to run:
  `tf.saved_model.load(path).signatures["serving_default"](text=...)`;
- `out_dir/model.keras`: the same `ServingModel` as a Keras file
  (`import bertzoo; keras.saving.load_model(path)`);
- `out_dir/serving.json`: the signature's inputs and outputs.

Inputs and outputs per task (batches; strings are UTF-8):

| task | inputs | outputs |
|---|---|---|
| classification | `text` (+ `text_pair` for pair tasks) | `probabilities` (B, C), `label_id` (B,), `label` (B,), `text_cut` (B,) |
| regression | `text` (+ `text_pair`) | `score` (B,), `text_cut` (B,) |

`text_cut`: a text of the row was longer than `text_cap(sequence_length)`
characters and cut there before tokenizing (`bertzoo.tasks.sentences`).
| tagging | `text` (split into words on whitespace) | `words`, `tags` (B, W) padded with "", `num_words` (B,) |
| qa | `question`, `context` | `answer` (B,), `start`, `end` (byte offsets in the context, -1: no answer), `score` (B,) |

The serving graph runs TensorFlow ops, so building it needs the TensorFlow
backend; under another backend `export_serving` runs itself in a
subprocess with `KERAS_BACKEND=tensorflow`.
"""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import keras

from bertzoo import presets as preset_lib
from bertzoo.errors import PresetError
from bertzoo.io.jsonfile import read_json_object
from bertzoo.io.publish import atomic_write_text, check_target, publish_directory

SAVED_MODEL_DIR = "saved_model"
KERAS_FILE = "model.keras"
SIGNATURE_FILE = "serving.json"


def _tokenizer_config(tokenizer):
    config = {"kind": tokenizer.kind, "settings": tokenizer.get_config()}
    if getattr(tokenizer, "proto", None) is not None:  # ALBERT's and XLM-R's SentencePiece
        config["proto_base64"] = base64.b64encode(tokenizer.proto).decode("ascii")
    else:
        config["vocabulary"] = list(tokenizer.vocabulary)
    return config


def _tokenizer_from_config(config):
    from bertzoo.tokenizers import tokenizer_class
    from bertzoo.tokenizers.kinds import check_settings

    cls = tokenizer_class(config["kind"])
    check_settings(cls, config["settings"], "The serving model's tokenizer config")
    source = (
        base64.b64decode(config["proto_base64"])
        if "proto_base64" in config
        else config["vocabulary"]
    )
    return cls(source, **config["settings"])


@keras.saving.register_keras_serializable(package="bertzoo")
class ServingModel(keras.Model):
    """A fine-tuned task model behind its tokenizer: a dict of string
    tensors in (see the module docstring), a dict of answers out.
    TensorFlow backend only. The task model's kind (`bertzoo.tasks`)
    names the inputs and builds the outputs (`TaskKind.serve`).

    Args:
        task_model: a `BertClassifier`, `BertTokenClassifier` or `BertSpanQA`.
        tokenizer: the bertzoo tokenizer the model was trained with.
        sequence_length: packed length (QA: the window length).
        pairs: classification/regression on text pairs.
        label_names: class or tag names (default "0", "1", ...).
        doc_stride, max_query_length, max_answer_length,
        null_score_diff_threshold, version_2: QA settings (see
            `bertzoo.tasks.qa.features`).
    """

    def __init__(
        self,
        task_model,
        tokenizer,
        sequence_length=128,
        pairs=False,
        label_names=None,
        doc_stride=128,
        max_query_length=64,
        max_answer_length=30,
        null_score_diff_threshold=0.0,
        version_2=False,
        **kwargs,
    ):
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError(
                "ServingModel runs the tokenizer in TensorFlow ops: it needs the TensorFlow "
                f"backend (KERAS_BACKEND=tensorflow), not {keras.backend.backend()!r}."
            )
        super().__init__(**kwargs)
        from bertzoo import tasks as task_kinds

        self.task_model = task_model
        self.tokenizer = tokenizer
        from bertzoo.input_checks import check_sequence_length

        self.sequence_length = check_sequence_length(sequence_length)  # 5.7 is an error, not 5
        self.pairs = bool(pairs)
        self.kind = task_model.kind
        self.task_kind = task_kinds.get(self.kind)
        count = getattr(task_model, "num_classes", None) or getattr(task_model, "num_labels", None)
        if label_names is None and self.task_kind.labelled:
            label_names = getattr(task_model, "label_names", None) or [str(i) for i in range(count)]
        self.label_names = None if label_names is None else [str(n) for n in label_names]
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.max_answer_length = int(max_answer_length)
        self.null_score_diff_threshold = float(null_score_diff_threshold)
        self.version_2 = bool(version_2)
        self.input_names = self.task_kind.serving_inputs(self.pairs)
        self.segment_ids = "segment_ids" in task_model.input
        # The backbone's segment rows: one-segment models (RoBERTa, XLM-R)
        # pack a pair's second text with segment id 0, never 1.
        backbone = getattr(task_model, "backbone", None)
        self.num_segments = getattr(backbone, "num_segments", 2 if self.segment_ids else 0)
        self.built = True

    def model_inputs(self, packed):
        """The task model's inputs out of packed features (`segment_ids`
        only when the model takes them)."""
        keys = ["token_ids", "padding_mask"] + (["segment_ids"] if self.segment_ids else [])
        return {k: packed[k] for k in keys}

    def run(self, packed):
        """The task model on packed features (TensorFlow ops): the batch is
        cut to its longest sequence's bucket (`bertzoo.batching`), and
        per-token outputs are padded back to the packed length, so the
        caller's position-aligned features still line up."""
        import tensorflow as tf

        from bertzoo.batching import trim_to_bucket

        inputs = trim_to_bucket(self.model_inputs(packed), self.sequence_length)
        outputs = self.task_model(inputs, training=False)
        if not self.task_model.per_token_outputs:
            return outputs
        full = tf.shape(packed["token_ids"])[1]

        def pad(t):
            fill = t.dtype.min / 2 if t.dtype.is_floating else 0
            widths = [[0, 0], [0, full - tf.shape(t)[1]]] + [[0, 0]] * (t.shape.rank - 2)
            out = tf.pad(t, widths, constant_values=tf.cast(fill, t.dtype))
            out.set_shape([t.shape[0], packed["token_ids"].shape[1]] + t.shape[2:])
            return out

        return keras.tree.map_structure(pad, outputs)

    def call(self, inputs):
        import tensorflow as tf

        missing = [k for k in self.input_names if k not in inputs]
        if missing:
            raise ValueError(
                f"Missing input(s) {missing}; this model takes {list(self.input_names)}."
            )
        texts = {
            k: tf.reshape(tf.convert_to_tensor(inputs[k], tf.string), [-1])
            for k in self.input_names
        }
        return self.task_kind.serve(self, texts)

    def get_config(self):
        return {
            "name": self.name,
            "task_model": keras.saving.serialize_keras_object(self.task_model),
            "tokenizer": _tokenizer_config(self.tokenizer),
            "sequence_length": self.sequence_length,
            "pairs": self.pairs,
            "label_names": self.label_names,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
            "max_answer_length": self.max_answer_length,
            "null_score_diff_threshold": self.null_score_diff_threshold,
            "version_2": self.version_2,
        }

    @classmethod
    def from_config(cls, config):
        import bertzoo.models.tasks  # noqa: F401 (registers the task model classes to deserialize)

        config = dict(config)
        config["task_model"] = keras.saving.deserialize_keras_object(config["task_model"])
        config["tokenizer"] = _tokenizer_from_config(config["tokenizer"])
        return cls(**config)

    def _serve_function(self):
        """The `tf.function` over named string batches (traced once, cached)."""
        function = self.__dict__.get("_serve")
        if function is None:
            import tensorflow as tf

            specs = {k: tf.TensorSpec([None], tf.string, name=k) for k in self.input_names}
            function = tf.function(lambda inputs: self(inputs), input_signature=[specs])
            self.__dict__["_serve"] = function
        return function

    def signature(self):
        """A `tf.function` over named string batches, for SavedModel export."""
        function = self._serve_function()
        return lambda: function.get_concrete_function()

    def answer(self, **texts):
        """Strings in (the inputs `input_names` lists, each a string or a
        list of strings), numpy answers out, through the same compiled
        graph the export saves: no per-call Keras set-up. Strings come back
        as bytes."""
        import numpy as np
        import tensorflow as tf

        from bertzoo.tokenizers.base import check_utf8, to_string_tensor

        unknown = sorted(set(texts) - set(self.input_names))
        missing = [k for k in self.input_names if k not in texts]
        if unknown or missing:
            raise TypeError(
                f"answer() takes the inputs {', '.join(self.input_names)}; "
                + (
                    f"got unknown {', '.join(unknown)}"
                    if unknown
                    else f"missing {', '.join(missing)}"
                )
                + "."
            )
        inputs = {
            k: tf.reshape(check_utf8(to_string_tensor(texts[k]), f" of {k}"), [-1])
            for k in self.input_names
        }
        outputs = self._serve_function()(inputs)
        return {k: np.asarray(v) for k, v in outputs.items()}


def serving_model_from_preset(preset_dir, sequence_length=None, warm=True, **settings):
    """The `ServingModel` of a fine-tuned task preset directory (written by
    the fine-tune recipe or `save_to_preset(dir, tokenizer=...)`). Settings
    default to those the recipe recorded in `finetune.json`. `warm`: trace
    and first run the serving graph here (2-4 s for MiniLM on 2 cores), so
    that the first `answer` does not wait on it."""
    from bertzoo.models.tasks import task_model_from_preset
    from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset

    preset_dir = Path(preset_dir)
    recorded = {}
    # The run's settings, the model and the tokenizer from one published
    # version of the directory (a run may publish its next best meanwhile).
    with preset_lib.pinned(preset_dir) as source:
        run_file = Path(source) / "finetune.json"
        if run_file.is_file():
            recorded = read_json_object(run_file, PresetError).get("serving", {})
        model = task_model_from_preset(source)
        tokenizer = tokenizer_from_preset(source)
    settings = {**recorded, **{k: v for k, v in settings.items() if v is not None}}
    if sequence_length is None:
        # The positions' tokens: RoBERTa's first position_padding_id + 1 rows serve padding.
        sequence_length = recorded.get("sequence_length") or preset_lib.max_input_length(
            model.backbone.get_config()
        )
    settings.pop("sequence_length", None)
    serving = ServingModel(model, tokenizer, sequence_length=sequence_length, **settings)
    # One graph serves every batch shape after this first run.
    if warm and keras.backend.backend() == "tensorflow":
        serving.answer(**{k: [""] for k in serving.input_names})
    return serving


def export_in_tensorflow(arguments, settings, error=RuntimeError):
    """Runs `python -m bertzoo export ARGUMENTS --setting VALUE ...` with
    the TensorFlow backend (the export graphs run TensorFlow ops), for a
    process on another backend; a failure raises `error` with its log."""
    command = [sys.executable, "-m", "bertzoo", "export", *arguments]
    for key, value in settings.items():
        if value is not None:
            command += [f"--{key.replace('_', '-')}", json.dumps(value)]
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise error(f"Export (TensorFlow subprocess) failed:\n{done.stderr.strip()[-3000:]}")


def export_serving(preset_dir, out_dir, overwrite=False, **settings):
    """Writes the SavedModel, the `.keras` file and `serving.json` for a
    fine-tuned task preset directory (see the module docstring), published
    as one unit with a checksum manifest (`bertzoo.io.publish`). Returns
    `out_dir`.

    `out_dir` must be new, empty, or (with `overwrite=True`) an earlier
    bertzoo export: anything else is an `OutputError` before anything is
    written, so an export never deletes a user's files."""
    out_dir = Path(out_dir)
    check_target(out_dir, "export", overwrite)  # before any work
    if keras.backend.backend() != "tensorflow":
        arguments = [str(preset_dir), str(out_dir)] + ["--overwrite"] * bool(overwrite)
        export_in_tensorflow(arguments, settings)
        return out_dir
    import tensorflow as tf

    model = serving_model_from_preset(preset_dir, warm=False, **settings)
    with publish_directory(out_dir, "export", overwrite=overwrite) as staging:
        module = tf.Module()
        module.model = model
        module.tokenizer = model.tokenizer
        concrete = model.signature()()
        tf.saved_model.save(
            module, str(staging / SAVED_MODEL_DIR), signatures={"serving_default": concrete}
        )
        model.save(staging / KERAS_FILE)
        description = {
            "task": model.kind,
            "inputs": list(model.input_names),
            "outputs": sorted(concrete.structured_outputs),
            "sequence_length": model.sequence_length,
            "label_names": model.label_names,
        }
        atomic_write_text(staging / SIGNATURE_FILE, json.dumps(description, indent=2) + "\n")
    return out_dir
