"""Google's original TF1 checkpoints -> a bertzoo preset directory.

Reads the checkpoints released with google-research/bert
(`bert_model.ckpt.{index,data-*}` + `bert_config.json` + `vocab.txt`),
google-research/albert (`model.ckpt-best.*` + `albert_config.json` +
`30k-clean.model`) and google-research/electra (a checkpoint + `vocab.txt`,
no model config; the same layout in KoELECTRA's and Chinese-ELECTRA's TF1
checkpoints), and writes `config.json`, `model.weights.h5`,
`heads.safetensors` (the pre-training heads, in Hugging Face names and
layouts) and the vocabulary (`vocab.txt` or `spiece.model`).
An ELECTRA checkpoint's generator becomes a complete preset of its own in
the `generator/` subdirectory of the discriminator's.

Variable names, as the reference code creates them (google-research/bert
modeling.py + run_pretraining.py, google-research/albert modeling.py +
run_pretraining.py, google-research/electra model/modeling.py +
run_pretraining.py). TF1 Dense kernels are stored `(in, out)`, as in Keras.

    bert/embeddings/{word,position,token_type}_embeddings, LayerNorm/{gamma,beta}
    BERT:   bert/encoder/layer_{i}/attention/self/{query,key,value}/{kernel,bias}
            bert/encoder/layer_{i}/attention/output/{dense,LayerNorm}/...
            bert/encoder/layer_{i}/{intermediate,output}/dense/...
            bert/encoder/layer_{i}/output/LayerNorm/...
    ALBERT: bert/encoder/embedding_hidden_mapping_in/{kernel,bias}   (E -> H)
            bert/encoder/transformer/group_{g}/inner_group_0/
                attention_1/self/{query,key,value}/...
                attention_1/output/dense/...
                LayerNorm/...          (after attention)
                ffn_1/intermediate/dense/...
                ffn_1/intermediate/output/dense/...
                LayerNorm_1/...        (after the feed-forward block)
    bert/pooler/dense/{kernel,bias}
    cls/predictions/transform/{dense,LayerNorm}/..., cls/predictions/output_bias
    cls/seq_relationship/output_weights (2, H), cls/seq_relationship/output_bias

    ELECTRA: the discriminator is BERT's encoder under `electra/`, without
    pooler; the generator, a narrower one under `generator/`, reads the
    discriminator's embedding tables and their LayerNorm (`electra/embeddings`)
    through its own projection, unless it was trained with
    `untied_generator_embeddings` (then it has `generator/embeddings/...`,
    H_gen wide, and no projection).
            electra/embeddings/{word,position,token_type}_embeddings, LayerNorm/...
            electra/embeddings_project/{kernel,bias}      (E -> H, when E != H)
            electra/encoder/layer_{i}/...                 (BERT's block names)
            generator/embeddings_project/{kernel,bias}    (E -> H_gen, when E != H_gen)
            generator/encoder/layer_{i}/...
            discriminator_predictions/dense/{kernel,bias}     (H -> H, hidden_act)
            discriminator_predictions/dense_1/{kernel,bias}   (H -> 1)
            generator_predictions/dense/{kernel,bias}         (H_gen -> E, hidden_act)
            generator_predictions/LayerNorm/{gamma,beta}
            generator_predictions/output_bias                 (V; logits tied to
                                                               the word embeddings)
    A checkpoint of a generator tied to the discriminator (`untied_generator`
    off) has `generator_predictions/...` on `electra/` alone.

ELECTRA's archives ship no model config: the sizes are read from the tensor
shapes and the heads follow the reference rule max(1, H // 64)
(util/training_utils.py `get_bert_config`, run_pretraining.py
`get_generator_config`), unless a config file says otherwise (a
`bert_config.json`-style or Hugging Face `config.json`, or the pre-training
`--hparams` JSON with its `model_hparam_overrides` and `do_lower_case`; a
`*generator*config*.json` beside the checkpoint describes the generator).

Numerics of the reference code that the converted preset keeps: BERT's and
ALBERT's "gelu" is the tanh approximation (bertzoo "gelu_approximate"),
ELECTRA's the exact erf form (bertzoo "gelu"); LayerNorm epsilon 1e-12
(tf.contrib.layers.layer_norm, which all three use), post-LN blocks.

Downloads of the official archives: `bertzoo.convert.download`.
"""

import dataclasses
import logging
import re
import shutil
from pathlib import Path

import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.common import (
    CheckpointError,
    assign_tensors,
    check_group_map,
    read_json_object,
)
from bertzoo.io.publish import publish_directory
from bertzoo.tokenizers import tokenizer_class

logger = logging.getLogger(__name__)

MODEL_TYPES = ("bert", "albert", "electra")

# Google's `get_activation` names (lowercased by the reference code) ->
# bertzoo activations. BERT's and ALBERT's modeling.py define "gelu" as
# 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))); ELECTRA's
# model/modeling.py as x * 0.5 * (1 + erf(x / sqrt(2))).
_TANH_GELU = {"gelu": "gelu_approximate", "relu": "relu", "tanh": "tanh"}
_ACTIVATIONS = {
    "bert": _TANH_GELU,
    "albert": _TANH_GELU,
    "electra": {"gelu": "gelu", "relu": "relu", "tanh": "tanh"},
}
_GELU_NOTES = {
    "bert": "Google's 'gelu' is the tanh approximation, bertzoo 'gelu_approximate'",
    "albert": "Google's 'gelu' is the tanh approximation, bertzoo 'gelu_approximate'",
    "electra": "ELECTRA's 'gelu' is the exact erf form, bertzoo 'gelu'",
}

# tf.contrib.layers.layer_norm, which all three reference models use.
_LAYER_NORM_EPSILON = 1e-12

# Never part of the model: the step counter, Adam's beta powers, and the
# optimizer slots the reference optimizers create beside each variable:
# "<var>/adam_m", "<var>/adam_v" (BERT's AdamWeightDecayOptimizer, ALBERT's
# LAMBOptimizer) and the slot names of the tf.compat.v1.train optimizers
# (Adam, Momentum, Adagrad, RMSProp, Ftrl, Adadelta); "temperature", a
# training scalar that transformers' ELECTRA reader also skips.
_IGNORED_NAMES = ("global_step", "beta1_power", "beta2_power", "temperature")
_SLOT_SUFFIX = re.compile(
    r"/(adam_m|adam_v|Adam|Adam_1|Momentum|Adagrad|RMSProp|RMSProp_1|Ftrl|Ftrl_1"
    r"|Adadelta|Adadelta_1)$"
)

_ALBERT_NAME = re.compile(r"/transformer/group_\d+/inner_group_\d+/")
_BERT_NAME = re.compile(r"^bert/encoder/layer_\d+/")
_ELECTRA_NAME = re.compile(r"^(electra|generator)/encoder/layer_\d+/")
# A BERT-style encoder's layers, under any scope.
_LAYER_NAME = re.compile(r"^(?P<scope>[^/]+)/encoder/layer_(?P<index>\d+)/")

# The checkpoint scope of each model type's encoder (the one converted at
# the preset's top level), and the scopes of its pre-training heads.
_SCOPES = {"bert": "bert", "albert": "bert", "electra": "electra"}
_HEAD_SCOPES = {
    "bert": ("cls/",),
    "albert": ("cls/",),
    "electra": ("discriminator_predictions/",),
}
# ELECTRA's generator: its encoder scope and its head's.
_GENERATOR_SCOPE = "generator"
_GENERATOR_HEAD_SCOPES = ("generator_predictions/",)
# The model config beside the checkpoint, first match wins. ELECTRA's
# archives ship none (it is optional there); a config naming the generator
# describes the generator, never the discriminator.
_CONFIG_FILES = {
    "bert": ("bert_config.json", "*config*.json"),
    "albert": ("albert_config.json", "*config*.json"),
    "electra": (
        "*discriminator*config*.json",
        "electra_config.json",
        "bert_config.json",
        "config.json",
        "*config*.json",
    ),
}
_GENERATOR_CONFIG_FILES = ("*generator*config*.json",)
_GENERATOR_FILE_NAME = re.compile("generator", re.IGNORECASE)
# Keys of ELECTRA's pre-training hparams JSON (configure_pretraining.py)
# that a model config never has.
_HPARAMS_KEYS = ("model_size", "model_hparam_overrides", "generator_hidden_size")


def _is_ignored(name):
    return name in _IGNORED_NAMES or _SLOT_SUFFIX.search(name) is not None


# === Locating the files ===


def _checkpoint_prefixes(directory):
    return sorted(str(p)[: -len(".index")] for p in Path(directory).glob("*.index"))


def _search_dirs(source):
    """`source` and, for archives that extract into one folder, its only
    subdirectory."""
    source = Path(source)
    dirs = [source]
    subdirs = [p for p in source.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))]
    if not _checkpoint_prefixes(source) and len(subdirs) == 1:
        dirs.append(subdirs[0])
    return dirs


def _pick_checkpoint(source):
    source = Path(source)
    if not source.is_dir():
        if Path(f"{source}.index").is_file():
            return str(source)  # a checkpoint prefix
        raise CheckpointError(
            f"{source} is neither a directory nor a checkpoint prefix (no {source}.index)."
        )
    for directory in _search_dirs(source):
        prefixes = _checkpoint_prefixes(directory)
        if len(prefixes) == 1:
            return prefixes[0]
        if len(prefixes) > 1:
            import tensorflow as tf

            latest = tf.train.latest_checkpoint(str(directory))
            by_path = {Path(p).resolve(): p for p in prefixes}
            if latest and Path(latest).resolve() in by_path:
                return by_path[Path(latest).resolve()]
            raise CheckpointError(
                f"{directory} holds several checkpoints ({', '.join(Path(p).name for p in prefixes)}) "
                "and no 'checkpoint' file says which is the latest: pass checkpoint=PREFIX."
            )
    raise CheckpointError(
        f"{source} holds no TF1 checkpoint: no '<prefix>.index' file (such as "
        "bert_model.ckpt.index or model.ckpt-best.index) was found in it or in its "
        "only subdirectory."
    )


def _pick_file(directory, patterns, what, keyword, required=True, exclude=None):
    """The one file of `directory` matching the first of `patterns` that
    matches any (names `exclude` searches skipped); None when none matches
    and the file is not `required`."""
    found = []
    for pattern in patterns:
        found = sorted(
            p
            for p in Path(directory).glob(pattern)
            if p.is_file() and not (exclude and exclude.search(p.name))
        )
        if found:
            break
    if len(found) == 1:
        return found[0]
    if not found:
        if not required:
            return None
        raise CheckpointError(
            f"{directory} has no {what} ({' or '.join(patterns)}): pass {keyword}=PATH."
        )
    hint = f"pass {keyword}=PATH" if keyword else "keep one of them beside the checkpoint"
    raise CheckpointError(
        f"{directory} has several candidate {what}s ({', '.join(p.name for p in found)}): {hint}."
    )


# === Config ===


def google_config_to_backbone(config, model_type, source="config", shapes=None, scope=None):
    """Maps a `bert_config.json` / `albert_config.json` dict (for ELECTRA:
    the same keys, as `electra_config` makes them) to `BertBackbone`
    arguments.

    Args:
        config: the parsed JSON.
        model_type: "bert", "albert" or "electra".
        source: what to name in errors.
        shapes: the checkpoint's `{name: shape}`; fills `type_vocab_size` and
            `max_position_embeddings` when the config leaves them out, and
            tells whether the checkpoint has a pooler (ELECTRA never has).
        scope: the checkpoint scope of the encoder's embeddings and pooler
            (default: the model type's, "bert" or "electra").
    """
    shapes = shapes or {}
    scope = scope or _SCOPES[model_type]
    activations = _ACTIVATIONS[model_type]
    missing = [
        k
        for k in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
        )
        if k not in config
    ]
    if missing:
        raise CheckpointError(f"{source}: missing the required key(s) {', '.join(missing)}.")
    act = config.get("hidden_act", "gelu")
    act_key = act.lower() if isinstance(act, str) else act
    if act_key not in activations:
        raise CheckpointError(
            f"{source}: hidden_act {act!r} is not supported. Supported: "
            f"{', '.join(sorted(activations))} ({_GELU_NOTES[model_type]})."
        )

    def from_shape(key, tensor, default):
        if key in config:
            return config[key]
        if tensor in shapes:
            return int(shapes[tensor][0])
        return default

    # The reference defaults: dropout 0.1 in BertConfig (BERT's and
    # ELECTRA's), 0 in AlbertConfig.
    default_dropout = 0.0 if model_type == "albert" else 0.1
    backbone = {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "hidden_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "num_segments": from_shape(
            "type_vocab_size", f"{scope}/embeddings/token_type_embeddings", 2
        ),
        # ELECTRA's BertModel has no pooler variables (its pooled output is
        # the [CLS] vector itself).
        "use_pooler": model_type != "electra"
        and (not shapes or f"{scope}/pooler/dense/kernel" in shapes),
        "activation": activations[act_key],
        "dropout": config.get("hidden_dropout_prob", default_dropout),
        "attention_dropout": config.get("attention_probs_dropout_prob", default_dropout),
        "max_sequence_length": from_shape(
            "max_position_embeddings", f"{scope}/embeddings/position_embeddings", 512
        ),
        "layer_norm_epsilon": _LAYER_NORM_EPSILON,
        "initializer_range": config.get("initializer_range", 0.02),
    }
    if model_type == "electra":
        backbone["embedding_dim"] = config.get("embedding_size") or config["hidden_size"]
    if model_type == "albert":
        inner = config.get("inner_group_num", 1)
        if inner != 1:
            raise CheckpointError(
                f"{source}: inner_group_num={inner} is not supported: bertzoo's "
                "BertBackbone runs one attention + feed-forward block per layer "
                "(inner_group_num=1, as in every released ALBERT model)."
            )
        num_layers = config["num_hidden_layers"]
        num_groups = config.get("num_hidden_groups", 1)
        backbone["embedding_dim"] = config.get("embedding_size", 128)
        backbone["num_groups"] = num_groups
        # The reference code's float form: int(i / num_layers * num_groups).
        check_group_map(
            num_layers,
            num_groups,
            lambda i: int(i / num_layers * num_groups),
            source,
            "the reference code",
        )
    return backbone


# What the reference code's generator takes from the discriminator's
# BertConfig (run_pretraining.py get_generator_config copies it and sets
# these from its own sizes).
_GENERATOR_SIZE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "embedding_size",
)


def electra_model_keys(config, source="config"):
    """The `BertConfig` keys of an ELECTRA config file: a `bert_config.json`-
    style or Hugging Face `config.json` as it is; ELECTRA's pre-training
    hparams JSON (configure_pretraining.py: `model_size`,
    `model_hparam_overrides`, ...) as its `model_hparam_overrides` with its
    `vocab_size` and `embedding_size`. Null values are left out."""
    if any(k in config for k in _HPARAMS_KEYS):
        overrides = config.get("model_hparam_overrides") or {}
        if not isinstance(overrides, dict):
            raise CheckpointError(f"{source}: model_hparam_overrides must be a JSON object.")
        keys = {k: config[k] for k in ("vocab_size", "embedding_size") if k in config}
        keys.update(overrides)
    else:
        keys = dict(config)
    return {k: v for k, v in keys.items() if v is not None}


def electra_config(shapes, scope="electra", embeddings_scope=None, keys=None, source="checkpoint"):
    """The `BertConfig` keys of the ELECTRA encoder under `scope` ("electra",
    the discriminator, or "generator") for `google_config_to_backbone`.

    The released checkpoints come without a model config, so the sizes are
    read from the tensor shapes: vocabulary and embedding width from
    `<embeddings_scope>/embeddings/word_embeddings`, positions and segments
    from their tables, hidden and feed-forward widths from layer 0, the
    layers counted. Heads leave no trace in the shapes: the reference rule
    max(1, H // 64) (training_utils.get_bert_config,
    run_pretraining.get_generator_config). `keys` (`electra_model_keys` of
    a config file) override all of these.
    """
    embeddings_scope = embeddings_scope or scope

    def shape(name):
        if name not in shapes:
            raise CheckpointError(
                f"{source} has no {name!r}: not a complete ELECTRA checkpoint (the sizes "
                f"of its {scope!r} encoder are read from the tensor shapes)."
            )
        return tuple(int(d) for d in shapes[name])

    layers = sorted(
        {int(m["index"]) for m in map(_LAYER_NAME.match, shapes) if m and m["scope"] == scope}
    )
    if layers != list(range(len(layers))):
        raise CheckpointError(
            f"{source}: the layers under {scope}/encoder/ are numbered "
            f"{', '.join(map(str, layers))}, not 0 to {len(layers) - 1}."
        )
    vocab, embedding = shape(f"{embeddings_scope}/embeddings/word_embeddings")
    hidden = shape(f"{scope}/encoder/layer_0/attention/self/query/kernel")[-1]
    inferred = {
        "vocab_size": vocab,
        "embedding_size": embedding,
        "hidden_size": hidden,
        "num_hidden_layers": len(layers),
        "num_attention_heads": max(1, hidden // 64),
        "intermediate_size": shape(f"{scope}/encoder/layer_0/intermediate/dense/kernel")[-1],
    }
    for key, table, default in (
        ("max_position_embeddings", "position_embeddings", 512),
        ("type_vocab_size", "token_type_embeddings", 2),
    ):
        name = f"{embeddings_scope}/embeddings/{table}"
        inferred[key] = int(shapes[name][0]) if name in shapes else default
    return {**inferred, **(keys or {})}


# === Tensor names ===


def _variable_map(backbone, model_type, scope=None, embeddings_scope=None):
    """Google tensor name -> (keras variable, transpose?) for `backbone`, the
    encoder under `scope` (default: the model type's; ELECTRA's generator:
    "generator") with the embedding tables of `embeddings_scope` (default:
    `scope`; the generator reads "electra"'s)."""
    scope = scope or _SCOPES[model_type]
    tables = f"{embeddings_scope or scope}/embeddings"
    emb = backbone.embeddings_layer
    out = {
        f"{tables}/word_embeddings": emb.token_embedding.embeddings,
        f"{tables}/position_embeddings": emb.position_embeddings,
        f"{tables}/LayerNorm/gamma": emb.layer_norm.gamma,
        f"{tables}/LayerNorm/beta": emb.layer_norm.beta,
    }
    if emb.segment_embedding is not None:
        out[f"{tables}/token_type_embeddings"] = emb.segment_embedding.embeddings

    def dense(prefix, layer):
        out[f"{prefix}/kernel"] = layer.kernel  # (in, out) in both
        out[f"{prefix}/bias"] = layer.bias

    def norm(prefix, layer):
        out[f"{prefix}/gamma"] = layer.gamma
        out[f"{prefix}/beta"] = layer.beta

    if emb.projection is not None:
        if model_type == "electra":
            dense(f"{scope}/embeddings_project", emb.projection)
        else:
            dense(f"{scope}/encoder/embedding_hidden_mapping_in", emb.projection)
    for g, block in enumerate(backbone.transformer_layers):
        if model_type == "albert":
            p = f"{scope}/encoder/transformer/group_{g}/inner_group_0"
            attention = f"{p}/attention_1"
            names = (
                f"{p}/LayerNorm",
                f"{p}/ffn_1/intermediate/dense",
                f"{p}/ffn_1/intermediate/output/dense",
                f"{p}/LayerNorm_1",
            )
        else:
            p = f"{scope}/encoder/layer_{g}"
            attention = f"{p}/attention"
            names = (
                f"{p}/attention/output/LayerNorm",
                f"{p}/intermediate/dense",
                f"{p}/output/dense",
                f"{p}/output/LayerNorm",
            )
        attn = block.self_attention
        dense(f"{attention}/self/query", attn.query)
        dense(f"{attention}/self/key", attn.key)
        dense(f"{attention}/self/value", attn.value)
        dense(f"{attention}/output/dense", attn.attention_output)
        norm(names[0], block.attention_layer_norm)
        dense(names[1], block.intermediate_dense)
        dense(names[2], block.output_dense)
        norm(names[3], block.output_layer_norm)
    if backbone.pooler_dense is not None:
        dense(f"{scope}/pooler/dense", backbone.pooler_dense)
    return {name: (variable, False) for name, variable in out.items()}


def _head_map(model_type, hidden_dim, embedding_dim, vocabulary_size):
    """Google head tensor -> (Hugging Face name, transpose?, TF1 shape), for
    the heads on an encoder `hidden_dim` wide with `embedding_dim`-wide word
    embeddings.

    HF names: BertForPreTraining (`cls.predictions.*`, `cls.seq_relationship.*`),
    AlbertForPreTraining (`predictions.*`, `sop_classifier.classifier.*`),
    ElectraForPreTraining (`discriminator_predictions.*`) and
    ElectraForMaskedLM (`generator_predictions.*`, `generator_lm_head.bias`);
    torch Linear weights are (out, in). `output_weights` of the NSP/SOP head is
    already stored (2, H) by the reference code. ELECTRA's heads are
    `tf.layers.dense` layers: the second one of the discriminator's scope is
    `dense_1`.
    """
    H, E, V = hidden_dim, embedding_dim, vocabulary_size
    if model_type == "electra":
        return {
            "discriminator_predictions/dense/kernel": (
                "discriminator_predictions.dense.weight",
                True,
                (H, H),
            ),
            "discriminator_predictions/dense/bias": (
                "discriminator_predictions.dense.bias",
                False,
                (H,),
            ),
            "discriminator_predictions/dense_1/kernel": (
                "discriminator_predictions.dense_prediction.weight",
                True,
                (H, 1),
            ),
            "discriminator_predictions/dense_1/bias": (
                "discriminator_predictions.dense_prediction.bias",
                False,
                (1,),
            ),
            "generator_predictions/dense/kernel": (
                "generator_predictions.dense.weight",
                True,
                (H, E),
            ),
            "generator_predictions/dense/bias": ("generator_predictions.dense.bias", False, (E,)),
            "generator_predictions/LayerNorm/gamma": (
                "generator_predictions.LayerNorm.weight",
                False,
                (E,),
            ),
            "generator_predictions/LayerNorm/beta": (
                "generator_predictions.LayerNorm.bias",
                False,
                (E,),
            ),
            "generator_predictions/output_bias": ("generator_lm_head.bias", False, (V,)),
        }
    if model_type == "albert":
        mlm, transform, width = "predictions", "predictions", E
        order = "sop_classifier.classifier"
    else:
        mlm, transform, width = "cls.predictions", "cls.predictions.transform", H
        order = "cls.seq_relationship"
    return {
        "cls/predictions/transform/dense/kernel": (f"{transform}.dense.weight", True, (H, width)),
        "cls/predictions/transform/dense/bias": (f"{transform}.dense.bias", False, (width,)),
        "cls/predictions/transform/LayerNorm/gamma": (
            f"{transform}.LayerNorm.weight",
            False,
            (width,),
        ),
        "cls/predictions/transform/LayerNorm/beta": (
            f"{transform}.LayerNorm.bias",
            False,
            (width,),
        ),
        "cls/predictions/output_bias": (f"{mlm}.bias", False, (V,)),
        "cls/seq_relationship/output_weights": (f"{order}.weight", False, (2, H)),
        "cls/seq_relationship/output_bias": (f"{order}.bias", False, (2,)),
    }


def detect_model_type(names, source="checkpoint"):
    """ "albert" when the names have ALBERT's `group_*/inner_group_*` scopes,
    "electra" for `electra/encoder/layer_*` or `generator/encoder/layer_*`,
    "bert" for `bert/encoder/layer_*`, else an error."""
    if any(_ALBERT_NAME.search(n) for n in names):
        return "albert"
    if any(_ELECTRA_NAME.search(n) for n in names):
        return "electra"
    if any(_BERT_NAME.search(n) for n in names):
        return "bert"
    sample = ", ".join(sorted(n for n in names if not _is_ignored(n))[:8])
    raise CheckpointError(
        f"{source} does not look like a Google BERT, ALBERT or ELECTRA checkpoint: no "
        "'bert/encoder/layer_N/...', 'bert/encoder/transformer/group_N/"
        "inner_group_M/...' or 'electra/encoder/layer_N/...' variables (first names: "
        f"{sample or 'none'})."
    )


# === Vocabulary ===


def _count_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for _ in f)
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"Cannot read the vocabulary {path}: {e}") from e


def _sentencepiece_size(path):
    """Pieces in a SentencePiece model: counted from the `.vocab` text file
    the ALBERT archives ship beside it, else with the sentencepiece package
    when it is installed; None when neither is available."""
    listing = Path(path).with_suffix(".vocab")
    if listing.is_file():
        return _count_lines(listing), listing
    try:
        import sentencepiece
    except ImportError:
        return None, None
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except Exception as e:  # sentencepiece raises OSError/RuntimeError
        raise CheckpointError(f"{path} is not a readable SentencePiece model: {e}") from e
    return processor.get_piece_size(), path


def _check_vocabulary(vocab, kind, vocabulary_size, config_path):
    if kind == "wordpiece":
        size, counted = _count_lines(vocab), vocab
    else:
        size, counted = _sentencepiece_size(vocab)
        if size is None:
            logger.warning(
                "Not checking the size of %s: no %s beside it and the sentencepiece "
                "package is not installed.",
                vocab,
                Path(vocab).with_suffix(".vocab").name,
            )
            return
    if size != vocabulary_size:
        raise CheckpointError(
            f"The vocabulary {counted} has {size} entries but {config_path} says "
            f"vocab_size={vocabulary_size}: they come from different models."
        )


_LOWERCASED_NAMES = re.compile(r"(^|[^a-z])(uncased|multilingual_l-|chinese_l-)")
_CASED_NAMES = re.compile(r"(^|[^a-z])cased")


def infer_lowercase(*paths):
    """True for "uncased" directory names, False for "cased", None if no name
    says. The reference code's own check (`validate_case_matches_checkpoint`)
    also counts the original multilingual and Chinese models as lowercased."""
    for path in paths:
        name = Path(path).resolve().name.lower()
        if _LOWERCASED_NAMES.search(name):
            return True
        if _CASED_NAMES.search(name):
            return False
    return None


# === Conversion ===


@dataclasses.dataclass(frozen=True)
class GoogleCheckpoint:
    """A Google TF1 checkpoint read and checked by `read_google_checkpoint`,
    ready to be loaded into a backbone built from `backbone_config`.

    Attributes:
        prefix: the checkpoint prefix (`<prefix>.index`, `<prefix>.data-*`).
        model_type: "bert", "albert" or "electra".
        config_path: the model config file read; None for an ELECTRA
            checkpoint without one (its sizes come from the tensor shapes).
        backbone_config: `BertBackbone` constructor arguments.
        tensors: checkpoint name -> array, the backbone's tensors.
        head_shapes: checkpoint name -> shape, the pre-training heads.
        vocabulary: the vocabulary file (`vocab.txt` or a SentencePiece model).
        preset_info: the preset's description, tokenizer and metadata sections.
        scope: the checkpoint scope of the backbone's encoder ("bert",
            "electra", or "generator" for ELECTRA's generator).
        embeddings_scope: the scope of its embedding tables (ELECTRA's
            generator: "electra", whose tables it shares).
        generator: the generator of an ELECTRA checkpoint, a
            `GoogleCheckpoint` of its own (same prefix, vocabulary and
            reader); None when there is none.
    """

    prefix: str
    model_type: str
    config_path: Path | None
    backbone_config: dict
    tensors: dict
    head_shapes: dict
    vocabulary: Path
    preset_info: dict
    reader: object = dataclasses.field(repr=False)
    scope: str = "bert"
    embeddings_scope: str = "bert"
    generator: "GoogleCheckpoint | None" = None


def _generator_scopes(shapes):
    """(encoder scope, embeddings scope) of an ELECTRA checkpoint's
    generator, or None when it has none: `generator/` reading
    `electra/embeddings` (or its own `generator/embeddings`, trained with
    `untied_generator_embeddings`); a generator tied to the discriminator
    (`untied_generator` off) is `electra/` itself with the generator's head."""
    if any(n.startswith(f"{_GENERATOR_SCOPE}/") for n in shapes):
        own = f"{_GENERATOR_SCOPE}/embeddings/word_embeddings" in shapes
        return _GENERATOR_SCOPE, (_GENERATOR_SCOPE if own else _SCOPES["electra"])
    if any(n.startswith(_GENERATOR_HEAD_SCOPES) for n in shapes):
        return _SCOPES["electra"], _SCOPES["electra"]
    return None


def read_google_checkpoint(
    source,
    model_type=None,
    lowercase=None,
    *,
    checkpoint=None,
    config_file=None,
    vocab_file=None,
    metadata=None,
):
    """Reads and checks a Google TF1 BERT, ALBERT or ELECTRA checkpoint, its
    config and vocabulary (arguments as for
    `bertzoo.convert.convert_google_checkpoint`). Returns a
    `GoogleCheckpoint` (an ELECTRA checkpoint's generator in its
    `generator`); `load_google_weights` fills a backbone from it and
    `save_google_preset` writes the preset directory."""
    import tensorflow as tf

    if model_type is not None and model_type not in MODEL_TYPES:
        raise CheckpointError(
            f"model_type must be one of {', '.join(MODEL_TYPES)} (or None to detect it), "
            f"got {model_type!r}."
        )
    if source is None and not (checkpoint and vocab_file):
        raise CheckpointError(
            "Pass a source directory, or checkpoint= and vocab_file= (with config_file= "
            "unless the model config is beside the checkpoint)."
        )
    prefix = str(checkpoint) if checkpoint else _pick_checkpoint(source)
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(f"No TF1 checkpoint at {prefix} (no {prefix}.index).")
    ckpt_dir = Path(prefix).parent
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = {k: tuple(v) for k, v in reader.get_variable_to_shape_map().items()}
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"Cannot read the TF1 checkpoint {prefix}: {e}") from e
    detected = detect_model_type(shapes, prefix)
    if model_type is not None and model_type != detected:
        raise CheckpointError(
            f"model_type={model_type!r} was asked for, but {prefix} holds a "
            f"{detected.upper()} checkpoint (its tensor names)."
        )
    model_type = detected
    electra = model_type == "electra"
    info_metadata = {
        "source_checkpoint": str(prefix),
        # The architecture alone reads as BERT: no pooler, ELECTRA's heads.
        **({"model_type": "electra"} if electra else {}),
        **(metadata or {}),
    }
    preset_lib.validate_preset({"backbone": {}, "metadata": info_metadata}, "metadata")

    config_path = (
        Path(config_file)
        if config_file
        else _pick_file(
            ckpt_dir,
            _CONFIG_FILES[model_type],
            "model config",
            "config_file",
            required=not electra,  # ELECTRA's archives ship none
            exclude=_GENERATOR_FILE_NAME if electra else None,
        )
    )
    config = read_json_object(config_path) if config_path is not None else {}
    kind = "sentencepiece" if model_type == "albert" else "wordpiece"
    if vocab_file:
        vocab = Path(vocab_file)
        if not vocab.is_file():
            raise CheckpointError(f"The vocabulary {vocab} does not exist.")
        kind = "wordpiece" if vocab.suffix == ".txt" else "sentencepiece"
    elif model_type == "albert":
        vocab = _pick_file(ckpt_dir, ("*.model",), "SentencePiece model", "vocab_file")
    else:
        vocab = _pick_file(
            ckpt_dir, ("vocab.txt", "*vocab*.txt"), "WordPiece vocabulary", "vocab_file"
        )

    size_source = config_path if config_path is not None else f"the checkpoint {prefix}"
    generator_scopes, keys = None, {}
    if electra:
        keys = electra_model_keys(config, config_path)
        backbone_config = google_config_to_backbone(
            electra_config(shapes, keys=keys, source=prefix), model_type, size_source, shapes
        )
        generator_scopes = _generator_scopes(shapes)
    else:
        backbone_config = google_config_to_backbone(config, model_type, config_path, shapes)
    _check_vocabulary(vocab, kind, backbone_config["vocabulary_size"], size_source)
    if lowercase is None and isinstance(config.get("do_lower_case"), bool):
        lowercase = config["do_lower_case"]  # ELECTRA's pre-training hparams
    if lowercase is None:
        if model_type == "albert":
            lowercase = True  # every released ALBERT model lowercases
        else:
            # The checkpoint's folder, then its parents up to `source`.
            dirs = [ckpt_dir.resolve()]
            if source is not None and Path(source).is_dir():
                top = Path(source).resolve()
                while dirs[-1] != top and top in dirs[-1].parents:
                    dirs.append(dirs[-1].parent)
            lowercase = infer_lowercase(*dirs)
        if lowercase is None:
            raise CheckpointError(
                f"Cannot tell whether {prefix} is a cased or an uncased model (its "
                "directory name says neither): pass lowercase=True or False "
                "(--lowercase / --cased on the command line)"
                + (
                    "; Google's released ELECTRA models are uncased, KoELECTRA is cased."
                    if electra
                    else "."
                )
            )

    # The tensors of the encoder converted at the top level, and of ELECTRA's
    # generator: it reads its own scope, its head and the embedding tables
    # it shares with the discriminator; names only it reads are not the
    # discriminator's. Everything else is the top-level encoder's (and
    # reported unused there when it is not one of its tensors).
    main = ({}, {}, _HEAD_SCOPES[model_type])
    generator_part = ({}, {}, _GENERATOR_HEAD_SCOPES)
    generator_reads, generator_only = (), ()
    if generator_scopes is not None:
        scope, tables = generator_scopes
        generator_reads = (*_GENERATOR_HEAD_SCOPES, f"{scope}/", f"{tables}/embeddings/")
        generator_only = (*_GENERATOR_HEAD_SCOPES, f"{_GENERATOR_SCOPE}/")
    for name, shape in shapes.items():
        if _is_ignored(name):
            continue
        parts = []
        if not name.startswith(generator_only):
            parts.append(main)
        if name.startswith(generator_reads):
            parts.append(generator_part)
        value = None
        for tensors, head_shapes, head_scopes in parts:
            if name.startswith(head_scopes):
                head_shapes[name] = shape
            else:
                value = reader.get_tensor(name) if value is None else value
                tensors[name] = value

    tokenizer_info = {
        "kind": kind,
        "lowercase": bool(lowercase),
        # BERT (and ELECTRA) strip accents exactly when they lowercase;
        # ALBERT's preprocess_text always strips them (NFKD, drop combining
        # marks).
        "strip_accents": bool(lowercase) if kind == "wordpiece" else True,
        # google-research/bert's own tokenization.py (ELECTRA ships a copy),
        # as the checkpoint was trained with.
        **({"reference": "google"} if kind == "wordpiece" else {}),
    }

    def preset_info(what):
        return {
            "description": (
                f"{what} converted from the Google TF1 checkpoint {Path(prefix).name} in "
                f"{ckpt_dir}."
            ),
            "tokenizer": tokenizer_info,
            "metadata": info_metadata,
        }

    generator = None
    if generator_scopes is not None:
        scope, tables = generator_scopes
        tensors, head_shapes, _ = generator_part
        generator_config_path, generator_keys = config_path, keys
        if scope == _GENERATOR_SCOPE:
            # Its own sizes; the rest of the discriminator's config, as the
            # reference code copies it.
            generator_keys = {k: v for k, v in keys.items() if k not in _GENERATOR_SIZE_KEYS}
            generator_config_path = _pick_file(
                ckpt_dir, _GENERATOR_CONFIG_FILES, "generator config", None, required=False
            )
            if generator_config_path is not None:
                generator_keys.update(
                    electra_model_keys(
                        read_json_object(generator_config_path), generator_config_path
                    )
                )
        generator = GoogleCheckpoint(
            prefix=str(prefix),
            model_type=model_type,
            config_path=generator_config_path,
            backbone_config=google_config_to_backbone(
                electra_config(shapes, scope, tables, generator_keys, prefix),
                model_type,
                generator_config_path if generator_config_path is not None else size_source,
                shapes,
                scope=tables,
            ),
            tensors=tensors,
            head_shapes=head_shapes,
            vocabulary=Path(vocab),
            preset_info=preset_info("ELECTRA generator"),
            reader=reader,
            scope=scope,
            embeddings_scope=tables,
        )
    tensors, head_shapes, _ = main
    scope = _SCOPES[model_type]
    return GoogleCheckpoint(
        prefix=str(prefix),
        model_type=model_type,
        config_path=config_path,
        backbone_config=backbone_config,
        tensors=tensors,
        head_shapes=head_shapes,
        vocabulary=Path(vocab),
        preset_info=preset_info("ELECTRA discriminator" if electra else model_type.upper()),
        reader=reader,
        scope=scope,
        embeddings_scope=scope,
        generator=generator,
    )


def load_google_weights(backbone, checkpoint, allow_partial=False):
    """Fills `backbone` (a `BertBackbone` built from
    `checkpoint.backbone_config`) from a `GoogleCheckpoint`, every tensor
    checked first. Returns the pre-training head tensors, checked against
    the config and translated to Hugging Face names and layouts. (An
    ELECTRA checkpoint's generator is a second call, with
    `checkpoint.generator` and a backbone built from its config.)"""
    heads = {}
    tensors = dict(checkpoint.tensors)
    head_map = _head_map(
        checkpoint.model_type, backbone.hidden_dim, backbone.embedding_dim, backbone.vocabulary_size
    )
    sizes = (
        f"the config ({checkpoint.config_path.name})"
        if checkpoint.config_path is not None
        else "the encoder's tensor shapes"
    )
    for name, shape in checkpoint.head_shapes.items():
        if name not in head_map:
            tensors[name] = checkpoint.reader.get_tensor(name)  # reported as unused
            continue
        hf_name, transpose, expected = head_map[name]
        if shape != expected:
            raise CheckpointError(
                f"{checkpoint.prefix}: head tensor {name!r} has shape {shape}, but {sizes} "
                f"implies {expected}."
            )
        value = np.asarray(checkpoint.reader.get_tensor(name), dtype="float32")
        heads[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    assign_tensors(
        _variable_map(
            backbone, checkpoint.model_type, checkpoint.scope, checkpoint.embeddings_scope
        ),
        tensors,
        checkpoint.prefix,
        allow_partial=allow_partial,
    )
    return heads


def _write_preset(directory, backbone, checkpoint, heads):
    kind = checkpoint.preset_info["tokenizer"]["kind"]
    shutil.copyfile(checkpoint.vocabulary, directory / tokenizer_class(kind).vocabulary_file)
    backbone.save_to_preset(directory, preset_info=checkpoint.preset_info, head_tensors=heads)


def save_google_preset(backbone, checkpoint, heads, output_dir, generator=None):
    """Writes the preset directory of a converted checkpoint: the vocabulary
    and the backbone's files (`backbone.save_to_preset`) with `heads`,
    published as one directory with its manifest (an earlier conversion's
    files are replaced). `generator`: `(backbone, heads)` of an ELECTRA
    checkpoint's generator (`checkpoint.generator`), written as a complete
    preset of its own in `output_dir/generator`, published with the rest.
    Returns `output_dir` as a `Path`."""
    output_dir = Path(output_dir)
    with publish_directory(output_dir, "preset") as staging:
        _write_preset(staging, backbone, checkpoint, heads)
        if generator is not None:
            # A publication inside the discriminator's: the generator
            # directory gets its own manifest, and appears with the rest.
            with publish_directory(staging / preset_lib.GENERATOR_DIR, "preset") as inner:
                _write_preset(inner, generator[0], checkpoint.generator, generator[1])
    logger.info("Converted %s (%s) to %s.", checkpoint.prefix, checkpoint.model_type, output_dir)
    return output_dir
