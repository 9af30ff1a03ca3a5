"""What an export is made from: a fine-tuned task preset (classifier,
regressor, tagger, QA; a distilled student is one too) or any other model
directory as a `TextEmbedder` (a sentence-transformers directory, a bertzoo
backbone preset, a Hugging Face checkpoint), with its tokenizer, and the
graph over token ids that ONNX and LiteRT hold: task heads, softmax,
pooling and normalisation inside."""

import dataclasses
from pathlib import Path

from bertzoo import presets as preset_lib
from bertzoo.errors import BertzooError

EMBEDDER = "embedder"
TASKS = ("classification", "regression", "tagging", "qa")

# The graph's outputs per task, and those that are per token (B, S, ...).
OUTPUTS = {
    "classification": ("logits", "probabilities"),
    "regression": ("score",),
    "tagging": ("logits",),
    "qa": ("start_logits", "end_logits"),
    EMBEDDER: ("embedding",),
}
PER_TOKEN = {"tagging": ("logits",), "qa": ("start_logits", "end_logits")}
# A QA serving model's settings that an export records for run.py.
QA_SERVING = (
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "null_score_diff_threshold",
    "version_2",
)


class ExportError(BertzooError, ValueError):
    """An export that cannot be made as asked (a bad combination of model,
    format and options, a missing package, an artefact that does not match
    its Keras model)."""


def model_kind(model_dir):
    """The task kind a task preset directory records, or "embedder" for any
    other model directory; read before TensorFlow loads, so a bad argument
    is refused at once."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ExportError(
            f"{model_dir} is not a directory; MODEL is a model directory: a fine-tuned task "
            "preset (recipes/finetune.py, recipes/distill.py) or, exported as a text embedder, "
            "a sentence-transformers, Hugging Face or bertzoo backbone directory."
        )
    kind = preset_lib.read_task_section(path).get("kind")
    return kind if kind in TASKS else EMBEDDER


@dataclasses.dataclass
class ExportSource:
    """A model over token ids with what strings need to reach it."""

    task: str  # a task kind, or "embedder"
    model: object  # the Keras model: dict of int32 (B, S) inputs -> its outputs
    tokenizer: object
    sequence_length: int
    label_names: list | None
    pair_segment_id: int
    details: dict  # recorded in export.json (embedder pooling, pairs)

    @property
    def inputs(self):
        return list(self.model.input)

    def outputs(self, inputs):
        """TensorFlow ops: the graph's named outputs for int32 inputs."""
        import tensorflow as tf

        raw = self.model(inputs, training=False)
        if self.task == "classification":
            return {"logits": raw, "probabilities": tf.nn.softmax(raw, axis=-1)}
        if self.task == "regression":
            return {"score": raw[:, 0]}
        if self.task == "tagging":
            return {"logits": raw}
        if self.task == "qa":
            return {k: raw[k] for k in OUTPUTS["qa"]}
        return {"embedding": raw}


def load_source(model_dir, sequence_length=None, **settings):
    """The `ExportSource` of `model_dir` (see `model_kind`); `settings` are
    the task preset's serving settings (sequence_length defaults to the one
    the run recorded, else the model's maximum; for an embedder, to what a
    sentence-transformers directory records)."""
    from bertzoo.preprocessing import segment_inputs

    task = model_kind(model_dir)
    if task == EMBEDDER:
        from bertzoo.embedder import TextEmbedder

        embedder = TextEmbedder.from_preset(model_dir, sequence_length=sequence_length, warm=False)
        if embedder.preprocessor is None:
            raise ExportError(f"{model_dir} holds no vocabulary; an export needs its tokenizer.")
        backbone = embedder.backbone
        return ExportSource(
            task=EMBEDDER,
            model=embedder,
            tokenizer=embedder.preprocessor.tokenizer,
            sequence_length=embedder.preprocessor.sequence_length,
            label_names=None,
            pair_segment_id=segment_inputs(backbone.num_segments)["pair_segment_id"],
            details={"pooling": embedder.pooling, "normalize": embedder.normalize},
        )
    from bertzoo.serving import serving_model_from_preset

    serving = serving_model_from_preset(
        model_dir, sequence_length=sequence_length, warm=False, **settings
    )
    details = {"pairs": serving.pairs}
    if serving.kind == "qa":  # how run.py windows contexts and picks answers
        details["qa"] = {
            **{k: getattr(serving, k) for k in QA_SERVING},
            "separators": serving.tokenizer.pair_separators,
        }
    return ExportSource(
        task=serving.kind,
        model=serving.task_model,
        tokenizer=serving.tokenizer,
        sequence_length=serving.sequence_length,
        label_names=serving.label_names,
        pair_segment_id=segment_inputs(serving.num_segments)["pair_segment_id"],
        details=details,
    )
