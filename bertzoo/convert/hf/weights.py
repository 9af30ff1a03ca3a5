"""HF tensor names <-> a backbone's variables, and loading an HF checkpoint's
tensors into a backbone.

Loading is strict: every backbone variable must be filled and every tensor
used, except buffers (`embeddings.position_ids`, ...) and task-head tensors
(e.g. "cls.", "predictions.", "vocab_projector."), which are returned (and
kept as `backbone.head_tensors`) for task models and written back by
`save_hf`."""

from pathlib import Path

import numpy as np

from bertzoo.convert.common import CheckpointError, assign_tensors, check_float_tensors
from bertzoo.convert.hf.config import read_config
from bertzoo.convert.hf.spec import BLOCK_ROLES, PICKLE_FILE, SAFETENSORS_FILE
from bertzoo.convert.torch_pickle import read_torch_pickle
from bertzoo.io.safetensors import read_safetensors


def variable_map(backbone, spec):
    """HF tensor name (without the base-model prefix) -> (keras variable,
    transposed?) for `backbone` in `spec`'s naming."""
    out = {}

    def add(name, layer):
        if layer is None:  # ModernBERT's first block has no attention LayerNorm
            return
        if hasattr(layer, "gamma"):  # LayerNormalization
            out[f"{name}.weight"] = (layer.gamma, False)
            if layer.beta is not None:
                out[f"{name}.bias"] = (layer.beta, False)
        else:  # Dense: torch Linear stores (out, in), Keras (in, out)
            out[f"{name}.weight"] = (layer.kernel, True)
            if layer.bias is not None:
                out[f"{name}.bias"] = (layer.bias, False)

    emb = backbone.embeddings_layer
    out[f"{spec.word_embeddings}.weight"] = (emb.token_embedding.embeddings, False)
    if emb.position_embeddings is not None:
        out["embeddings.position_embeddings.weight"] = (emb.position_embeddings, False)
    if emb.segment_embedding is not None:
        out["embeddings.token_type_embeddings.weight"] = (emb.segment_embedding.embeddings, False)
    add(spec.embedding_norm, emb.layer_norm)
    if emb.projection is not None:
        add(spec.projection, emb.projection)
    for g, block in enumerate(backbone.transformer_layers):
        for role, name in zip(BLOCK_ROLES, spec.block_tensors):
            layer = block
            for attr in role.split("."):
                layer = getattr(layer, attr)
            add(f"{spec.block.format(g)}.{name}", layer)
    if backbone.pooler_dense is not None:
        add(spec.pooler, backbone.pooler_dense)
    if getattr(backbone, "final_layer_norm", None) is not None:
        add(spec.final_norm, backbone.final_layer_norm)
    return out


_QKV_PARTS = ("query", "key", "value")


def _fused_name(name, spec):
    """`(stem, suffix)` when `name` is a fused query/key/value tensor of
    `spec` ("model.layers.0.attn.Wqkv" + ".weight"), else None."""
    if spec.fused_qkv is None:
        return None
    for suffix in (".weight", ".bias"):
        if name.endswith(f".{spec.fused_qkv}{suffix}"):
            return name[: -len(suffix)], suffix
    return None


def split_fused(tensors, spec, source):
    """Splits each fused query/key/value tensor of `tensors` (torch layout:
    the three projections stacked on the output axis) into the thirds that
    `spec.block_tensors` name (`<fused>.query.weight`, ...)."""
    out = {}
    for name, value in tensors.items():
        fused = _fused_name(name, spec)
        if fused is None:
            out[name] = value
            continue
        stem, suffix = fused
        value = np.asarray(value)
        rows = value.shape[0] if value.ndim else 0
        if rows == 0 or rows % 3:
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(value.shape)}; a fused "
                "query/key/value projection has 3 x hidden_size outputs."
            )
        for part, piece in zip(_QKV_PARTS, value.reshape((3, rows // 3) + value.shape[1:])):
            out[f"{stem}.{part}{suffix}"] = piece
    return out


def join_fused(tensors, spec):
    """The inverse of `split_fused`: the thirds of each fused projection
    stacked back into one tensor, under its own name."""
    if spec.fused_qkv is None:
        return tensors
    out = {}
    marker = f".{spec.fused_qkv}.query"
    for name, value in tensors.items():
        if marker in name and name.endswith((f"{marker}.weight", f"{marker}.bias")):
            stem, suffix = name.rsplit(".query", 1)
            parts = [tensors[f"{stem}.{part}{suffix}"] for part in _QKV_PARTS]
            out[f"{stem}{suffix}"] = np.ascontiguousarray(np.concatenate(parts, axis=0))
        elif not any(f".{spec.fused_qkv}.{part}." in name for part in _QKV_PARTS[1:]):
            out[name] = value
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


def _file_names(raw, spec, path):
    """Normalised name -> the name as it is in the file (matching is on
    normalised names, reports use the file's)."""
    file_name = {}
    for name in raw:
        key = _normal_name(name, spec)
        if key in file_name:
            raise CheckpointError(f"{path} holds both {file_name[key]!r} and {name!r}.")
        file_name[key] = name
    return file_name


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
    _, spec = read_config(directory)
    path = _checkpoint_file(directory, allow_pickle)
    raw = split_fused(_read_tensors(path), spec, path)
    file_name = _file_names(raw, spec, path)
    prefix = spec.prefix if any(k.startswith(spec.prefix) for k in raw) else ""
    heads = {k: raw[n] for k, n in file_name.items() if k.startswith(spec.heads)}
    # Head tensors are kept for task models and save_hf: weights too.
    check_float_tensors({file_name[k]: v for k, v in heads.items()}, path)
    mapping = {file_name.get(k, prefix + k): v for k, v in variable_map(backbone, spec).items()}
    assign_tensors(
        mapping,
        {n: raw[n] for k, n in file_name.items() if k not in heads},
        path,
        allow_partial=allow_partial,
        ignored=[file_name.get(b, b) for b in spec.buffers],
    )
    return heads
