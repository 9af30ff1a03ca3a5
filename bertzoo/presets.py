"""Presets: named architectures shipped as JSON, and preset directories.

A preset is one JSON document:

    {
      "name": "bert_base",
      "description": "...",
      "backbone": {...BertBackbone constructor arguments...},
      "tokenizer": {"kind": "wordpiece", "lowercase": true, "strip_accents": true},
      "metadata": {"params": 109482240, "paper": "...", "source_checkpoint": "..."}
    }

Built-in presets live in the repository's top-level `presets/` folder, which
is installed as the `bertzoo.presets_data` package. A preset *directory*
(written by `save_to_preset`) holds the same document as `config.json` plus
the weights as `model.weights.h5`, the task-head tensors of a converted
checkpoint as `heads.safetensors` (Hugging Face names) and the vocabulary
(`vocab.txt` or `spiece.model`).

A built-in preset is named "bert_base" or, explicitly, "builtin:bert_base";
a directory by its path ("./bert_base", "/models/bert_base" or a
`pathlib.Path`). A bare name that is both a built-in and a preset directory
under the current directory is ambiguous: an error saying how to pick each.

This module only classifies a preset argument (`classify`: a built-in name, a
bertzoo preset directory or a Hugging Face checkpoint directory) and reads
and validates preset documents; reading weights, and mapping a Hugging Face
config to a preset document, is the preset loader (`bertzoo.convert.loader`).
"""

import contextlib
import difflib
import functools
import json
import os
from pathlib import Path

from bertzoo.errors import PresetError  # noqa: F401  (bertzoo.presets.PresetError)
from bertzoo.io import snapshot
from bertzoo.io.bounded import CONFIG_BYTES, MAX_TOKENS, read_bounded_text
from bertzoo.io.jsonfile import parse_json
from bertzoo.io.manifest import verify_directory

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
GENERATOR_DIR = "generator"  # an ELECTRA preset's generator, a preset of its own
# Task-head tensors (MLM, NSP/SOP, classifier) kept with a backbone, in
# Hugging Face names and layouts, for the task models.
HEADS_FILE = "heads.safetensors"
# A fine-tuned task model's head (bertzoo.models.tasks).
TASK_HEAD_FILE = "task_head.safetensors"
# A LiteRT-int8 model's graph, beside its float32 weights, by the kind of
# model that runs it (bertzoo.models.int8).
INT8_GRAPH_FILES = {
    "backbone": "backbone_int8.tflite",
    "task": "task_int8.tflite",
    "embedder": "embedder_int8.tflite",
}
# What a model's save replaces in a preset directory (the vocabulary, saved
# by the tokenizer, stays).
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE, HEADS_FILE, TASK_HEAD_FILE, *INT8_GRAPH_FILES.values())

# Allowed keys and their JSON types, per section.
_TOP_LEVEL = {
    "name": str,
    "description": str,
    "backbone": dict,
    "tokenizer": dict,
    "metadata": dict,
    # A fine-tuned task model's head settings (bertzoo.models.tasks).
    "task": dict,
    # A quantized model's mode: {"mode": "int8"} for Keras' int8 layers
    # (bertzoo.models.quantize); a LiteRT-int8 model's adds "runtime":
    # "litert" and its "graph" file (bertzoo.models.int8).
    "quantization": dict,
    # A TextEmbedder's pooling, normalisation and sequence length.
    "embedder": dict,
    # A task preset's text packing: the length its preprocessor packs to
    # when loaded (a fine-tuning run's, so Keras packs as the run and its
    # export do).
    "preprocessor": dict,
}
# The quantization modes a preset may record (bertzoo.models.quantize).
QUANTIZATION_MODES = ("int8",)
_QUANTIZATION = {"mode": str, "runtime": str, "graph": str}
# The runtimes a quantized preset may record: "keras" (the default: int8
# layers in the weights file) or "litert" (float32 weights and a graph).
QUANTIZATION_RUNTIMES = ("keras", "litert")
_EMBEDDER = {"pooling": str, "normalize": bool, "sequence_length": int}
_PREPROCESSOR = {"sequence_length": int}
_TOKENIZER = {
    "kind": str,
    "lowercase": bool,
    "strip_accents": bool,
    # Special tokens, only where they differ from the kind's defaults.
    "cls_token": str,
    "sep_token": str,
    "pad_token": str,
    "unk_token": str,
    "mask_token": str,
    # WordPiece: the reference implementation the checkpoint was trained
    # with (bertzoo.tokenizers.basic.REFERENCES; absent = "google"), an
    # override of its cleaning, and added tokens matched in the text.
    "reference": str,
    "control_chars": str,
    "added_tokens": list,
    # Byte-level BPE (RoBERTa): a space put before each text.
    "add_prefix_space": bool,
    # Byte-level BPE read from a tokenizer.json (ModernBERT) instead of
    # vocab.json + merges.txt.
    "vocabulary_file": str,
}
_TOKENIZER_FILES = ("tokenizer.json",)
_TOKENIZER_KINDS = ("wordpiece", "sentencepiece", "byte_level_bpe", "fairseq_sentencepiece")
_TOKENIZER_REFERENCES = ("google", "hf-python", "hf-fast")
_METADATA = {
    "params": int,
    # The model family a checkpoint belongs to where its architecture alone
    # does not say (Hugging Face model_type, e.g. "electra": no pooler,
    # ELECTRA's task heads and export names).
    "model_type": str,
    "paper": str,
    "source_checkpoint": str,
    "checkpoint_url": str,
    "license": str,
    # Where each value of the backbone config was read, when it is not the
    # source checkpoint's own config.json (the Ettin presets).
    "config_source": str,
    # Hugging Face config keys bertzoo does not model, kept to be written
    # back by save_hf (ModernBERT: special token ids, the task head's
    # pooling, the architecture).
    "hf_config": dict,
}


def _builtin_root():
    """The folder holding the built-in preset JSON files."""
    package_dir = Path(__file__).resolve().parent
    installed = package_dir / "presets_data"  # where the wheel puts presets/
    if installed.is_dir():
        return installed
    return package_dir.parent / "presets"  # a source checkout (editable install)


@functools.lru_cache(maxsize=None)
def builtin_presets():
    """Maps each built-in preset name to its JSON file."""
    root = _builtin_root()
    files = {p.stem: p for p in sorted(root.glob("*.json"))}
    if not files:
        raise PresetError(
            f"No built-in presets found in {root}. The installation is broken: reinstall bertzoo."
        )
    return files


def _check_types(section, spec, source, where):
    for key, value in section.items():
        if key not in spec:
            raise PresetError(
                f"{source}: unknown key '{where}{key}'. Valid keys: {', '.join(sorted(spec))}."
            )
        expected = spec[key]
        if expected is int and isinstance(value, bool) or not isinstance(value, expected):
            raise PresetError(
                f"{source}: key '{where}{key}' must be a JSON {expected.__name__}, got {value!r}."
            )


# Upper bounds on a preset's sizes, checked before anything is built: a
# config.json that asks for more is damaged or hostile (the largest released
# BERT-family checkpoints have 250,002 tokens, 48 layers, hidden 4,096,
# intermediate 16,384 and 4,096 positions). Each bound leaves room above
# them. Layers are bounded more tightly: building one takes a noticeable
# time, and layers that share their weights (num_groups < num_layers) cannot
# be counted in a weights file.
SIZE_BOUNDS = {
    "vocabulary_size": MAX_TOKENS,
    "num_layers": 256,
    "num_groups": 256,
    "num_heads": 1024,
    "hidden_dim": 65_536,
    "embedding_dim": 65_536,
    "intermediate_dim": 262_144,
    "num_segments": 1024,
    "max_sequence_length": 131_072,
}


def _memory_bytes():
    """This machine's physical memory in bytes (None where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def estimated_params(backbone):
    """About how many parameters a backbone section builds (its embedding
    tables and distinct transformer blocks), from its sizes alone."""
    hidden = backbone["hidden_dim"]
    embedding = backbone.get("embedding_dim") or hidden
    inner = backbone["intermediate_dim"]
    groups = backbone.get("num_groups") or backbone["num_layers"]
    tables = (
        backbone["vocabulary_size"]
        + backbone.get("max_sequence_length", 512)
        + backbone.get("num_segments", 2)
    ) * embedding
    projection = embedding * hidden if embedding != hidden else 0
    block = 4 * hidden * hidden + 2 * hidden * inner + 9 * hidden + inner
    return tables + projection + groups * block + hidden * hidden


def check_sizes(backbone, source):
    """Refuses, before anything is built, a backbone section whose sizes
    exceed `SIZE_BOUNDS`, or whose weights (float32) would not fit in this
    machine's memory: a one-line `PresetError` naming the key, its value
    and the bound."""
    for key, bound in SIZE_BOUNDS.items():
        value = backbone.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
            raise PresetError(
                f"{source}: backbone.{key} is {value:,}, above the largest bertzoo builds "
                f"({bound:,}); the file is damaged or not a model config."
            )
    sizes = ("vocabulary_size", "num_layers", "hidden_dim", "intermediate_dim")
    numeric = ("embedding_dim", "num_groups", "num_segments", "max_sequence_length", *sizes)
    if not all(k in backbone for k in sizes) or not all(
        isinstance(backbone[k], int) and not isinstance(backbone[k], bool) and backbone[k] > 0
        for k in numeric
        if backbone.get(k) is not None
    ):
        return  # the constructor reports missing or invalid sizes
    params = estimated_params(backbone)
    memory = _memory_bytes()
    if memory and 4 * params > memory:
        raise PresetError(
            f"{source}: the backbone's sizes make about {params:,} parameters "
            f"({4 * params / 2**30:,.1f} GiB as float32), more than this machine's "
            f"{memory / 2**30:,.1f} GiB of memory; the file is damaged or the model too large."
        )


# Model types (preset metadata) pre-trained without a sentence objective:
# masked LM only, one segment.
MLM_ONLY_FAMILIES = ("roberta", "xlm-roberta", "modernbert")


def modernbert_shaped(document):
    """Whether a preset document (`backbone` and `metadata` sections) is a
    ModernBERT-class encoder: model_type "modernbert", or ModernBERT's
    switches on any model (rotary positions, a gated feed-forward). These
    pre-train as ModernBERT does: masked LM only, 30% of tokens masked."""
    backbone = document.get("backbone") or {}
    return (
        (document.get("metadata") or {}).get("model_type") == "modernbert"
        or backbone.get("rope_theta") is not None
        or bool(backbone.get("gated_feedforward"))
    )


def max_input_length(backbone):
    """The longest sequence a backbone config's position table embeds:
    `max_sequence_length`, less the rows RoBERTa's padding-aware positions
    keep for padding (`position_padding_id + 1`)."""
    length = backbone.get("max_sequence_length", 512)
    if backbone.get("position_padding_id") is not None:
        length -= backbone["position_padding_id"] + 1
    return length


def validate_preset(data, source, backbone_keys=None):
    """Checks a preset document; errors name `source` and the offending key.

    Args:
        data: the parsed JSON document.
        source: file path or name used in error messages.
        backbone_keys: the backbone constructor arguments that are valid
            (None: the backbone section's keys are not checked).
    """
    if not isinstance(data, dict):
        raise PresetError(f"{source}: a preset must be a JSON object, got {type(data).__name__}.")
    _check_types(data, _TOP_LEVEL, source, "")
    if "backbone" not in data:
        raise PresetError(f"{source}: missing the required key 'backbone'.")
    for key in data["backbone"] if backbone_keys is not None else ():
        if key not in backbone_keys:
            close = difflib.get_close_matches(key, backbone_keys, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise PresetError(
                f"{source}: unknown key 'backbone.{key}'.{hint} Valid keys: "
                f"{', '.join(sorted(backbone_keys))}."
            )
    tokenizer = data.get("tokenizer", {})
    _check_types(tokenizer, _TOKENIZER, source, "tokenizer.")
    if "kind" in tokenizer and tokenizer["kind"] not in _TOKENIZER_KINDS:
        raise PresetError(
            f"{source}: tokenizer.kind must be one of {', '.join(_TOKENIZER_KINDS)}, "
            f"got {tokenizer['kind']!r}."
        )
    if "vocabulary_file" in tokenizer and tokenizer["vocabulary_file"] not in _TOKENIZER_FILES:
        raise PresetError(
            f"{source}: tokenizer.vocabulary_file must be one of {', '.join(_TOKENIZER_FILES)}, "
            f"got {tokenizer['vocabulary_file']!r}."
        )
    if "reference" in tokenizer and tokenizer["reference"] not in _TOKENIZER_REFERENCES:
        raise PresetError(
            f"{source}: tokenizer.reference must be one of {', '.join(_TOKENIZER_REFERENCES)}, "
            f"got {tokenizer['reference']!r}."
        )
    _check_types(data.get("metadata", {}), _METADATA, source, "metadata.")
    _check_types(data.get("embedder", {}), _EMBEDDER, source, "embedder.")
    _check_types(data.get("preprocessor", {}), _PREPROCESSOR, source, "preprocessor.")
    quantization = data.get("quantization")
    if quantization is not None:
        _check_quantization(quantization, source)
    check_sizes(data["backbone"], source)
    return data


def _check_quantization(section, source):
    _check_types(section, _QUANTIZATION, source, "quantization.")
    if section.get("mode") not in QUANTIZATION_MODES:
        raise PresetError(
            f"{source}: quantization.mode must be one of {', '.join(QUANTIZATION_MODES)}, "
            f"got {section.get('mode')!r}."
        )
    runtime = section.get("runtime", "keras")
    if runtime not in QUANTIZATION_RUNTIMES:
        raise PresetError(
            f"{source}: quantization.runtime must be one of "
            f"{', '.join(QUANTIZATION_RUNTIMES)}, got {runtime!r}."
        )
    graphs = tuple(INT8_GRAPH_FILES.values()) if runtime == "litert" else (None,)
    if section.get("graph") not in graphs:
        valid = (
            f"one of {', '.join(graphs)}"
            if runtime == "litert"
            else "absent (Keras' int8 layers are in the weights file)"
        )
        raise PresetError(
            f"{source}: quantization.graph must be {valid} with runtime {runtime!r}, "
            f"got {section.get('graph')!r}."
        )


def _config_text(path):
    """A preset's config.json (or a preset JSON file) as text: a plain UTF-8
    file of at most CONFIG_BYTES (`bertzoo.io.bounded`), else a PresetError."""
    return read_bounded_text(path, CONFIG_BYTES, "config file", PresetError)


def read_preset_file(path, backbone_keys=None):
    """Reads and validates one preset JSON file."""
    path = Path(path)
    try:
        text = _config_text(path)
    except OSError as e:
        raise PresetError(f"{path}: cannot read the preset file ({e}).") from e
    try:
        data = parse_json(text)
    except json.JSONDecodeError as e:
        raise PresetError(
            f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}."
        ) from e
    except ValueError as e:
        raise PresetError(f"{path}: {e}") from e
    return validate_preset(data, str(path), backbone_keys)


def unknown_preset_error(name):
    """The error for a preset argument that names nothing, with the closest
    built-in name."""
    names = sorted(builtin_presets())
    close = difflib.get_close_matches(str(name), names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return PresetError(
        f"Unknown preset {name!r}: not a built-in preset name and not a "
        f"directory with a {CONFIG_FILE}.{hint} Built-in presets: {', '.join(names)}."
    )


# === Preset names (issue 14) ===
# "bert_tiny" names the built-in preset unless ./bert_tiny is a preset
# directory too: then the name is ambiguous, an error. "builtin:bert_tiny"
# always names the built-in; "./bert_tiny" or pathlib.Path("bert_tiny")
# always a directory. An empty name is an error (it used to load the
# current directory: pass "." for that).
BUILTIN_PREFIX = "builtin:"


def builtin_name(preset):
    """The built-in preset that `preset` names ("bert_tiny" or
    "builtin:bert_tiny"), or None (a path, or not a built-in name)."""
    if not isinstance(preset, str):
        return None
    name = preset.removeprefix(BUILTIN_PREFIX)
    return name if name in builtin_presets() else None


def _check_preset_argument(preset):
    names = ", ".join(sorted(builtin_presets()))
    if not isinstance(preset, str | os.PathLike):
        raise PresetError(
            f"A preset is a built-in name ({names}) or a preset directory (a str or "
            f"pathlib.Path), got {type(preset).__name__}: {preset!r}."
        )
    if isinstance(preset, str) and not preset.strip():
        raise PresetError(
            f"The preset name {preset!r} is empty. Pass a built-in preset ({names}) or a "
            'preset directory (for the current directory, "." explicitly).'
        )
    if isinstance(preset, str) and preset.startswith(BUILTIN_PREFIX):
        name = preset[len(BUILTIN_PREFIX) :]
        if name not in builtin_presets():
            close = difflib.get_close_matches(name, sorted(builtin_presets()), n=1)
            hint = f" Did you mean '{BUILTIN_PREFIX}{close[0]}'?" if close else ""
            raise PresetError(f"Unknown built-in preset {name!r}.{hint} Built-in presets: {names}.")
    elif isinstance(preset, str) and preset in builtin_presets():
        local = Path(preset)
        if (local / CONFIG_FILE).is_file():
            raise PresetError(
                f"Preset {preset!r} is ambiguous: it is a built-in preset (an architecture, "
                f"randomly initialised) and also the preset directory {local.resolve()}. "
                f"Pass '{BUILTIN_PREFIX}{preset}' for the built-in, or './{preset}' (or "
                f"pathlib.Path('{preset}')) for the directory."
            )


# === End of preset names ===


@contextlib.contextmanager
def pinned(preset):
    """Yields the preset argument to read a preset from: for a directory, a
    view of the one version it holds now (`bertzoo.io.snapshot`), so that a
    save publishing a new version meanwhile cannot mix the config of one
    save with the weights or head of another. Errors raised inside name
    the directory, not its view. Built-in names (and arguments that name
    nothing, which the loader reports) are yielded unchanged."""
    _check_preset_argument(preset)
    if builtin_name(preset) is not None or not Path(preset).is_dir():
        yield preset
        return
    with snapshot.pinned_directory(preset) as view:
        if view == Path(preset):
            yield preset
            return
        try:
            yield view
        except BaseException as e:
            snapshot.show_original(e, view, preset)
            raise


def _is_hf_config(config):
    """Whether `config` (a directory's config.json) is a Hugging Face model
    config rather than a bertzoo preset document."""
    try:
        raw = parse_json(_config_text(config))
    except (OSError, ValueError):  # too large, not UTF-8, not JSON: PresetError too
        return False  # read_preset_file reports what is wrong
    return isinstance(raw, dict) and "model_type" in raw and "backbone" not in raw


def classify(name_or_dir):
    """What a preset argument names, as `(kind, location)`.

    kind is "builtin" (location: the built-in name; built-in presets ship no
    weights), "bertzoo" (a directory written by save_to_preset) or "hf" (a
    Hugging Face checkpoint directory); location is then the directory's
    `Path`. A built-in name may be written "builtin:NAME"; a bare NAME that is
    also a preset directory under the current directory is ambiguous (a
    PresetError saying how to pick either), and an empty name is an error. A
    directory with a bertzoo manifest is verified against it first
    (`bertzoo.io.manifest`; IntegrityError names a damaged file).
    """
    _check_preset_argument(name_or_dir)
    name = builtin_name(name_or_dir)
    if name is not None:
        return "builtin", name
    path = Path(name_or_dir)
    if not path.is_dir():
        raise unknown_preset_error(name_or_dir)
    config = path / CONFIG_FILE
    if not config.is_file():
        raise PresetError(
            f"{path} is a directory but has no {CONFIG_FILE}; a preset "
            f"directory holds {CONFIG_FILE} and {WEIGHTS_FILE} (written by "
            "save_to_preset), a Hugging Face checkpoint directory config.json "
            "and model.safetensors."
        )
    verify_directory(path)
    return ("hf" if _is_hf_config(config) else "bertzoo"), path


def read_document(kind, location, backbone_keys=None):
    """The validated preset document of a "builtin" or "bertzoo" preset that
    `classify` returned. `backbone_keys`: the valid backbone constructor
    arguments (None: the backbone section's keys are not checked, for
    callers that read only the other sections). A Hugging Face directory's
    config is mapped to a document by the checkpoint converters
    (`bertzoo.convert.loader.resolve_preset` does both)."""
    if kind == "builtin":
        return read_preset_file(builtin_presets()[location], backbone_keys)
    if kind == "bertzoo":
        return read_preset_file(Path(location) / CONFIG_FILE, backbone_keys)
    raise PresetError(f"{location}: a {kind!r} directory has no bertzoo preset document.")


def read_task_section(preset):
    """The `task` section of a bertzoo preset directory ({} for built-in
    presets, Hugging Face directories and backbone-only presets)."""
    return read_section(preset, "task")


def read_section(preset, name):
    """The top-level section `name` of a bertzoo preset directory's
    `config.json` ({} for built-in presets, Hugging Face directories and
    presets without one)."""
    if isinstance(preset, str) and preset in builtin_presets():
        return {}
    config = Path(preset) / CONFIG_FILE
    if not config.is_file():
        return {}
    # Only the file read here: classify() verifies the whole directory
    # before any weights load (hashing them here too would repeat that).
    verify_directory(config.parent, names=[CONFIG_FILE])
    try:
        data = parse_json(_config_text(config))
    except (OSError, ValueError):
        return {}  # reading the preset document reports unreadable files
    section = data.get(name, {}) if isinstance(data, dict) else {}
    if not isinstance(section, dict):
        raise PresetError(f"{config}: {name!r} must be a JSON object, got {section!r}.")
    return section


def list_presets():
    """Built-in presets: name -> {"description", "params", ...} metadata."""
    out = {}
    for name, path in builtin_presets().items():
        data = json.loads(path.read_text(encoding="utf-8"))
        out[name] = {"description": data.get("description", ""), **data.get("metadata", {})}
    return out
