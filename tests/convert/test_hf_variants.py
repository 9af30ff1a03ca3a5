"""Hugging Face BERT, ALBERT and DistilBERT checkpoints <-> bertzoo.

Fixtures: tests/fixtures/hf_variants/, small random checkpoints written by
transformers, and reference.npz with transformers' outputs on them (both made
by tests/fixtures/make_hf_variants.py, which also checks that transformers
reproduces the originals from bertzoo's export; the errors it measured are
in reference.npz's info). Bar: max abs error <= 1e-5 at real tokens.
"""

import json
import os
import pickle
import shutil
import struct
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
from keras import ops

from bertzoo import BertBackbone, BertPretrainer
from bertzoo.convert import CheckpointError, read_safetensors, save_hf, write_safetensors
from bertzoo.convert.hf import SUPPORTED_MODEL_TYPES, hf_to_preset, load_hf_weights
from bertzoo.convert.hf.spec import hf_group_map
from bertzoo.convert.torch_pickle import read_torch_pickle
from bertzoo.layers.common import group_of_layer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf_variants"
REF = np.load(FIXTURES / "reference.npz")
INFO = json.loads(str(REF["info"]))["variants"]
TOLERANCE = 1e-5

# name -> expected (model type, tokenizer section)
VARIANTS = {
    "bert_pretraining": ("bert", ("wordpiece", False, False)),
    "albert_pretraining": ("albert", ("sentencepiece", True, False)),
    "albert_mlm": ("albert", ("sentencepiece", False, True)),
    "distilbert": ("distilbert", ("wordpiece", True, True)),
    "distilbert_mlm_sinusoidal": ("distilbert", ("wordpiece", True, True)),
    "bert_mlm_bin": ("bert", ("wordpiece", True, True)),
}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float32")


def _inputs(name):
    inputs = {
        "token_ids": REF[f"{name}/input_ids"],
        "padding_mask": REF[f"{name}/attention_mask"],
    }
    if f"{name}/token_type_ids" in REF:
        inputs["segment_ids"] = REF[f"{name}/token_type_ids"]
    return inputs


def _stored(directory):
    """name -> float32 array of a checkpoint directory's weights file."""
    directory = Path(directory)
    if (directory / "model.safetensors").is_file():
        tensors = read_safetensors(directory / "model.safetensors")
    else:
        tensors = read_torch_pickle(directory / "pytorch_model.bin")
    return {k: np.asarray(v) for k, v in tensors.items()}


def _load(name):
    return BertBackbone.from_preset(FIXTURES / name, allow_pickle=name.endswith("_bin"))


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_matches_transformers_and_round_trips(name, tmp_path):
    model_type, (kind, lowercase, strip) = VARIANTS[name]
    backbone = _load(name)
    info = INFO[name]
    assert backbone.count_params() == info["base_params"]
    assert sorted(backbone.head_tensors) == info["head_tensors"]
    # A WordPiece checkpoint loads with the tokenizer transformers gives it,
    # its Rust one ("hf-fast"); the SentencePiece kind has one behaviour.
    assert backbone.preset_info["tokenizer"] == {
        "kind": kind,
        "lowercase": lowercase,
        "strip_accents": strip,
        **({"reference": "hf-fast"} if kind == "wordpiece" else {}),
    }
    inputs = _inputs(name)
    assert inputs["padding_mask"].min() == 0  # padding is exercised
    assert ("segment_ids" in inputs) == (model_type != "distilbert")
    out = backbone(inputs)
    mask = inputs["padding_mask"].astype(bool)
    err = np.abs(_np(out["sequence_output"]) - REF[f"{name}/last_hidden_state"])[mask].max()
    assert err <= TOLERANCE, f"{name}: sequence_output max abs error {err:.2e}"
    has_pooler = f"{name}/pooler_output" in REF
    assert ("pooled_output" in out) == has_pooler
    if has_pooler:
        err = np.abs(_np(out["pooled_output"]) - REF[f"{name}/pooler_output"]).max()
        assert err <= TOLERANCE, f"{name}: pooled_output max abs error {err:.2e}"
    # Export, re-checked on every run without torch: save_hf writes exactly
    # what transformers' save_pretrained wrote for this model (the fixture's
    # weights file): the same names, shapes, dtypes and values, so
    # transformers loads it as the original (the fixture script also ran
    # transformers on the export: max error 0.0).
    save_hf(backbone, tmp_path)
    mine, theirs = _stored(tmp_path), _stored(FIXTURES / name)
    assert sorted(mine) == sorted(theirs)
    for key, value in theirs.items():
        assert mine[key].dtype == value.dtype and mine[key].shape == value.shape, key
        np.testing.assert_array_equal(mine[key], value, err_msg=key)
    written = json.loads((tmp_path / "config.json").read_text())
    original = json.loads((FIXTURES / name / "config.json").read_text())
    assert set(written) == set(original) - {"transformers_version"}
    assert written["model_type"] == model_type
    assert written["architectures"] == [info["architecture"]]
    restored = BertBackbone.from_preset(tmp_path)
    out2 = restored(inputs)
    for key in out:
        np.testing.assert_array_equal(_np(out2[key]), _np(out[key]))
    assert sorted(restored.head_tensors) == sorted(backbone.head_tensors)
    for key, value in backbone.head_tensors.items():
        np.testing.assert_array_equal(restored.head_tensors[key], value)


def test_albert_group_map_and_shapes():
    b = BertBackbone.from_preset(FIXTURES / "albert_pretraining", load_weights=False)
    assert (b.num_layers, b.num_groups, b.embedding_dim, b.hidden_dim) == (3, 2, 16, 32)
    assert b.activation == "gelu_approximate"  # HF gelu_new
    assert b.embeddings_layer.projection is not None
    for layers, groups in ((3, 2), (5, 3), (12, 1), (12, 12), (24, 1)):
        ours = [group_of_layer(i, layers, groups) for i in range(layers)]
        assert ours == hf_group_map(layers, groups)
    assert hf_group_map(3, 2) == [0, 0, 1]  # sharing matters in the fixture
    assert hf_group_map(5, 3) == [0, 0, 1, 1, 2]


def test_distilbert_config_and_sinusoidal_table():
    b = BertBackbone.from_preset(FIXTURES / "distilbert_mlm_sinusoidal")
    assert (b.num_segments, b.use_pooler, b.layer_norm_epsilon) == (0, False, 1e-12)
    assert b.activation == "relu"
    # The stored table is transformers' sinusoidal one, loaded as is.
    table = _np(b.embeddings_layer.position_embeddings)
    positions = np.arange(table.shape[0])
    np.testing.assert_allclose(table[:, 0], np.sin(positions), atol=1e-6)
    np.testing.assert_allclose(table[:, 1], np.cos(positions), atol=1e-6)


# === Bad input ===


def _copy(name, tmp_path, **config_changes):
    directory = tmp_path / name
    shutil.copytree(FIXTURES / name, directory)
    if config_changes:
        path = directory / "config.json"
        config = json.loads(path.read_text())
        config.update(config_changes)
        path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return directory


def _edit_tensors(directory, edit):
    path = directory / "model.safetensors"
    tensors = read_safetensors(path)
    edit(tensors)
    write_safetensors(path, tensors)


@pytest.mark.backend_independent  # configs refused before a model is built
@pytest.mark.parametrize(
    "name, changes, pattern",
    [
        (
            "bert_pretraining",
            {"model_type": "deberta"},
            "model_type 'deberta' is not supported. Supported: bert, albert, distilbert, "
            "electra, roberta, xlm-roberta",
        ),
        ("albert_mlm", {"inner_group_num": 2}, "inner_group_num 2 is not supported"),
        (
            "albert_mlm",
            {"num_hidden_layers": 18, "num_hidden_groups": 14},
            "transformers applies group 6 at layer 9 .* but bertzoo group 7",
        ),
        ("distilbert", {"activation": "mish"}, "activation 'mish' is not supported"),
        ("distilbert", {"n_layers": None}, "missing the required key 'n_layers'"),
    ],
)
def test_bad_configs(tmp_path, name, changes, pattern):
    directory = _copy(name, tmp_path, **changes)
    with pytest.raises(CheckpointError, match=pattern):
        BertBackbone.from_preset(directory)
    assert SUPPORTED_MODEL_TYPES == (
        "bert",
        "albert",
        "distilbert",
        "electra",
        "roberta",
        "xlm-roberta",
        "modernbert",
    )


def test_shape_mismatch_names_tensor_and_both_shapes(tmp_path):
    directory = _copy("albert_pretraining", tmp_path)
    name = "albert.encoder.embedding_hidden_mapping_in.weight"
    _edit_tensors(directory, lambda t: t.update({name: np.zeros((32, 15), "float32")}))
    with pytest.raises(
        CheckpointError,
        match=rf"'{name}' has shape \(32, 15\).*of shape \(16, 32\) \(after transposing\)",
    ):
        BertBackbone.from_preset(directory)


def test_missing_unused_and_allow_partial(tmp_path):
    directory = _copy("distilbert_mlm_sinusoidal", tmp_path)
    dropped = "distilbert.transformer.layer.1.ffn.lin2.bias"
    extra = "distilbert.transformer.layer.2.ffn.lin2.bias"

    def edit(tensors):
        tensors[extra] = tensors.pop(dropped)
        tensors["cls.predictions.bias"] = np.zeros(99, "float32")  # a BERT head

    _edit_tensors(directory, edit)
    with pytest.raises(CheckpointError) as e:
        BertBackbone.from_preset(directory)
    msg = str(e.value)
    assert f"missing tensors: {dropped}" in msg
    assert f"unused tensors: cls.predictions.bias, {extra}" in msg
    assert "allow_partial=True" in msg
    partial = BertBackbone.from_preset(directory, allow_partial=True)
    reference = BertBackbone.from_preset(FIXTURES / "distilbert_mlm_sinusoidal")
    np.testing.assert_array_equal(
        _np(partial.transformer_layers[1].output_dense.kernel),
        _np(reference.transformer_layers[1].output_dense.kernel),
    )
    assert not np.array_equal(
        _np(partial.transformer_layers[1].output_dense.bias),
        _np(reference.transformer_layers[1].output_dense.bias),
    )


def test_failed_load_changes_nothing(tmp_path):
    directory = _copy("bert_pretraining", tmp_path)
    # The pooler comes last in the mapping: everything else would be assigned
    # first by a loader that checked as it went.
    _edit_tensors(
        directory, lambda t: t.update({"bert.pooler.dense.bias": np.zeros(31, "float32")})
    )
    backbone = BertBackbone.from_preset(directory, load_weights=False)
    before = [_np(w) for w in backbone.weights]
    with pytest.raises(CheckpointError, match="bert.pooler.dense.bias"):
        load_hf_weights(backbone, directory)
    for w, value in zip(backbone.weights, before):
        np.testing.assert_array_equal(_np(w), value)


# === pytorch_model.bin ===


def test_pickle_needs_opt_in(tmp_path):
    with pytest.raises(
        CheckpointError, match=r"pickle that can run arbitrary code.*allow_pickle=True"
    ):
        BertBackbone.from_preset(FIXTURES / "bert_mlm_bin")


@pytest.mark.backend_independent  # numpy and files only: no model
def test_torch_pickle_tied_weights():
    tensors = read_torch_pickle(FIXTURES / "bert_mlm_bin" / "pytorch_model.bin")
    assert all(v.dtype == np.float32 for v in tensors.values())
    np.testing.assert_array_equal(
        tensors["cls.predictions.decoder.weight"], tensors["bert.embeddings.word_embeddings.weight"]
    )
    assert tensors["bert.encoder.layer.0.output.dense.weight"].shape == (16, 21)


def _torch_zip(path, data_pkl, storages=None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)


def _bin_dir(tmp_path, data_pkl, storages=None):
    """A DistilBERT config with a pytorch_model.bin holding `data_pkl`."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    shutil.copy(FIXTURES / "distilbert" / "config.json", directory)
    _torch_zip(directory / "pytorch_model.bin", data_pkl, storages)
    return directory


class _Evil:
    def __init__(self, func, arg):
        self.func, self.arg = func, arg

    def __reduce__(self):
        return self.func, (self.arg,)


@pytest.mark.parametrize("func, refused", [(os.system, "system"), (eval, "builtins.eval")])
def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path, func, refused):
    marker = tmp_path / "pwned"
    arg = f"touch {marker}" if func is os.system else f"open({str(marker)!r}, 'w')"
    payload = pickle.dumps({"embeddings.word_embeddings.weight": _Evil(func, arg)}, protocol=4)
    directory = _bin_dir(tmp_path, payload)
    with pytest.raises(CheckpointError, match=rf"refused to load: .*global \S*{refused}"):
        BertBackbone.from_preset(directory, allow_pickle=True)
    assert not marker.exists()


# Raw pickle opcodes, as torch.save writes them (see
# bertzoo.convert.torch_pickle._TorchUnpickler), so dtypes and views are tested without
# torch.
def _str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(n):
    return b"J" + struct.pack("<i", n)


def _tuple(values):
    return b"(" + b"".join(_int(v) for v in values) + b"t"


def _state_dict_pickle(entries):
    """entries: (name, storage type, key, numel, offset, size, stride)."""
    out = b"\x80\x02ccollections\nOrderedDict\n)R("
    for name, stype, key, numel, offset, size, stride in entries:
        out += _str(name) + b"ctorch._utils\n_rebuild_tensor_v2\n("
        out += b"(" + _str("storage") + f"ctorch\n{stype}\n".encode() + _str(key)
        out += _str("cpu") + _int(numel) + b"tQ"
        out += _int(offset) + _tuple(size) + _tuple(stride) + b"\x89"
        out += b"ccollections\nOrderedDict\n)RtR"
    return out + b"u."


@pytest.mark.backend_independent  # numpy and files only: no model
def test_torch_pickle_dtypes_and_views(tmp_path):
    values = np.arange(12, dtype="float32") - 3.5
    bf16 = (values.view(np.uint32) >> 16).astype("<u2")  # exact: few mantissa bits
    pkl = _state_dict_pickle(
        [
            ("f32", "FloatStorage", "0", 12, 2, (2, 3), (1, 4)),  # a transposed view
            ("bf16", "BFloat16Storage", "1", 12, 0, (12,), (1,)),
            ("i64", "LongStorage", "2", 3, 1, (2,), (1,)),
            ("empty", "FloatStorage", "0", 12, 0, (0, 4), (4, 1)),
        ]
    )
    path = tmp_path / "x.bin"
    _torch_zip(
        path,
        pkl,
        {
            "0": values.tobytes(),
            "1": bf16.tobytes(),
            "2": np.array([7, 8, 9], "<i8").tobytes(),
        },
    )
    tensors = read_torch_pickle(path)
    np.testing.assert_array_equal(
        tensors["f32"], values[2:].reshape(-1)[np.array([[0, 4, 8], [1, 5, 9]])]
    )
    np.testing.assert_array_equal(tensors["bf16"], values)
    assert tensors["bf16"].dtype == np.float32
    np.testing.assert_array_equal(tensors["i64"], [8, 9])
    assert tensors["empty"].shape == (0, 4)


@pytest.mark.backend_independent  # numpy and files only: no model
@pytest.mark.parametrize(
    "entry, storage, pattern",
    [
        # Reads past the end of the storage.
        (("w", "FloatStorage", "0", 4, 1, (2, 2), (2, 1)), 16, "invalid tensor"),
        (("w", "FloatStorage", "0", 4, 0, (2,), (-1,)), 16, "invalid tensor"),
        # Storage bytes do not match numel.
        (("w", "FloatStorage", "0", 5, 0, (2,), (1,)), 16, "has 16 bytes, expected 5 x 4"),
        (
            ("w", "ComplexFloatStorage", "0", 4, 0, (2,), (1,)),
            16,
            "global torch.ComplexFloatStorage",
        ),
    ],
)
def test_torch_pickle_bad_tensors(tmp_path, entry, storage, pattern):
    path = tmp_path / "x.bin"
    _torch_zip(path, _state_dict_pickle([entry]), {"0": b"\0" * storage})
    with pytest.raises(CheckpointError, match=pattern):
        read_torch_pickle(path)


@pytest.mark.backend_independent  # numpy and files only: no model
def test_legacy_torch_format_is_refused(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CheckpointError, match="not a zip-format torch checkpoint"):
        read_torch_pickle(path)


# === Export ===


class _StandInTokenizer:
    """What save_hf needs from a bertzoo tokenizer (BertTokenizer and
    SentencePieceTokenizer have these attributes)."""

    def __init__(self, vocabulary_file, lowercase, strip_accents, size=99):
        self.vocabulary_file = vocabulary_file
        self.lowercase, self.strip_accents = lowercase, strip_accents
        self.vocabulary_size = size
        self.cls_token, self.sep_token, self.pad_token = "[CLS]", "[SEP]", "<pad>"

    def save_to_preset(self, directory):
        (Path(directory) / self.vocabulary_file).write_text("stand-in\n")


@pytest.mark.parametrize(
    "name, tokenizer, expected",
    [
        (
            "albert_mlm",
            _StandInTokenizer("spiece.model", True, False),
            {"do_lower_case": True, "keep_accents": True, "tokenizer_class": "AlbertTokenizer"},
        ),
        (
            "distilbert",
            _StandInTokenizer("vocab.txt", False, True),
            {
                "do_lower_case": False,
                "strip_accents": True,
                "tokenizer_class": "DistilBertTokenizer",
            },
        ),
    ],
)
def test_save_hf_writes_tokenizer(tmp_path, name, tokenizer, expected):
    backbone = BertBackbone.from_preset(FIXTURES / name, load_weights=False)
    save_hf(backbone, tmp_path, tokenizer=tokenizer)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert {k: config[k] for k in expected} == expected
    assert config["cls_token"] == "[CLS]" and config["pad_token"] == "<pad>"
    assert (tmp_path / tokenizer.vocabulary_file).is_file()
    section = hf_to_preset(tmp_path)["tokenizer"]
    assert (section["lowercase"], section["strip_accents"]) == (
        tokenizer.lowercase,
        tokenizer.strip_accents,
    )


def test_save_hf_with_bert_tokenizer(tmp_path):
    from bertzoo.tokenizers import BertTokenizer, from_preset

    vocab = FIXTURES / "bert_pretraining" / "vocab.txt"
    backbone = _load("bert_pretraining")
    save_hf(backbone, tmp_path, tokenizer=BertTokenizer(vocab, lowercase=False, strip_accents=True))
    assert (tmp_path / "vocab.txt").read_text() == vocab.read_text()
    tokenizer = from_preset(tmp_path)
    assert (tokenizer.lowercase, tokenizer.strip_accents) == (False, True)


@pytest.mark.parametrize(
    "name, tokenizer, pattern",
    [
        (
            "albert_mlm",
            _StandInTokenizer("merges.txt", True, True),
            "must be a bertzoo tokenizer \\(BertTokenizer, SentencePieceTokenizer or",
        ),
        ("distilbert", _StandInTokenizer("vocab.txt", True, True, size=98), "98 tokens"),
    ],
)
def test_save_hf_tokenizer_mismatch_writes_nothing(tmp_path, name, tokenizer, pattern):
    backbone = BertBackbone.from_preset(FIXTURES / name, load_weights=False)
    with pytest.raises(CheckpointError, match=pattern):
        save_hf(backbone, tmp_path / "out", tokenizer=tokenizer)
    assert not (tmp_path / "out").exists()


@pytest.mark.backend_independent  # a stand-in backbone: no model
@pytest.mark.parametrize(
    "config, pattern",
    [
        (
            dict(num_segments=0, use_pooler=False, layer_norm_epsilon=1e-6),
            "layer_norm_epsilon=1e-06",
        ),
        (dict(num_segments=0, use_pooler=False, embedding_dim=8), "embedding_dim != hidden_dim"),
        (dict(num_segments=0), "num_segments=0 with a pooler"),
        (dict(num_layers=18, num_groups=14), "applies group 6 at layer 9"),
    ],
)
def test_save_hf_unrepresentable_backbones(tmp_path, config, pattern):
    # Only the configuration is read before the error: a stand-in is enough
    # (an 18-layer backbone takes seconds to build).
    backbone = types.SimpleNamespace(
        **{
            **dict(
                num_layers=2,
                num_groups=None,
                hidden_dim=4,
                embedding_dim=None,
                num_segments=2,
                use_pooler=True,
                layer_norm_epsilon=1e-12,
                position_padding_id=None,
            ),
            **config,
        }
    )
    backbone.num_groups = backbone.num_groups or backbone.num_layers
    backbone.embedding_dim = backbone.embedding_dim or backbone.hidden_dim
    with pytest.raises(CheckpointError, match=pattern):
        save_hf(backbone, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_save_hf_refuses_foreign_heads(tmp_path):
    backbone = BertBackbone.from_preset(FIXTURES / "distilbert", load_weights=False)
    backbone.head_tensors = {"cls.seq_relationship.weight": np.zeros((2, 32), "float32")}
    with pytest.raises(CheckpointError, match="not distilbert task heads"):
        save_hf(backbone, tmp_path)


# name -> (objective, masked-LM logits key): the variants with pre-training heads.
PRETRAINING = {
    name: (
        "sop"
        if f"{name}/sop_logits" in REF
        else "nsp"
        if f"{name}/seq_relationship_logits" in REF
        else "none",
        "prediction_logits" if f"{name}/prediction_logits" in REF else "logits",
    )
    for name in VARIANTS
    if f"{name}/prediction_logits" in REF or f"{name}/logits" in REF
}


@pytest.mark.parametrize("name", sorted(PRETRAINING))
def test_pretraining_heads_match_transformers(name):
    """BertPretrainer on a converted *ForPreTraining / *ForMaskedLM checkpoint
    gives transformers' masked-LM logits at every real position and its
    NSP / SOP logits: BERT (erf GELU, MLM + NSP), ALBERT (tanh GELU, MLM +
    SOP; ReLU, MLM), DistilBERT (ReLU, MLM) and a pickled BERT MLM."""
    objective, mlm_key = PRETRAINING[name]
    backbone = _load(name)
    model = BertPretrainer(backbone, objective=objective)
    inputs = _inputs(name)
    batch, seq = inputs["token_ids"].shape
    inputs["mask_positions"] = np.tile(np.arange(seq, dtype="int32"), (batch, 1))
    inputs.setdefault("segment_ids", np.zeros_like(inputs["token_ids"]))  # ignored: DistilBERT
    # Every head tensor loaded, but the decoder's aliases of the tied token
    # table and of the output bias (stored by torch.save in the .bin file).
    missing = set(backbone.head_tensors) - set(model.head_weights_loaded)
    assert model.head_weights_loaded and all(
        k.endswith(("decoder.weight", "decoder.bias")) for k in missing
    ), missing
    out = model(inputs, training=False)
    mask = inputs["padding_mask"].astype(bool)
    expected = REF[f"{name}/{mlm_key}"]
    assert expected.shape == (batch, seq, backbone.vocabulary_size)
    err = np.abs(_np(out["mlm"]) - expected)[mask].max()
    # Measured 1.2e-6 to 2.7e-6 (TF and JAX); the wrong GELU (tanh for erf
    # or erf for tanh) gives 1.4e-3 / 6.1e-4.
    assert err <= 2e-5, f"{name}: masked-LM logits max abs error {err:.2e}"
    if objective != "none":
        sentence = REF[f"{name}/{'sop' if objective == 'sop' else 'seq_relationship'}_logits"]
        err = np.abs(_np(out["sentence"]) - sentence).max()
        # Measured: NSP 4.5e-7 / 4.9e-7, SOP 2.4e-7 / 1.8e-7 (TF / JAX).
        assert err <= 1e-5, f"{name}: {objective} logits max abs error {err:.2e}"
    else:
        assert "sentence" not in out
