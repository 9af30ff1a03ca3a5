import json

import keras
import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo import BertBackbone
from bertzoo.layers.common import group_of_layer
from bertzoo.planner import Architecture
from tests.conftest import BATCH, SEQ, TINY, edited_by_hand, make_inputs, tiny_backbone

REFERENCE_PARAMS = {  # shared/REFERENCE.md, exact counts from the released configs
    "bert_tiny": 4_385_920,
    "bert_mini": 11_170_560,
    "bert_small": 28_763_648,
    "bert_medium": 41_373_184,
    "bert_base": 109_482_240,
    "bert_large": 335_141_888,
    "bert_base_cased": 108_310_272,
    # Not in the reference table: bert_large with V=28996, by the table's formula.
    "bert_large_cased": 335_141_888 - (30522 - 28996) * 1024,
    "albert_base": 11_683_584,
    "albert_large": 17_683_968,
    "albert_xlarge": 58_724_864,
    "albert_xxlarge": 222_595_584,
    "distilbert_base": 66_362_880,
    "tinybert_4l_312d": 14_350_248,
    "tinybert_6l_768d": 66_955_008,
    # transformers' ElectraModel built from the released configs (counted by
    # tests/fixtures/make_electra_reference.py; checked against the fixture
    # in tests/convert/test_hf_electra.py).
    "electra_small": 13_483_008,
    "electra_base": 108_891_648,
    "electra_large": 334_092_288,
    "electra_small_generator": 13_483_008,
    "electra_base_generator": 33_511_168,
    "electra_large_generator": 50_999_552,
    # transformers' RobertaModel / XLMRobertaModel (with the pooler) built
    # from the released configs (counted by
    # tests/fixtures/make_roberta_fixtures.py; checked against the fixture in
    # tests/convert/test_hf_roberta.py).
    "roberta_base": 124_645_632,
    "roberta_large": 355_359_744,
    "xlm_roberta_base": 278_043_648,
    "xlm_roberta_large": 559_890_432,
    "klue_roberta_small": 68_090_880,
    "klue_roberta_base": 110_618_112,
    "klue_roberta_large": 336_656_384,
    # transformers' ModernBertModel built from the released configs (counted
    # by tests/fixtures/make_modernbert_fixtures.py; checked against the
    # fixture in tests/convert/test_hf_modernbert.py). Both are above the
    # size built below: the small ModernBERT configs of that fixture are
    # built there and counted against transformers' own counts.
    "modernbert_base": 149_014_272,
    "modernbert_large": 394_781_696,
    # The Ettin encoders (jhu-clsp/ettin-encoder-*): ModernBertModel built
    # from their configs, counted by the same generator. They are also the
    # n_parameters MTEB lists for cross-encoder/ettin-reranker-*-v1,
    # fine-tuned from them (embeddings-benchmark/mteb,
    # mteb/models/model_implementations/ettin_models.py): an independent
    # check of the sizes, vocabulary and absent biases.
    "ettin_encoder_17m": 16_797_440,
    "ettin_encoder_32m": 31_883_136,
    "ettin_encoder_68m": 68_144_640,
    "ettin_encoder_150m": 149_014_272,
    "ettin_encoder_400m": 394_781_696,
    "ettin_encoder_1b": 1_028_050_688,
}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


@pytest.mark.backend_independent
def test_preset_list_is_the_issue_list():
    assert sorted(BertBackbone.presets) == sorted(REFERENCE_PARAMS)


@pytest.mark.slow
@pytest.mark.backend_independent  # counting and configs are Keras code, not backend ops
def test_every_preset_exact_params_and_config_round_trip(fast_init):
    for name, expected in REFERENCE_PARAMS.items():
        assert BertBackbone.presets[name]["params"] == expected, name
        # bertzoo.plan's count, from the config alone (tests/test_planner.py
        # checks it against built models with factorised embeddings, shared
        # layers, no segments and no pooler).
        assert Architecture.of(name).backbone_params() == expected, name
        if expected > 120_000_000:
            # The 200M+ presets (BERT/ELECTRA-large, ALBERT-xxlarge) differ
            # from the ones built here in sizes only; building them costs a
            # minute of CI for no other check.
            continue
        backbone = BertBackbone.from_preset(name)
        assert backbone.count_params() == expected, name
        config = backbone.get_config()
        rebuilt = json.loads(json.dumps(config))
        if expected < 20_000_000:  # the same from_config path for every size
            clone = BertBackbone.from_config(rebuilt)
            assert clone.get_config() == config, name
            assert clone.count_params() == expected, name
            del clone
        else:
            assert rebuilt == config, name
        del backbone
        keras.backend.clear_session()


def test_outputs_and_shapes():
    backbone = tiny_backbone()
    out = backbone(make_inputs())
    assert set(out) == {"sequence_output", "pooled_output"}
    assert tuple(out["sequence_output"].shape) == (BATCH, SEQ, 10)
    assert tuple(out["pooled_output"].shape) == (BATCH, 10)
    # The pooler is tanh(Dense(first token)).
    pooler = backbone.pooler_dense
    expected = np.tanh(_np(out["sequence_output"])[:, 0] @ _np(pooler.kernel) + _np(pooler.bias))
    np.testing.assert_allclose(_np(out["pooled_output"]), expected, atol=1e-5)


def test_distilbert_shape_has_no_segments_and_no_pooler():
    backbone = tiny_backbone(num_segments=0, use_pooler=False)
    assert sorted(i.name for i in backbone.inputs) == ["padding_mask", "token_ids"]
    out = backbone(make_inputs(num_segments=0))
    assert set(out) == {"sequence_output"}
    assert backbone.embeddings_layer.segment_embedding is None


def test_feature_model_hidden_states_and_scores_share_weights():
    backbone = tiny_backbone()
    features = backbone.feature_model()
    assert features.count_params() == backbone.count_params()
    inputs = make_inputs()
    out = features(inputs)
    hidden, scores = out["hidden_states"], out["attention_scores"]
    assert len(hidden) == TINY["num_layers"] + 1
    assert len(scores) == TINY["num_layers"]
    assert all(tuple(h.shape) == (BATCH, SEQ, 10) for h in hidden)
    assert all(tuple(s.shape) == (BATCH, 2, SEQ, SEQ) for s in scores)
    np.testing.assert_allclose(_np(hidden[-1]), _np(backbone(inputs)["sequence_output"]), atol=1e-5)
    # Same variables, not copies: a change to the backbone shows in features.
    kernel = backbone.pooler_dense.kernel
    kernel.assign(kernel * 2.0)
    np.testing.assert_allclose(
        _np(features(inputs)["pooled_output"]), _np(backbone(inputs)["pooled_output"]), atol=1e-5
    )


def test_feature_scores_masked_softmax_are_the_probabilities_used():
    backbone = tiny_backbone(num_layers=2)
    inputs = make_inputs(lengths=[7, 5, 3])
    out = backbone.feature_model()(inputs)
    block = backbone.transformer_layers[1]
    x = _np(out["hidden_states"][1])
    mask = inputs["padding_mask"].astype(bool)
    logits = np.where(mask[:, None, None, :], _np(out["attention_scores"][1]), -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    attn = block.self_attention
    v = (x @ _np(attn.value.kernel) + _np(attn.value.bias)).reshape(BATCH, SEQ, 2, 5)
    context = np.einsum("bnts,bsnh->btnh", probs, v).reshape(BATCH, SEQ, 10)
    expected = context @ _np(attn.attention_output.kernel) + _np(attn.attention_output.bias)
    used = _np(attn(x, inputs["padding_mask"]))  # the fused path the backbone takes
    np.testing.assert_allclose(used, expected, atol=1e-5)


def test_roberta_shape_one_segment_and_positions_past_the_padding_id():
    """RoBERTa is configuration: one segment row and padding-aware positions.
    A padded sequence gives its real tokens the outputs of the same tokens
    without padding."""
    backbone = tiny_backbone(num_segments=1, position_padding_id=1, max_sequence_length=12)
    assert backbone.embeddings_layer.segment_embedding.input_dim == 1
    inputs = make_inputs(num_segments=1, lengths=[7, 5, 3])
    real = inputs["padding_mask"].astype(bool)
    inputs["token_ids"] = np.where(real, np.maximum(inputs["token_ids"], 2), 1).astype("int32")
    inputs["segment_ids"] = np.zeros_like(inputs["token_ids"])
    out = _np(backbone(inputs)["sequence_output"])
    alone = backbone(
        {
            "token_ids": inputs["token_ids"][2:, :3],
            "segment_ids": np.zeros((1, 3), "int32"),
            "padding_mask": np.ones((1, 3), "int32"),
        }
    )
    np.testing.assert_allclose(_np(alone["sequence_output"])[0], out[2, :3], atol=1e-5)
    config = json.loads(json.dumps(backbone.get_config()))
    assert config["position_padding_id"] == 1
    assert BertBackbone.from_config(config).embeddings_layer.max_input_length == 10
    with pytest.raises(ValueError, match="position_padding_id=11 leaves no position"):
        tiny_backbone(position_padding_id=11, max_sequence_length=12)
    with pytest.raises(ValueError, match="position_padding_id must be an integer >= 0"):
        tiny_backbone(position_padding_id=-1)


def test_real_token_outputs_do_not_change_with_more_padding():
    backbone = tiny_backbone()
    inputs = make_inputs(seq=SEQ, lengths=[7, 5, 3])
    longer = {k: np.pad(v, ((0, 0), (0, 6))) for k, v in inputs.items()}
    longer["token_ids"][:, SEQ:] = 0
    short = backbone(inputs)
    long = backbone(longer)
    mask = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(
        _np(long["sequence_output"])[:, :SEQ][mask], _np(short["sequence_output"])[mask], atol=1e-5
    )
    np.testing.assert_allclose(_np(long["pooled_output"]), _np(short["pooled_output"]), atol=1e-5)


def test_albert_sharing_and_grouping():
    albert = tiny_backbone(embedding_dim=6, num_groups=1)
    deeper = tiny_backbone(embedding_dim=6, num_groups=1, num_layers=9)
    assert albert.count_params() == deeper.count_params()
    assert len(albert.transformer_layers) == 1
    # With num_groups == num_layers the model is exactly plain BERT.
    plain = tiny_backbone()
    full = tiny_backbone(num_groups=TINY["num_layers"])
    assert [tuple(w.shape) for w in plain.weights] == [tuple(w.shape) for w in full.weights]
    assert [w.path for w in plain.weights] == [w.path for w in full.weights]
    # The reference layer -> group map: int(i / L * G).
    assert [group_of_layer(i, 6, 4) for i in range(6)] == [0, 0, 1, 2, 2, 3]
    assert [group_of_layer(i, 12, 1) for i in range(12)] == [0] * 12
    # The graph applies the groups in that order.
    grouped = tiny_backbone(num_layers=6, num_groups=4)
    inputs = make_inputs()
    x = grouped.embeddings_layer(inputs["token_ids"], inputs["segment_ids"])
    for i in range(6):
        x = grouped.transformer_layers[group_of_layer(i, 6, 4)](x, inputs["padding_mask"])
    np.testing.assert_allclose(_np(grouped(inputs)["sequence_output"]), _np(x), atol=1e-5)


def test_factorised_embedding_params():
    b = tiny_backbone(embedding_dim=6)
    v, e, h, p = 61, 6, 10, 32
    embeddings = v * e + p * e + 2 * e + 2 * e + (e * h + h)
    layer = 4 * h * h + 2 * h * 26 + 9 * h + 26
    assert b.count_params() == embeddings + 4 * layer + h * h + h


def test_reference_initializer():
    b = BertBackbone(
        vocabulary_size=4000, num_layers=1, num_heads=2, hidden_dim=64, intermediate_dim=96
    )
    table = _np(b.token_embedding.embeddings)
    # Truncated at 2 stddev: |w| <= 0.04 and std = 0.02 * 0.8796.
    assert np.abs(table).max() <= 0.04 + 1e-7
    assert abs(table.std() - 0.02 * 0.8796) < 0.0005
    assert np.all(_np(b.transformer_layers[0].output_dense.bias) == 0)
    assert np.all(_np(b.transformer_layers[0].output_layer_norm.gamma) == 1)


def test_mixed_bfloat16_runs_and_tracks_float32():
    inputs = make_inputs()
    f32 = tiny_backbone()
    bf16 = tiny_backbone(dtype="mixed_bfloat16")
    bf16.set_weights(f32.get_weights())
    out = bf16(inputs)
    assert keras.backend.standardize_dtype(out["sequence_output"].dtype) == "bfloat16"
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in bf16.weights)
    np.testing.assert_allclose(
        _np(out["sequence_output"]), _np(f32(inputs)["sequence_output"]), atol=0.1
    )
    scores = bf16.feature_model()(inputs)["attention_scores"][0]
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"


def test_dropout_trains_stochastically():
    b = tiny_backbone(dropout=0.3)
    inputs = make_inputs()
    a = _np(b(inputs, training=False)["sequence_output"])
    np.testing.assert_allclose(a, _np(b(inputs, training=False)["sequence_output"]))
    assert not np.allclose(a, _np(b(inputs, training=True)["sequence_output"]))


def test_keras_file_round_trip(tmp_path):
    b = tiny_backbone(embedding_dim=6, num_groups=2, activation="gelu")
    inputs = make_inputs()
    path = tmp_path / "model.keras"
    b.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertBackbone)
    assert restored.get_config() == b.get_config()
    np.testing.assert_array_equal(
        _np(restored(inputs)["sequence_output"]), _np(b(inputs)["sequence_output"])
    )


def test_save_to_preset_round_trip(tmp_path):
    b = BertBackbone.from_preset("bert_tiny", dropout=0.0)
    inputs = make_inputs(vocab=30522)
    b.save_to_preset(tmp_path / "mine")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == [
        "bertzoo-manifest.json",
        "config.json",
        "model.weights.h5",
    ]
    restored = BertBackbone.from_preset(str(tmp_path / "mine"))
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(_np(restored(inputs)[key]), _np(b(inputs)[key]))
    saved = json.loads((tmp_path / "mine" / "config.json").read_text())
    assert saved["tokenizer"] == {"kind": "wordpiece", "lowercase": True, "strip_accents": True}
    assert saved["metadata"]["params"] == 4_385_920
    # Architecture only.
    fresh = BertBackbone.from_preset(tmp_path / "mine", load_weights=False)
    assert not np.allclose(_np(fresh(inputs)["sequence_output"]), _np(b(inputs)["sequence_output"]))


def test_save_to_preset_leaves_no_temporary_files_and_overwrites(tmp_path):
    a = tiny_backbone()
    a.save_to_preset(tmp_path)
    b = tiny_backbone()
    b.save_to_preset(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bertzoo-manifest.json",
        "config.json",
        "model.weights.h5",
    ]
    # The staging folders beside it are gone too.
    assert not [p for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.")]
    restored = BertBackbone.from_preset(tmp_path)
    inputs = make_inputs()
    np.testing.assert_array_equal(
        _np(restored(inputs)["sequence_output"]), _np(b(inputs)["sequence_output"])
    )


def test_from_preset_overrides():
    b = BertBackbone.from_preset("bert_tiny", dropout=0.0, dtype="mixed_bfloat16", name="enc")
    assert b.dropout == 0.0 and b.name == "enc"
    # attention_dropout unset means "same as dropout", so it follows the override.
    assert b.attention_dropout is None and b.transformer_layers[0].attention_dropout == 0.0
    assert b.dtype_policy.name == "mixed_bfloat16"
    assert b.preset_info["metadata"]["params"] == 4_385_920


def test_dtype_policy_round_trips(tmp_path):
    b = tiny_backbone(dtype="mixed_bfloat16")
    clone = BertBackbone.from_config(json.loads(json.dumps(b.get_config())))
    assert clone.dtype_policy.name == "mixed_bfloat16"
    assert clone.transformer_layers[0].output_dense.dtype_policy.name == "mixed_bfloat16"
    b.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").dtype_policy.name == "mixed_bfloat16"


def test_every_weight_trains_with_fit():
    backbone = tiny_backbone(embedding_dim=6, num_groups=2, dropout=0.1)
    inputs = make_inputs()
    head = keras.layers.Dense(1)
    symbolic = backbone._make_inputs(backbone.num_segments)
    model = keras.Model(symbolic, head(backbone(symbolic)["pooled_output"]))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    before = [_np(w).copy() for w in backbone.weights]
    history = model.fit(inputs, np.ones((BATCH, 1), "float32"), epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    for w, old in zip(backbone.weights, before):
        if w.path.endswith("self_attention/key/bias"):
            # Adding b to every key adds q.b to all of a query's scores, which
            # the softmax ignores: its gradient is zero up to rounding.
            np.testing.assert_allclose(_np(w), old, atol=1e-9)
            continue
        assert not np.allclose(_np(w), old, atol=1e-6), f"{w.path} received no update"


def test_grouping_is_exact_for_every_depth(fast_init):
    # The float form int(i / L * G) skips a group at e.g. L = 22, G = 22.
    for layers in range(1, 60):
        for groups in {1, 2, 3, layers}:
            if groups <= layers:
                used = [group_of_layer(i, layers, groups) for i in range(layers)]
                assert sorted(set(used)) == list(range(groups)), (layers, groups)
                assert used == sorted(used)
    plain = BertBackbone(
        vocabulary_size=11, num_layers=22, num_heads=1, hidden_dim=4, intermediate_dim=6
    )
    per_layer = 4 * 16 + 2 * 4 * 6 + 9 * 4 + 6
    assert plain.count_params() == 11 * 4 + 512 * 4 + 2 * 4 + 2 * 4 + 22 * per_layer + 4 * 4 + 4


def test_saved_preset_dropout_override_moves_attention_dropout(tmp_path):
    tiny_backbone(dropout=0.1).save_to_preset(tmp_path)
    b = BertBackbone.from_preset(tmp_path, dropout=0.0)
    assert b.transformer_layers[0].attention_dropout == 0.0
    assert b.transformer_layers[0].dropout == 0.0


@pytest.mark.parametrize("change", [dict(use_pooler=False), dict(num_groups=2)])
def test_weights_with_extra_tensors_are_rejected(tmp_path, change):
    tiny_backbone().save_to_preset(tmp_path)
    edited_by_hand(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    doc["backbone"].update(change)
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(
        bertzoo.PresetError, match="do not match the .* weights of the configured architecture"
    ):
        BertBackbone.from_preset(tmp_path)


def test_feature_model_says_how_to_save():
    backbone = tiny_backbone(num_layers=1)
    features = backbone.feature_model()
    with pytest.raises(NotImplementedError, match="save the backbone"):
        features.get_config()


# ModernBERT's switches on TINY's sizes (head size 6: rotary positions rotate
# pairs of features): layers 0 and 3 global, 1 and 2 local with a window of 4.
MODERN = dict(
    hidden_dim=12,
    num_segments=0,
    use_pooler=False,
    norm_first=True,
    use_bias=False,
    gated_feedforward=True,
    rope_theta=1000.0,
    local_rope_theta=100.0,
    local_attention_window=4,
    global_attention_every=3,
    activation="gelu",
)


def test_modernbert_shape_is_configuration():
    """ModernBERT's layout from switches: no position table, no biases,
    block 0 without an attention LayerNorm, local layers 1 and 2, a final
    LayerNorm; what stands in the padding changes none of the real tokens'
    outputs (local layers included)."""
    backbone = tiny_backbone(**MODERN)
    blocks = backbone.transformer_layers
    assert backbone.embeddings_layer.learned_positions is False
    assert [b.attention_window for b in blocks] == [None, 4, 4, None]
    assert [b.rope_theta for b in blocks] == [1000.0, 100.0, 100.0, 1000.0]
    assert blocks[0].attention_layer_norm is None and blocks[1].attention_layer_norm is not None
    paths = [w.path for w in backbone.weights]
    assert "final_layer_norm/gamma" in paths
    assert not [p for p in paths if p.endswith(("bias", "beta", "position_embeddings"))]
    assert Architecture.of(backbone).backbone_params() == backbone.count_params()

    inputs = make_inputs(seq=SEQ, num_segments=0, lengths=[7, 5, 3])
    mask = inputs["padding_mask"].astype(bool)
    other = dict(inputs, token_ids=np.where(mask, inputs["token_ids"], 5).astype("int32"))
    # Compiled once for both (under JAX, op by op is slower).
    out = _np(backbone.predict_on_batch(inputs)["sequence_output"])
    again = _np(backbone.predict_on_batch(other)["sequence_output"])
    np.testing.assert_allclose(again[mask], out[mask], atol=1e-6)
    assert not np.allclose(again[~mask], out[~mask], atol=1e-3)  # the padding did change


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "change, message",
    [
        (dict(global_attention_every=1), "leaves no local layer; global_attention_every must"),
        (dict(local_attention_window=1), "local_attention_window must be an integer >= 2"),
        (dict(rope_theta=None), "local_rope_theta needs rope_theta"),
        (dict(rope_theta=-1.0), "rope_theta must be a finite number > 0 or null"),
        (dict(rope_theta=float("nan")), "rope_theta must be a finite number > 0 or null"),
        (dict(local_rope_theta=float("inf")), "local_rope_theta must be a finite number > 0"),
        # A hostile window (1e9 built a band of that width): at most the positions.
        (dict(local_attention_window=10**9), "is wider than max_sequence_length=32"),
        (dict(local_attention_window=33), "local_attention_window=33 is wider than"),
        (dict(hidden_dim=10), "hidden_dim / num_heads = 5 must be even"),
        (dict(num_groups=2), "norm_first needs one block per layer"),
        (dict(norm_first="yes"), "norm_first must be true or false"),
        (dict(position_padding_id=1, max_sequence_length=12), "with rope_theta"),
    ],
)
def test_modernbert_switches_say_what_is_valid(change, message):
    with pytest.raises(ValueError, match=message):
        tiny_backbone(**{**MODERN, **change})
