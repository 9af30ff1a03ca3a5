"""Google TF1 ELECTRA checkpoints (google-research/electra) -> bertzoo.

The checkpoints are written here in TF1 format with the variable names of
google-research/electra's run_pretraining.py and model/modeling.py: a
discriminator under `electra/` whose embeddings (E) are narrower than its
encoder (H), a narrower generator under `generator/` that reads
`electra/embeddings` through its own projection, both pre-training heads,
Adam slots and `global_step`, random values and no model config (as the
released archives). The converted presets are compared with an independent
numpy forward pass (exact erf GELU, post-LN, LayerNorm epsilon 1e-12,
-10000 mask adder) built on test_google's reference helpers.
"""

import json
import math
import shutil

import numpy as np
import pytest

from bertzoo import BertBackbone, ElectraPretrainer
from bertzoo.cli import main
from bertzoo.convert.common import CheckpointError
from bertzoo.convert.google import MODEL_TYPES, read_google_checkpoint
from bertzoo.convert.loader import convert_google_checkpoint
from bertzoo.io.manifest import MANIFEST_FILE
from bertzoo.io.safetensors import read_safetensors
from tests.conftest import make_inputs
from tests.convert.test_google import TOLERANCE, _dense, _layer_norm, _np, _write_checkpoint

# Pairwise-distinct sizes (batch 3 and seq 7 come from make_inputs). The
# reference rule max(1, H // 64) gives the discriminator 2 heads and the
# generator 1.
VOCAB, POSITIONS, SEGMENTS, EMBEDDING = 43, 16, 2, 24
DISCRIMINATOR = {"hidden": 128, "layers": 2, "intermediate": 56, "heads": 2}
GENERATOR = {"hidden": 64, "layers": 3, "intermediate": 36, "heads": 1}

DISCRIMINATOR_HEAD = {
    # HF name: (TF1 name, transposed?)
    "discriminator_predictions.dense.weight": ("discriminator_predictions/dense/kernel", True),
    "discriminator_predictions.dense.bias": ("discriminator_predictions/dense/bias", False),
    "discriminator_predictions.dense_prediction.weight": (
        "discriminator_predictions/dense_1/kernel",
        True,
    ),
    "discriminator_predictions.dense_prediction.bias": (
        "discriminator_predictions/dense_1/bias",
        False,
    ),
}
GENERATOR_HEAD = {
    "generator_predictions.dense.weight": ("generator_predictions/dense/kernel", True),
    "generator_predictions.dense.bias": ("generator_predictions/dense/bias", False),
    "generator_predictions.LayerNorm.weight": ("generator_predictions/LayerNorm/gamma", False),
    "generator_predictions.LayerNorm.bias": ("generator_predictions/LayerNorm/beta", False),
    "generator_lm_head.bias": ("generator_predictions/output_bias", False),
}


# === Writing ELECTRA checkpoints ===


def _electra_arrays(seed=0, generator="shared"):
    """Random tensors under the reference code's variable names.

    generator: "shared" (the released models: `generator/` reading
    `electra/embeddings`), "own" (`untied_generator_embeddings`: its own
    H_gen-wide tables, no projection), "tied" (`untied_generator` off: the
    generator's head on `electra/`), or None.
    """
    rng = np.random.default_rng(seed)
    t = {}

    def normal(shape, std):
        return rng.normal(0.0, std, shape).astype("float32")

    def dense(name, n_in, n_out):
        t[f"{name}/kernel"] = normal((n_in, n_out), 1.0 / math.sqrt(n_in))
        t[f"{name}/bias"] = normal((n_out,), 0.1)

    def norm(name, n):
        t[f"{name}/gamma"] = 1.0 + normal((n,), 0.2)
        t[f"{name}/beta"] = normal((n,), 0.1)

    def embeddings(scope, width):
        t[f"{scope}/embeddings/word_embeddings"] = normal((VOCAB, width), 0.5)
        t[f"{scope}/embeddings/token_type_embeddings"] = normal((SEGMENTS, width), 0.5)
        t[f"{scope}/embeddings/position_embeddings"] = normal((POSITIONS, width), 0.5)
        norm(f"{scope}/embeddings/LayerNorm", width)

    def encoder(scope, sizes, width):
        H, inner = sizes["hidden"], sizes["intermediate"]
        if width != H:  # modeling.py: tf.layers.dense(..., name="embeddings_project")
            dense(f"{scope}/embeddings_project", width, H)
        for i in range(sizes["layers"]):
            p = f"{scope}/encoder/layer_{i}"
            for proj in ("query", "key", "value"):
                dense(f"{p}/attention/self/{proj}", H, H)
            dense(f"{p}/attention/output/dense", H, H)
            norm(f"{p}/attention/output/LayerNorm", H)
            dense(f"{p}/intermediate/dense", H, inner)
            dense(f"{p}/output/dense", inner, H)
            norm(f"{p}/output/LayerNorm", H)

    def generator_head(hidden, width):  # run_pretraining.py get_token_logits
        dense("generator_predictions/dense", hidden, width)
        norm("generator_predictions/LayerNorm", width)
        t["generator_predictions/output_bias"] = normal((VOCAB,), 0.1)

    embeddings("electra", EMBEDDING)
    encoder("electra", DISCRIMINATOR, EMBEDDING)
    # run_pretraining.py _get_discriminator_output: two tf.layers.dense.
    dense("discriminator_predictions/dense", DISCRIMINATOR["hidden"], DISCRIMINATOR["hidden"])
    dense("discriminator_predictions/dense_1", DISCRIMINATOR["hidden"], 1)
    if generator == "shared":
        encoder("generator", GENERATOR, EMBEDDING)
        generator_head(GENERATOR["hidden"], EMBEDDING)
    elif generator == "own":
        embeddings("generator", GENERATOR["hidden"])
        encoder("generator", GENERATOR, GENERATOR["hidden"])
        generator_head(GENERATOR["hidden"], GENERATOR["hidden"])
    elif generator == "tied":
        generator_head(DISCRIMINATOR["hidden"], EMBEDDING)
    # Optimizer state (model/optimization.py AdamWeightDecayOptimizer).
    for name in list(t):
        t[f"{name}/adam_m"] = normal(t[name].shape, 1e-3)
        t[f"{name}/adam_v"] = np.abs(normal(t[name].shape, 1e-3))
    t["global_step"] = np.array(1000, "int64")
    return t


def _make_electra_dir(directory, arrays=None, configs=None):
    """A directory as the released archives extract (a checkpoint named
    after the directory and `vocab.txt`, no model config), with the config
    files `configs` ({file name: dict}) added."""
    directory.mkdir(parents=True, exist_ok=True)
    arrays = _electra_arrays() if arrays is None else arrays
    _write_checkpoint(directory / directory.name, arrays)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(VOCAB - 5)]
    (directory / "vocab.txt").write_text("".join(f"{tok}\n" for tok in tokens))
    for name, config in (configs or {}).items():
        (directory / name).write_text(json.dumps(config, indent=2))
    return arrays


@pytest.fixture(scope="module")
def electra_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("google_electra") / "electra_tiny"
    return directory, _make_electra_dir(directory)


@pytest.fixture(scope="module")
def converted(electra_dir, tmp_path_factory):
    source, arrays = electra_dir
    out = convert_google_checkpoint(
        source, tmp_path_factory.mktemp("out") / "preset", lowercase=True
    )
    return source, arrays, out


# === The reference architecture in numpy ===

_erf = np.vectorize(math.erf)


def _gelu_erf(x):  # model/modeling.py's gelu
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _electra_forward(t, inputs, scope, sizes, tables="electra"):
    """modeling.py's BertModel under `scope` with the embedding tables of
    `tables`: embeddings + LayerNorm, `embeddings_project` when there is
    one, post-LN blocks; the sequence output (B, S, H)."""
    ids, seg, mask = inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"]
    B, S = ids.shape
    H, N = sizes["hidden"], sizes["heads"]
    D = H // N
    x = (
        t[f"{tables}/embeddings/word_embeddings"][ids]
        + t[f"{tables}/embeddings/token_type_embeddings"][seg]
        + t[f"{tables}/embeddings/position_embeddings"][:S][None]
    ).astype("float64")
    x = _layer_norm(x, t, f"{tables}/embeddings/LayerNorm")
    if f"{scope}/embeddings_project/kernel" in t:
        x = _dense(x, t, f"{scope}/embeddings_project")
    adder = (1.0 - mask[:, None, None, :].astype("float64")) * -10000.0  # (B, 1, 1, S)
    for i in range(sizes["layers"]):
        p = f"{scope}/encoder/layer_{i}"

        def heads(name, x=x, p=p):  # (B, S, H) -> (B, N, S, D)
            return (
                _dense(x, t, f"{p}/attention/self/{name}").reshape(B, S, N, D).transpose(0, 2, 1, 3)
            )

        scores = heads("query") @ heads("key").transpose(0, 1, 3, 2) / np.sqrt(D) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ heads("value")).transpose(0, 2, 1, 3).reshape(B, S, H)
        x = _layer_norm(
            _dense(context, t, f"{p}/attention/output/dense") + x,
            t,
            f"{p}/attention/output/LayerNorm",
        )
        h = _dense(_gelu_erf(_dense(x, t, f"{p}/intermediate/dense")), t, f"{p}/output/dense")
        x = _layer_norm(h + x, t, f"{p}/output/LayerNorm")
    return x


def _inputs():
    inputs = make_inputs(vocab=VOCAB)
    assert inputs["padding_mask"].min() == 0 and inputs["segment_ids"].max() == 1
    return inputs


def _max_error(preset_dir, arrays, scope, sizes, tables="electra"):
    backbone = BertBackbone.from_preset(preset_dir)
    inputs = _inputs()
    out = backbone(inputs)
    assert "pooled_output" not in out  # ELECTRA has no pooler
    expected = _electra_forward(arrays, inputs, scope, sizes, tables)
    error = np.abs(_np(out["sequence_output"]) - expected).max()
    print(f"ELECTRA {scope} max abs error: {error:.2e}")
    return backbone, error


def _check_sizes(backbone, sizes, embedding_dim):
    assert (
        backbone.hidden_dim,
        backbone.num_layers,
        backbone.intermediate_dim,
        backbone.num_heads,
        backbone.embedding_dim,
    ) == (sizes["hidden"], sizes["layers"], sizes["intermediate"], sizes["heads"], embedding_dim)
    assert (backbone.vocabulary_size, backbone.max_sequence_length) == (VOCAB, POSITIONS)
    assert backbone.num_segments == SEGMENTS and not backbone.use_pooler
    assert backbone.activation == "gelu"  # ELECTRA's gelu is the exact erf form
    assert backbone.layer_norm_epsilon == 1e-12 and backbone.dropout == 0.1


# === Conversion ===


def test_discriminator_and_generator_match_reference(converted):
    source, arrays, out = converted
    disc, error = _max_error(out, arrays, "electra", DISCRIMINATOR)
    assert error <= TOLERANCE, error
    _check_sizes(disc, DISCRIMINATOR, EMBEDDING)
    assert disc.embeddings_layer.projection is not None  # E != H

    gen, error = _max_error(out / "generator", arrays, "generator", GENERATOR)
    assert error <= TOLERANCE, error
    _check_sizes(gen, GENERATOR, EMBEDDING)
    # Its own tables are the shared ones, copied.
    np.testing.assert_array_equal(
        _np(gen.embeddings_layer.token_embedding.embeddings),
        arrays["electra/embeddings/word_embeddings"],
    )
    np.testing.assert_array_equal(
        _np(gen.embeddings_layer.projection.kernel), arrays["generator/embeddings_project/kernel"]
    )

    for directory, what in ((out, "discriminator"), (out / "generator", "generator")):
        doc = json.loads((directory / "config.json").read_text())
        assert doc["tokenizer"] == {
            "kind": "wordpiece",
            "lowercase": True,
            "strip_accents": True,
            "reference": "google",
        }
        assert doc["metadata"]["model_type"] == "electra"
        assert doc["metadata"]["source_checkpoint"] == str(source / "electra_tiny")
        assert f"ELECTRA {what}" in doc["description"]
        assert (directory / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
        # Each a complete preset, with its own manifest.
        assert (directory / MANIFEST_FILE).is_file()


def test_head_tensors(converted):
    _, arrays, out = converted
    for directory, names in ((out, DISCRIMINATOR_HEAD), (out / "generator", GENERATOR_HEAD)):
        heads = read_safetensors(directory / "heads.safetensors")
        assert sorted(heads) == sorted(names)
        for hf_name, (tf_name, transposed) in names.items():
            expected = arrays[tf_name].T if transposed else arrays[tf_name]
            np.testing.assert_array_equal(heads[hf_name], expected)
        assert sorted(BertBackbone.from_preset(directory).head_tensors) == sorted(names)
    H, Hg = DISCRIMINATOR["hidden"], GENERATOR["hidden"]
    heads = read_safetensors(out / "heads.safetensors")
    assert heads["discriminator_predictions.dense_prediction.weight"].shape == (1, H)
    assert heads["discriminator_predictions.dense_prediction.bias"].shape == (1,)
    heads = read_safetensors(out / "generator" / "heads.safetensors")
    assert heads["generator_predictions.dense.weight"].shape == (EMBEDDING, Hg)  # (out, in)
    assert heads["generator_lm_head.bias"].shape == (VOCAB,)


def test_pretrainer_loads_both_heads(converted):
    _, arrays, out = converted
    model = ElectraPretrainer(
        BertBackbone.from_preset(out / "generator"), BertBackbone.from_preset(out)
    )
    assert sorted(model.head_weights_loaded) == sorted({**DISCRIMINATOR_HEAD, **GENERATOR_HEAD})
    inputs = _inputs()
    hidden = _electra_forward(arrays, inputs, "electra", DISCRIMINATOR)
    expected = _dense(
        _gelu_erf(_dense(hidden, arrays, "discriminator_predictions/dense")),
        arrays,
        "discriminator_predictions/dense_1",
    )[..., 0]
    logits = _np(model.discriminator_logits(inputs))
    assert logits.shape == expected.shape == (3, 7)
    error = np.abs(logits - expected).max()
    print(f"ELECTRA discriminator logits max abs error: {error:.2e}")
    assert error <= 10 * TOLERANCE, error
    # The directory pair loads as one.
    pair = ElectraPretrainer.from_preset(out)
    assert sorted(pair.head_weights_loaded) == sorted(model.head_weights_loaded)


@pytest.mark.parametrize("variant", ["own", "tied", None])
def test_generator_variants(variant, tmp_path):
    """`untied_generator_embeddings` (the generator's own tables, no
    projection), `untied_generator` off (the generator is the discriminator
    with the generator's head), and a checkpoint without generator."""
    source = tmp_path / "uncased_electra"
    arrays = _make_electra_dir(source, _electra_arrays(seed=1, generator=variant))
    out = convert_google_checkpoint(source, tmp_path / "preset")  # "uncased" in the name
    assert json.loads((out / "config.json").read_text())["tokenizer"]["lowercase"] is True
    _, error = _max_error(out, arrays, "electra", DISCRIMINATOR)
    assert error <= TOLERANCE, error
    if variant is None:
        assert not (out / "generator").exists()
        return
    if variant == "own":
        gen, error = _max_error(out / "generator", arrays, "generator", GENERATOR, "generator")
        _check_sizes(gen, GENERATOR, GENERATOR["hidden"])
        assert gen.embeddings_layer.projection is None
        width = GENERATOR["hidden"]
    else:
        gen, error = _max_error(out / "generator", arrays, "electra", DISCRIMINATOR)
        _check_sizes(gen, DISCRIMINATOR, EMBEDDING)
        width = EMBEDDING
    assert error <= TOLERANCE, error
    heads = read_safetensors(out / "generator" / "heads.safetensors")
    assert sorted(heads) == sorted(GENERATOR_HEAD)
    assert heads["generator_predictions.dense.weight"].shape == (width, gen.hidden_dim)
    assert sorted(read_safetensors(out / "heads.safetensors")) == sorted(DISCRIMINATOR_HEAD)


# === Config: from the shapes, or from a config file ===


@pytest.mark.backend_independent  # reads the checkpoint: no model
def test_config_inferred_from_shapes(electra_dir):
    source, _ = electra_dir
    ckpt = read_google_checkpoint(source, lowercase=True)
    assert ckpt.model_type == "electra" and ckpt.config_path is None
    assert (ckpt.scope, ckpt.embeddings_scope) == ("electra", "electra")
    for part, sizes in ((ckpt, DISCRIMINATOR), (ckpt.generator, GENERATOR)):
        config = part.backbone_config
        assert (
            config["hidden_dim"],
            config["num_layers"],
            config["intermediate_dim"],
            config["num_heads"],  # max(1, H // 64)
            config["embedding_dim"],
            config["vocabulary_size"],
            config["max_sequence_length"],
            config["num_segments"],
        ) == (
            sizes["hidden"],
            sizes["layers"],
            sizes["intermediate"],
            sizes["heads"],
            EMBEDDING,
            VOCAB,
            POSITIONS,
            SEGMENTS,
        )
        assert config["use_pooler"] is False and config["activation"] == "gelu"
    assert (ckpt.generator.scope, ckpt.generator.embeddings_scope) == ("generator", "electra")
    # Optimizer slots and global_step are not read; the shared tables are in both.
    assert not any(n.endswith(("adam_m", "adam_v")) or n == "global_step" for n in ckpt.tensors)
    assert "electra/embeddings/word_embeddings" in ckpt.generator.tensors
    assert not any(n.startswith("generator") for n in ckpt.tensors)
    assert sorted(ckpt.head_shapes) == sorted(t for t, _ in DISCRIMINATOR_HEAD.values())
    assert sorted(ckpt.generator.head_shapes) == sorted(t for t, _ in GENERATOR_HEAD.values())


def test_config_files(electra_dir, tmp_path):
    """Config files beside the checkpoint (Chinese-ELECTRA's names; Hugging
    Face keys) set what the shapes cannot: the heads. The converted models
    compute with them."""
    _, arrays = electra_dir
    source = tmp_path / "electra_configs"
    disc_config = {
        "model_type": "electra",
        "vocab_size": VOCAB,
        "embedding_size": EMBEDDING,
        "hidden_size": DISCRIMINATOR["hidden"],
        "num_hidden_layers": DISCRIMINATOR["layers"],
        "num_attention_heads": 4,
        "intermediate_size": DISCRIMINATOR["intermediate"],
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "max_position_embeddings": POSITIONS,
        "type_vocab_size": SEGMENTS,
        "layer_norm_eps": 1e-12,
    }
    gen_config = {
        **{k: v for k, v in disc_config.items() if k != "hidden_dropout_prob"},
        "hidden_size": GENERATOR["hidden"],
        "num_hidden_layers": GENERATOR["layers"],
        "num_attention_heads": 2,
        "intermediate_size": GENERATOR["intermediate"],
    }
    _make_electra_dir(
        source,
        arrays,
        {
            "tiny_discriminator_config.json": disc_config,
            "tiny_generator_config.json": gen_config,
        },
    )
    out = convert_google_checkpoint(source, tmp_path / "preset", lowercase=True)
    disc, error = _max_error(out, arrays, "electra", {**DISCRIMINATOR, "heads": 4})
    assert error <= TOLERANCE, error
    assert disc.num_heads == 4 and disc.dropout == 0.0
    gen, error = _max_error(out / "generator", arrays, "generator", {**GENERATOR, "heads": 2})
    assert error <= TOLERANCE, error
    assert gen.num_heads == 2 and gen.dropout == 0.0  # the discriminator's, as the reference

    # ELECTRA's pre-training hparams JSON (configure_pretraining.py keys, as
    # KoELECTRA's small_config.json): overrides for the discriminator, the
    # casing; the generator keeps the rule and the discriminator's dropout.
    hparams = tmp_path / "hparams.json"
    hparams.write_text(
        json.dumps(
            {
                "model_size": "small",
                "vocab_size": VOCAB,
                "embedding_size": None,
                "do_lower_case": False,
                "generator_hidden_size": 0.5,
                "model_hparam_overrides": {"num_attention_heads": 8, "hidden_dropout_prob": 0.2},
            }
        )
    )
    ckpt = read_google_checkpoint(tmp_path / "electra_configs", config_file=hparams)
    assert ckpt.config_path == hparams
    assert ckpt.backbone_config["num_heads"] == 8
    assert ckpt.backbone_config["embedding_dim"] == EMBEDDING  # null: from the shapes
    assert ckpt.generator.backbone_config["dropout"] == 0.2
    # The generator config beside the checkpoint still describes the generator.
    assert ckpt.generator.backbone_config["num_heads"] == 2
    assert ckpt.preset_info["tokenizer"]["lowercase"] is False  # do_lower_case

    # A config that disagrees with the tensors: their shapes say so.
    wrong = tmp_path / "wrong_config.json"
    wrong.write_text(json.dumps({**disc_config, "intermediate_size": 50}))
    with pytest.raises(CheckpointError, match=r"intermediate/dense/kernel' has shape \(128, 56\)"):
        convert_google_checkpoint(source, tmp_path / "x", lowercase=True, config_file=wrong)
    assert not (tmp_path / "x").exists()


# === Errors ===


@pytest.mark.parametrize(
    "change, pattern",
    [
        (
            lambda t: t.pop("electra/embeddings/word_embeddings"),
            r"has no 'electra/embeddings/word_embeddings': not a complete ELECTRA checkpoint",
        ),
        (
            lambda t: t.pop("generator/encoder/layer_2/output/dense/bias"),
            r"missing tensors: generator/encoder/layer_2/output/dense/bias",
        ),
        (
            lambda t: t.update({"generator/encoder/extra": np.zeros(3, "float32")}),
            r"unused tensors: generator/encoder/extra",
        ),
        (
            lambda t: t.update({"electra/pooler/dense/kernel": np.zeros((128, 128), "float32")}),
            r"unused tensors: electra/pooler/dense/kernel",
        ),
        (
            lambda t: t.update({"generator_predictions/output_bias": np.zeros(44, "float32")}),
            r"'generator_predictions/output_bias' has shape \(44,\).*tensor shapes implies \(43,\)",
        ),
        (
            lambda t: t.update(
                {
                    "generator/encoder/layer_5/output/dense/bias": np.zeros(
                        GENERATOR["hidden"], "float32"
                    )
                }
            ),
            r"layers under generator/encoder/ are numbered 0, 1, 2, 5",
        ),
    ],
    ids=["no-word-embeddings", "missing", "unused", "pooler", "head-shape", "layer-gap"],
)
def test_bad_tensors(electra_dir, tmp_path, change, pattern):
    _, arrays = electra_dir
    arrays = {k: v for k, v in arrays.items() if not k.endswith(("/adam_m", "/adam_v"))}
    change(arrays)
    source = tmp_path / "electra_bad"
    _make_electra_dir(source, arrays)
    with pytest.raises(CheckpointError, match=pattern):
        convert_google_checkpoint(source, tmp_path / "out", lowercase=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.backend_independent  # errors before a model is built
def test_bad_inputs(electra_dir, tmp_path):
    source, _ = electra_dir
    # The released archives' directory names say nothing about the casing.
    with pytest.raises(CheckpointError, match="cased or an uncased.*released ELECTRA models"):
        convert_google_checkpoint(source, tmp_path / "out")
    with pytest.raises(CheckpointError, match="holds an? ELECTRA checkpoint"):
        convert_google_checkpoint(source, tmp_path / "out", model_type="bert", lowercase=True)
    relu6 = tmp_path / "relu6.json"
    relu6.write_text(json.dumps({"hidden_act": "relu6"}))
    with pytest.raises(CheckpointError, match="hidden_act 'relu6' is not supported.*erf form"):
        convert_google_checkpoint(source, tmp_path / "out", lowercase=True, config_file=relu6)
    two = shutil.copytree(source, tmp_path / "electra_two")
    for name in ("a_generator_config.json", "b_generator_config.json"):
        (two / name).write_text("{}")
    with pytest.raises(CheckpointError, match="several candidate generator configs"):
        convert_google_checkpoint(two, tmp_path / "out", lowercase=True)
    assert not (tmp_path / "out").exists()


# === Command line ===


def test_cli_convert_google_electra(converted, tmp_path, capsys):
    source, arrays, _ = converted
    out = tmp_path / "preset"
    assert main(["convert-google", str(source), str(out), "--lowercase"]) == 0
    assert "Wrote the preset directory" in capsys.readouterr().out
    assert (out / "generator" / "model.weights.h5").is_file()
    _, error = _max_error(out / "generator", arrays, "generator", GENERATOR)
    assert error <= TOLERANCE

    assert main(["convert-google", str(source), str(tmp_path / "x")]) == 1
    assert "released ELECTRA models are uncased" in capsys.readouterr().err

    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"num_attention_heads": 8}))
    args = ["convert-google", str(source), str(tmp_path / "c"), "--cased", "--config", str(config)]
    assert main([*args, "--model-type", "electra"]) == 0
    doc = json.loads((tmp_path / "c" / "config.json").read_text())
    assert doc["backbone"]["num_heads"] == 8 and doc["tokenizer"]["lowercase"] is False
    doc = json.loads((tmp_path / "c" / "generator" / "config.json").read_text())
    assert doc["backbone"]["num_heads"] == GENERATOR["heads"]  # the rule: a size key

    with pytest.raises(SystemExit) as e:
        main(["convert-google", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--config" in text and "ELECTRA" in text
    assert all(t in text for t in MODEL_TYPES)  # --model-type's choices
