"""Hugging Face ModernBERT checkpoints <-> bertzoo.

Fixtures: tests/fixtures/modernbert/, small random models saved by
transformers 5 (ModernBertModel, the MaskedLM, SequenceClassification,
TokenClassification and QuestionAnswering models) with local and global
layers, windows of 8 and 11 tokens and sequences of 40, and reference.npz
with transformers' outputs (eager attention) on inputs padded after the real
tokens; made by tests/fixtures/make_modernbert_fixtures.py. The masked-LM
checkpoint's config.json is in the released checkpoints' layout
(global_attn_every_n_layers, global_rope_theta, local_rope_theta), the
others in transformers 5's (layer_types, rope_parameters).
Bar: max abs error <= 1e-5 at every position, padding included (measured
on CPU: about 3e-6).
"""

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.convert import (
    CheckpointError,
    hf_to_preset,
    read_safetensors,
    save_hf,
    write_safetensors,
)
from bertzoo.planner import Architecture
from tests.models.test_backbone import REFERENCE_PARAMS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "modernbert"
REF = np.load(FIXTURES / "reference.npz")
INFO = json.loads(str(REF["info"]))
TOLERANCE = 1e-5
VARIANTS = tuple(INFO["variants"])
# name -> (global_attention_every, local_attention_window, rope_theta,
# local_rope_theta), as the generator set them.
PATTERNS = {
    "masked_lm": (2, 11, 500.0, 50.0),
    **{name: (3, 8, 160000.0, 10000.0) for name in VARIANTS if name != "masked_lm"},
}
HEADS = {
    "model": [],
    "masked_lm": ["decoder.bias", "head.dense.weight", "head.norm.weight"],
    **{
        name: ["classifier.bias", "classifier.weight", "head.dense.weight", "head.norm.weight"]
        for name in ("sequence_classification", "token_classification", "question_answering")
    },
}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


@functools.cache
def _backbone(name):
    """Each fixture loaded once per test session (the tests only read
    them)."""
    return bertzoo.BertBackbone.from_preset(FIXTURES / name)


def _inputs(name):
    return {"token_ids": REF[f"{name}/input_ids"], "padding_mask": REF[f"{name}/attention_mask"]}


def _close(ours, reference):
    error = float(np.abs(np.asarray(ours) - np.asarray(reference)).max())
    assert error <= TOLERANCE, error
    return error


# tests/models/test_backbone.py's counts of the ModernBERT-architecture
# presets: the generator's ModernBertModel counts must be these.
RELEASED_COUNTS = {
    name: count
    for name, count in REFERENCE_PARAMS.items()
    if name.startswith(("modernbert_", "ettin_encoder_"))
}


@pytest.mark.backend_independent
def test_preset_counts_are_transformers_counts():
    """ModernBERT's and Ettin's presets: the presets' counts, the planner's
    count from the config (equal to count_params() of a built backbone, in
    test_backbone_matches_transformers below and tests/test_planner.py), and
    transformers' ModernBertModel built from the released configs."""
    counts = INFO["released_param_counts"]
    assert counts == RELEASED_COUNTS and len(counts) == 8
    for name, count in counts.items():
        assert bertzoo.BertBackbone.presets[name]["params"] == count, name
        assert Architecture.of(name).backbone_params() == count, name


@pytest.mark.backend_independent
def test_ettin_presets_are_modernbert_with_one_rope_base():
    """The Ettin presets differ from ModernBERT's only where their configs
    say: sizes, 7,999 tokens and RoPE base 160,000 in the local layers too;
    the same tokenizer settings and switches, and the metadata names where
    each value was read."""
    files = bertzoo.presets.builtin_presets()
    base = bertzoo.presets.read_preset_file(files["modernbert_base"])
    for name in (n for n in RELEASED_COUNTS if n.startswith("ettin")):
        preset = bertzoo.presets.read_preset_file(files[name])
        sizes = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")
        changed = {k for k in base["backbone"] if preset["backbone"][k] != base["backbone"][k]}
        assert changed <= {*sizes, "max_sequence_length", "local_rope_theta"}, (name, changed)
        assert preset["backbone"]["max_sequence_length"] == 7999, name
        assert preset["backbone"]["local_rope_theta"] == preset["backbone"]["rope_theta"] == 160000
        assert preset["tokenizer"] == base["tokenizer"], name
        metadata = preset["metadata"]
        assert metadata["source_checkpoint"] == "jhu-clsp/" + name.replace("_", "-", 2)
        assert "ettin-encoder-vs-decoder" in metadata["config_source"], name


@pytest.mark.parametrize("name", VARIANTS)
def test_backbone_matches_transformers(name):
    """Every variant loads with transformers' count and settings, and its
    task heads kept for the task models and save_hf; every layer's hidden
    states of the two configurations match at every position."""
    backbone = _backbone(name)
    assert backbone.count_params() == INFO["variants"][name]["base_params"]
    assert Architecture.of(backbone).backbone_params() == backbone.count_params()
    settings = (
        backbone.global_attention_every,
        backbone.local_attention_window,
        backbone.rope_theta,
        backbone.local_rope_theta,
    )
    assert settings == PATTERNS[name]
    assert (backbone.num_segments, backbone.use_pooler, backbone.use_bias) == (0, False, False)
    assert backbone.preset_info["metadata"]["model_type"] == "modernbert"
    assert sorted(backbone.head_tensors) == HEADS[name]
    if name not in ("model", "masked_lm"):
        # The configuration of "model" with other weights: their outputs
        # are checked through the task models (test_task_heads_match_...),
        # on the backbone's own (fused) attention path, as the masked-LM
        # logits check it on the other configuration.
        return
    # The explicit path (every layer), compiled once: faster than op by op
    # under JAX.
    features = backbone.feature_model().predict_on_batch(_inputs(name))
    assert len(features["hidden_states"]) == backbone.num_layers + 1
    for layer, hidden in enumerate(features["hidden_states"]):
        _close(_np(hidden), REF[f"{name}/hidden_states"][layer])
    _close(_np(features["sequence_output"]), REF[f"{name}/last_hidden_state"])


@pytest.mark.parametrize("name", ["model", "masked_lm"])
def test_blocked_local_attention_matches_transformers(name, monkeypatch):
    """The local layers in blocks (forced: the fixtures' 40 tokens are below
    the length where "auto" picks them), windows of 8 and 11: transformers'
    outputs at every position, padding included, at the same bar."""
    from bertzoo.layers import BertSelfAttention, attention

    calls = []
    blocked = attention.blocked_sliding_window_attention
    monkeypatch.setattr(
        attention,
        "blocked_sliding_window_attention",
        lambda *args: calls.append(1) or blocked(*args),
    )
    backbone = bertzoo.BertBackbone.from_preset(FIXTURES / name)  # its own: changed below
    for layer in backbone._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, BertSelfAttention):
            layer.local_attention_path = "blocked"
    output = backbone.predict_on_batch(_inputs(name))["sequence_output"]
    _close(_np(output), REF[f"{name}/last_hidden_state"])
    assert calls, "no layer ran in blocks"


def test_masked_lm_logits_match_transformers():
    backbone = _backbone("masked_lm")
    pretrainer = bertzoo.BertPretrainer(backbone, objective="none")
    assert pretrainer.head_weights_loaded == tuple(HEADS["masked_lm"])
    assert pretrainer.mlm_head.dense.bias is None and pretrainer.mlm_head.layer_norm.beta is None
    inputs = _inputs("masked_lm")
    positions = np.tile(np.arange(inputs["token_ids"].shape[1], dtype="int32"), (3, 1))
    batch = {**inputs, "segment_ids": np.zeros_like(positions), "mask_positions": positions}
    _close(_np(pretrainer.predict_on_batch(batch)["mlm"]), REF["masked_lm/logits"])
    # The head goes back under ModernBERT's names, as transformers saved it.
    saved = read_safetensors(FIXTURES / "masked_lm" / "model.safetensors")
    heads = pretrainer.head_tensors()
    assert sorted(heads) == HEADS["masked_lm"]
    for key, value in heads.items():
        np.testing.assert_array_equal(value, saved[key], err_msg=key)
    with pytest.raises(ValueError, match="modernbert is pre-trained with masked LM only"):
        bertzoo.BertPretrainer(backbone, objective="nsp")


def test_a_classifier_head_is_not_a_masked_lm_head():
    """ModernBERT's task models call their transform "head." too: a
    pretrainer on a sequence classifier's backbone starts a new MLM head
    instead of loading the classifier's transform (or failing on it)."""
    backbone = _backbone("sequence_classification")
    assert bertzoo.BertPretrainer(backbone, objective="none").head_weights_loaded == ()


@pytest.mark.backend_independent  # a file format: the same variables under any backend
@pytest.mark.parametrize("name", VARIANTS)
def test_export_is_what_transformers_saves(name, tmp_path):
    """save_hf writes, tensor for tensor, what transformers' save_pretrained
    wrote for the same model (the fixture's model.safetensors; the fused
    Wqkv joined back), and a config transformers reads as the original
    (the generator checks that transformers reproduces the outputs)."""
    backbone = _backbone(name)
    out = save_hf(backbone, tmp_path / name)
    ours = read_safetensors(out / "model.safetensors")
    theirs = read_safetensors(FIXTURES / name / "model.safetensors")
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype, key
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    config = json.loads((out / "config.json").read_text())
    reference = json.loads((FIXTURES / name / "config.json").read_text())
    keys = [
        "model_type",
        "architectures",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "local_attention",
        "norm_eps",
        "hidden_activation",
        "norm_bias",
        "attention_bias",
        "mlp_bias",
        "pad_token_id",
        "cls_token_id",
        "sep_token_id",
        "classifier_pooling",
    ]
    if name == "masked_lm":  # the released layout
        keys += ["global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"]
    else:  # transformers 5's
        keys += ["layer_types", "rope_parameters"]
    for key in keys:
        assert config[key] == reference[key], key
    if "id2label" in reference:
        assert len(config["id2label"]) == len(reference["id2label"])


def test_bertzoo_preset_round_trip(tmp_path):
    """A ModernBERT backbone saved as a bertzoo preset loads back with the
    same outputs, its heads and what save_hf needs to write the original
    checkpoint again."""
    backbone = _backbone("masked_lm")
    backbone.save_to_preset(tmp_path / "preset")
    again = bertzoo.BertBackbone.from_preset(tmp_path / "preset")
    assert {**again.get_config(), "name": ""} == {**backbone.get_config(), "name": ""}
    assert sorted(again.head_tensors) == HEADS["masked_lm"]
    # The same weights in the same places (the same config then computes the
    # same outputs, which test_backbone_matches_transformers checks).
    assert [w.path for w in again.weights] == [w.path for w in backbone.weights]
    for ours, theirs in zip(again.weights, backbone.weights):
        np.testing.assert_array_equal(_np(ours), _np(theirs), err_msg=ours.path)
    out = save_hf(again, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForMaskedLM"]
    assert (config["pad_token_id"], config["cls_token_id"], config["sep_token_id"]) == (3, 1, 2)


# === Bad input ===


def _copy(name, tmp_path, drop=(), **config_changes):
    directory = tmp_path / name
    shutil.copytree(FIXTURES / name, directory)
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(config_changes)
    for key in drop:
        del config[key]
    path.write_text(json.dumps(config))
    return directory


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {
                "layer_types": [
                    "full_attention",
                    "sliding_attention",
                    "full_attention",
                    "full_attention",
                ]
            },
            "layer_types .* is not supported: bertzoo attends globally in layer 0 and every "
            "n-th layer after it",
        ),
        (
            {"layer_types": ["full_attention"] * 3},
            "layer_types lists 3 layers, num_hidden_layers is 4",
        ),
        (
            {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0}}},
            "rope_parameters.full_attention.rope_type 'linear' is not supported",
        ),
        ({"mlp_bias": True}, "mlp_bias=True.* bertzoo's use_bias sets them all"),
        ({"classifier_activation": "silu"}, "classifier_activation 'silu' is not supported"),
    ],
)
def test_unsupported_configs_are_one_line_errors(tmp_path, changes, message):
    directory = _copy("model", tmp_path, **changes)
    with pytest.raises(CheckpointError, match=message) as info:
        bertzoo.BertBackbone.from_preset(directory)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(str(directory / "config.json"))


@pytest.mark.backend_independent
def test_config_without_layer_types_uses_the_released_default(tmp_path):
    """No layer_types and no global_attn_every_n_layers: transformers'
    default, global attention every 3rd layer."""
    directory = _copy("masked_lm", tmp_path, drop=["global_attn_every_n_layers"])
    document = hf_to_preset(directory)
    assert document["backbone"]["global_attention_every"] == 3
    assert document["backbone"]["local_attention_window"] == 11
    everywhere = _copy("model", tmp_path / "all", layer_types=["full_attention"] * 4)
    document = hf_to_preset(everywhere)
    assert document["backbone"]["global_attention_every"] == 1
    assert document["backbone"]["local_attention_window"] is None


@pytest.mark.backend_independent
def test_a_missing_attention_tensor_is_named(tmp_path):
    directory = _copy("model", tmp_path)
    path = directory / "model.safetensors"
    tensors = read_safetensors(path)
    del tensors["layers.2.attn.Wqkv.weight"]
    write_safetensors(path, tensors)
    with pytest.raises(CheckpointError, match="missing tensors: layers.2.attn.Wqkv.key.weight"):
        bertzoo.BertBackbone.from_preset(directory)


@pytest.mark.backend_independent
def test_modernbert_and_bert_styles_cannot_be_written_as_each_other(tmp_path):
    backbone = _backbone("model")
    with pytest.raises(CheckpointError, match="norm_first=True \\(bert needs False\\)"):
        save_hf(backbone, tmp_path / "as_bert", model_type="bert")
    plain = bertzoo.BertBackbone(
        vocabulary_size=99, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    with pytest.raises(CheckpointError, match="rope_theta=None \\(modernbert has rotary"):
        save_hf(plain, tmp_path / "as_modernbert", model_type="modernbert")
    assert not (tmp_path / "as_bert").exists() and not (tmp_path / "as_modernbert").exists()


def test_task_heads_match_transformers():
    """ModernBERT's task models: its transform (Dense -> GELU -> LayerNorm,
    no biases) then the classifier; the sequence classifier on the mean of
    the real tokens, as the checkpoint's classifier_pooling says."""
    real = REF["question_answering/attention_mask"].astype(bool)
    classifier = bertzoo.BertClassifier.from_preset(FIXTURES / "sequence_classification")
    assert classifier.head_loaded and classifier.head_style == "modernbert_mean"
    assert classifier.num_classes == 3
    _close(
        _np(classifier.predict_on_batch(_inputs("sequence_classification"))),
        REF["sequence_classification/logits"],
    )

    tagger = bertzoo.BertTokenClassifier.from_preset(
        FIXTURES / "token_classification", num_labels=5
    )
    assert tagger.head_loaded
    assert [layer.name for layer in tagger.head_layers()] == [
        "tagger_transform_dense",
        "tagger_transform_norm",
        "tagger_head",
    ]
    logits = tagger.predict_on_batch(_inputs("token_classification"))
    _close(_np(logits), REF["token_classification/logits"])

    qa = bertzoo.BertSpanQA.from_preset(FIXTURES / "question_answering")
    assert qa.head_loaded
    out = qa.predict_on_batch(_inputs("question_answering"))
    # bertzoo sets padding positions to -1e9; compare the real tokens.
    _close(_np(out["start_logits"])[real], REF["question_answering/start_logits"][real])
    _close(_np(out["end_logits"])[real], REF["question_answering/end_logits"][real])

    # A new classifier on the bare model: ModernBERT's head on the first
    # token, from the initialiser.
    fresh = bertzoo.BertClassifier.from_preset(FIXTURES / "model", num_classes=2)
    assert fresh.head_style == "modernbert" and not fresh.head_loaded


@pytest.mark.backend_independent  # a config check before anything is built
@pytest.mark.parametrize("window", [10**9, float("nan"), 65])
def test_a_hostile_local_attention_window_is_refused_before_building(tmp_path, window):
    """`local_attention` of 1e9 built a band that wide (over 6 GiB): a
    window wider than the positions (64 here), or not an integer, is one
    line naming it, before any layer is built."""
    directory = tmp_path / "model"
    shutil.copytree(FIXTURES / "model", directory)
    config = json.loads((directory / "config.json").read_text())
    config["local_attention"] = window
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(bertzoo.PresetError) as error:
        bertzoo.BertBackbone.from_preset(directory)
    message = str(error.value)
    assert "\n" not in message and "local_attention" in message, message
