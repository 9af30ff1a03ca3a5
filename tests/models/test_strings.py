"""Task models on strings: `fit`, `evaluate`, `predict` and `predict_proba`
take texts through the model's preprocessor (keras-hub style), token-id
dicts still work, and a model without a preprocessor refuses strings in one
line. Runs under both backends (KERAS_BACKEND=jax too)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from bertzoo import BertClassifier, BertPreprocessor, BertSpanQA, BertTokenClassifier
from bertzoo.errors import InputError
from bertzoo.models import text_inputs
from bertzoo.tokenizers import BertTokenizer
from tests.conftest import seed_everything, tiny_backbone

WORDS = ["good", "great", "nice", "fine", "bad", "awful", "poor", "sad", "the", "film", "day"]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
POSITIVE = ["good film", "great day", "nice film", "the fine day", "good day", "great film"]
NEGATIVE = ["bad film", "awful day", "poor film", "the sad day", "bad day", "awful film"]
TEXTS = POSITIVE + NEGATIVE
LABELS = [1] * len(POSITIVE) + [0] * len(NEGATIVE)

# The README's fine-tuning snippet: 20 short texts, two classes.
SNIPPET_TEXTS = [
    "what a lovely day",
    "i love this film",
    "great food and kind staff",
    "this is wonderful",
    "a delightful evening",
    "the best concert ever",
    "such a happy moment",
    "brilliant work, well done",
    "i enjoyed every minute",
    "beautiful and moving",
    "what a terrible day",
    "i hate this film",
    "awful food and rude staff",
    "this is horrible",
    "a miserable evening",
    "the worst concert ever",
    "such a sad moment",
    "poor work, badly done",
    "i regretted every minute",
    "ugly and boring",
]
SNIPPET_LABELS = [1] * 10 + [0] * 10


def tiny_classifier(**kwargs):
    tokenizer = BertTokenizer(VOCABULARY)
    backbone = tiny_backbone(vocabulary_size=len(VOCABULARY), num_layers=2)
    preprocessor = BertPreprocessor(tokenizer, sequence_length=32)
    return BertClassifier(backbone, 2, dropout=0.0, preprocessor=preprocessor, **kwargs)


def keras_warnings(caught):
    return [w for w in caught if issubclass(w.category, UserWarning | RuntimeWarning)]


@pytest.mark.slow
def test_fit_predict_evaluate_on_strings_without_a_keras_warning():
    model = tiny_classifier()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(TEXTS, LABELS, epochs=20, batch_size=4, verbose=0)
        logits = model.predict(TEXTS, verbose=0)
        metrics = model.evaluate(TEXTS, LABELS, verbose=0, return_dict=True)
        probabilities = model.predict_proba(["good film", "bad day"], verbose=0)
    assert not keras_warnings(caught), [str(w.message) for w in caught]
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert history.history["accuracy"][-1] == 1.0, history.history
    assert logits.shape == (len(TEXTS), 2)
    assert (logits.argmax(-1) == LABELS).all()
    assert metrics["accuracy"] == 1.0
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    assert probabilities[0, 1] > 0.5 > probabilities[1, 1]


def test_string_predictions_equal_those_of_the_packed_ids():
    """Batches are cut to the longest text's bucket: the logits are those of
    the ids padded to the full sequence length."""
    model = tiny_classifier()
    texts = ["good film", "the sad day the sad day the sad day good", "nice"]
    ids = {k: np.asarray(v) for k, v in model.preprocessor.pack(tf.constant(texts)).items()}
    assert ids["token_ids"].shape == (3, 32)
    np.testing.assert_allclose(
        model.predict(texts, verbose=0), model.predict(ids, verbose=0), atol=1e-5
    )
    # A single string is a batch of one; numpy and tf string batches work too.
    assert model.predict("good film", verbose=0).shape == (1, 2)
    np.testing.assert_allclose(
        model.predict(np.array(texts), verbose=0), model.predict(ids, verbose=0), atol=1e-5
    )
    np.testing.assert_allclose(
        model.predict(tf.constant(texts), verbose=0), model.predict(ids, verbose=0), atol=1e-5
    )
    np.testing.assert_allclose(
        model.predict_proba(texts, verbose=0),
        text_inputs.softmax(model.predict(ids, verbose=0)),
        atol=1e-6,
    )


def test_buckets_and_packed_widths():
    assert text_inputs.buckets(128) == [16, 32, 64, 128]
    assert text_inputs.buckets(100) == [16, 32, 64, 100]
    assert text_inputs.buckets(16) == [16]
    model = tiny_classifier()
    pack = text_inputs.packer(model.preprocessor)
    assert pack(tf.constant(["good film"]))["token_ids"].shape == (1, 16)
    assert pack(tf.constant([" ".join(["good"] * 20)]))["token_ids"].shape == (1, 32)


@pytest.mark.slow
def test_text_pairs_and_datasets_of_strings():
    model = tiny_classifier()
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    firsts, seconds = TEXTS, TEXTS[::-1]
    pair_logits = model.predict((firsts, seconds), verbose=0)
    ids = model.preprocessor.pack((tf.constant(firsts), tf.constant(seconds)))
    assert (np.asarray(ids["segment_ids"]).max(axis=1) == 1).all()
    ids = {k: np.asarray(v) for k, v in ids.items()}
    np.testing.assert_allclose(pair_logits, model.predict(ids, verbose=0), atol=1e-5)
    history = model.fit((firsts, seconds), LABELS, epochs=2, batch_size=4, verbose=0)
    assert len(history.history["loss"]) == 2

    labelled = tf.data.Dataset.from_tensor_slices((TEXTS, LABELS)).shuffle(12).batch(4)
    unlabelled = tf.data.Dataset.from_tensor_slices(TEXTS).batch(5)
    pairs = tf.data.Dataset.from_tensor_slices((firsts, seconds)).batch(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(labelled, epochs=1, verbose=0)
        metrics = model.evaluate(labelled, verbose=0, return_dict=True)
        logits = model.predict(unlabelled, verbose=0)
        from_pairs = model.predict(pairs, verbose=0)
    assert not keras_warnings(caught), [str(w.message) for w in caught]
    assert set(metrics) >= {"loss", "accuracy"}
    assert logits.shape == (12, 2) and from_pairs.shape == (12, 2)


@pytest.mark.slow
def test_validation_split_and_validation_data_on_strings():
    model = tiny_classifier()
    history = model.fit(
        TEXTS, LABELS, epochs=1, batch_size=4, validation_split=0.25, shuffle=False, verbose=0
    )
    assert "val_accuracy" in history.history
    history = model.fit(
        TEXTS, LABELS, epochs=1, batch_size=4, validation_data=(TEXTS, LABELS), verbose=0
    )
    assert "val_loss" in history.history
    # Keras' positional order: (x, y, batch_size, epochs, verbose).
    history = model.fit(TEXTS, LABELS, 6, 2, 0)
    assert len(history.history["loss"]) == 2
    assert set(model.evaluate(TEXTS, LABELS, 6, 0, None, None, None, True)) >= {"accuracy"}


def test_fit_compiles_with_the_documented_defaults():
    model = tiny_classifier()
    assert not model.compiled
    model.fit(TEXTS, LABELS, epochs=1, batch_size=6, verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    assert float(model.optimizer.learning_rate) == pytest.approx(5e-5)


@pytest.mark.slow
def test_token_id_dicts_still_work_and_strings_without_a_preprocessor_are_refused():
    model = BertClassifier(tiny_backbone(vocabulary_size=len(VOCABULARY)), 2)
    assert model.preprocessor is None
    ids = tiny_classifier().preprocessor.pack(tf.constant(TEXTS))
    ids = {k: np.asarray(v) for k, v in ids.items()}
    dataset = tf.data.Dataset.from_tensor_slices((ids, LABELS)).batch(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(ids, np.asarray(LABELS), epochs=1, batch_size=4, verbose=0)
        model.fit(dataset, epochs=1, verbose=0)  # no "shuffle=True ... ignored"
        assert model.predict(ids, verbose=0).shape == (12, 2)
    assert not keras_warnings(caught), [str(w.message) for w in caught]
    for call in (
        lambda: model.predict(TEXTS),
        lambda: model.fit(TEXTS, LABELS),
        lambda: model.evaluate(TEXTS, LABELS),
        lambda: model.predict(tf.data.Dataset.from_tensor_slices(TEXTS).batch(2)),
    ):
        with pytest.raises(InputError, match="has no preprocessor, so it takes token-id dicts"):
            call()
    with pytest.raises(TypeError, match="preprocessor must be"):
        model.preprocessor = 3


@pytest.mark.backend_independent  # reads a preset file
def test_a_built_in_preset_has_no_vocabulary_so_no_preprocessor():
    from bertzoo.preprocessing import preset_preprocessor

    assert preset_preprocessor("bert_mini") is None


def test_tagging_and_qa_refuse_strings_naming_their_feature_builders():
    tagger = BertTokenClassifier(tiny_backbone(), 3)
    with pytest.raises(InputError, match="tagging_features"):
        tagger.predict(["good film"])
    qa = BertSpanQA(tiny_backbone())
    with pytest.raises(InputError, match="encode_qa"):
        qa.predict((["who?"], ["me"]))


def test_regression_probabilities_are_refused_in_one_line():
    model = BertClassifier(tiny_backbone(vocabulary_size=len(VOCABULARY)), 1)
    model.preprocessor = tiny_classifier().preprocessor
    with pytest.raises(ValueError, match="regression"):
        model.predict_proba(["good film"], verbose=0)


@pytest.mark.slow
def test_saving_with_a_preprocessor(tmp_path):
    model = tiny_classifier()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    model.fit(TEXTS, LABELS, epochs=1, batch_size=6, verbose=0)
    ids = {k: np.asarray(v) for k, v in model.preprocessor.pack(tf.constant(TEXTS)).items()}
    path = tmp_path / "m.keras"
    model.save(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restored = keras.saving.load_model(path)
    # Recompiled from the file (Keras warns for a custom compile() without
    # compile_from_config).
    assert not keras_warnings(caught), [str(w.message) for w in caught]
    assert float(restored.optimizer.learning_rate) == pytest.approx(1e-3)
    assert int(restored.optimizer.iterations) == 2
    assert restored.preprocessor is None  # not part of the .keras file
    np.testing.assert_allclose(
        restored.predict(ids, verbose=0), model.predict(ids, verbose=0), atol=1e-6
    )
    restored.preprocessor = model.preprocessor
    np.testing.assert_allclose(
        restored.predict(TEXTS, verbose=0), model.predict(TEXTS, verbose=0), atol=1e-5
    )
    # A task preset saved with its tokenizer comes back with a preprocessor.
    preset = tmp_path / "preset"
    model.save_to_preset(preset, tokenizer=model.preprocessor.tokenizer)
    loaded = BertClassifier.from_preset(preset, sequence_length=16)
    assert loaded.preprocessor.sequence_length == 16
    np.testing.assert_allclose(
        loaded.predict(TEXTS, verbose=0), model.predict(TEXTS, verbose=0), atol=1e-5
    )
    assert BertClassifier.from_preset(preset, preprocessor=None).preprocessor is None
    assert bertzoo.models.tasks.task_model_from_preset(preset).preprocessor is not None


@pytest.mark.slow
def test_the_readme_snippet_fits_twenty_texts_visibly(minilm_dir):
    """The README's snippet, as written: MiniLM, `fit` on strings with the
    compile defaults, `predict` logits."""
    seed_everything()
    model = BertClassifier.from_preset(str(minilm_dir), num_classes=2)
    assert model.preprocessor is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(SNIPPET_TEXTS, SNIPPET_LABELS, epochs=5, batch_size=4, verbose=0)
        logits = model.predict(["what a lovely day", "what a terrible day"], verbose=0)
    assert not keras_warnings(caught), [str(w.message) for w in caught]
    losses, accuracy = history.history["loss"], history.history["accuracy"]
    assert losses[-1] < losses[0] - 0.1, losses
    assert accuracy[-1] == 1.0, accuracy
    assert logits.shape == (2, 2)
    assert logits[0].argmax() == 1 and logits[1].argmax() == 0
