"""Hugging Face RoBERTa, XLM-RoBERTa and KLUE-RoBERTa checkpoints <-> bertzoo.

Fixtures: tests/fixtures/roberta/, small random models saved by transformers
(RobertaModel, the MaskedLM, SequenceClassification, TokenClassification
and QuestionAnswering models, an XLMRobertaForMaskedLM and a KLUE-style
RobertaForMaskedLM with a WordPiece vocab.txt), all with type_vocab_size 1
and pad_token_id 1, and reference.npz with transformers' outputs on inputs
padded with id 1; made by tests/fixtures/make_roberta_fixtures.py.
Bar: max abs error <= 1e-5 at every position, padding included (measured
on CPU: about 1e-6).
"""

import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.convert import CheckpointError, read_safetensors, save_hf
from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset
from bertzoo.tokenizers.kinds import TokenizerError
from tests.models.test_backbone import REFERENCE_PARAMS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "roberta"
REF = np.load(FIXTURES / "reference.npz")
INFO = json.loads(str(REF["info"]))
TOLERANCE = 1e-5
VARIANTS = tuple(INFO["variants"])
MLM_VARIANTS = ("masked_lm", "xlm_roberta_masked_lm", "klue_masked_lm")
MODEL_TYPES = {"xlm_roberta_masked_lm": "xlm-roberta"}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


def _inputs(name):
    ids = REF[f"{name}/input_ids"]
    return {
        "token_ids": ids,
        "segment_ids": np.zeros_like(ids),
        "padding_mask": REF[f"{name}/attention_mask"],
    }


def _close(ours, reference, real=None):
    ours, reference = np.asarray(ours), np.asarray(reference)
    if real is not None:
        ours, reference = ours[real], reference[real]
    error = float(np.abs(ours - reference).max())
    assert error <= TOLERANCE, error
    return error


@pytest.mark.backend_independent
def test_preset_counts_are_transformers_counts():
    """The presets' exact counts (checked by building them in
    tests/models/test_backbone.py) are those of transformers' RobertaModel
    and XLMRobertaModel built from the released configs."""
    counts = INFO["released_param_counts"]
    assert sorted(counts) == sorted(
        [f"roberta_{s}" for s in ("base", "large")]
        + [f"xlm_roberta_{s}" for s in ("base", "large")]
        + [f"klue_roberta_{s}" for s in ("small", "base", "large")]
    )
    for name, count in counts.items():
        assert REFERENCE_PARAMS[name] == count, name
        preset = bertzoo.BertBackbone.presets[name]
        assert preset["params"] == count, name


@pytest.mark.parametrize("name", VARIANTS)
def test_backbone_hidden_states_match_transformers(name):
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / name)
    assert backbone.count_params() == INFO["variants"][name]["base_params"]
    assert (backbone.num_segments, backbone.position_padding_id) == (1, 1)
    assert backbone.use_pooler == (name == "model")
    assert backbone.preset_info["metadata"]["model_type"] == MODEL_TYPES.get(name, "roberta")
    features = backbone.feature_model()(_inputs(name))
    # Every position, padding too: padding tokens sit at position 1 in both.
    for layer, hidden in enumerate(features["hidden_states"]):
        _close(_np(hidden), REF[f"{name}/hidden_states"][layer])
    _close(_np(features["sequence_output"]), REF[f"{name}/last_hidden_state"])
    if backbone.use_pooler:
        _close(_np(features["pooled_output"]), REF[f"{name}/pooler_output"])


@pytest.mark.parametrize("name", MLM_VARIANTS)
def test_masked_lm_logits_match_transformers(name):
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / name)
    assert sorted(backbone.head_tensors) == [
        "lm_head.bias",
        "lm_head.dense.bias",
        "lm_head.dense.weight",
        "lm_head.layer_norm.bias",
        "lm_head.layer_norm.weight",
    ]
    with pytest.raises(ValueError, match="masked LM only .*use objective='none'"):
        bertzoo.BertPretrainer(backbone, objective="nsp")
    pretrainer = bertzoo.BertPretrainer(backbone, objective="none")
    assert len(pretrainer.head_weights_loaded) == 5
    inputs = _inputs(name)
    positions = np.tile(np.arange(inputs["token_ids"].shape[1], dtype="int32"), (3, 1))
    logits = _np(pretrainer({**inputs, "mask_positions": positions})["mlm"])
    _close(logits, REF[f"{name}/logits"])
    # The head goes back under RoBERTa's names, as transformers saved it.
    saved = read_safetensors(FIXTURES / name / "model.safetensors")
    heads = pretrainer.head_tensors()
    assert sorted(heads) == sorted(backbone.head_tensors)
    for key, value in heads.items():
        np.testing.assert_array_equal(value, saved[key], err_msg=key)


def test_task_heads_match_transformers():
    real = REF["sequence_classification/attention_mask"].astype(bool)
    classifier = bertzoo.BertClassifier.from_preset(FIXTURES / "sequence_classification")
    assert classifier.head_loaded and classifier.head_style == "roberta"
    assert classifier.num_classes == 3
    _close(
        _np(classifier(_inputs("sequence_classification"))),
        REF["sequence_classification/logits"],
    )

    tagger = bertzoo.BertTokenClassifier.from_preset(
        FIXTURES / "token_classification", num_labels=5
    )
    assert tagger.head_loaded
    _close(_np(tagger(_inputs("token_classification"))), REF["token_classification/logits"])

    qa = bertzoo.BertSpanQA.from_preset(FIXTURES / "question_answering")
    assert qa.head_loaded
    out = qa(_inputs("question_answering"))
    # bertzoo sets padding positions to -1e9; compare the real tokens.
    _close(_np(out["start_logits"]), REF["question_answering/start_logits"], real)
    _close(_np(out["end_logits"]), REF["question_answering/end_logits"], real)

    # A sequence-classification checkpoint is not a token classifier.
    other = bertzoo.BertTokenClassifier.from_preset(
        FIXTURES / "sequence_classification", num_labels=5
    )
    assert not other.head_loaded


def test_classifier_head_on_a_pooled_roberta_leaves_the_pooler_out():
    """RobertaModel has a pooler; RoBERTa's classification head reads the
    first token, so the pooler is frozen (and still saved)."""
    classifier = bertzoo.BertClassifier.from_preset(FIXTURES / "model", num_classes=2)
    assert classifier.head_style == "roberta"
    assert not classifier.backbone.get_layer("pooler_dense").trainable
    assert [layer.name for layer in classifier.head_layers()] == [
        "classifier_dense",
        "classifier_head",
    ]


@pytest.mark.parametrize("name", VARIANTS)
def test_export_is_what_transformers_saves(name, tmp_path):
    """save_hf writes, tensor for tensor, what transformers' save_pretrained
    wrote for the same model (the fixture's model.safetensors)."""
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / name)
    out = save_hf(backbone, tmp_path / name)
    ours = read_safetensors(out / "model.safetensors")
    theirs = read_safetensors(FIXTURES / name / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype, key
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    config = json.loads((out / "config.json").read_text())
    reference = json.loads((FIXTURES / name / "config.json").read_text())
    for key in (
        "model_type",
        "architectures",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "hidden_act",
        "layer_norm_eps",
    ):
        assert config[key] == reference[key], key
    if "id2label" in reference:
        assert len(config["id2label"]) == len(reference["id2label"])


def test_klue_wordpiece_with_roberta_special_tokens(tmp_path):
    """KLUE-RoBERTa: a BertTokenizer vocab.txt with [CLS] 0, [PAD] 1,
    [SEP] 2; bertzoo's WordPiece gives transformers' ids, the preprocessor
    pads with 1 and keeps every segment id 0 (one segment row), and the
    model runs end to end."""
    directory = FIXTURES / "klue_masked_lm"
    tokenizer = tokenizer_from_preset(directory)
    assert (tokenizer.cls_token_id, tokenizer.pad_token_id, tokenizer.sep_token_id) == (0, 1, 2)
    texts = json.loads(str(REF["klue/texts"]))
    expected = REF["klue/ids"]
    preprocessor = bertzoo.BertPreprocessor.from_preset(
        directory, sequence_length=expected.shape[1]
    )
    packed = {k: np.asarray(v) for k, v in preprocessor(texts).items()}
    np.testing.assert_array_equal(packed["token_ids"], expected)
    np.testing.assert_array_equal(packed["padding_mask"], (expected != 1).astype("int32"))
    assert not packed["segment_ids"].any()
    pairs = preprocessor((texts[:2], texts[2:4]))
    assert not np.asarray(pairs["segment_ids"]).any()
    # The default length is what the positions allow: 40 rows - 2 = 38.
    assert bertzoo.BertPreprocessor.from_preset(directory).sequence_length == 38
    backbone = bertzoo.BertBackbone.from_preset(directory)
    out = backbone(packed)
    assert np.isfinite(_np(out["sequence_output"])).all()
    again = save_hf(backbone, tmp_path / "klue", tokenizer=tokenizer)
    config = json.loads((again / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer"
    assert (again / "vocab.txt").read_text() == (directory / "vocab.txt").read_text()


def test_klue_classifier_fine_tunes_and_round_trips(tmp_path):
    """Texts -> KLUE preprocessor -> RoBERTa classification head: a step of
    training moves the loss, and the saved task preset gives the same
    logits."""
    directory = FIXTURES / "klue_masked_lm"
    texts = json.loads(str(REF["klue/texts"]))
    packed = bertzoo.BertPreprocessor.from_preset(directory, sequence_length=24)(texts)
    labels = np.arange(len(texts)) % 2
    classifier = bertzoo.BertClassifier.from_preset(directory, num_classes=2)
    assert classifier.head_style == "roberta" and not classifier.head_loaded
    classifier.compile(optimizer=keras.optimizers.Adam(1e-3))
    history = classifier.fit(packed, labels, epochs=5, batch_size=len(texts), verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    classifier.save_to_preset(tmp_path / "klue_classifier")
    again = bertzoo.BertClassifier.from_preset(tmp_path / "klue_classifier")
    assert again.head_style == "roberta" and again.head_loaded
    np.testing.assert_allclose(_np(again(packed)), _np(classifier(packed)), atol=1e-5)


# === Bad input ===


def _copy(name, tmp_path, **config_changes):
    directory = tmp_path / name
    shutil.copytree(FIXTURES / name, directory)
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(config_changes)
    path.write_text(json.dumps(config))
    return directory


@pytest.mark.backend_independent  # the config is refused before a model is built
def test_unknown_model_type_names_the_supported_families(tmp_path):
    directory = _copy("model", tmp_path, model_type="camembert")
    with pytest.raises(CheckpointError) as info:
        bertzoo.BertBackbone.from_preset(directory)
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith(
        "model_type 'camembert' is not supported. Supported: bert, albert, distilbert, "
        "electra, roberta, xlm-roberta, modernbert."
    )


def test_vocabulary_size_mismatch_is_one_line(tmp_path):
    directory = _copy("masked_lm", tmp_path, vocab_size=98)
    with pytest.raises(CheckpointError) as info:
        bertzoo.BertBackbone.from_preset(directory)
    message = str(info.value)
    assert "\n" not in message
    assert "embeddings.word_embeddings.weight" in message
    assert "(99, 16)" in message and "(98, 16)" in message


def test_roberta_tokenizer_is_recorded_by_kind():
    """RoBERTa's byte-level BPE is recorded by kind; a directory without its
    vocab.json is an error naming the file, not a WordPiece tokenizer with
    the wrong ids (tests/tokenizers/test_byte_bpe.py loads one that has it)."""
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / "masked_lm")
    assert backbone.preset_info["tokenizer"] == {"kind": "byte_level_bpe"}
    with pytest.raises(TokenizerError, match="has no vocab.json \\(byte_level_bpe tokenizer\\)"):
        tokenizer_from_preset(FIXTURES / "masked_lm")


def test_roberta_positions_cannot_be_written_as_bert(tmp_path):
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / "model")
    with pytest.raises(CheckpointError, match="position_padding_id=1 \\(bert numbers positions"):
        save_hf(backbone, tmp_path / "as_bert", model_type="bert")
    plain = bertzoo.BertBackbone(
        vocabulary_size=99, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    with pytest.raises(CheckpointError, match="position_padding_id=None"):
        save_hf(plain, tmp_path / "as_roberta", model_type="roberta")
    assert not (tmp_path / "as_bert").exists() and not (tmp_path / "as_roberta").exists()
