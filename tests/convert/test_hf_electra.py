"""Hugging Face ELECTRA checkpoints <-> bertzoo.

Fixtures: tests/fixtures/electra/, small random ELECTRA models saved by
transformers (discriminator with embedding_size 24 != hidden_size 32, a
narrower generator, a discriminator of equal widths, and the sequence /
token classification and QA models), reference.npz with transformers'
outputs on them and saved_tensors.npz with what transformers'
`save_pretrained` wrote; all made by tests/fixtures/make_electra_reference.py.
Bar: max abs error <= 1e-5 at real tokens (measured: <= 2e-6).
"""

import json
from pathlib import Path

import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.convert import CheckpointError, read_safetensors, save_hf
from bertzoo.models.electra import ElectraPretrainer
from tests.models.test_backbone import REFERENCE_PARAMS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "electra"
REF = np.load(FIXTURES / "reference.npz")
SAVED = np.load(FIXTURES / "saved_tensors.npz")
INFO = json.loads(str(REF["info"]))
TOLERANCE = 1e-5
VARIANTS = (
    "discriminator",
    "generator",
    "discriminator_same_width",
    "sequence_classification",
    "token_classification",
    "question_answering",
)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


INPUTS = {
    "token_ids": REF["input_ids"].astype("int32"),
    "segment_ids": REF["token_type_ids"].astype("int32"),
    "padding_mask": REF["attention_mask"].astype("int32"),
}
REAL = REF["attention_mask"].astype(bool)


def _close(ours, reference):
    """Max abs error at real tokens (per-token outputs) or overall."""
    ours, reference = np.asarray(ours), np.asarray(reference)
    if ours.shape[:2] == REAL.shape:
        ours, reference = ours[REAL], reference[REAL]
    error = float(np.abs(ours - reference).max())
    assert error <= TOLERANCE, error
    return error


@pytest.mark.backend_independent
def test_preset_counts_are_transformers_counts():
    """The presets' exact counts (checked by building them in
    tests/models/test_backbone.py) are those of transformers' ElectraModel
    built from the same configs."""
    counts = INFO["released_param_counts"]
    for size in ("small", "base", "large"):
        for name in (f"electra_{size}", f"electra_{size}_generator"):
            assert REFERENCE_PARAMS[name] == counts[name]["electra_model"], name
            assert bertzoo.BertBackbone.presets[name]["params"] == counts[name]["electra_model"]


@pytest.mark.parametrize("name", VARIANTS)
def test_backbone_hidden_states_match_transformers(name):
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / name)
    info = INFO["variants"][name]
    assert backbone.count_params() == info["base_params"]
    assert not backbone.use_pooler
    assert backbone.preset_info["metadata"]["model_type"] == "electra"
    features = backbone.feature_model()(INPUTS)
    _close(_np(features["sequence_output"]), REF[f"{name}/last_hidden_state"])
    for layer, hidden in enumerate(features["hidden_states"]):
        _close(_np(hidden), REF[f"{name}/hidden_states"][layer])
    assert sorted(backbone.head_tensors) == sorted(info["head_tensors"])


def test_discriminator_and_generator_heads_match_transformers():
    model = ElectraPretrainer.from_preset(
        FIXTURES / "discriminator", generator=FIXTURES / "generator"
    )
    assert len(model.head_weights_loaded) == 9
    _close(_np(model.discriminator_logits(INPUTS)), REF["discriminator/logits"])
    # The generator alone (ElectraForMaskedLM, with its own embeddings) is a
    # masked-LM model: BertPretrainer reads its head.
    generator = bertzoo.BertBackbone.from_preset(FIXTURES / "generator")
    pretrainer = bertzoo.BertPretrainer(generator, objective="none")
    assert len(pretrainer.head_weights_loaded) == 5
    positions = np.tile(np.arange(REAL.shape[1], dtype="int32"), (REAL.shape[0], 1))
    logits = _np(pretrainer({**INPUTS, "mask_positions": positions})["mlm"])
    _close(logits, REF["generator/logits"])


def test_task_heads_match_transformers():
    classifier = bertzoo.BertClassifier.from_preset(FIXTURES / "sequence_classification")
    assert classifier.head_loaded and classifier.head_style == "electra"
    assert classifier.num_classes == 3
    _close(_np(classifier(INPUTS)), REF["sequence_classification/logits"])

    tagger = bertzoo.BertTokenClassifier.from_preset(
        FIXTURES / "token_classification", num_labels=5
    )
    assert tagger.head_loaded
    _close(_np(tagger(INPUTS)), REF["token_classification/logits"])

    qa = bertzoo.BertSpanQA.from_preset(FIXTURES / "question_answering")
    assert qa.head_loaded
    out = qa(INPUTS)
    _close(_np(out["start_logits"]), REF["question_answering/start_logits"])
    _close(_np(out["end_logits"]), REF["question_answering/end_logits"])

    # A sequence-classification checkpoint is not a token classifier.
    other = bertzoo.BertTokenClassifier.from_preset(
        FIXTURES / "sequence_classification", num_labels=5
    )
    assert not other.head_loaded


@pytest.mark.parametrize("name", ["discriminator", "generator"])
def test_export_is_what_transformers_saves(name, tmp_path):
    """save_hf writes the tensors transformers' own save_pretrained wrote for
    the same model: the same names, shapes and values (re-checked on every
    run, without torch)."""
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / name)
    tokenizer = bertzoo.BertTokenizer.from_preset(FIXTURES / name)
    out = save_hf(backbone, tmp_path / name, tokenizer=tokenizer)
    ours = read_safetensors(out / "model.safetensors")
    prefix = f"saved/{name}/"
    theirs = {k[len(prefix) :]: SAVED[k] for k in SAVED.files if k.startswith(prefix)}
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours[key].shape == value.shape, key
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    config = json.loads((out / "config.json").read_text())
    reference = json.loads((FIXTURES / name / "config.json").read_text())
    assert config["model_type"] == "electra"
    assert config["architectures"] == reference["architectures"]
    for key in (
        "embedding_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "type_vocab_size",
        "hidden_act",
        "layer_norm_eps",
    ):
        assert config[key] == reference[key], key
    # ... and it loads back as the same model.
    again = bertzoo.BertBackbone.from_preset(out)
    _close(_np(again(INPUTS)["sequence_output"]), REF[f"{name}/last_hidden_state"])


def test_electra_export_needs_an_electra_shape(tmp_path):
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / "discriminator")
    with pytest.raises(
        CheckpointError, match="cannot be written as Hugging Face model_type 'bert'"
    ):
        save_hf(backbone, tmp_path / "as_bert", model_type="bert")
    pooled = bertzoo.BertBackbone(
        vocabulary_size=99, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    with pytest.raises(CheckpointError, match="use_pooler=True"):
        save_hf(pooled, tmp_path / "pooled", model_type="electra")
    assert not (tmp_path / "as_bert").exists() and not (tmp_path / "pooled").exists()
