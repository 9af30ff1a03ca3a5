"""Reading and writing backbones in every preset format, in one place.

`bertzoo.presets` classifies a preset argument (a built-in name, a bertzoo
preset directory or a Hugging Face checkpoint directory); this module reads
each kind's config and weights into a `BertBackbone` (`load_backbone`, which
`BertBackbone.from_preset` calls), writes preset directories
(`save_backbone`, behind `save_to_preset`) and converts Google's TF1
checkpoints (`convert_google_checkpoint`, `download_google_checkpoint`). The
format readers themselves (`bertzoo.convert`) work on tensors, config dicts
and the backbone handed to them.
"""

import json
import logging
from pathlib import Path

from bertzoo import presets as preset_lib
from bertzoo.convert.common import CheckpointError
from bertzoo.convert.download import download_google_archive
from bertzoo.convert.google import load_google_weights, read_google_checkpoint, save_google_preset
from bertzoo.convert.hf import hf_to_preset, load_hf_weights
from bertzoo.convert.safetensors_io import read_safetensors, write_safetensors
from bertzoo.errors import PresetError
from bertzoo.io.publish import publish_directory
from bertzoo.models.backbone import BertBackbone

logger = logging.getLogger(__name__)

# The sections of a preset document a backbone carries (`preset_info`).
PRESET_INFO_KEYS = ("description", "tokenizer", "metadata")


def resolve_preset(preset):
    """The validated preset document of any preset argument, as
    `(document, directory, kind)`: kind is "builtin" (directory None),
    "bertzoo" or "hf" (a Hugging Face checkpoint directory, its config mapped
    to a preset document). See `bertzoo.presets.classify`."""
    kind, location = preset_lib.classify(preset)
    if kind == "hf":
        document = hf_to_preset(location)
        source = str(Path(location) / preset_lib.CONFIG_FILE)
        return (
            preset_lib.validate_preset(document, source, BertBackbone.architecture_keys()),
            location,
            kind,
        )
    document = preset_lib.read_document(kind, location, BertBackbone.architecture_keys())
    return document, (None if kind == "builtin" else location), kind


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


def _load_bertzoo_weights(backbone, directory):
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


def load_backbone(
    cls, preset, load_weights=True, allow_partial=False, allow_pickle=False, overrides=None
):
    """Builds a `cls` (a `BertBackbone`) from any preset argument and loads
    its weights: the single format dispatch behind `BertBackbone.from_preset`
    (which documents the arguments). The model records the preset's
    description, tokenizer and metadata sections (`preset_info`) and the
    task-head tensors found beside the backbone (`head_tensors`)."""
    data, directory, kind = resolve_preset(preset)
    config = {**data["backbone"], **(overrides or {})}
    try:
        backbone = cls(**config)
    except (TypeError, ValueError) as e:
        source = preset if directory is None else directory / preset_lib.CONFIG_FILE
        raise PresetError(f"{source}: invalid backbone config: {e}") from e
    backbone.preset_info = {k: data[k] for k in PRESET_INFO_KEYS if k in data}
    if not load_weights:
        return backbone
    if kind == "builtin":
        logger.info(
            "Preset %r is an architecture preset and ships no weights; the "
            "model is randomly initialised (truncated normal, stddev %s).",
            preset,
            backbone.initializer_range,
        )
    elif kind == "hf":
        backbone.head_tensors = load_hf_weights(
            backbone, directory, allow_partial=allow_partial, allow_pickle=allow_pickle
        )
    else:
        backbone.head_tensors = _load_bertzoo_weights(backbone, directory)
    return backbone


def save_backbone(backbone, preset_dir, preset_info, head_tensors, extra=None):
    """Writes `backbone` as a preset directory (see
    `BertBackbone.save_to_preset`): `preset_info` holds the description,
    tokenizer and metadata sections to record, `head_tensors` the task-head
    tensors written as `heads.safetensors` (none: no file), `extra` more
    top-level sections for `config.json`."""
    preset_dir = Path(preset_dir)
    config = backbone.get_config()
    backbone_config = {k: config[k] for k in BertBackbone.architecture_keys() if k in config}
    metadata = {**preset_info.get("metadata", {}), "params": int(backbone.count_params())}
    document = {"name": preset_dir.name}
    if "description" in preset_info:
        document["description"] = preset_info["description"]
    document["backbone"] = backbone_config
    if "tokenizer" in preset_info:
        document["tokenizer"] = preset_info["tokenizer"]
    document["metadata"] = metadata
    document.update(extra or {})
    text = json.dumps(document, indent=2) + "\n"
    with publish_directory(preset_dir, "preset", replaces=preset_lib.MODEL_FILES) as staging:
        backbone.save_weights(staging / preset_lib.WEIGHTS_FILE)
        if head_tensors:
            write_safetensors(staging / preset_lib.HEADS_FILE, head_tensors)
        (staging / preset_lib.CONFIG_FILE).write_text(text, encoding="utf-8")
    return preset_dir


# === Google TF1 checkpoints ===


def convert_google_checkpoint(
    source,
    output_dir,
    model_type=None,
    lowercase=None,
    *,
    checkpoint=None,
    config_file=None,
    vocab_file=None,
    allow_partial=False,
    metadata=None,
):
    """Converts a Google TF1 BERT, ALBERT or ELECTRA checkpoint into a preset
    directory.

    Args:
        source: a directory holding the checkpoint (`<prefix>.index` +
            `<prefix>.data-*`), `bert_config.json` or `albert_config.json`
            (ELECTRA: optional, see `config_file`) and `vocab.txt` or a
            SentencePiece `*.model` (directly or in its only subdirectory,
            as archives extract); or a checkpoint prefix; or None when
            `checkpoint` and `vocab_file` are given (and `config_file`
            unless the config is beside the checkpoint).
        output_dir: the preset directory to write (created if needed). An
            ELECTRA checkpoint's discriminator is written there and its
            generator, when it has one, as a preset of its own in
            `output_dir/generator` (`ElectraPretrainer.from_preset(output_dir)`
            loads the pair).
        model_type: "bert", "albert" or "electra"; detected from the tensor
            names (ALBERT's `group_*/inner_group_*` scopes, ELECTRA's
            `electra/` and `generator/`) when None.
        lowercase: whether the tokenizer lowercases. When None: True for
            ALBERT; else the config's `do_lower_case` (ELECTRA's pre-training
            hparams), else the directory name ("uncased" or "cased"), else
            an error asks for it (Google's ELECTRA models are uncased).
        checkpoint, config_file, vocab_file: explicit paths, overriding what
            is found in `source`. ELECTRA's archives ship no model config:
            the sizes come from the tensor shapes and the heads from the
            reference rule max(1, hidden // 64) unless a config file (found
            beside the checkpoint, or `config_file`: `bert_config.json`
            keys, a Hugging Face `config.json` or the pre-training hparams
            JSON) says otherwise; a `*generator*config*.json` beside the
            checkpoint describes the generator.
        allow_partial: load what matches instead of failing on missing or
            unused tensors (the rest stays randomly initialised).
        metadata: extra preset metadata (e.g. `checkpoint_url`, `license`).

    Returns the output directory; `BertBackbone.from_preset(output_dir)`
    loads it, with the pre-training heads in `backbone.head_tensors`.

    Example:
    >>> convert_google_checkpoint("uncased_L-12_H-768_A-12", "bert_base_google")
    >>> backbone = BertBackbone.from_preset("bert_base_google")
    >>> convert_google_checkpoint("electra_small", "electra_small_google", lowercase=True)
    >>> pretrainer = ElectraPretrainer.from_preset("electra_small_google")
    """
    ckpt = read_google_checkpoint(
        source,
        model_type,
        lowercase,
        checkpoint=checkpoint,
        config_file=config_file,
        vocab_file=vocab_file,
        metadata=metadata,
    )

    def load(part):
        try:
            backbone = BertBackbone(**part.backbone_config)
        except (TypeError, ValueError) as e:
            source = part.config_path or part.prefix
            raise CheckpointError(f"{source}: invalid model config: {e}") from e
        return backbone, load_google_weights(backbone, part, allow_partial=allow_partial)

    backbone, heads = load(ckpt)
    generator = load(ckpt.generator) if ckpt.generator is not None else None
    return save_google_preset(backbone, ckpt, heads, output_dir, generator=generator)


def download_google_checkpoint(
    name,
    cache_dir,
    output_dir=None,
    sha256=None,
    lowercase=None,
    check_recorded=True,
):
    """Downloads, verifies and extracts an official Google BERT/ALBERT archive
    (`bertzoo.convert.download.download_google_archive`, which documents
    `name`, `cache_dir`, `sha256` and `check_recorded`), and converts it
    into the preset directory `output_dir` when given (`lowercase`: the
    tokenizer casing; defaults to the built-in preset's, else inferred).

    Returns `output_dir` if given, else the extracted checkpoint directory.
    """
    archive = download_google_archive(name, cache_dir, sha256=sha256, check_recorded=check_recorded)
    if output_dir is None:
        return archive.directory
    if lowercase is None:
        lowercase = archive.lowercase
    return convert_google_checkpoint(
        archive.directory, output_dir, lowercase=lowercase, metadata=archive.metadata
    )
