"""An HF checkpoint directory's `config.json` (and `tokenizer_config.json`)
-> a bertzoo preset document."""

import logging
from pathlib import Path

from bertzoo.convert.common import CheckpointError, check_group_map, read_json_object
from bertzoo.convert.hf.families import spec_of
from bertzoo.convert.hf.spec import (
    ACTIVATIONS,
    PICKLE_FILE,
    REQUIRED,
    SAFETENSORS_FILE,
    hf_group_map,
)
from bertzoo.convert.torch_pickle import pickle_strings
from bertzoo.io.safetensors import tensor_names
from bertzoo.io.snapshot import shown_path
from bertzoo.tokenizers.hf_config import hf_tokenizer_section

logger = logging.getLogger(__name__)


def read_config(directory):
    """`(config dict, spec)` of an HF checkpoint directory."""
    config_path = Path(directory) / "config.json"
    hf = read_json_object(config_path)
    return hf, spec_of(hf.get("model_type"), config_path)


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
    hf, spec = read_config(directory)
    _check_supported(hf, spec, config_path)
    backbone = _backbone_settings(hf, spec, config_path)
    backbone["use_pooler"] = spec.pooler is not None and _has_pooler(directory, spec)
    backbone.update(spec.fixed)
    if spec.read_config is not None:
        backbone.update(spec.read_config(hf, config_path))
    if spec.model_type == "albert":
        _check_albert_groups(backbone, config_path)
    # The directory as the caller named it (not the view it is read through).
    shown = shown_path(directory)
    metadata = {"source_checkpoint": str(hf.get("_name_or_path") or shown)}
    if spec.record_model_type:  # the architecture alone does not say it
        metadata["model_type"] = spec.model_type
    carried = {key: hf[key] for key in spec.carried_keys if key in hf}
    if carried:  # written back by save_hf
        metadata["hf_config"] = carried
    return {
        "name": shown.name,
        "description": f"Converted from the Hugging Face checkpoint in {shown}.",
        "backbone": backbone,
        "tokenizer": hf_tokenizer_section(directory, spec.tokenizer_kind, check=False),
        "metadata": metadata,
    }


def _check_supported(hf, spec, config_path):
    """Refuses the config settings bertzoo's backbone does not model."""
    act = hf.get(spec.activation_key, spec.activation_default)
    if act not in ACTIVATIONS:
        raise CheckpointError(
            f"{config_path}: {spec.activation_key} {act!r} is not supported. Supported: "
            f"{', '.join(sorted(ACTIVATIONS))}."
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


def _backbone_settings(hf, spec, config_path):
    """The backbone arguments `spec`'s config keys give, and the activation."""
    backbone = {}
    for key, hf_key, default in spec.config_keys:
        if hf_key in hf:
            backbone[key] = hf[hf_key]
        elif default is REQUIRED:
            raise CheckpointError(f"{config_path}: missing the required key {hf_key!r}.")
        else:
            backbone[key] = default
    backbone["activation"] = ACTIVATIONS[hf.get(spec.activation_key, spec.activation_default)]
    return backbone


def _check_albert_groups(backbone, config_path):
    """transformers and bertzoo must assign layers to the same groups."""
    layers, groups = backbone["num_layers"], backbone["num_groups"]
    if isinstance(layers, int) and isinstance(groups, int) and 0 < groups <= layers:
        check_group_map(
            layers,
            groups,
            hf_group_map(layers, groups).__getitem__,
            config_path,
            "transformers",
        )


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
