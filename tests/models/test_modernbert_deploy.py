"""ModernBERT deployed: the serving export (a SavedModel that takes raw
strings, and the `.keras` file) of a ModernBERT classifier answers as the
Keras model, and `quantize("int8", runtime="keras")` quantizes its GeGLU's fused input
projection (one Dense of 2 x intermediate_dim) and its attention
projections (transformers' fused Wqkv, three Dense layers here) and stays
close to float32, on the random ModernBERT checkpoints of
tests/fixtures/modernbert and tests/fixtures/modernbert_sentence_transformers."""

import json

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo.models import task_model_from_preset
from bertzoo.models.quantize import quantization_mode
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from tests.conftest import FIXTURES

REF = np.load(FIXTURES / "modernbert" / "reference.npz")
# Messy texts: [MASK] with the space before it, special-token strings, NFC,
# whitespace runs, a text longer than the serving length, an empty one.
TEXTS = [
    "a great film",
    "Fill the [MASK] in.",
    "[CLS] x [SEP] [PAD]",
    "Cafe\u0301 naïve 안녕하세요 😀",
    "tabs\tand\n  spaces  ",
    " ".join(["word", "한국어"] * 40),
    "",
]


@pytest.mark.backend_independent  # the export is built in TensorFlow, whatever the backend
@pytest.mark.slow
def test_serving_export_of_a_modernbert_classifier_answers_as_keras(tmp_path):
    """A classifier on the random ModernBERT of the sentence-transformers
    fixture (its tokenizer.json; 3 layers, a window of 8) saved as a task
    preset and exported: the SavedModel, fed strings, gives the Keras
    model's probabilities on what the tokenizer packs (bar 1e-5). (The
    `.keras` file's answers are the in-memory serving model's for any
    task preset: tests/test_finetune_recipe.py.)"""
    import tensorflow as tf

    source = FIXTURES / "modernbert_sentence_transformers"
    keras.utils.set_random_seed(0)
    model = bertzoo.BertClassifier.from_preset(source, num_classes=3)
    tokenizer = tokenizer_from_preset(source)
    assert type(tokenizer).__name__ == "ByteLevelBPETokenizer"
    preset = tmp_path / "preset"
    model.save_to_preset(preset, tokenizer=tokenizer)
    out = bertzoo.export_serving(preset, tmp_path / "export")
    description = json.loads((out / "serving.json").read_text())
    length = description["sequence_length"]
    assert length > 8  # windows longer than the local attention's
    # The Keras model itself, packed as serving packs ([CLS] text [SEP], cut).
    packer = bertzoo.preprocessing.BertPreprocessor(
        tokenizer, sequence_length=length, segment_ids=False
    )
    packed = packer(tf.constant(TEXTS))
    logits = np.asarray(model({k: np.asarray(v) for k, v in packed.items()}))
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    saved = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    answers = {k: v.numpy() for k, v in saved(text=tf.constant(TEXTS)).items()}
    np.testing.assert_allclose(answers["probabilities"], probabilities, atol=1e-5)
    labels = [label.decode() for label in answers["label"]]  # names: "0", "1", "2"
    assert labels == [str(i) for i in probabilities.argmax(-1)]


def _outputs(model, name):
    x = {"token_ids": REF[f"{name}/input_ids"], "padding_mask": REF[f"{name}/attention_mask"]}
    return [np.asarray(a) for a in keras.tree.flatten(model(x))]


@pytest.mark.parametrize(
    "name, build",
    [
        ("model", bertzoo.BertBackbone.from_preset),
        ("sequence_classification", lambda d: bertzoo.BertClassifier.from_preset(d, num_classes=3)),
    ],
)
def test_int8_modernbert_quantizes_geglu_and_attention_and_stays_close(name, build, tmp_path):
    """Every Dense of the backbone becomes int8 (the GeGLU's fused
    H -> 2 x I projection, query, key, value, attention output, output
    projection) and the token table; outputs move by at most 5% of their
    scale (measured: 2.7% for the hidden states, 2.2% for the logits, on
    these random weights of std 0.2), and the int8 preset loads back with
    the same outputs."""
    model = build(FIXTURES / "modernbert" / name)
    backbone = getattr(model, "backbone", model)
    before = _outputs(model, name)
    model.quantize("int8", runtime="keras")
    assert quantization_mode(model) == "int8"
    layers = {
        layer.path: layer
        for layer in backbone._flatten_layers(include_self=False)
        if type(layer) in (keras.layers.Dense, keras.layers.Embedding)
    }
    assert {layer.quantization_mode for layer in layers.values()} == {"int8"}
    gated = layers["transformer_layer_0/intermediate_dense"]
    assert gated.kernel.shape == (backbone.hidden_dim, 2 * backbone.intermediate_dim)
    projections = {path.rsplit("/", 1)[-1] for path in layers if "/self_attention/" in path}
    assert projections == {"query", "key", "value", "attention_output"}
    after = _outputs(model, name)
    mask = REF[f"{name}/attention_mask"].astype(bool)
    for b, a in zip(before, after, strict=True):
        real = mask if b.ndim == 3 else np.ones(b.shape, bool)
        error, scale = np.abs(a - b)[real].max(), np.abs(b[real]).max()
        assert error <= 0.05 * scale, (error, scale)
    if name == "sequence_classification":
        assert (before[0].argmax(-1) == after[0].argmax(-1)).all()
        directory = tmp_path / "int8"
        model.save_to_preset(directory)
        loaded = task_model_from_preset(directory)
        assert quantization_mode(loaded) == "int8"
        for a, b in zip(after, _outputs(loaded, name)):
            np.testing.assert_array_equal(a, b)
