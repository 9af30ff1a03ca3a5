"""Task models: shapes, losses against hand-computed values, presets (bertzoo
and Hugging Face heads), `.keras` round trips."""

import json

import keras
import numpy as np
import pytest
from keras import ops

from bertzoo import BertClassifier, BertSpanQA, BertTokenClassifier, PresetError
from bertzoo.convert import read_safetensors, save_hf, write_safetensors
from bertzoo.models.tasks import IGNORE_LABEL, task_model_from_preset
from tests.conftest import BATCH, SEQ, edited_by_hand, make_inputs, tiny_backbone


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float64")


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _loss(model, x, y):
    return float(_np(model.compute_loss(x, y, model(x, training=False), training=False)))


def test_classifier_uses_pooled_output_and_cross_entropy():
    backbone = tiny_backbone()
    model = BertClassifier(backbone, num_classes=5, dropout=0.0)
    x = make_inputs()
    logits = _np(model(x))
    assert logits.shape == (BATCH, 5)
    pooled = _np(backbone(x)["pooled_output"])
    expected = pooled @ _np(model.head.kernel) + _np(model.head.bias)
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    y = np.array([0, 3, 4])
    hand = -np.mean(_log_softmax(logits)[np.arange(BATCH), y])
    assert _loss(model, x, y) == pytest.approx(hand, rel=1e-5)


def test_classifier_without_pooler_uses_the_cls_vector():
    backbone = tiny_backbone(use_pooler=False, num_segments=0)
    model = BertClassifier(backbone, num_classes=3, dropout=0.0)
    x = make_inputs(num_segments=0)
    cls_vector = _np(backbone(x)["sequence_output"])[:, 0]
    np.testing.assert_allclose(
        _np(model(x)), cls_vector @ _np(model.head.kernel) + _np(model.head.bias), atol=1e-5
    )


def test_regression_is_mean_squared_error():
    model = BertClassifier(tiny_backbone(), num_classes=1, dropout=0.0)
    x = make_inputs()
    scores = _np(model(x)).reshape(-1)
    y = np.array([0.5, 2.0, 4.5], "float32")
    assert _loss(model, x, y) == pytest.approx(np.mean((scores - y) ** 2), rel=1e-5)
    assert model.kind == "regression" and model.accuracy is None


def test_token_classifier_ignores_unscored_positions():
    model = BertTokenClassifier(tiny_backbone(), num_labels=4, dropout=0.0)
    x = make_inputs()
    logits = _np(model(x))
    assert logits.shape == (BATCH, SEQ, 4)
    y = np.full((BATCH, SEQ), IGNORE_LABEL)
    y[0, 1], y[1, 2], y[2, 1], y[2, 4] = 3, 0, 2, 1
    scored = y != IGNORE_LABEL
    hand = -np.mean(_log_softmax(logits)[scored, y[scored]])
    assert _loss(model, x, y) == pytest.approx(hand, rel=1e-4)
    # Any label at an ignored position leaves the loss unchanged.
    assert _loss(model, x, np.where(scored, y, IGNORE_LABEL)) == pytest.approx(hand, rel=1e-4)


def test_span_qa_masks_padding_and_averages_start_and_end_losses():
    model = BertSpanQA(tiny_backbone())
    x = make_inputs(lengths=[SEQ, SEQ - 2, 4])
    out = {k: _np(v) for k, v in model(x).items()}
    assert out["start_logits"].shape == (BATCH, SEQ)
    assert np.all(out["end_logits"][2, 4:] <= -1e8)  # padding never wins
    start, end = np.array([1, 3, 0]), np.array([2, 4, 3])
    ls, le = _log_softmax(out["start_logits"]), _log_softmax(out["end_logits"])
    hand = -np.mean((ls[np.arange(BATCH), start] + le[np.arange(BATCH), end]) / 2)
    y = {"start_positions": start, "end_positions": end}
    assert _loss(model, x, y) == pytest.approx(hand, rel=1e-5)


@pytest.mark.parametrize("kind", ["classifier", "regression", "tagger", "qa"])
def test_preset_round_trip_keeps_head_and_settings(tmp_path, kind):
    backbone = tiny_backbone()
    model = {
        "classifier": lambda: BertClassifier(backbone, 3, label_names=["neg", "neu", "pos"]),
        "regression": lambda: BertClassifier(backbone, 1),
        "tagger": lambda: BertTokenClassifier(
            backbone, 5, label_names=["B-A", "B-B", "I-A", "I-B", "O"]
        ),
        "qa": lambda: BertSpanQA(backbone),
    }[kind]()
    model.save_to_preset(tmp_path)
    document = json.loads((tmp_path / "config.json").read_text())
    assert (
        document["task"]["kind"]
        == {
            "classifier": "classification",
            "regression": "regression",
            "tagger": "tagging",
            "qa": "qa",
        }[kind]
    )
    restored = task_model_from_preset(tmp_path)
    assert type(restored) is type(model) and restored.head_loaded
    assert getattr(restored, "label_names", None) == getattr(model, "label_names", None)
    x = make_inputs()
    a, b = keras.tree.flatten(model(x)), keras.tree.flatten(restored(x))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(_np(u), _np(v))


def test_a_different_class_count_keeps_the_backbone_and_starts_a_new_head(tmp_path):
    model = BertClassifier(tiny_backbone(), 3, label_names=["a", "b", "c"])
    model.save_to_preset(tmp_path)
    two = BertClassifier.from_preset(tmp_path, num_classes=2)
    assert two.num_classes == 2 and not two.head_loaded and two.label_names is None
    x = make_inputs()
    np.testing.assert_array_equal(
        _np(two.backbone(x)["pooled_output"]), _np(model.backbone(x)["pooled_output"])
    )
    # A classifier preset is also a backbone preset, and a start for other tasks.
    tagger = BertTokenClassifier.from_preset(tmp_path, num_labels=3)
    assert not tagger.head_loaded


def test_task_preset_errors(tmp_path):
    tiny_backbone().save_to_preset(tmp_path)
    with pytest.raises(PresetError, match="not a fine-tuned task preset"):
        task_model_from_preset(tmp_path)
    with pytest.raises(ValueError, match="pass num_classes"):
        BertClassifier.from_preset(tmp_path)
    with pytest.raises(ValueError, match="num_classes must be an integer >= 1"):
        BertClassifier(tiny_backbone(), 0)
    with pytest.raises(ValueError, match="label_names has 2 names but the model has 3"):
        BertClassifier(tiny_backbone(), 3, label_names=["a", "b"])
    with pytest.raises(ValueError, match="computes its task loss itself"):
        BertSpanQA(tiny_backbone()).compile(optimizer="adam", loss="mse")


def test_hugging_face_classifier_and_qa_heads_load(tmp_path):
    backbone = tiny_backbone()
    rng = np.random.default_rng(0)
    weight, bias = rng.normal(size=(4, 10)).astype("float32"), rng.normal(size=4).astype("float32")
    cls_dir, qa_dir = tmp_path / "cls", tmp_path / "qa"
    for directory, prefix, rows, arch in (
        (cls_dir, "classifier", 4, "BertForSequenceClassification"),
        (qa_dir, "qa_outputs", 2, "BertForQuestionAnswering"),
    ):
        save_hf(backbone, directory)
        edited_by_hand(directory)
        tensors = {
            f"bert.{k}": v for k, v in read_safetensors(directory / "model.safetensors").items()
        }
        tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"] = weight[:rows], bias[:rows]
        write_safetensors(directory / "model.safetensors", tensors)
        config = json.loads((directory / "config.json").read_text())
        config["architectures"] = [arch]
        config["id2label"] = {str(i): f"L{i}" for i in range(rows)}
        (directory / "config.json").write_text(json.dumps(config))
    x = make_inputs()
    classifier = BertClassifier.from_preset(cls_dir)  # 4 classes, from id2label
    assert classifier.num_classes == 4 and classifier.head_loaded
    pooled = _np(backbone(x)["pooled_output"])
    np.testing.assert_allclose(_np(classifier(x)), pooled @ weight.T + bias, atol=1e-5)
    # A sequence classifier's "classifier." head is not a token head.
    assert not BertTokenClassifier.from_preset(cls_dir, num_labels=4).head_loaded
    qa_model = BertSpanQA.from_preset(qa_dir)
    assert qa_model.head_loaded
    sequence = _np(backbone(x)["sequence_output"])
    real = x["padding_mask"] == 1
    np.testing.assert_allclose(
        _np(qa_model(x)["start_logits"])[real], (sequence @ weight[0] + bias[0])[real], atol=1e-5
    )


@pytest.mark.parametrize("kind", ["classifier", "qa"])
def test_keras_file_round_trip(tmp_path, kind):
    backbone = tiny_backbone()
    model = BertClassifier(backbone, 2) if kind == "classifier" else BertSpanQA(backbone)
    path = tmp_path / "m.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    x = make_inputs()
    for u, v in zip(keras.tree.flatten(model(x)), keras.tree.flatten(restored(x))):
        np.testing.assert_array_equal(_np(u), _np(v))


def test_fit_learns_a_separable_task():
    """Tokens 5-9 mean class 1, tokens 10-14 class 0: a tiny classifier must
    reach 100% training accuracy."""
    rng = np.random.default_rng(0)
    n = 64
    labels = rng.integers(0, 2, n)
    ids = np.where(
        labels[:, None] == 1, rng.integers(5, 10, (n, SEQ)), rng.integers(10, 15, (n, SEQ))
    )
    x = {
        "token_ids": ids.astype("int32"),
        "segment_ids": np.zeros_like(ids, "int32"),
        "padding_mask": np.ones_like(ids, "int32"),
    }
    model = BertClassifier(tiny_backbone(), 2, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    history = model.fit(x, labels, epochs=15, batch_size=16, verbose=0)
    assert history.history["accuracy"][-1] == 1.0, history.history


def test_a_task_preset_records_the_length_its_texts_were_packed_to(tmp_path):
    """`from_preset` packs texts to the length the preset records (a
    fine-tuning run's, `save_to_preset(sequence_length=...)` or the model's
    own preprocessor's), not to the backbone's maximum: Keras then answers
    as the run trained and as its export does. An explicit length wins; a
    preset without one packs to the maximum (32 here); a damaged record is
    refused in one line."""
    import bertzoo

    words = [f"w{i}" for i in range(56)]
    tokenizer = bertzoo.BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])
    model = BertClassifier(tiny_backbone(), 2)
    model.save_to_preset(tmp_path / "run", tokenizer=tokenizer, sequence_length=16)
    document = json.loads((tmp_path / "run" / "config.json").read_text())
    assert document["preprocessor"] == {"sequence_length": 16}
    loaded = BertClassifier.from_preset(tmp_path / "run")
    assert loaded.preprocessor.sequence_length == 16
    long_text = " ".join(words * 3)
    assert np.asarray(loaded.preprocessor([long_text])["token_ids"]).shape == (1, 16)
    assert (
        BertClassifier.from_preset(
            tmp_path / "run", sequence_length=24
        ).preprocessor.sequence_length
        == 24
    )
    # Saved again from the loaded model: its preprocessor's length is kept.
    loaded.save_to_preset(tmp_path / "again", tokenizer=tokenizer)
    assert task_model_from_preset(tmp_path / "again").preprocessor.sequence_length == 16

    model.save_to_preset(tmp_path / "plain", tokenizer=tokenizer)
    assert "preprocessor" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    assert BertClassifier.from_preset(tmp_path / "plain").preprocessor.sequence_length == 32

    edited_by_hand(tmp_path / "run")
    config = tmp_path / "run" / "config.json"
    config.write_text(json.dumps({**document, "preprocessor": {"sequence_length": "16"}}))
    with pytest.raises(PresetError, match="'preprocessor.sequence_length' must be a JSON int"):
        BertClassifier.from_preset(tmp_path / "run")
