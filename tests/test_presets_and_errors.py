import json
import re

import pytest

import bertzoo
from bertzoo import BertBackbone, PresetError
from bertzoo import presets as preset_lib
from tests.conftest import TINY, edited_by_hand

ARCH_KEYS = BertBackbone.architecture_keys()


def _formula_params(b):
    # REFERENCE.md: per layer 4H^2 + 2HI + 9H + I; embeddings V*E + P*E + T*E + 2E
    # (+ E*H + H when factorised); shared layers counted once; pooler H^2 + H.
    v, layers, h, i = b["vocabulary_size"], b["num_layers"], b["hidden_dim"], b["intermediate_dim"]
    if b.get("norm_first"):
        # ModernBERT (transformers' ModernBertModel): per layer Wqkv 3H^2, Wo
        # H^2, GeGLU Wi H*2I and Wo I*H, two bias-free LayerNorms 2H (layer
        # 0 lacks its attention one); embeddings V*H + H; final LayerNorm H.
        assert b["use_bias"] is False and b["gated_feedforward"] is True
        return layers * (4 * h * h + 3 * h * i + 2 * h) - h + v * h + h + h
    e = b.get("embedding_dim", h)
    g = b.get("num_groups", layers)
    n = v * e + b["max_sequence_length"] * e + b["num_segments"] * e + 2 * e
    n += (e * h + h) if e != h else 0
    n += g * (4 * h * h + 2 * h * i + 9 * h + i)
    n += (h * h + h) if b["use_pooler"] else 0
    return n


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", sorted(preset_lib.builtin_presets()))
def test_builtin_preset_files_are_valid_and_consistent(name):
    path = preset_lib.builtin_presets()[name]
    data = preset_lib.read_preset_file(path, ARCH_KEYS)
    assert data["name"] == name == path.stem
    assert data["description"]
    assert data["metadata"]["params"] == _formula_params(data["backbone"])
    assert data["metadata"]["paper"] and data["metadata"]["source_checkpoint"]
    tok = data["tokenizer"]
    act = data["backbone"]["activation"]
    roberta = name.startswith(("roberta", "xlm_roberta", "klue_roberta"))
    if roberta:
        # One segment row, positions past the padding id 1 (514 rows for 512
        # tokens), erf GELU, the family recorded (heads, export), and the
        # tokenizer kind of the checkpoint: KLUE's is a cased WordPiece.
        backbone = data["backbone"]
        assert (backbone["num_segments"], backbone["position_padding_id"]) == (1, 1)
        assert backbone["max_sequence_length"] == 514 and act == "gelu"
        family = "xlm-roberta" if name.startswith("xlm") else "roberta"
        assert data["metadata"]["model_type"] == family
        kind = {"roberta": "byte_level_bpe", "xlm": "fairseq_sentencepiece"}
        expected = kind.get(name.split("_")[0], "wordpiece")
        assert tok["kind"] == expected
        if expected == "wordpiece":
            assert tok["lowercase"] is tok["strip_accents"] is False
        return
    if name.startswith(("modernbert", "ettin_encoder")):
        # No segments, no pooler, rotary positions over 8,192 tokens (Ettin:
        # 7,999), global attention every 3rd layer; a byte-level BPE with
        # BERT's special tokens.
        backbone = data["backbone"]
        assert (backbone["num_segments"], backbone["use_pooler"]) == (0, False)
        length = 8192 if name.startswith("modernbert") else 7999
        assert backbone["max_sequence_length"] == length and act == "gelu"
        assert (backbone["global_attention_every"], backbone["local_attention_window"]) == (3, 128)
        assert data["metadata"]["model_type"] == "modernbert"
        assert (tok["kind"], tok["cls_token"], tok["mask_token"]) == (
            "byte_level_bpe",
            "[CLS]",
            "[MASK]",
        )
        return
    assert tok["kind"] in ("wordpiece", "sentencepiece")
    # Cased vocabularies keep case and accents; uncased ones strip both.
    assert tok["lowercase"] == tok["strip_accents"] == ("cased" not in name)
    # Google BERT/ALBERT: tanh GELU; DistilBERT/TinyBERT (HF "gelu") and
    # ELECTRA (its reference code's gelu is erf-based): erf GELU.
    erf = name.startswith(("distil", "tiny", "electra"))
    assert act == ("gelu" if erf else "gelu_approximate")
    # ELECTRA has no pooler and records its family (task heads, export).
    if name.startswith("electra"):
        assert data["backbone"]["use_pooler"] is False
        assert data["metadata"]["model_type"] == "electra"


@pytest.mark.backend_independent
def test_unknown_preset_lists_valid_names_and_suggests():
    with pytest.raises(PresetError) as e:
        BertBackbone.from_preset("bert_bse")
    msg = str(e.value)
    assert "Did you mean 'bert_base'?" in msg
    for name in BertBackbone.presets:
        assert name in msg


@pytest.mark.backend_independent
def test_bad_json_names_file_and_position(tmp_path):
    (tmp_path / "config.json").write_text('{"backbone": {"num_layers": 2,}}')
    with pytest.raises(PresetError, match=re.escape(str(tmp_path / "config.json")) + ".*line 1"):
        BertBackbone.from_preset(tmp_path)


def _write(tmp_path, doc):
    (tmp_path / "config.json").write_text(json.dumps(doc))
    return tmp_path


@pytest.mark.backend_independent
def test_unknown_backbone_key_names_file_and_key(tmp_path):
    doc = {"backbone": {**TINY, "hiden_dim": 3}}
    with pytest.raises(PresetError) as e:
        BertBackbone.from_preset(_write(tmp_path, doc), load_weights=False)
    msg = str(e.value)
    assert str(tmp_path / "config.json") in msg
    assert "'backbone.hiden_dim'" in msg and "Did you mean 'hidden_dim'?" in msg


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "doc, pattern",
    [
        ({"backbone": TINY, "extra": 1}, "unknown key 'extra'"),
        (
            {"backbone": TINY, "tokenizer": {"lowercase": "yes"}},
            "'tokenizer.lowercase' must be a JSON bool",
        ),
        (
            {"backbone": TINY, "tokenizer": {"kind": "bpe"}},
            "tokenizer.kind must be one of wordpiece, sentencepiece",
        ),
        ({"backbone": TINY, "metadata": {"params": 1.5}}, "'metadata.params' must be a JSON int"),
        ({"backbone": TINY, "metadata": {"author": "x"}}, "unknown key 'metadata.author'"),
        ({"tokenizer": {}}, "missing the required key 'backbone'"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_invalid_preset_documents(tmp_path, doc, pattern):
    with pytest.raises(PresetError, match=re.escape(pattern)):
        BertBackbone.from_preset(_write(tmp_path, doc), load_weights=False)


def test_directory_without_config_or_weights(tmp_path):
    with pytest.raises(PresetError, match="has no config.json"):
        BertBackbone.from_preset(tmp_path)
    _write(tmp_path, {"backbone": TINY})
    with pytest.raises(PresetError, match="no model.weights.h5.*load_weights=False"):
        BertBackbone.from_preset(tmp_path)
    assert BertBackbone.from_preset(tmp_path, load_weights=False).num_layers == TINY["num_layers"]


def test_weights_of_another_architecture_are_rejected(tmp_path):
    BertBackbone(**TINY).save_to_preset(tmp_path)
    edited_by_hand(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    # Larger than the weights: refused before the model is built, naming the key.
    doc["backbone"]["intermediate_dim"] = 27
    _write(tmp_path, doc)
    with pytest.raises(
        PresetError, match=r"backbone\.intermediate_dim is 27, but \S+model.weights.h5 holds 26"
    ):
        BertBackbone.from_preset(tmp_path)
    # Smaller: built (cheap), then the weights' tensors do not match.
    doc["backbone"]["intermediate_dim"] = 25
    _write(tmp_path, doc)
    with pytest.raises(PresetError, match="model.weights.h5 holds .* tensors that do not match"):
        BertBackbone.from_preset(tmp_path)


@pytest.mark.backend_independent
def test_incomplete_hf_config_names_file_and_key(tmp_path):
    _write(tmp_path, {"model_type": "bert", "hidden_size": 8})
    with pytest.raises(PresetError, match="config.json: missing the required key 'vocab_size'"):
        BertBackbone.from_preset(tmp_path)


@pytest.mark.backend_independent
def test_invalid_values_in_a_preset_name_the_file(tmp_path):
    doc = {"backbone": {k: v for k, v in TINY.items() if k != "vocabulary_size"}}
    with pytest.raises(
        PresetError,
        match=re.escape(str(tmp_path / "config.json"))
        + ": invalid backbone config.*vocabulary_size",
    ):
        BertBackbone.from_preset(_write(tmp_path, doc), load_weights=False)
    doc = {"backbone": {**TINY, "num_layers": "2"}}
    with pytest.raises(
        PresetError, match="config.json: invalid backbone config: num_layers must be an integer"
    ):
        BertBackbone.from_preset(_write(tmp_path, doc), load_weights=False)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "key, pattern",
    [
        ("num_layers", "cannot override 'num_layers': it is architectural"),
        ("hidden_size", "cannot override 'hidden_size': it is not a backbone argument"),
    ],
)
def test_overrides_are_limited(key, pattern):
    with pytest.raises(ValueError, match=pattern + ".*dropout, dtype, name, trainable"):
        BertBackbone.from_preset("bert_tiny", **{key: 3})


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "overrides, pattern",
    [
        (dict(num_heads=3), "hidden_dim=10 must be divisible by num_heads=3"),
        (dict(num_groups=5), "num_groups=5 must not exceed num_layers=4"),
        (dict(num_groups=0), "num_groups must be an integer >= 1, got 0"),
        (dict(num_layers=2.0), "num_layers must be an integer >= 1, got 2.0"),
        (dict(vocabulary_size=0), "vocabulary_size must be an integer >= 1"),
        (dict(num_segments=-1), "num_segments must be an integer >= 0"),
        (dict(dropout=1.0), "dropout must be a number in [0, 1), got 1.0"),
        (dict(attention_dropout=-0.1), "attention_dropout must be a number in [0, 1)"),
        (
            dict(activation="gelu_new"),
            "activation='gelu_new' is not supported. Valid: gelu, gelu_approximate",
        ),
        (dict(layer_norm_epsilon=0), "layer_norm_epsilon must be a finite number > 0"),
        # NaN passes `value <= 0` and makes every output NaN; inf too.
        (dict(layer_norm_epsilon=float("nan")), "layer_norm_epsilon must be a finite number > 0"),
        (dict(layer_norm_epsilon=float("inf")), "got inf"),
        (dict(initializer_range=True), "initializer_range must be a finite number > 0, got True"),
        (dict(use_pooler="yes"), "use_pooler must be true or false"),
    ],
)
def test_invalid_shapes_are_rejected_at_construction(overrides, pattern):
    with pytest.raises(ValueError, match=re.escape(pattern)):
        BertBackbone(**{**TINY, **overrides})


@pytest.mark.backend_independent
def test_public_api():
    for name in ("BertBackbone", "PresetError", "list_presets", "layers", "__version__"):
        assert hasattr(bertzoo, name)
    assert bertzoo.list_presets()["bert_base"]["params"] == 109_482_240


def test_a_preset_saved_inside_a_publication_records_its_final_name(tmp_path):
    """A fine-tuning run saves its best epoch into the staging folder of
    best/'s publication: the recorded name is "best", not the staging
    folder's (".best.tmp-PID-RANDOM")."""
    from bertzoo.io.publish import atomic_directory, published_name

    with atomic_directory(tmp_path / "best") as staging:
        assert staging.name.startswith(".best.tmp-") and published_name(staging) == "best"
        BertBackbone(**TINY).save_to_preset(staging)
    assert json.loads((tmp_path / "best" / "config.json").read_text())["name"] == "best"
    assert published_name(tmp_path / "best") == "best"
    BertBackbone(**TINY).save_to_preset(tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "config.json").read_text())["name"] == "plain"
