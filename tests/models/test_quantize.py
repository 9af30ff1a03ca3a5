"""int8 models: `quantize("int8")` on backbones, task models and the
embedder (Keras' int8 Dense and Embedding layers, activations quantized per
token at run time), their presets, the refusals, and the quality against
float32 on the real MiniLM checkpoint and real texts."""

import json

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from benchmarks.probes import softmax_probe
from benchmarks.texts import short_texts
from bertzoo import batching
from bertzoo.data.readers.common import LabelSet, TaggedSentence
from bertzoo.models import task_model_from_preset
from bertzoo.models.quantize import QuantizationError, int8_runtime, quantization_mode
from bertzoo.tasks.classification.builtin import sentiment
from bertzoo.tasks.tagging.builtin import entities
from bertzoo.tasks.tagging.features import tagging_features, word_predictions
from bertzoo.tasks.tagging.metrics import entity_f1
from tests.conftest import edited_by_hand
from tests.fixtures.fuzz_text import fuzz_texts

TINY = dict(
    vocabulary_size=61,
    num_layers=3,
    num_heads=2,
    hidden_dim=16,
    intermediate_dim=24,
    max_sequence_length=16,
    dropout=0.0,
)
# ALBERT's switches: a factorised embedding (E -> H projection, a Dense too)
# and layers sharing their blocks.
TINY_ALBERT = dict(TINY, embedding_dim=8, num_groups=1)


def _ids(n=6, length=10, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, length + 1, n)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    return {
        "token_ids": (rng.integers(5, 61, (n, length)) * mask).astype("int32"),
        "segment_ids": np.zeros((n, length), "int32"),
        "padding_mask": mask,
    }


def _quantized_layers(model):
    return {
        layer.name: layer.quantization_mode
        for layer in model._flatten_layers(include_self=False)
        if type(layer) in (keras.layers.Dense, keras.layers.Embedding)
    }


def _task_models():
    yield bertzoo.BertClassifier(bertzoo.BertBackbone(**TINY), num_classes=3)
    yield bertzoo.BertTokenClassifier(bertzoo.BertBackbone(**TINY_ALBERT), num_labels=4)
    yield bertzoo.BertSpanQA(bertzoo.BertBackbone(**TINY))


def _dataset_dtypes(path, suffix):
    """The dtypes of the datasets of a weights file whose names end with `suffix`."""
    found = []
    with h5py.File(path) as f:
        f.visititems(lambda name, obj: found.append(obj.dtype) if name.endswith(suffix) else None)
    return found


def _numpy(outputs):
    return [np.asarray(a) for a in keras.tree.flatten(outputs)]


def test_task_models_quantize_their_backbone_and_load_back_quantized(tmp_path):
    """Every Dense and Embedding layer of the backbone becomes int8 and the
    head stays float32; outputs stay close to float32, compiled (`predict`)
    as eagerly; the preset records the mode and loads back int8, giving
    the same outputs."""
    x = _ids()
    for i, model in enumerate(_task_models()):
        before = _numpy(model(x))
        model.quantize("int8", runtime="keras")
        assert quantization_mode(model) == "int8"
        modes = _quantized_layers(model.backbone)
        assert modes and set(modes.values()) == {"int8"}, modes
        if model.backbone.embedding_dim != model.backbone.hidden_dim:
            assert modes["embedding_projection"] == "int8"
        assert {layer.quantization_mode for layer in model.head_layers()} == {None}
        after = _numpy(model(x))
        for b, a in zip(before, after):
            real = b > -1e8  # QA: padding positions are -1e9
            # Tiny random weights: int8 moves logits by about 1% of their scale.
            assert np.max(np.abs(a - b)[real]) <= 0.05 * np.max(np.abs(b[real])) + 1e-3
        if i == 0:  # compiled (XLA under TensorFlow, jit under JAX) as eagerly
            compiled = _numpy(model.predict(x, verbose=0))[0]
            np.testing.assert_allclose(compiled, after[0], atol=1e-3 * np.max(np.abs(after[0])))

        directory = tmp_path / str(i)
        model.save_to_preset(directory)
        config = json.loads((directory / "config.json").read_text())
        assert config["quantization"] == {"mode": "int8"}
        kernels = _dataset_dtypes(directory / "model.weights.h5", "query/vars/0")
        assert kernels and set(kernels) == {np.dtype("int8")}
        loaded = task_model_from_preset(directory)
        assert type(loaded) is type(model) and quantization_mode(loaded) == "int8"
        assert loaded.head_loaded
        for a, b in zip(after, _numpy(loaded(x))):
            np.testing.assert_array_equal(a, b)


def test_a_quantized_model_round_trips_through_a_keras_file(tmp_path):
    """ELECTRA's head (a hidden Dense of its own) stays float32 too."""
    backbone = bertzoo.BertBackbone(**TINY_ALBERT)
    model = bertzoo.BertClassifier(backbone, num_classes=3, head="electra")
    model.quantize("int8", runtime="keras")
    assert [layer.quantization_mode for layer in model.head_layers()] == [None, None]
    x = _ids()
    expected = np.asarray(model(x))
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert quantization_mode(loaded) == "int8"
    np.testing.assert_array_equal(np.asarray(loaded(x)), expected)


def test_auto_says_in_one_line_when_the_fast_int8_path_is_not_there(monkeypatch, caplog):
    """`pip install .` has no LiteRT runtime: quantize("int8") then runs
    Keras' int8 layers, and says so, with how to get the fast path (before,
    silently, at 0.41x the best CPU peer's throughput)."""
    from bertzoo.models import litert

    monkeypatch.setattr(litert, "available", lambda: False)
    model = bertzoo.BertClassifier(bertzoo.BertBackbone(**TINY_ALBERT), num_classes=2)
    with caplog.at_level("WARNING", logger="bertzoo.models.int8"):
        model.quantize("int8")
    lines = [r.getMessage() for r in caplog.records if r.name == "bertzoo.models.int8"]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "Keras' int8 layers run, not bertzoo's fastest int8 CPU path" in lines[0]
    expected = litert.INSTALL if keras.backend.backend() == "tensorflow" else "Keras backend is"
    assert expected in lines[0] and int8_runtime(model) == "keras"
    caplog.clear()
    other = bertzoo.BertClassifier(bertzoo.BertBackbone(**TINY_ALBERT), num_classes=2)
    with caplog.at_level("WARNING", logger="bertzoo.models.int8"):
        other.quantize("int8", runtime="keras")  # chosen: no line
    assert not [r for r in caplog.records if r.name == "bertzoo.models.int8"]


@pytest.mark.backend_independent
def test_unsupported_modes_and_states_are_refused_in_one_line(tmp_path):
    backbone = bertzoo.BertBackbone(**TINY)
    for mode, why in (
        ("int4", "cosine to float32 0.95"),
        ("float8", "kernels in float32"),
        ("gptq", "calibrates on a dataset"),
        ("int3", None),
        (None, None),
    ):
        with pytest.raises(QuantizationError) as e:
            backbone.quantize(mode)
        message = str(e.value)
        assert "\n" not in message and "support: int8." in message, message
        assert why is None or why in message
    with pytest.raises(
        QuantizationError, match="takes mode, runtime and interpreters.*not config, filters"
    ):
        backbone.quantize("int8", config=None, filters="query")
    assert quantization_mode(backbone) is None  # nothing was changed

    with_lora = bertzoo.BertClassifier(bertzoo.BertBackbone(**TINY), num_classes=2)
    with_lora.enable_lora(2)
    with pytest.raises(QuantizationError, match="LoRA enabled.*merge the adapters first"):
        with_lora.quantize("int8")
    assert quantization_mode(with_lora) is None

    model = bertzoo.BertClassifier(bertzoo.BertBackbone(**TINY), num_classes=2)
    model.quantize("int8", runtime="keras")
    with pytest.raises(QuantizationError, match="already int8-quantized"):
        model.quantize("int8")
    with pytest.raises(QuantizationError, match="fit needs float weights"):
        model.fit(_ids(), np.zeros(6, "int32"), verbose=0)
    with pytest.raises(bertzoo.models.lora.LoraError, match="quantized.*enable LoRA on the float"):
        model.enable_lora(2)
    with pytest.raises(QuantizationError, match="pre-training"):
        bertzoo.BertPretrainer(model.backbone)
    from bertzoo.convert import save_hf
    from bertzoo.distill.init import init_student_from_teacher

    with pytest.raises(QuantizationError, match="Hugging Face checkpoint"):
        save_hf(model.backbone, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    with pytest.raises(QuantizationError, match="distillation"):
        init_student_from_teacher(bertzoo.BertBackbone(**TINY), model)

    # A preset recording a mode bertzoo does not load.
    model.save_to_preset(tmp_path / "int8")
    config = json.loads((tmp_path / "int8" / "config.json").read_text())
    config["quantization"]["mode"] = "int4"
    edited_by_hand(tmp_path / "int8")
    (tmp_path / "int8" / "config.json").write_text(json.dumps(config))
    with pytest.raises(bertzoo.presets.PresetError, match="quantization.mode must be one of int8"):
        bertzoo.BertBackbone.from_preset(tmp_path / "int8")


# === Quality against float32: the real MiniLM checkpoint on real texts ===


def _cosines(a, b):
    return np.sum(a * b, axis=-1)  # unit vectors


@pytest.mark.slow
def test_int8_embedder_stays_within_the_cosine_bars_and_loads_back(minilm_dir, tmp_path):
    """all-MiniLM-L6-v2 after quantize("int8", runtime="keras") (Keras'
    int8 layers: the runtime under any backend), against itself in float32,
    texts cut at 64 tokens (one compiled shape per model).
    Real texts: 112 sentences of Python's documentation, one in ten with an
    emoji, a URL, curly quotes, Hangul or CJK (benchmarks/texts.py):
    cosine mean 0.9974, min 0.9923 measured (the goals: 0.995 and 0.98).
    Fuzz strings (every Unicode category, mojibake, controls: not text
    anyone writes, mostly [UNK]): 0.9939 and 0.9790. Pooling and
    normalisation are kept; the preset holds a quarter of the bytes and
    loads back int8, giving the same vectors."""
    texts = short_texts(112, seed=5) + fuzz_texts(16, seed=5)
    embedder = bertzoo.TextEmbedder.from_preset(minilm_dir, sequence_length=64)
    reference = embedder.embed(texts, batch_size=len(texts))
    embedder.quantize("int8", runtime="keras")
    assert int8_runtime(embedder) == "keras"
    got = embedder.embed(texts, batch_size=len(texts))
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)
    cosine = np.sum(got * reference, axis=-1)  # unit vectors
    real, fuzz = cosine[:112], cosine[112:]
    assert real.mean() >= 0.996 and real.min() >= 0.99, (real.mean(), real.min())
    assert fuzz.mean() >= 0.993 and fuzz.min() >= 0.975, (fuzz.mean(), fuzz.min())

    directory = tmp_path / "minilm_int8"
    embedder.save_to_preset(directory)
    config = json.loads((directory / "config.json").read_text())
    assert config["quantization"] == {"mode": "int8"}
    assert config["embedder"] == {"pooling": "mean", "normalize": True, "sequence_length": 64}
    size = (directory / "model.weights.h5").stat().st_size
    assert size < 0.3 * (minilm_dir / "model.safetensors").stat().st_size
    loaded = bertzoo.TextEmbedder.from_preset(directory)
    assert quantization_mode(loaded) == "int8"
    assert (loaded.pooling, loaded.normalize) == ("mean", True)
    np.testing.assert_array_equal(loaded.embed(texts, batch_size=len(texts)), got)


@pytest.mark.slow
def test_int8_classifier_and_tagger_keep_accuracy_and_f1(minilm_dir):
    """MiniLM task models on the fine-tuning recipe's built-in tasks
    (sentiment with adjectives, and person and location names, that
    training never shows), each head trained on the float32 features (a
    linear probe: fine-tuning the encoder costs minutes here), then the
    model quantized with Keras' int8 layers (the LiteRT graph's bars:
    test_int8_litert.py, benchmarks/int8_tasks.py). Measured, float32 and int8 alike: classifier accuracy
    0.9922 on 256 sentences (no prediction changes), tagger entity F1
    0.9896 on 64 sentences (no word's tag changes)."""
    backbone = bertzoo.BertBackbone.from_preset(minilm_dir)
    preprocessor = bertzoo.BertPreprocessor.from_preset(minilm_dir, sequence_length=32)

    train, validation = sentiment(train_size=256, validation_size=256)
    texts = [text for text, _ in train + validation]
    labels = np.array([label == "positive" for _, label in train + validation], "int32")
    ids = {k: np.asarray(v) for k, v in preprocessor.pack(tf.constant(texts)).items()}
    classifier = bertzoo.BertClassifier(backbone, num_classes=2, dropout=0.0)
    pooled = keras.Model(classifier.input, classifier.get_layer("classifier_dropout").input)
    features = batching.predict_by_length(batching.compiled_forward(pooled), ids, 512, 32)
    kernel, bias = softmax_probe(features[:256], labels[:256], 2)
    classifier.head.set_weights([kernel, bias])
    float_predictions = (features[256:] @ kernel + bias).argmax(-1)  # the head on them

    train, validation = entities(train_size=192, validation_size=64)
    sentences = [TaggedSentence(words, tags, 1) for words, tags in train + validation]
    names = sorted({tag for s in sentences for tag in s.tags})
    tagged, tags, starts, _ = tagging_features(
        preprocessor.tokenizer, sentences, LabelSet(names), sequence_length=32
    )
    tagger = bertzoo.BertTokenClassifier(backbone, num_labels=len(names), dropout=0.0)
    tokens = keras.Model(tagger.input, tagger.get_layer("tagger_dropout").input)
    token_features = batching.compiled_forward(tokens)(tagged)  # (n, 32, 384)
    scored = tags[:192] >= 0
    kernel, bias = softmax_probe(token_features[:192][scored], tags[:192][scored], len(names))
    tagger.head.set_weights([kernel, bias])
    truth = [s.tags for s in sentences[192:]]
    lengths = [len(s.words) for s in sentences[192:]]
    float_tags = word_predictions(
        token_features[192:] @ kernel + bias, starts[192:], lengths, names
    )

    classifier.quantize("int8", runtime="keras")  # the backbone both share
    assert quantization_mode(tagger) == "int8"
    test = {k: v[256:] for k, v in ids.items()}
    int8_predictions = classifier.predict(test, batch_size=256, verbose=0).argmax(-1)
    float_accuracy = np.mean(float_predictions == labels[256:])
    int8_accuracy = np.mean(int8_predictions == labels[256:])
    assert float_accuracy >= 0.95, float_accuracy  # a trained classifier
    assert abs(int8_accuracy - float_accuracy) <= 0.01, (float_accuracy, int8_accuracy)
    assert np.sum(int8_predictions != float_predictions) <= 2

    test = {k: v[192:] for k, v in tagged.items()}
    int8_tags = word_predictions(
        tagger.predict(test, batch_size=64, verbose=0), starts[192:], lengths, names
    )
    float_f1, int8_f1 = (entity_f1(truth, t)["f1"] for t in (float_tags, int8_tags))
    assert float_f1 >= 0.95, float_f1
    assert abs(int8_f1 - float_f1) <= 0.01, (float_f1, int8_f1)
