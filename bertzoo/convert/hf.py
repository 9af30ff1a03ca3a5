"""Hugging Face format (config.json + model.safetensors + vocab.txt) -> bertzoo.

Supported here: `model_type` "bert" (BertModel and the BertFor* models, whose
tensors carry a "bert." prefix). Loading is strict: every backbone variable
must be filled and every tensor must be used, except task-head tensors
("cls.", "classifier.", "qa_outputs."), which are reported and left for task
models, and buffers such as `embeddings.position_ids`.
"""

import json
import logging
from pathlib import Path

import numpy as np

from bertzoo.convert.safetensors_io import read_safetensors, tensor_names, write_safetensors
from bertzoo.io_utils import atomic_write_text
from bertzoo.presets import PresetError

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("bert",)
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.")
_BUFFERS = ("embeddings.position_ids",)

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


class CheckpointError(PresetError):
    """A checkpoint directory cannot be loaded as asked."""


def _read_json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"Cannot read {path}: {e}") from e


def _has_pooler(directory):
    """BertModel checkpoints carry a pooler; BertForMaskedLM ones do not."""
    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        return True
    return "pooler.dense.weight" in _normalise_names(dict.fromkeys(tensor_names(path)))


def hf_to_preset(directory):
    """Maps an HF checkpoint directory's `config.json` (and
    `tokenizer_config.json`) to a bertzoo preset document."""
    directory = Path(directory)
    config_path = directory / "config.json"
    hf = _read_json(config_path)
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CheckpointError(
            f"{config_path}: model_type {model_type!r} is not supported. Supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    act = hf.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise CheckpointError(
            f"{config_path}: hidden_act {act!r} is not supported. Supported: "
            f"{', '.join(sorted(_ACTIVATIONS))}."
        )
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise CheckpointError(
            f"{config_path}: position_embedding_type {position_type!r} is not supported "
            "(only learned absolute positions)."
        )
    try:
        backbone = {
            "vocabulary_size": hf["vocab_size"],
            "num_layers": hf["num_hidden_layers"],
            "num_heads": hf["num_attention_heads"],
            "hidden_dim": hf["hidden_size"],
            "intermediate_dim": hf["intermediate_size"],
            "num_segments": hf.get("type_vocab_size", 2),
            "use_pooler": _has_pooler(directory),
            "activation": _ACTIVATIONS[act],
            "dropout": hf.get("hidden_dropout_prob", 0.1),
            "attention_dropout": hf.get("attention_probs_dropout_prob", 0.1),
            "max_sequence_length": hf.get("max_position_embeddings", 512),
            "layer_norm_epsilon": hf.get("layer_norm_eps", 1e-12),
            "initializer_range": hf.get("initializer_range", 0.02),
        }
    except KeyError as e:
        raise CheckpointError(f"{config_path}: missing the required key {e.args[0]!r}.") from e
    tokenizer = {"kind": "wordpiece", "lowercase": True, "strip_accents": True}
    tok_path = directory / "tokenizer_config.json"
    if tok_path.is_file():
        tok = _read_json(tok_path)
        lowercase = bool(tok.get("do_lower_case", True))
        strip = tok.get("strip_accents")
        # HF: strip_accents=None means "follow do_lower_case".
        tokenizer = {
            "kind": "wordpiece",
            "lowercase": lowercase,
            "strip_accents": lowercase if strip is None else bool(strip),
        }
    return {
        "name": directory.name,
        "description": f"Converted from the Hugging Face checkpoint in {directory}.",
        "backbone": backbone,
        "tokenizer": tokenizer,
        "metadata": {"source_checkpoint": str(hf.get("_name_or_path") or directory)},
    }


def _bert_variable_map(backbone):
    """HF tensor name -> (keras variable, transposed?) for a BERT backbone."""
    emb = backbone.embeddings_layer
    out = {
        "embeddings.word_embeddings.weight": (emb.token_embedding.embeddings, False),
        "embeddings.position_embeddings.weight": (emb.position_embeddings, False),
        "embeddings.LayerNorm.weight": (emb.layer_norm.gamma, False),
        "embeddings.LayerNorm.bias": (emb.layer_norm.beta, False),
    }
    if emb.segment_embedding is not None:
        out["embeddings.token_type_embeddings.weight"] = (emb.segment_embedding.embeddings, False)

    def dense(prefix, layer):
        # torch Linear stores (out, in); Keras Dense (in, out).
        out[f"{prefix}.weight"] = (layer.kernel, True)
        out[f"{prefix}.bias"] = (layer.bias, False)

    def norm(prefix, layer):
        out[f"{prefix}.weight"] = (layer.gamma, False)
        out[f"{prefix}.bias"] = (layer.beta, False)

    for i, block in enumerate(backbone.transformer_layers):
        p = f"encoder.layer.{i}"
        attn = block.self_attention
        dense(f"{p}.attention.self.query", attn.query)
        dense(f"{p}.attention.self.key", attn.key)
        dense(f"{p}.attention.self.value", attn.value)
        dense(f"{p}.attention.output.dense", attn.attention_output)
        norm(f"{p}.attention.output.LayerNorm", block.attention_layer_norm)
        dense(f"{p}.intermediate.dense", block.intermediate_dense)
        dense(f"{p}.output.dense", block.output_dense)
        norm(f"{p}.output.LayerNorm", block.output_layer_norm)
    if backbone.pooler_dense is not None:
        dense("pooler.dense", backbone.pooler_dense)
    return out


def _normalise_names(tensors):
    """Drops the "bert." prefix of BertFor* models and renames the
    LayerNorm gamma/beta of old checkpoints."""
    out = {}
    for name, value in tensors.items():
        if name.startswith("bert."):
            name = name[len("bert.") :]
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias"
        )
        out[name] = value
    return out


def read_hf_weights(directory):
    """The checkpoint's tensors as numpy arrays, names normalised."""
    directory = Path(directory)
    path = directory / "model.safetensors"
    if not path.is_file():
        if (directory / "pytorch_model.bin").is_file():
            raise CheckpointError(
                f"{directory} has only pytorch_model.bin, a pickle that can run "
                "arbitrary code when read; bertzoo reads model.safetensors. Convert "
                "it with a tool you trust (e.g. transformers' save_pretrained with "
                "safe_serialization=True)."
            )
        raise CheckpointError(f"{directory} has no model.safetensors.")
    return _normalise_names(read_safetensors(path))


def load_hf_weights(backbone, directory, allow_partial=False):
    """Fills `backbone` from an HF checkpoint directory.

    All values are checked (names and shapes) before any variable is
    assigned, so a failed load leaves the backbone untouched.

    Returns the task-head tensors that the backbone does not use
    (`{name: array}`), for task models.
    """
    tensors = read_hf_weights(directory)
    mapping = _bert_variable_map(backbone)
    heads = {k: v for k, v in tensors.items() if k.startswith(HEAD_PREFIXES)}
    missing = sorted(set(mapping) - set(tensors))
    unused = sorted(
        k for k in tensors if k not in mapping and k not in heads and k not in _BUFFERS
    )
    source = Path(directory) / "model.safetensors"
    if (missing or unused) and not allow_partial:
        parts = []
        if missing:
            parts.append(f"missing tensors: {', '.join(missing)}")
        if unused:
            parts.append(f"unused tensors: {', '.join(unused)}")
        raise CheckpointError(
            f"{source} does not match the backbone ({'; '.join(parts)}). Pass "
            "allow_partial=True to load what matches and keep the rest randomly "
            "initialised."
        )
    assignments = []
    for name, (variable, transpose) in mapping.items():
        if name not in tensors:
            continue
        value = tensors[name].T if transpose else tensors[name]
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                f"which does not fit {variable.path} of shape {tuple(variable.shape)}"
                f"{' (after transposing)' if transpose else ''}."
            )
        assignments.append((variable, value))
    for variable, value in assignments:
        variable.assign(np.asarray(value, dtype="float32"))
    if missing:
        logger.warning("Left randomly initialised (not in %s): %s", source, ", ".join(missing))
    return heads


_ACTIVATIONS_TO_HF = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu", "silu": "silu", "tanh": "tanh"}


def save_hf(backbone, directory):
    """Writes `backbone` as a Hugging Face BERT checkpoint directory
    (`config.json` + `model.safetensors`, each atomically)."""
    if backbone.embedding_dim != backbone.hidden_dim or backbone.num_groups != backbone.num_layers:
        raise CheckpointError(
            "Only BERT-shaped backbones (embedding_dim == hidden_dim, no layer "
            "sharing) can be written as model_type 'bert'."
        )
    directory = Path(directory)
    tensors = {}
    for name, (variable, transpose) in _bert_variable_map(backbone).items():
        value = np.asarray(variable.numpy(), dtype="float32")
        tensors[name] = np.ascontiguousarray(value.T if transpose else value)
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": backbone.vocabulary_size,
        "hidden_size": backbone.hidden_dim,
        "num_hidden_layers": backbone.num_layers,
        "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_dim,
        "hidden_act": _ACTIVATIONS_TO_HF[backbone.activation],
        "hidden_dropout_prob": backbone.dropout,
        "attention_probs_dropout_prob": backbone.transformer_layers[0].attention_dropout,
        "max_position_embeddings": backbone.max_sequence_length,
        "type_vocab_size": backbone.num_segments,
        "layer_norm_eps": backbone.layer_norm_epsilon,
        "initializer_range": backbone.initializer_range,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
    }
    write_safetensors(directory / "model.safetensors", tensors, metadata={"format": "pt"})
    atomic_write_text(directory / "config.json", json.dumps(config, indent=2) + "\n")
    return directory
