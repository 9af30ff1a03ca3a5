"""bertzoo's own preset directories: `config.json` (the preset document),
`model.weights.h5` (the backbone), `heads.safetensors` (task-head tensors in
Hugging Face names) and, for a fine-tuned task model,
`task_head.safetensors` (the head's variables by path) with a `task`
section in `config.json`, and for a LiteRT-int8 model its graph
(`presets.INT8_GRAPH_FILES`, `bertzoo.models.int8`). Every directory is
published as one unit with a checksum manifest (`bertzoo.io.publish`)."""

import inspect
import json
import logging
import re
from pathlib import Path

import keras
import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.common import assign_tensors
from bertzoo.errors import PresetError
from bertzoo.io.bounded import read_bounded
from bertzoo.io.manifest import verify_directory
from bertzoo.io.publish import publish_directory, published_name
from bertzoo.io.safetensors import read_safetensors, write_safetensors
from bertzoo.io.snapshot import shown_path
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.int8 import saved_graph
from bertzoo.models.quantize import layer_quantization_mode
from bertzoo.tokenizers.base import VOCABULARY_FILES

logger = logging.getLogger(__name__)


def weights_file_shapes(path):
    """`{dataset name: shape}` of a `.weights.h5` file, reading its metadata
    only (no tensor is loaded)."""
    import h5py

    shapes = {}
    try:
        with h5py.File(path, "r") as f:
            f.visititems(
                lambda name, obj: (
                    shapes.__setitem__(name, tuple(obj.shape))
                    if isinstance(obj, h5py.Dataset)
                    else None
                )
            )
    except OSError as e:
        raise PresetError(f"{path} is not a readable weights file: {e}") from e
    return shapes


# What a bertzoo weights file's tensors say about the config, by dataset
# name (Keras names them by layer: layers/bert_embeddings/token_embedding/...).
_H5_TABLES = (
    (re.compile(r"(?:^|/)token_embedding/vars/0$"), ("vocabulary_size", "embedding_dim")),
    (re.compile(r"^layers/[^/]*embeddings/vars/0$"), ("max_sequence_length", "embedding_dim")),
    (re.compile(r"(?:^|/)segment_embedding/vars/0$"), ("num_segments", "embedding_dim")),
    (re.compile(r"(?:^|/)intermediate_dense/vars/0$"), ("hidden_dim", "intermediate_dim")),
)
_H5_BLOCK = re.compile(r"^layers/([^/]*transformer_block[^/]*)/")
# The same for a Hugging Face safetensors file, by tensor name.
_HF_TABLES = (
    (re.compile(r"(?:^|\.)word_embeddings\.weight$"), ("vocabulary_size", "embedding_dim")),
    (re.compile(r"(?:^|\.)tok_embeddings\.weight$"), ("vocabulary_size", "embedding_dim")),
    (re.compile(r"(?:^|\.)position_embeddings\.weight$"), ("max_sequence_length", None)),
    (re.compile(r"(?:^|\.)token_type_embeddings\.weight$"), ("num_segments", None)),
)
_HF_BLOCKS = (
    (re.compile(r"(?:^|\.)albert_layer_groups\.(\d+)\."), "num_groups"),
    (re.compile(r"(?:^|\.)layer\.(\d+)\."), "num_layers"),
    (re.compile(r"(?:^|\.)layers\.(\d+)\."), "num_layers"),  # ModernBERT
)


def _effective(cls, config):
    """The backbone config with the constructor's defaults filled in."""
    defaults = {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    full = {**defaults, **config}
    if full.get("embedding_dim") is None:
        full["embedding_dim"] = full.get("hidden_dim")
    if full.get("num_groups") is None:
        full["num_groups"] = full.get("num_layers")
    return full


def _check_fact(config, source, weights, key, actual, what):
    # Only a config asking for more than the weights hold is refused here
    # (it would build a model the file cannot fill); a smaller one is cheap
    # to build, and the load then names each tensor that does not match.
    value = config.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > actual:
        raise PresetError(
            f"{source}: backbone.{key} is {value:,}, but {weights} holds {actual:,} ({what}); "
            "the config and the weights come from different models."
        )


def check_config_against_weights(cls, config, weights, source, kind="bertzoo"):
    """Compares a backbone config with the tensor shapes of its weights file
    `weights` (a bertzoo `.weights.h5`, or with `kind="hf"` a Hugging Face
    `.safetensors`), reading only their metadata, before the model is built:
    a config asking for larger sizes than its weights have (a hostile or
    mismatched config.json: a huge vocabulary, hundreds of layers) is a
    one-line `PresetError` naming the key, its value and the weights'
    value, instead of a model built for nothing."""
    full = _effective(cls, config)
    if kind == "hf":
        from bertzoo.io.safetensors import tensor_shapes

        shapes = tensor_shapes(weights)
        tables, blocks = _HF_TABLES, ()
        for pattern, key in _HF_BLOCKS:
            found = {int(m.group(1)) for n in shapes for m in [pattern.search(n)] if m}
            if found:
                blocks = ((key, max(found) + 1, f"tensors of {max(found) + 1} layers"),)
                break
    else:
        shapes = weights_file_shapes(weights)
        tables = _H5_TABLES
        found = {m.group(1) for n in shapes for m in [_H5_BLOCK.match(n)] if m}
        # One block per parameter group (num_layers where layers share none).
        key = "num_groups" if config.get("num_groups") is not None else "num_layers"
        blocks = ((key, len(found), f"{len(found)} transformer blocks"),) if found else ()
    for pattern, keys in tables:
        name = next((n for n in shapes if pattern.search(n)), None)
        if name is None or len(shapes[name]) != 2:
            continue
        for key, actual in zip(keys, shapes[name], strict=True):
            if key is not None:
                what = f"{name} has shape {list(shapes[name])}"
                _check_fact(full, source, weights, key, actual, what)
    for key, actual, what in blocks:
        _check_fact(full, source, weights, key, actual, what)


def check_weights_file(path, model):
    """Keras matches weights by layer order, and silently drops extra ones:
    compare the shapes of the tensors in the `.weights.h5` file `path` with
    `model.weights` before loading (a `PresetError` when they differ)."""
    import h5py

    shapes = []
    try:
        with h5py.File(path, "r") as f:
            f.visititems(
                lambda name, obj: (
                    shapes.append(tuple(obj.shape)) if isinstance(obj, h5py.Dataset) else None
                )
            )
    except OSError as e:
        raise PresetError(f"{path} is not a readable weights file: {e}") from e
    expected = sorted(tuple(w.shape) for w in model.weights)
    if sorted(shapes) != expected:
        raise PresetError(
            f"{path} holds {len(shapes)} tensors that do not match the "
            f"{len(expected)} weights of the configured architecture (the "
            "config and the weights come from different models)."
        )


def load_bertzoo_weights(backbone, directory):
    """Loads a bertzoo preset directory's weights into `backbone`; returns
    its head tensors (`heads.safetensors`, or none)."""
    weights = directory / preset_lib.WEIGHTS_FILE
    if not weights.is_file():
        raise PresetError(
            f"{directory} has a {preset_lib.CONFIG_FILE} but no "
            f"{preset_lib.WEIGHTS_FILE}. Pass load_weights=False to build the "
            "architecture with random weights."
        )
    check_weights_file(weights, backbone)
    try:
        backbone.load_weights(weights)
    except Exception as e:
        raise PresetError(
            f"Cannot load weights from {weights} into the architecture of "
            f"{directory / preset_lib.CONFIG_FILE}: {e}"
        ) from e
    heads = directory / preset_lib.HEADS_FILE
    return read_safetensors(heads, float_only=True) if heads.is_file() else {}


def _preset_document(backbone, name, preset_info, extra, int8_graph=None):
    config = backbone.get_config()
    backbone_config = {k: config[k] for k in BertBackbone.architecture_keys() if k in config}
    metadata = {**preset_info.get("metadata", {}), "params": int(backbone.count_params())}
    document = {"name": name}
    if "description" in preset_info:
        document["description"] = preset_info["description"]
    document["backbone"] = backbone_config
    if "tokenizer" in preset_info:
        document["tokenizer"] = preset_info["tokenizer"]
    document["metadata"] = metadata
    mode = layer_quantization_mode(backbone)
    if mode is not None:
        document["quantization"] = {"mode": mode}
    if int8_graph is not None:
        document["quantization"] = {"mode": "int8", "runtime": "litert", "graph": int8_graph[0]}
    document.update(extra or {})
    return document


def save_backbone(backbone, preset_dir, preset_info, head_tensors, extra=None, int8_graph=None):
    """Writes `backbone` as a preset directory (see
    `BertBackbone.save_to_preset`): `preset_info` holds the description,
    tokenizer and metadata sections to record, `head_tensors` the task-head
    tensors written as `heads.safetensors` (none: no file), `extra` more
    top-level sections for `config.json`, `int8_graph` the `(file name,
    bytes)` of the LiteRT-int8 graph of the model saved (the backbone, a
    task model, an embedder: `bertzoo.models.int8.saved_graph`), recorded in
    the `quantization` section."""
    preset_dir = Path(preset_dir)
    # Saved into a publication's staging folder (a fine-tuning run's best/),
    # the preset is named after the folder it is published as.
    name = published_name(preset_dir)
    document = _preset_document(backbone, name, preset_info, extra, int8_graph)
    text = json.dumps(document, indent=2) + "\n"
    with publish_directory(preset_dir, "preset", replaces=preset_lib.MODEL_FILES) as staging:
        backbone.save_weights(staging / preset_lib.WEIGHTS_FILE)
        if head_tensors:
            write_safetensors(staging / preset_lib.HEADS_FILE, head_tensors)
        if int8_graph is not None:
            (staging / int8_graph[0]).write_bytes(int8_graph[1])
        (staging / preset_lib.CONFIG_FILE).write_text(text, encoding="utf-8")
    return preset_dir


# What an int8 graph may take beyond its model's weights as float32 (the
# graph's own structure, and a head's few weights).
_INT8_GRAPH_SLACK = 64 << 20


def _int8_graph_cap(preset):
    """The most bytes the int8 graph of `preset` may take: its model's
    weights as float32 (an int8 graph holds them in a byte each, with some
    in float32), and some slack; a hostile directory's graph (resealed in
    its manifest) is bounded by the model it says it belongs to."""
    backbone = preset_lib.read_section(preset, "backbone")
    try:
        params = preset_lib.estimated_params(backbone)
    except (KeyError, TypeError):  # the preset document's validation says what is missing
        params = 0
    return 4 * params + _INT8_GRAPH_SLACK


def read_int8_graph(preset):
    """`(owner, bytes)` of the LiteRT-int8 graph a bertzoo preset directory
    holds (owner: the kind of model that saved it, a key of
    `presets.INT8_GRAPH_FILES`), checked against the manifest; None for a
    preset without one (built-in names, Hugging Face directories too)."""
    section = preset_lib.read_section(preset, "quantization")
    if section.get("runtime") != "litert":
        return None
    owners = {name: owner for owner, name in preset_lib.INT8_GRAPH_FILES.items()}
    name = section.get("graph")
    if name not in owners:  # the document's validation names what is valid
        preset_lib.validate_preset({"backbone": {}, "quantization": section}, preset)
    path = Path(preset) / name
    verify_directory(path.parent, [name])
    try:
        return owners[name], read_bounded(
            path, _int8_graph_cap(preset), "LiteRT int8 graph", PresetError
        )
    except OSError as e:
        raise PresetError(f"{shown_path(path)}: cannot read the int8 graph: {e.strerror}.") from e


def load_task_head_file(model, path):
    """Loads a task model's head from its `task_head.safetensors` file
    `path` (variable path -> tensor) when the tensors fit the head's
    variables; returns whether it did (a head that does not fit is left to
    the initialiser, with a warning)."""
    tensors = read_safetensors(path)
    variables = model.head_variables()
    if sorted(tensors) != sorted(variables) or any(
        tuple(tensors[k].shape) != tuple(variables[k].shape) for k in variables
    ):
        shapes = {k: tuple(v.shape) for k, v in tensors.items()}
        wanted = {k: tuple(v.shape) for k, v in variables.items()}
        logger.warning(
            "Not loading the task head from %s: it holds %s, this model needs %s; "
            "the head starts from the initialiser.",
            shown_path(path),
            shapes,
            wanted,
        )
        return False
    # Checked (dtypes) and assigned like every checkpoint weight.
    assign_tensors({k: (v, False) for k, v in variables.items()}, tensors, path)
    return True


def save_task_model(model, preset_dir, tokenizer=None, preset_info=None, sequence_length=None):
    """Writes a task model as a task preset directory (see
    `TaskModel.save_to_preset`): the backbone files, the head
    (`task_head.safetensors`), the `task` section, with `sequence_length`
    the `preprocessor` section and, with `tokenizer`, its vocabulary and
    settings, published as one unit."""
    preset_dir = Path(preset_dir)
    replaces = preset_lib.MODEL_FILES + (VOCABULARY_FILES if tokenizer is not None else ())
    info = dict(model.backbone.preset_info if preset_info is None else preset_info)
    sections = {"task": model.task_config()}
    if sequence_length is not None:
        sections["preprocessor"] = {"sequence_length": int(sequence_length)}
    with publish_directory(preset_dir, "preset", replaces=replaces) as staging:
        if tokenizer is not None:
            tokenizer.save_to_preset(staging)
            info["tokenizer"] = tokenizer.preset_section()
        write_safetensors(
            staging / preset_lib.TASK_HEAD_FILE,
            {
                k: np.asarray(keras.ops.convert_to_numpy(v.value), "float32")
                for k, v in model.head_variables().items()
            },
        )
        backbone = model.backbone
        save_backbone(
            backbone,
            staging,
            info,
            backbone.head_tensors,
            extra=sections,
            int8_graph=saved_graph(model),
        )
    return preset_dir
