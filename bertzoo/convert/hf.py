"""Hugging Face format <-> bertzoo, for `model_type` "bert", "albert",
"distilbert" and "electra".

A checkpoint directory holds `config.json`, `model.safetensors` (or, only when
asked for with `allow_pickle=True`, `pytorch_model.bin`) and optionally
`tokenizer_config.json` with `vocab.txt` or `spiece.model`.

Each model type is described once, as data, by a `_Spec` (config keys, tensor
names, head prefixes, architecture names); reading the config, mapping
tensors to variables, loading and exporting are one piece of code for all
three.

Loading is strict: every backbone variable must be filled and every tensor
used, except buffers (`embeddings.position_ids`, ...) and task-head tensors
(e.g. "cls.", "predictions.", "vocab_projector."), which are returned (and
kept as `backbone.head_tensors`) for task models and written back by
`save_hf`.
"""

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np

from bertzoo.convert.common import (
    CheckpointError,
    assign_tensors,
    check_float_tensors,
    check_group_map,
    read_json_object,
)
from bertzoo.convert.torch_pickle import pickle_strings, read_torch_pickle
from bertzoo.io.publish import atomic_write_text, publish_directory
from bertzoo.io.safetensors import read_safetensors, tensor_names, write_safetensors
from bertzoo.tokenizers.base import VOCABULARY_FILES
from bertzoo.tokenizers.hf_config import hf_tokenizer_config, hf_tokenizer_section

logger = logging.getLogger(__name__)

SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"

# HF hidden_act -> bertzoo activation.
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
}
_ACTIVATIONS_TO_HF = {
    "gelu": "gelu",
    "gelu_approximate": "gelu_new",
    "relu": "relu",
    "silu": "silu",
    "tanh": "tanh",
}

# The transformer block's sub-layers, in the order of `_Spec.block_tensors`.
_BLOCK_ROLES = (
    "self_attention.query",
    "self_attention.key",
    "self_attention.value",
    "self_attention.attention_output",
    "attention_layer_norm",
    "intermediate_dense",
    "output_dense",
    "output_layer_norm",
)
_REQUIRED = object()  # a config key without a default


@dataclasses.dataclass(frozen=True)
class _Spec:
    """How one HF model type names its config keys and tensors.

    Tensor names are given without `prefix`, the base-model prefix that the
    `*For*` task models put before every backbone tensor.
    """

    model_type: str
    prefix: str
    # (bertzoo backbone key, HF config key, HF default or _REQUIRED)
    config_keys: tuple
    activation_key: str
    activation_default: str
    # Backbone settings this model type fixes (HF has no key for them).
    fixed: dict
    # Name of block `g` ("{}" is g): for ALBERT a parameter group, else a layer.
    block: str
    block_tensors: tuple  # HF names of _BLOCK_ROLES inside a block
    pooler: str | None
    projection: str | None  # ALBERT's embedding -> hidden Dense
    heads: tuple  # prefixes of task-head tensors
    buffers: tuple  # non-trainable tensors that may be present and are ignored
    # (head prefix, pooler present? (None: either), architecture); first match wins.
    architectures: tuple
    base_architecture: str
    tokenizer_kind: str
    tokenizer_class: str
    # Keys transformers writes that bertzoo does not model, at HF's defaults.
    hf_extra: dict


_BERT_SIZES = (
    ("vocabulary_size", "vocab_size", _REQUIRED),
    ("num_layers", "num_hidden_layers", _REQUIRED),
    ("num_heads", "num_attention_heads", _REQUIRED),
    ("hidden_dim", "hidden_size", _REQUIRED),
    ("intermediate_dim", "intermediate_size", _REQUIRED),
    ("num_segments", "type_vocab_size", 2),
    ("max_sequence_length", "max_position_embeddings", 512),
    ("layer_norm_epsilon", "layer_norm_eps", 1e-12),
    ("initializer_range", "initializer_range", 0.02),
)


def _architectures(name):
    """The task models shared by BERT and ALBERT; sequence classifiers use the
    pooler, token classifiers are built without one."""
    return (
        ("qa_outputs.", None, f"{name}ForQuestionAnswering"),
        ("classifier.", True, f"{name}ForSequenceClassification"),
        ("classifier.", False, f"{name}ForTokenClassification"),
    )


_SPECS = {
    "bert": _Spec(
        model_type="bert",
        prefix="bert.",
        config_keys=_BERT_SIZES
        + (
            ("dropout", "hidden_dropout_prob", 0.1),
            ("attention_dropout", "attention_probs_dropout_prob", 0.1),
        ),
        activation_key="hidden_act",
        activation_default="gelu",
        fixed={},
        block="encoder.layer.{}",
        block_tensors=(
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
            "intermediate.dense",
            "output.dense",
            "output.LayerNorm",
        ),
        pooler="pooler.dense",
        projection=None,
        heads=("cls.", "classifier.", "qa_outputs."),
        buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
        architectures=(
            ("cls.seq_relationship.", None, "BertForPreTraining"),
            ("cls.predictions.", None, "BertForMaskedLM"),
        )
        + _architectures("Bert"),
        base_architecture="BertModel",
        tokenizer_kind="wordpiece",
        tokenizer_class="BertTokenizer",
        hf_extra={
            "add_cross_attention": False,
            "bos_token_id": None,
            "classifier_dropout": None,
            "eos_token_id": None,
            "is_decoder": False,
            "pad_token_id": 0,
            "tie_word_embeddings": True,
            "use_cache": True,
        },
    ),
    "albert": _Spec(
        model_type="albert",
        prefix="albert.",
        config_keys=_BERT_SIZES
        + (
            ("embedding_dim", "embedding_size", 128),
            ("num_groups", "num_hidden_groups", 1),
            ("dropout", "hidden_dropout_prob", 0.0),
            ("attention_dropout", "attention_probs_dropout_prob", 0.0),
        ),
        activation_key="hidden_act",
        activation_default="gelu_new",
        fixed={},
        block="encoder.albert_layer_groups.{}.albert_layers.0",
        block_tensors=(
            "attention.query",
            "attention.key",
            "attention.value",
            "attention.dense",
            "attention.LayerNorm",
            "ffn",
            "ffn_output",
            "full_layer_layer_norm",
        ),
        pooler="pooler",
        projection="encoder.embedding_hidden_mapping_in",
        heads=("predictions.", "sop_classifier.", "classifier.", "qa_outputs."),
        buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
        architectures=(
            ("sop_classifier.", None, "AlbertForPreTraining"),
            ("predictions.", None, "AlbertForMaskedLM"),
        )
        + _architectures("Albert"),
        base_architecture="AlbertModel",
        tokenizer_kind="sentencepiece",
        tokenizer_class="AlbertTokenizer",
        hf_extra={
            "bos_token_id": 2,
            "classifier_dropout_prob": 0.1,
            "eos_token_id": 3,
            "inner_group_num": 1,
            "pad_token_id": 0,
            "tie_word_embeddings": True,
        },
    ),
    "distilbert": _Spec(
        model_type="distilbert",
        prefix="distilbert.",
        config_keys=(
            ("vocabulary_size", "vocab_size", _REQUIRED),
            ("num_layers", "n_layers", _REQUIRED),
            ("num_heads", "n_heads", _REQUIRED),
            ("hidden_dim", "dim", _REQUIRED),
            ("intermediate_dim", "hidden_dim", _REQUIRED),
            ("max_sequence_length", "max_position_embeddings", 512),
            ("initializer_range", "initializer_range", 0.02),
            ("dropout", "dropout", 0.1),
            ("attention_dropout", "attention_dropout", 0.1),
        ),
        activation_key="activation",
        activation_default="gelu",
        # transformers hard-codes eps=1e-12 in every DistilBERT LayerNorm.
        fixed={"num_segments": 0, "use_pooler": False, "layer_norm_epsilon": 1e-12},
        block="transformer.layer.{}",
        block_tensors=(
            "attention.q_lin",
            "attention.k_lin",
            "attention.v_lin",
            "attention.out_lin",
            "sa_layer_norm",
            "ffn.lin1",
            "ffn.lin2",
            "output_layer_norm",
        ),
        pooler=None,
        projection=None,
        heads=(
            "vocab_transform.",
            "vocab_layer_norm.",
            "vocab_projector.",
            "pre_classifier.",
            "classifier.",
            "qa_outputs.",
        ),
        buffers=("embeddings.position_ids",),
        architectures=(
            ("vocab_projector.", None, "DistilBertForMaskedLM"),
            ("pre_classifier.", None, "DistilBertForSequenceClassification"),
            ("qa_outputs.", None, "DistilBertForQuestionAnswering"),
            ("classifier.", None, "DistilBertForTokenClassification"),
        ),
        base_architecture="DistilBertModel",
        tokenizer_kind="wordpiece",
        tokenizer_class="DistilBertTokenizer",
        hf_extra={
            "bos_token_id": None,
            "eos_token_id": None,
            "pad_token_id": 0,
            "qa_dropout": 0.1,
            "seq_classif_dropout": 0.2,
            # bertzoo's table is an ordinary (trainable) one; see hf_to_preset.
            "sinusoidal_pos_embds": False,
            "tie_word_embeddings": True,
        },
    ),
}
_SPECS["electra"] = _Spec(
    model_type="electra",
    prefix="electra.",
    config_keys=_SPECS["bert"].config_keys + (("embedding_dim", "embedding_size", 128),),
    activation_key="hidden_act",
    activation_default="gelu",
    # No pooler: the discriminator, the generator and ELECTRA's task heads
    # all read the sequence output.
    fixed={"use_pooler": False},
    block="encoder.layer.{}",
    block_tensors=_SPECS["bert"].block_tensors,
    pooler=None,
    # ElectraModel's E -> H projection, when embedding_size != hidden_size.
    projection="embeddings_project",
    heads=(
        "discriminator_predictions.",
        "generator_predictions.",
        "generator_lm_head.",
        "classifier.",
        "qa_outputs.",
    ),
    buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
    architectures=(
        ("discriminator_predictions.", None, "ElectraForPreTraining"),
        ("generator_lm_head.", None, "ElectraForMaskedLM"),
        ("qa_outputs.", None, "ElectraForQuestionAnswering"),
        ("classifier.out_proj.", None, "ElectraForSequenceClassification"),
        ("classifier.", None, "ElectraForTokenClassification"),
    ),
    base_architecture="ElectraModel",
    tokenizer_kind="wordpiece",
    tokenizer_class="ElectraTokenizer",
    hf_extra={
        **_SPECS["bert"].hf_extra,
        "position_embedding_type": "absolute",
        "summary_activation": "gelu",
        "summary_last_dropout": 0.1,
        "summary_type": "first",
        "summary_use_proj": True,
    },
)
SUPPORTED_MODEL_TYPES = tuple(_SPECS)


def _read_config(directory):
    """`(config dict, spec)` of an HF checkpoint directory."""
    config_path = Path(directory) / "config.json"
    hf = read_json_object(config_path)
    model_type = hf.get("model_type")
    if model_type not in _SPECS:
        raise CheckpointError(
            f"{config_path}: model_type {model_type!r} is not supported. Supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    return hf, _SPECS[model_type]


def _hf_group_map(num_layers, num_groups):
    """transformers' ALBERT layer -> group map, in its float form."""
    return [int(i / (num_layers / num_groups)) for i in range(num_layers)]


# === Config ===


def hf_to_preset(directory):
    """Maps an HF checkpoint directory's `config.json` (and
    `tokenizer_config.json`) to a bertzoo preset document.

    DistilBERT's `sinusoidal_pos_embds: true` is accepted: transformers fills
    `embeddings.position_embeddings.weight` with sinusoids at initialisation,
    saves it like any weight and reads it back from the checkpoint, so loading
    the stored table reproduces the model exactly. (bertzoo trains the table
    when fine-tuning; older transformers versions froze it.)
    """
    directory = Path(directory)
    config_path = directory / "config.json"
    hf, spec = _read_config(directory)
    act = hf.get(spec.activation_key, spec.activation_default)
    if act not in _ACTIVATIONS:
        raise CheckpointError(
            f"{config_path}: {spec.activation_key} {act!r} is not supported. Supported: "
            f"{', '.join(sorted(_ACTIVATIONS))}."
        )
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise CheckpointError(
            f"{config_path}: position_embedding_type {position_type!r} is not supported "
            "(only learned absolute positions)."
        )
    if hf.get("inner_group_num", 1) != 1:
        raise CheckpointError(
            f"{config_path}: inner_group_num {hf['inner_group_num']!r} is not supported: "
            "bertzoo's ALBERT has one transformer layer per parameter group "
            "(inner_group_num 1, as in every released ALBERT)."
        )
    if hf.get("sinusoidal_pos_embds"):
        logger.info(
            "%s: sinusoidal_pos_embds is set; the stored position table is loaded "
            "as an ordinary (trainable) table.",
            config_path,
        )
    backbone = {}
    for key, hf_key, default in spec.config_keys:
        if hf_key in hf:
            backbone[key] = hf[hf_key]
        elif default is _REQUIRED:
            raise CheckpointError(f"{config_path}: missing the required key {hf_key!r}.")
        else:
            backbone[key] = default
    backbone["activation"] = _ACTIVATIONS[act]
    backbone["use_pooler"] = spec.pooler is not None and _has_pooler(directory, spec)
    backbone.update(spec.fixed)
    if spec.model_type == "albert":
        layers, groups = backbone["num_layers"], backbone["num_groups"]
        if isinstance(layers, int) and isinstance(groups, int) and 0 < groups <= layers:
            check_group_map(
                layers,
                groups,
                _hf_group_map(layers, groups).__getitem__,
                config_path,
                "transformers",
            )
    metadata = {"source_checkpoint": str(hf.get("_name_or_path") or directory)}
    if spec.model_type == "electra":  # the architecture alone reads as BERT/ALBERT
        metadata["model_type"] = "electra"
    return {
        "name": directory.name,
        "description": f"Converted from the Hugging Face checkpoint in {directory}.",
        "backbone": backbone,
        "tokenizer": hf_tokenizer_section(directory, spec.tokenizer_kind, check=False),
        "metadata": metadata,
    }


def _has_pooler(directory, spec):
    """BertModel / AlbertModel checkpoints carry a pooler; the masked-LM and
    token-classification models do not. Decided from the tensor names alone
    (a safetensors header, or the strings in a pickle's opcode stream, which
    are listed without executing anything)."""
    directory = Path(directory)
    name = f"{spec.pooler}.weight"
    if (directory / SAFETENSORS_FILE).is_file():
        names = set(tensor_names(directory / SAFETENSORS_FILE))
    elif (directory / PICKLE_FILE).is_file():
        names = pickle_strings(directory / PICKLE_FILE)
    else:
        return True
    return name in names or spec.prefix + name in names


# === Tensor names ===


def _variable_map(backbone, spec):
    """HF tensor name (without the base-model prefix) -> (keras variable,
    transposed?) for `backbone` in `spec`'s naming."""
    out = {}

    def add(name, layer):
        if hasattr(layer, "gamma"):  # LayerNormalization
            out[f"{name}.weight"] = (layer.gamma, False)
            out[f"{name}.bias"] = (layer.beta, False)
        else:  # Dense: torch Linear stores (out, in), Keras (in, out)
            out[f"{name}.weight"] = (layer.kernel, True)
            out[f"{name}.bias"] = (layer.bias, False)

    emb = backbone.embeddings_layer
    out["embeddings.word_embeddings.weight"] = (emb.token_embedding.embeddings, False)
    out["embeddings.position_embeddings.weight"] = (emb.position_embeddings, False)
    if emb.segment_embedding is not None:
        out["embeddings.token_type_embeddings.weight"] = (emb.segment_embedding.embeddings, False)
    add("embeddings.LayerNorm", emb.layer_norm)
    if emb.projection is not None:
        add(spec.projection, emb.projection)
    for g, block in enumerate(backbone.transformer_layers):
        for role, name in zip(_BLOCK_ROLES, spec.block_tensors):
            layer = block
            for attr in role.split("."):
                layer = getattr(layer, attr)
            add(f"{spec.block.format(g)}.{name}", layer)
    if backbone.pooler_dense is not None:
        add(spec.pooler, backbone.pooler_dense)
    return out


def _normal_name(name, spec):
    """Drops the base-model prefix of the `*For*` models and renames the
    LayerNorm gamma/beta of old checkpoints."""
    if name.startswith(spec.prefix):
        name = name[len(spec.prefix) :]
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
        "LayerNorm.beta", "LayerNorm.bias"
    )


def _checkpoint_file(directory, allow_pickle):
    directory = Path(directory)
    path = directory / SAFETENSORS_FILE
    if path.is_file():
        return path
    path = directory / PICKLE_FILE
    if path.is_file():
        if not allow_pickle:
            raise CheckpointError(
                f"{directory} has only {PICKLE_FILE}, a pickle that can run arbitrary "
                f"code when read; bertzoo reads {SAFETENSORS_FILE}. Convert it with a "
                "tool you trust (e.g. transformers' save_pretrained with "
                "safe_serialization=True), or pass allow_pickle=True (e.g. "
                "BertBackbone.from_preset(directory, allow_pickle=True)) to read it "
                "with bertzoo's restricted reader, which rebuilds tensors only and "
                "refuses anything else."
            )
        return path
    raise CheckpointError(f"{directory} has no {SAFETENSORS_FILE}.")


def _read_tensors(path):
    return read_safetensors(path) if path.name == SAFETENSORS_FILE else read_torch_pickle(path)


def load_hf_weights(backbone, directory, allow_partial=False, allow_pickle=False):
    """Fills `backbone` from an HF checkpoint directory.

    All values are checked (names and shapes) before any variable is
    assigned, so a failed load leaves the backbone untouched.

    Args:
        backbone: a `BertBackbone` built from the directory's config
            (`BertBackbone.from_preset(directory)` does both steps).
        directory: the checkpoint directory.
        allow_partial: load what matches; missing or unused tensors are
            logged instead of raised.
        allow_pickle: read `pytorch_model.bin` when there is no
            `model.safetensors`, with a restricted unpickler that rebuilds
            tensors without torch and refuses every other object.

    Returns the task-head tensors that the backbone does not use
    (`{name: array}`, HF names), for task models and for `save_hf`.
    """
    _, spec = _read_config(directory)
    path = _checkpoint_file(directory, allow_pickle)
    raw = _read_tensors(path)
    # Match on normalised names, but report the names as they are in the file.
    file_name = {}
    for name in raw:
        key = _normal_name(name, spec)
        if key in file_name:
            raise CheckpointError(f"{path} holds both {file_name[key]!r} and {name!r}.")
        file_name[key] = name
    prefix = spec.prefix if any(k.startswith(spec.prefix) for k in raw) else ""
    heads = {k: raw[n] for k, n in file_name.items() if k.startswith(spec.heads)}
    # Head tensors are kept for task models and save_hf: weights too.
    check_float_tensors({file_name[k]: v for k, v in heads.items()}, path)
    mapping = {file_name.get(k, prefix + k): v for k, v in _variable_map(backbone, spec).items()}
    assign_tensors(
        mapping,
        {n: raw[n] for k, n in file_name.items() if k not in heads},
        path,
        allow_partial=allow_partial,
        ignored=[file_name.get(b, b) for b in spec.buffers],
    )
    return heads


# === Export ===


def model_type_of(backbone):
    """The Hugging Face model type a backbone is written as: the one its
    preset records (`metadata.model_type`, e.g. "electra" for ELECTRA
    checkpoints, whose architecture alone reads as BERT or ALBERT without a
    pooler), else the one its architecture implies: DistilBERT without
    segments and pooler, ALBERT with factorised embeddings or layer sharing,
    else BERT."""
    recorded = (getattr(backbone, "preset_info", None) or {}).get("metadata", {}).get("model_type")
    if recorded in _SPECS:
        return recorded
    if backbone.num_segments == 0 and not backbone.use_pooler:
        return "distilbert"
    factorised = backbone.embedding_dim != backbone.hidden_dim
    shared = backbone.num_groups != backbone.num_layers
    return "albert" if factorised or shared else "bert"


def _spec_for_backbone(backbone, model_type=None):
    """The spec of `model_type` (default: `model_type_of(backbone)`), after
    checking that it can hold `backbone`."""
    model_type = model_type or model_type_of(backbone)
    if model_type not in _SPECS:
        raise CheckpointError(
            f"model_type {model_type!r} is not supported. Supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    spec = _SPECS[model_type]
    factorised = backbone.embedding_dim != backbone.hidden_dim
    shared = backbone.num_groups != backbone.num_layers
    problems = [
        f"{k}={getattr(backbone, k)!r} ({spec.model_type} needs {v!r})"
        for k, v in spec.fixed.items()
        if getattr(backbone, k) != v
    ]
    if factorised and spec.projection is None:
        problems.append("embedding_dim != hidden_dim")
    if shared and spec.model_type != "albert":
        problems.append("num_groups != num_layers")
    if backbone.num_segments == 0 and spec.model_type != "distilbert":
        pooler = " with a pooler" if backbone.use_pooler else ""
        problems.append(f"num_segments=0{pooler} ({spec.model_type} needs segments)")
    if problems:
        raise CheckpointError(
            f"This backbone cannot be written as Hugging Face model_type "
            f"{spec.model_type!r}: {'; '.join(problems)}."
        )
    if spec.model_type == "albert":
        layers, groups = backbone.num_layers, backbone.num_groups
        reference = _hf_group_map(layers, groups).__getitem__
        check_group_map(layers, groups, reference, "save_hf", "transformers")
    return spec


def _architecture(spec, heads, has_pooler):
    for prefix, pooler, name in spec.architectures:
        if any(k.startswith(prefix) for k in heads) and pooler in (None, has_pooler):
            return name
    return spec.base_architecture


def _hf_config(backbone, spec, architecture):
    values = {
        **backbone.get_config(),
        # None means "same as dropout": write the rate actually used.
        "attention_dropout": backbone.transformer_layers[0].attention_dropout,
    }
    config = {
        "architectures": [architecture],
        "model_type": spec.model_type,
        "dtype": "float32",
        spec.activation_key: _ACTIVATIONS_TO_HF[backbone.activation],
        **spec.hf_extra,
    }
    for key, hf_key, _ in spec.config_keys:
        config[hf_key] = values[key]
    return config


def save_hf(backbone, directory, tokenizer=None, model_type=None):
    """Writes `backbone` as a Hugging Face checkpoint directory that
    transformers loads with `AutoModel` (or the `*For*` class named in
    `architectures`).

    The model type is `model_type` when given, else the one the backbone's
    preset records (ELECTRA checkpoints, and models trained from them), else
    the one its architecture implies: `num_segments=0` without a pooler is
    DistilBERT; `embedding_dim != hidden_dim` or layer sharing is ALBERT;
    otherwise BERT. The task-head tensors in `backbone.head_tensors`
    (e.g. from a converted BertForPreTraining) are written too, with the
    backbone tensors under the base-model prefix as transformers expects.

    Writes `model.safetensors`, (with `tokenizer`) its vocabulary file and
    `tokenizer_config.json`, and `config.json`, published as one directory
    with a checksum manifest (`bertzoo.io.publish`; an existing `directory`
    must be empty or an earlier bertzoo export of this kind).

    Args:
        backbone: a `BertBackbone`.
        directory: where to write (created if needed).
        tokenizer: optional bertzoo tokenizer (usually WordPiece for
            BERT/DistilBERT/ELECTRA, SentencePiece for ALBERT; either works)
            with `lowercase` and `strip_accents` attributes and
            `save_to_preset(directory)`.
        model_type: "bert", "albert", "distilbert" or "electra"; default
            as described above.
    """
    directory = Path(directory)
    spec = _spec_for_backbone(backbone, model_type)
    heads = dict(getattr(backbone, "head_tensors", None) or {})
    foreign = sorted(k for k in heads if not k.startswith(spec.heads))
    if foreign:
        raise CheckpointError(
            f"backbone.head_tensors holds tensors that are not {spec.model_type} "
            f"task heads ({', '.join(foreign)}); expected names starting with "
            f"{', '.join(spec.heads)}."
        )
    if tokenizer is not None:
        if getattr(tokenizer, "vocabulary_file", None) not in VOCABULARY_FILES:
            raise CheckpointError(
                "tokenizer must be a bertzoo BertTokenizer or SentencePieceTokenizer, "
                f"got {type(tokenizer).__name__}."
            )
        size = getattr(tokenizer, "vocabulary_size", backbone.vocabulary_size)
        if size != backbone.vocabulary_size:
            raise CheckpointError(
                f"The tokenizer has {size} tokens but the backbone's embedding table "
                f"{backbone.vocabulary_size} rows."
            )
    prefix = spec.prefix if heads else ""
    tensors = {}
    for name, (variable, transpose) in _variable_map(backbone, spec).items():
        value = np.asarray(variable.numpy(), dtype="float32")
        tensors[prefix + name] = np.ascontiguousarray(value.T if transpose else value)
    tensors.update(heads)
    config = _hf_config(backbone, spec, _architecture(spec, heads, backbone.use_pooler))
    with publish_directory(directory, "hf") as staging:
        write_safetensors(staging / SAFETENSORS_FILE, tensors, metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_to_preset(staging)
            atomic_write_text(
                staging / "tokenizer_config.json",
                json.dumps(
                    hf_tokenizer_config(tokenizer, spec.tokenizer_kind, spec.tokenizer_class),
                    indent=2,
                    sort_keys=True,
                )
                + "\n",
            )
        atomic_write_text(
            staging / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n"
        )
    return directory
