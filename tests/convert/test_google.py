"""Google TF1 checkpoints (google-research/bert and /albert) -> bertzoo.

The checkpoints are written here in TF1 format with the variable names the
reference code creates (checked with `tf.train.load_checkpoint`), random
values, optimizer slots and `global_step`, and the converted presets are
compared with an independent numpy forward pass of the reference
architecture (tanh GELU, post-LN, LayerNorm epsilon 1e-12, -10000 mask adder).
"""

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from bertzoo import BertBackbone
from bertzoo.cli import main
from bertzoo.convert.common import CheckpointError
from bertzoo.convert.loader import convert_google_checkpoint
from bertzoo.io.safetensors import read_safetensors
from tests.conftest import make_inputs

# Pairwise-distinct sizes; batch 3 and seq 7 come from make_inputs.
BERT_CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 20,
    "initializer_range": 0.02,
    "intermediate_size": 28,
    "max_position_embeddings": 16,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": 43,
}
ALBERT_CONFIG = {
    "attention_probs_dropout_prob": 0,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0,
    "embedding_size": 10,
    "hidden_size": 24,
    "initializer_range": 0.02,
    "intermediate_size": 30,
    "max_position_embeddings": 20,
    "num_attention_heads": 6,
    "num_hidden_layers": 3,
    "num_hidden_groups": 1,
    "net_structure_type": 0,
    "gap_size": 0,
    "num_memory_blocks": 0,
    "inner_group_num": 1,
    "down_scale_factor": 1,
    "type_vocab_size": 2,
    "vocab_size": 41,
}
TOLERANCE = 1e-5  # max abs error, float32 model vs float64 reference


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), dtype="float64")


# === Writing Google-format checkpoints ===


def _google_arrays(config, albert, seed=0):
    """Random tensors under the reference code's variable names."""
    rng = np.random.default_rng(seed)
    H, I = config["hidden_size"], config["intermediate_size"]
    E = config.get("embedding_size", H) if albert else H
    V, P, T = config["vocab_size"], config["max_position_embeddings"], config["type_vocab_size"]
    t = {}

    def normal(shape, std):
        return rng.normal(0.0, std, shape).astype("float32")

    def dense(name, n_in, n_out):
        t[f"{name}/kernel"] = normal((n_in, n_out), 0.3)
        t[f"{name}/bias"] = normal((n_out,), 0.1)

    def norm(name, n):
        t[f"{name}/gamma"] = 1.0 + normal((n,), 0.2)
        t[f"{name}/beta"] = normal((n,), 0.1)

    t["bert/embeddings/word_embeddings"] = normal((V, E), 0.5)
    t["bert/embeddings/token_type_embeddings"] = normal((T, E), 0.5)
    t["bert/embeddings/position_embeddings"] = normal((P, E), 0.5)
    norm("bert/embeddings/LayerNorm", E)
    if albert:
        dense("bert/encoder/embedding_hidden_mapping_in", E, H)
        blocks = [
            (
                f"bert/encoder/transformer/group_{g}/inner_group_0/attention_1",
                f"bert/encoder/transformer/group_{g}/inner_group_0/LayerNorm",
                f"bert/encoder/transformer/group_{g}/inner_group_0/ffn_1/intermediate/dense",
                f"bert/encoder/transformer/group_{g}/inner_group_0/ffn_1/intermediate/output/dense",
                f"bert/encoder/transformer/group_{g}/inner_group_0/LayerNorm_1",
            )
            for g in range(config["num_hidden_groups"])
        ]
    else:
        blocks = [
            (
                f"bert/encoder/layer_{i}/attention",
                f"bert/encoder/layer_{i}/attention/output/LayerNorm",
                f"bert/encoder/layer_{i}/intermediate/dense",
                f"bert/encoder/layer_{i}/output/dense",
                f"bert/encoder/layer_{i}/output/LayerNorm",
            )
            for i in range(config["num_hidden_layers"])
        ]
    for attention, ln1, inter, out, ln2 in blocks:
        for proj in ("query", "key", "value"):
            dense(f"{attention}/self/{proj}", H, H)
        dense(f"{attention}/output/dense", H, H)
        norm(ln1, H)
        dense(inter, H, I)
        dense(out, I, H)
        norm(ln2, H)
    dense("bert/pooler/dense", H, H)
    # Pre-training heads (run_pretraining.py): the MLM transform is H -> E.
    dense("cls/predictions/transform/dense", H, E)
    norm("cls/predictions/transform/LayerNorm", E)
    t["cls/predictions/output_bias"] = normal((V,), 0.1)
    t["cls/seq_relationship/output_weights"] = normal((2, H), 0.3)
    t["cls/seq_relationship/output_bias"] = normal((2,), 0.1)
    # Optimizer state the reference optimizers save beside every variable.
    for name in list(t):
        t[f"{name}/adam_m"] = normal(t[name].shape, 1e-3)
        t[f"{name}/adam_v"] = np.abs(normal(t[name].shape, 1e-3))
    t["global_step"] = np.array(1000, "int64")
    return t


def _write_checkpoint(prefix, arrays):
    """A TF1 checkpoint (tf.compat.v1 graph + Saver) holding `arrays` under
    exactly their names."""
    graph = tf.Graph()
    with graph.as_default():
        variables = {
            name: tf.compat.v1.get_variable(f"v{i}", initializer=value)
            for i, (name, value) in enumerate(arrays.items())
        }
        saver = tf.compat.v1.train.Saver(var_list=variables)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix), write_meta_graph=False)
    names = tf.train.load_checkpoint(str(prefix)).get_variable_to_shape_map()
    assert set(names) == set(arrays)  # the Google names, nothing else


def _make_bert_dir(directory, config=BERT_CONFIG, arrays=None, vocab_size=None):
    directory.mkdir(parents=True, exist_ok=True)
    arrays = _google_arrays(config, albert=False) if arrays is None else arrays
    _write_checkpoint(directory / "bert_model.ckpt", arrays)
    (directory / "bert_config.json").write_text(json.dumps(config, indent=2))
    n = config["vocab_size"] if vocab_size is None else vocab_size
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(n - 5)]
    (directory / "vocab.txt").write_text("".join(f"{tok}\n" for tok in tokens))
    return arrays


def _make_albert_dir(directory, config=ALBERT_CONFIG, arrays=None):
    directory.mkdir(parents=True, exist_ok=True)
    arrays = _google_arrays(config, albert=True, seed=1) if arrays is None else arrays
    _write_checkpoint(directory / "model.ckpt-best", arrays)
    (directory / "albert_config.json").write_text(json.dumps(config, indent=2))
    # A stand-in for the SentencePiece model (the tokenizer is tested
    # elsewhere); its size is counted from the .vocab listing beside it, as
    # the ALBERT archives ship it.
    (directory / "30k-clean.model").write_bytes(b"\x0a\x05stand-in spm model")
    pieces = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"] + [
        f"\u2581p{i}" for i in range(config["vocab_size"] - 5)
    ]
    (directory / "30k-clean.vocab").write_text("".join(f"{p}\t0\n" for p in pieces))
    return arrays


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("google") / "uncased_L-2_H-20_A-4"
    arrays = _make_bert_dir(directory)
    return directory, arrays


@pytest.fixture(scope="module")
def albert_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("google") / "albert_tiny"
    arrays = _make_albert_dir(directory)
    return directory, arrays


def _copy(directory, tmp_path, name=None):
    target = tmp_path / (name or directory.name)
    shutil.copytree(directory, target)
    return target


# === The reference architecture in numpy ===


def _layer_norm(x, t, name):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * t[f"{name}/gamma"] + t[f"{name}/beta"]


def _dense(x, t, name):
    return x @ t[f"{name}/kernel"].astype("float64") + t[f"{name}/bias"]


def _gelu_tanh(x):  # modeling.py's gelu
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _google_forward(t, config, inputs, albert):
    ids, seg, mask = inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"]
    B, S = ids.shape
    H, N, L = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    D = H // N
    x = (
        t["bert/embeddings/word_embeddings"][ids]
        + t["bert/embeddings/token_type_embeddings"][seg]
        + t["bert/embeddings/position_embeddings"][:S][None]
    ).astype("float64")
    x = _layer_norm(x, t, "bert/embeddings/LayerNorm")
    if albert:
        x = _dense(x, t, "bert/encoder/embedding_hidden_mapping_in")
    adder = (1.0 - mask[:, None, None, :].astype("float64")) * -10000.0  # (B, 1, 1, S)
    for i in range(L):
        if albert:
            group = int(i / L * config["num_hidden_groups"])
            p = f"bert/encoder/transformer/group_{group}/inner_group_0"
            attention, ln1 = f"{p}/attention_1", f"{p}/LayerNorm"
            inter, out, ln2 = (
                f"{p}/ffn_1/intermediate/dense",
                f"{p}/ffn_1/intermediate/output/dense",
                f"{p}/LayerNorm_1",
            )
        else:
            p = f"bert/encoder/layer_{i}"
            attention, ln1 = f"{p}/attention", f"{p}/attention/output/LayerNorm"
            inter, out, ln2 = (
                f"{p}/intermediate/dense",
                f"{p}/output/dense",
                f"{p}/output/LayerNorm",
            )

        def heads(name, x=x, attention=attention):  # (B, S, H) -> (B, N, S, D)
            return (
                _dense(x, t, f"{attention}/self/{name}").reshape(B, S, N, D).transpose(0, 2, 1, 3)
            )

        scores = heads("query") @ heads("key").transpose(0, 1, 3, 2) / np.sqrt(D) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ heads("value")).transpose(0, 2, 1, 3).reshape(B, S, H)
        x = _layer_norm(_dense(context, t, f"{attention}/output/dense") + x, t, ln1)
        h = _dense(_gelu_tanh(_dense(x, t, inter)), t, out)
        x = _layer_norm(h + x, t, ln2)
    pooled = np.tanh(_dense(x[:, 0], t, "bert/pooler/dense"))
    return x, pooled


def _max_errors(preset_dir, arrays, config, albert):
    backbone = BertBackbone.from_preset(preset_dir)
    inputs = make_inputs(vocab=config["vocab_size"])
    assert inputs["padding_mask"].min() == 0 and inputs["segment_ids"].max() == 1
    out = backbone(inputs)
    sequence, pooled = _google_forward(arrays, config, inputs, albert)
    errors = (
        np.abs(_np(out["sequence_output"]) - sequence).max(),
        np.abs(_np(out["pooled_output"]) - pooled).max(),
    )
    print(
        f"{'ALBERT' if albert else 'BERT'} max abs error: sequence {errors[0]:.2e}, "
        f"pooled {errors[1]:.2e}"
    )
    return backbone, errors


# === Conversion ===


def test_bert_matches_reference_forward(bert_dir, tmp_path):
    source, arrays = bert_dir
    out = convert_google_checkpoint(source, tmp_path / "preset")
    backbone, errors = _max_errors(out, arrays, BERT_CONFIG, albert=False)
    assert max(errors) <= TOLERANCE, errors
    assert backbone.activation == "gelu_approximate"  # Google's gelu is the tanh form
    assert backbone.layer_norm_epsilon == 1e-12
    assert (backbone.num_layers, backbone.num_groups, backbone.embedding_dim) == (2, 2, 20)
    assert backbone.dropout == 0.1 and backbone.max_sequence_length == 16
    doc = json.loads((out / "config.json").read_text())
    assert doc["tokenizer"] == {
        "kind": "wordpiece",
        "lowercase": True,
        "strip_accents": True,
        "reference": "google",  # google-research/bert tokenization.py
    }
    assert doc["metadata"]["source_checkpoint"] == str(source / "bert_model.ckpt")
    assert (out / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
    assert not (out / "spiece.model").exists()

    heads = read_safetensors(out / "heads.safetensors")
    assert sorted(heads) == [
        "cls.predictions.bias",
        "cls.predictions.transform.LayerNorm.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.dense.weight",
        "cls.seq_relationship.bias",
        "cls.seq_relationship.weight",
    ]
    # torch Linear layout (out, in); output_weights is already (2, H).
    np.testing.assert_array_equal(
        heads["cls.predictions.transform.dense.weight"],
        arrays["cls/predictions/transform/dense/kernel"].T,
    )
    np.testing.assert_array_equal(
        heads["cls.seq_relationship.weight"], arrays["cls/seq_relationship/output_weights"]
    )
    np.testing.assert_array_equal(
        heads["cls.predictions.bias"], arrays["cls/predictions/output_bias"]
    )
    assert sorted(backbone.head_tensors) == sorted(heads)


def test_albert_matches_reference_forward(albert_dir, tmp_path):
    source, arrays = albert_dir
    out = convert_google_checkpoint(source, tmp_path / "preset")
    backbone, errors = _max_errors(out, arrays, ALBERT_CONFIG, albert=True)
    assert max(errors) <= TOLERANCE, errors
    assert (backbone.num_layers, backbone.num_groups) == (3, 1)
    assert (backbone.embedding_dim, backbone.hidden_dim) == (10, 24)
    assert backbone.activation == "gelu_approximate" and backbone.dropout == 0
    # Shared layers are counted once: embeddings (V+P+T)E + 2E, E->H
    # projection, one block 4H^2 + 2HI + 9H + I, pooler H^2 + H.
    E, H, I = 10, 24, 30
    assert backbone.count_params() == (
        (41 + 20 + 2) * E + 2 * E + E * H + H + 4 * H * H + 2 * H * I + 9 * H + I + H * H + H
    )
    doc = json.loads((out / "config.json").read_text())
    assert doc["tokenizer"] == {"kind": "sentencepiece", "lowercase": True, "strip_accents": True}
    assert (out / "spiece.model").read_bytes() == (source / "30k-clean.model").read_bytes()
    assert not (out / "vocab.txt").exists()
    heads = read_safetensors(out / "heads.safetensors")
    assert sorted(heads) == [
        "predictions.LayerNorm.bias",
        "predictions.LayerNorm.weight",
        "predictions.bias",
        "predictions.dense.bias",
        "predictions.dense.weight",
        "sop_classifier.classifier.bias",
        "sop_classifier.classifier.weight",
    ]
    assert heads["predictions.dense.weight"].shape == (E, H)  # (out, in): H -> E
    np.testing.assert_array_equal(
        heads["predictions.dense.weight"], arrays["cls/predictions/transform/dense/kernel"].T
    )
    assert heads["sop_classifier.classifier.weight"].shape == (2, H)


def test_explicit_paths_and_casing(bert_dir, tmp_path):
    source, _ = bert_dir
    # Explicit files, no source directory: nothing names the casing.
    plain = _copy(source, tmp_path, "checkpoints")
    kwargs = dict(
        checkpoint=plain / "bert_model.ckpt",
        config_file=plain / "bert_config.json",
        vocab_file=plain / "vocab.txt",
    )
    with pytest.raises(CheckpointError, match="cased or an uncased.*lowercase=True or False"):
        convert_google_checkpoint(None, tmp_path / "a", **kwargs)
    assert not (tmp_path / "a" / "config.json").exists()
    out = convert_google_checkpoint(None, tmp_path / "b", lowercase=False, **kwargs)
    assert json.loads((out / "config.json").read_text())["tokenizer"]["lowercase"] is False
    # "cased" in the directory name; an archive that extracts into a folder.
    outer = tmp_path / "multi_cased_L-2_H-20_A-4"
    shutil.copytree(source, outer / "inner")
    out = convert_google_checkpoint(outer, tmp_path / "c")
    assert json.loads((out / "config.json").read_text())["tokenizer"] == {
        "kind": "wordpiece",
        "lowercase": False,
        "strip_accents": False,
        "reference": "google",
    }
    # A checkpoint prefix as the source.
    out = convert_google_checkpoint(source / "bert_model.ckpt", tmp_path / "d")
    assert (out / "model.weights.h5").is_file()


@pytest.mark.parametrize(
    "change, pattern",
    [
        (
            lambda t: t.pop("bert/encoder/layer_1/output/dense/bias"),
            r"missing tensors: bert/encoder/layer_1/output/dense/bias",
        ),
        (
            lambda t: t.update({"bert/encoder/layer_1/output/extra": np.zeros(3, "float32")}),
            r"unused tensors: bert/encoder/layer_1/output/extra",
        ),
        (
            lambda t: t.update({"cls/unknown_head/kernel": np.zeros((2, 2), "float32")}),
            r"unused tensors: cls/unknown_head/kernel",
        ),
        (
            lambda t: t.update(
                {"bert/encoder/layer_0/intermediate/dense/kernel": np.zeros((20, 21), "float32")}
            ),
            r"'bert/encoder/layer_0/intermediate/dense/kernel' has shape \(20, 21\).*shape \(20, 28\)",
        ),
        (
            lambda t: t.update({"cls/predictions/output_bias": np.zeros(44, "float32")}),
            r"'cls/predictions/output_bias' has shape \(44,\).*implies \(43,\)",
        ),
    ],
    ids=["missing", "unused", "unknown-head", "shape", "head-shape"],
)
def test_bad_tensors(bert_dir, tmp_path, change, pattern):
    source, arrays = bert_dir
    arrays = dict(arrays)
    change(arrays)
    directory = tmp_path / "uncased_bad"
    _make_bert_dir(directory, arrays=arrays)
    with pytest.raises(CheckpointError, match=pattern):
        convert_google_checkpoint(directory, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.backend_independent  # errors before a model is built
def test_bad_inputs(bert_dir, albert_dir, tmp_path):
    source, arrays = bert_dir
    small = tmp_path / "uncased_small_vocab"
    _make_bert_dir(small, arrays=arrays, vocab_size=42)
    with pytest.raises(CheckpointError, match=r"vocab.txt has 42 entries but .*vocab_size=43"):
        convert_google_checkpoint(small, tmp_path / "out")

    albert = _copy(albert_dir[0], tmp_path)
    config = json.loads((albert / "albert_config.json").read_text())
    (albert / "albert_config.json").write_text(json.dumps({**config, "inner_group_num": 2}))
    with pytest.raises(CheckpointError, match="inner_group_num=2 is not supported"):
        convert_google_checkpoint(albert, tmp_path / "out")

    relu6 = _copy(source, tmp_path, "uncased_relu6")
    (relu6 / "bert_config.json").write_text(json.dumps({**BERT_CONFIG, "hidden_act": "relu6"}))
    with pytest.raises(CheckpointError, match="hidden_act 'relu6' is not supported"):
        convert_google_checkpoint(relu6, tmp_path / "out")

    with pytest.raises(CheckpointError, match="holds an? BERT checkpoint"):
        convert_google_checkpoint(source, tmp_path / "out", model_type="albert")

    empty = tmp_path / "uncased_empty"
    empty.mkdir()
    (empty / "bert_config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="holds no TF1 checkpoint"):
        convert_google_checkpoint(empty, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# === Downloads (offline: file:// URLs and a patched opener) ===


def _zip_dir(directory, archive, top=True):
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(directory.iterdir()):
            zf.write(path, f"{directory.name}/{path.name}" if top else path.name)
    return archive


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_cli_convert_google(bert_dir, tmp_path, capsys):
    source, arrays = bert_dir
    out = tmp_path / "preset"
    assert main(["convert-google", str(source), str(out), "--cased"]) == 0
    assert "Wrote the preset directory" in capsys.readouterr().out
    doc = json.loads((out / "config.json").read_text())
    assert doc["tokenizer"]["lowercase"] is False  # the flag beats the name
    _, errors = _max_errors(out, arrays, BERT_CONFIG, albert=False)
    assert max(errors) <= TOLERANCE

    assert main(["convert-google", str(tmp_path / "missing"), str(tmp_path / "x")]) == 1
    assert "error:" in capsys.readouterr().err

    # A run_classifier checkpoint: its classifier is not a backbone tensor.
    finetuned = tmp_path / "uncased_finetuned"
    _make_bert_dir(finetuned, arrays={**arrays, "output_weights": np.zeros((3, 20), "float32")})
    assert main(["convert-google", str(finetuned), str(tmp_path / "ft")]) == 1
    assert "unused tensors: output_weights" in capsys.readouterr().err
    assert main(["convert-google", str(finetuned), str(tmp_path / "ft"), "--allow-partial"]) == 0

    archive = _zip_dir(source, tmp_path / "uncased_cli.zip")
    code = main(
        [
            "convert-google",
            str(tmp_path / "cache"),
            str(tmp_path / "dl"),
            "--download",
            archive.as_uri(),
            "--sha256",
            _sha256(archive),
        ]
    )
    assert code == 0 and (tmp_path / "dl" / "vocab.txt").is_file()

    with pytest.raises(SystemExit) as e:
        main(["convert-google", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "SOURCE",
        "OUTPUT",
        "--lowercase",
        "--cased",
        "--download",
        "--sha256",
        "--allow-partial",
    ):
        assert flag in text
