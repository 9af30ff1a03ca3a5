"""A backbone (and its task-head tensors and tokenizer) -> a Hugging Face
checkpoint directory that transformers loads."""

import json
from pathlib import Path

import numpy as np

from bertzoo.convert.common import CheckpointError, check_group_map
from bertzoo.convert.hf.families import SPECS, spec_of
from bertzoo.convert.hf.spec import ACTIVATIONS_TO_HF, SAFETENSORS_FILE, hf_group_map
from bertzoo.convert.hf.weights import join_fused, variable_map
from bertzoo.io.publish import atomic_write_text, publish_directory
from bertzoo.io.safetensors import write_safetensors
from bertzoo.models.quantize import check_float
from bertzoo.tokenizers.hf_config import hf_tokenizer_config
from bertzoo.tokenizers.kinds import tokenizer_class, tokenizer_kinds


def model_type_of(backbone):
    """The Hugging Face model type a backbone is written as: the one its
    preset records (`metadata.model_type`, e.g. "electra" for ELECTRA
    checkpoints, whose architecture alone reads as BERT or ALBERT without a
    pooler), else the one its architecture implies: DistilBERT without
    segments and pooler, ModernBERT with rotary positions, ALBERT with
    factorised embeddings or layer sharing, else BERT."""
    recorded = (getattr(backbone, "preset_info", None) or {}).get("metadata", {}).get("model_type")
    if recorded in SPECS:
        return recorded
    if getattr(backbone, "rope_theta", None) is not None:
        return "modernbert"
    if backbone.num_segments == 0 and not backbone.use_pooler:
        return "distilbert"
    if backbone.position_padding_id is not None:
        return "roberta"
    factorised = backbone.embedding_dim != backbone.hidden_dim
    shared = backbone.num_groups != backbone.num_layers
    return "albert" if factorised or shared else "bert"


def _spec_for_backbone(backbone, model_type=None):
    """The spec of `model_type` (default: `model_type_of(backbone)`), after
    checking that it can hold `backbone`."""
    spec = spec_of(model_type or model_type_of(backbone))
    problems = _mismatches(backbone, spec)
    if problems:
        raise CheckpointError(
            f"This backbone cannot be written as Hugging Face model_type "
            f"{spec.model_type!r}: {'; '.join(problems)}."
        )
    if spec.model_type == "albert":
        layers, groups = backbone.num_layers, backbone.num_groups
        reference = hf_group_map(layers, groups).__getitem__
        check_group_map(layers, groups, reference, "save_hf", "transformers")
    return spec


def _mismatches(backbone, spec):
    """What in `backbone` the model type of `spec` cannot hold."""
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
    padded_positions = any(k == "position_padding_id" for k, _, _ in spec.config_keys)
    if backbone.position_padding_id is not None and not padded_positions:
        problems.append(
            f"position_padding_id={backbone.position_padding_id} "
            f"({spec.model_type} numbers positions from 0)"
        )
    if backbone.position_padding_id is None and padded_positions:
        problems.append(
            f"position_padding_id=None ({spec.model_type} counts positions past the padding id)"
        )
    if backbone.num_segments == 0 and spec.model_type not in ("distilbert", "modernbert"):
        pooler = " with a pooler" if backbone.use_pooler else ""
        problems.append(f"num_segments=0{pooler} ({spec.model_type} needs segments)")
    problems.extend(_style_mismatches(backbone, spec))
    return problems


# The settings of ModernBERT-style encoders, at the values of BERT's
# post-LN blocks with learned positions.
_CLASSIC = {
    "norm_first": False,
    "use_bias": True,
    "gated_feedforward": False,
    "rope_theta": None,
    "local_attention_window": None,
}


def _style_mismatches(backbone, spec):
    """A ModernBERT-style backbone written as a BERT-family type, or the
    other way round."""
    if spec.modern:
        if getattr(backbone, "rope_theta", None) is None:
            return [f"rope_theta=None ({spec.model_type} has rotary positions)"]
        return []
    return [
        f"{key}={getattr(backbone, key)!r} ({spec.model_type} needs {value!r})"
        for key, value in _CLASSIC.items()
        if getattr(backbone, key, value) != value
    ]


def _architecture(spec, heads, has_pooler, recorded=()):
    """The architecture of the first entry of `spec.architectures` whose
    heads are present; the one the checkpoint recorded (`recorded`) when
    it is among those that fit (ModernBERT's task models share head
    names)."""
    fitting = [
        name
        for prefix, pooler, name in spec.architectures
        if any(k.startswith(prefix) for k in heads) and pooler in (None, has_pooler)
    ]
    for name in recorded:
        if name in fitting:
            return name
    return fitting[0] if fitting else spec.base_architecture


def _carried_config(backbone, spec):
    """The HF config keys read from the checkpoint that `spec` carries
    (`HfSpec.carried_keys`, kept in the preset's metadata)."""
    metadata = (getattr(backbone, "preset_info", None) or {}).get("metadata", {})
    carried = metadata.get("hf_config") or {}
    return {key: carried[key] for key in spec.carried_keys if key in carried}


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
        spec.activation_key: ACTIVATIONS_TO_HF[backbone.activation],
        **spec.hf_extra,
    }
    for key, hf_key, _ in spec.config_keys:
        config[hf_key] = values[key]
    if spec.write_config is not None:
        config.update(spec.write_config(backbone))
    carried = _carried_config(backbone, spec)
    carried.pop("architectures", None)  # chosen by _architecture
    config.update(carried)
    return config


def _label_config(architecture, heads):
    """The label count of a classifier head (transformers builds the head
    from `id2label`, two labels when absent), in transformers' default
    names."""
    if not architecture.endswith(("ForSequenceClassification", "ForTokenClassification")):
        return {}
    biases = [v for k, v in heads.items() if k in ("classifier.bias", "classifier.out_proj.bias")]
    if len(biases) != 1:
        return {}
    count = int(np.shape(biases[0])[0])
    return {
        "id2label": {str(i): f"LABEL_{i}" for i in range(count)},
        "label2id": {f"LABEL_{i}": i for i in range(count)},
    }


def _check_heads(heads, spec):
    foreign = sorted(k for k in heads if not k.startswith(spec.heads))
    if foreign:
        raise CheckpointError(
            f"backbone.head_tensors holds tensors that are not {spec.model_type} "
            f"task heads ({', '.join(foreign)}); expected names starting with "
            f"{', '.join(spec.heads)}."
        )


def _check_tokenizer(tokenizer, backbone):
    kinds = {tokenizer_class(kind).vocabulary_file: kind for kind in tokenizer_kinds()}
    known = getattr(tokenizer, "kind", None) in tokenizer_kinds()
    if not known and getattr(tokenizer, "vocabulary_file", None) not in kinds:
        raise CheckpointError(
            "tokenizer must be a bertzoo tokenizer (BertTokenizer, SentencePieceTokenizer or "
            f"ByteLevelBPETokenizer), got {type(tokenizer).__name__}."
        )
    size = getattr(tokenizer, "vocabulary_size", backbone.vocabulary_size)
    if size != backbone.vocabulary_size:
        raise CheckpointError(
            f"The tokenizer has {size} tokens but the backbone's embedding table "
            f"{backbone.vocabulary_size} rows."
        )


def _tensors(backbone, spec, heads):
    """The backbone's tensors in HF names and layouts (under the base-model
    prefix when there are heads), and the heads."""
    prefix = spec.prefix if heads else ""
    tensors = {}
    for name, (variable, transpose) in variable_map(backbone, spec).items():
        value = np.asarray(variable.numpy(), dtype="float32")
        tensors[prefix + name] = np.ascontiguousarray(value.T if transpose else value)
    tensors = join_fused(tensors, spec)
    tensors.update(heads)
    return tensors


def _write_json(path, document):
    atomic_write_text(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


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
            `save_to_preset(directory)`. A byte-level BPE read from a
            `tokenizer.json` (ModernBERT's) writes that file back as it
            was, which transformers 5 loads as it is; ModernBERT's config
            then gets the tokenizer's special token ids.
        model_type: one of `SUPPORTED_MODEL_TYPES` ("bert", "albert",
            "distilbert", "electra", "roberta", "xlm-roberta",
            "modernbert"); default as described above.
    """
    directory = Path(directory)
    spec = _spec_for_backbone(backbone, model_type)
    heads = dict(getattr(backbone, "head_tensors", None) or {})
    _check_heads(heads, spec)
    if tokenizer is not None:
        _check_tokenizer(tokenizer, backbone)
    check_float(backbone, "a Hugging Face checkpoint")
    tensors = _tensors(backbone, spec, heads)
    recorded = _carried_config(backbone, spec).get("architectures") or ()
    architecture = _architecture(spec, heads, backbone.use_pooler, recorded)
    config = _hf_config(backbone, spec, architecture)
    config.update(_label_config(config["architectures"][0], heads))
    if tokenizer is not None and spec.modern:
        # ModernBERT's config names its special tokens' ids (transformers
        # pads the embedding at pad_token_id): the tokenizer's.
        ids = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id}
        config.update(pad_token_id=tokenizer.pad_token_id, bos_token_id=ids["cls"])
        config.update(cls_token_id=ids["cls"], eos_token_id=ids["sep"], sep_token_id=ids["sep"])
    with publish_directory(directory, "hf") as staging:
        write_safetensors(staging / SAFETENSORS_FILE, tensors, metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_to_preset(staging)
            tokenizer_config = hf_tokenizer_config(
                tokenizer, spec.tokenizer_kind, spec.tokenizer_class
            )
            _write_json(staging / "tokenizer_config.json", tokenizer_config)
        _write_json(staging / "config.json", config)
    return directory
