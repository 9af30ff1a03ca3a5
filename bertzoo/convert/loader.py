"""The preset loader: classify a preset argument, dispatch to its format,
build the class it is given.

`bertzoo.presets.classify` tells a built-in name, a bertzoo preset directory
and a Hugging Face checkpoint directory apart; this module reads each kind's
config and weights into the model class the caller hands it (`load_backbone`
behind `BertBackbone.from_preset`, `load_task_model` behind the task models'
`from_preset`), through one module per format: `bertzoo_format` (bertzoo's
own directories), `hf` (Hugging Face, per family from its spec table) and
`heads` (task-head tensors in Hugging Face names). Google's TF1 checkpoints
are converted into bertzoo directories (`convert_google_checkpoint`).

The models reach this module through `bertzoo.loader_registry`, never by
importing it: it registers itself there when imported.
"""

import logging
import sys
from pathlib import Path

from bertzoo import loader_registry
from bertzoo import presets as preset_lib
from bertzoo.convert.bertzoo_format import (
    check_config_against_weights,
    check_weights_file,
    load_bertzoo_weights,
    load_task_head_file,
    read_int8_graph,
    save_backbone,
    save_task_model,
)
from bertzoo.convert.common import CheckpointError
from bertzoo.convert.download import download_google_archive
from bertzoo.convert.google import load_google_weights, read_google_checkpoint, save_google_preset
from bertzoo.convert.heads import (
    discriminator_head_tensors,
    hf_num_classes,
    load_discriminator_head,
    load_hf_task_head,
    load_pretraining_heads,
    mlm_head_names,
    pretraining_head_tensors,
)
from bertzoo.convert.hf import hf_to_preset, load_hf_weights, model_type_of
from bertzoo.convert.hf.spec import SAFETENSORS_FILE
from bertzoo.errors import PresetError
from bertzoo.io.snapshot import shown_path
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.quantize import quantize

logger = logging.getLogger(__name__)

__all__ = [
    "check_weights_file",
    "convert_google_checkpoint",
    "discriminator_head_tensors",
    "download_google_checkpoint",
    "head_family",
    "hf_num_classes",
    "load_backbone",
    "load_discriminator_head",
    "load_pretraining_heads",
    "load_task_model",
    "mlm_head_names",
    "pretraining_head_tensors",
    "read_int8_graph",
    "resolve_preset",
    "save_backbone",
    "save_task_model",
]

# The sections of a preset document a backbone carries (`preset_info`).
PRESET_INFO_KEYS = ("description", "tokenizer", "metadata")

# Constructor arguments of a task model's `from_preset` that go to its backbone.
_BACKBONE_OVERRIDES = ("dropout", "attention_dropout", "dtype")


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
    source = preset if directory is None else directory / preset_lib.CONFIG_FILE
    # The sizes were checked against bounds (resolve_preset); the weights'
    # shapes are compared before building too, reading metadata only.
    if load_weights and kind == "bertzoo" and (directory / preset_lib.WEIGHTS_FILE).is_file():
        check_config_against_weights(cls, config, directory / preset_lib.WEIGHTS_FILE, source)
    elif load_weights and kind == "hf" and not allow_partial:
        if (directory / SAFETENSORS_FILE).is_file():
            check_config_against_weights(
                cls, config, directory / SAFETENSORS_FILE, source, kind="hf"
            )
    try:
        backbone = cls(**config)
    except (TypeError, ValueError) as e:
        raise PresetError(f"{source}: invalid backbone config: {e}") from e
    except RecursionError as e:
        raise PresetError(
            f"{source}: the backbone is too deep to build ({config.get('num_layers')!r} "
            "layers exceed Python's recursion limit)."
        ) from e
    except Exception as e:
        if not _out_of_memory(e):
            raise
        first_line = (str(e).strip().splitlines() or [""])[0][:200]
        raise PresetError(
            f"{source}: not enough memory to build this backbone ({type(e).__name__}: "
            f"{first_line}); its sizes are too large for this machine."
        ) from e
    backbone.preset_info = {k: data[k] for k in PRESET_INFO_KEYS if k in data}
    quantization = data.get("quantization", {})
    if quantization and quantization.get("runtime", "keras") == "keras":
        # int8 variables first, so the int8 weights load into them. (A
        # LiteRT-int8 preset holds float32 weights; its model's from_preset
        # loads the graph: bertzoo.models.int8.)
        quantize(backbone, quantization["mode"])
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
        backbone.head_tensors = load_bertzoo_weights(backbone, directory)
    return backbone


def _out_of_memory(error):
    """Whether building failed for want of memory (MemoryError, TensorFlow's
    ResourceExhaustedError, XLA's RESOURCE_EXHAUSTED)."""
    text = str(error)
    return (
        isinstance(error, MemoryError)
        or type(error).__name__ == "ResourceExhaustedError"
        or "RESOURCE_EXHAUSTED" in text
        or "Out of memory" in text
    )


def load_task_model(cls, preset, load_weights=True, **kwargs):
    """Builds the task model `cls` on the backbone of `preset` (see
    `TaskModel.from_preset`): the head's weights come from a bertzoo task
    preset of the same kind (`task_head.safetensors`), else from a Hugging
    Face `*For<Task>` checkpoint's head, else the initialiser."""
    overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in _BACKBONE_OVERRIDES}
    # The loader's own load: a LiteRT-int8 graph in the preset is the task
    # model's to take (TaskModel.from_preset), not its backbone's.
    backbone = load_backbone(BertBackbone, preset, load_weights=load_weights, overrides=overrides)
    task = preset_lib.read_task_section(preset)
    same_kind = cls._kind_of(task) in cls.kinds
    if same_kind:
        for key, value in cls._constructor_defaults(task).items():
            kwargs.setdefault(key, value)
    model = cls(backbone, **kwargs)
    if not load_weights:
        return model
    head_file = Path(preset) / preset_lib.TASK_HEAD_FILE if task else None
    if same_kind and head_file is not None and head_file.is_file():
        model.head_loaded = load_task_head_file(model, head_file)
    elif task and not same_kind:
        logger.info(
            "%s holds a %s head; %s starts a new %s head.",
            shown_path(preset),
            task.get("kind"),
            cls.__name__,
            cls.kinds[0],
        )
    hf = getattr(backbone, "head_tensors", None)
    if hf and not model.head_loaded:  # a bertzoo head file wins
        model.head_loaded = load_hf_task_head(model, hf, preset)
    return model


def head_family(backbone):
    """The family whose names a pretrainer's MLM head is written in:
    "electra" for an ELECTRA generator (written as ElectraForMaskedLM),
    "roberta" for RoBERTa and XLM-R (`*ForMaskedLM`), "modernbert" for
    ModernBERT, else "bert"."""
    families = {
        "electra": "electra",
        "roberta": "roberta",
        "xlm-roberta": "roberta",
        "modernbert": "modernbert",
    }
    return families.get(model_type_of(backbone), "bert")


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


loader_registry.register_loader(sys.modules[__name__])
