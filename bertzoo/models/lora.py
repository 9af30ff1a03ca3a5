"""LoRA (low-rank adaptation) fine-tuning of bertzoo models.

    classifier.enable_lora(rank=8)        # before compile
    classifier.fit(...)                   # trains the adapters and the head
    classifier.save_lora_adapter("adapter")   # the adapter alone (a few MB)
    classifier.save_to_preset("merged")   # an ordinary preset, LoRA merged

`enable_lora` adds Keras' LoRA factors (`Dense.enable_lora`: the kernel W
becomes W + (alpha / rank) A B, with A `(in, rank)` and B `(rank, out)`, B
starting at zero) to the backbone's Dense layers named in `targets`, and
freezes every other backbone variable: embeddings, layer norms and the
frozen kernels. `targets` is a list of layer names or a named set:
"all" (the default: every projection of the encoder blocks, query, key,
value, attention output and both feed-forward layers, as QLoRA found
needed to match full fine-tuning) or "attention" (query and value, the
LoRA paper's choice; fewer parameters, lower accuracy: BENCHMARKS.md). A task model's head stays
trainable, with the backbone's pooler when a classifier's head starts there
(the dense -> tanh layer RoBERTa's head has of its own).

Saving merges: `save_weights` and `save_to_preset` write W + (alpha / rank)
A B as each layer's kernel (Keras' `Dense.save_own_variables`), so the
preset loads into a plain model. The adapter alone (`save_lora_adapter`)
holds A and B of every target and the head's variables, with the settings
and a fingerprint of the frozen base weights it was trained on; it loads
into a model built from that base (`load_lora_adapter`), which it checks.
"""

import hashlib
import json
import math
import zipfile
from pathlib import Path

import keras
import numpy as np

from bertzoo.errors import BertzooError, IntegrityError
from bertzoo.io import manifest as manifest_lib
from bertzoo.io.bounded import CONFIG_BYTES, read_bounded_text
from bertzoo.io.publish import publish_directory
from bertzoo.models import litert

TARGET_SETS = {
    "all": ("query", "key", "value", "attention_output", "intermediate_dense", "output_dense"),
    "attention": ("query", "value"),
}
DEFAULT_TARGETS = "all"
ADAPTER_FILE = "lora_adapter.npz"
ADAPTER_CONFIG = "lora_adapter.json"
FORMAT = "bertzoo-lora-adapter"
VERSION = 1


class LoraError(BertzooError, ValueError):
    """A LoRA setting or adapter that does not fit the model."""


def _backbone(model):
    return getattr(model, "backbone", model)


def _dense_layers(backbone, targets):
    return [
        layer
        for layer in backbone._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.Dense) and layer.name in targets
    ]


def lora_layers(model):
    """The model's Dense layers with LoRA enabled, in a stable order."""
    return [
        layer
        for layer in _backbone(model)._flatten_layers(include_self=False)
        if isinstance(layer, keras.layers.Dense) and layer.lora_enabled
    ]


def lora_settings(model):
    """{"rank", "alpha", "targets"} of a model with LoRA enabled, else None."""
    layers = lora_layers(model)
    if not layers:
        return None
    return {
        "rank": int(layers[0].lora_rank),
        "alpha": float(layers[0].lora_alpha),
        "targets": sorted({layer.name for layer in layers}),
    }


def check_rank(rank, name="rank"):
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise LoraError(f"LoRA {name} must be an integer >= 1, got {rank!r}.")
    return rank


def resolve_targets(targets):
    """Layer names of `targets`: a named set (`TARGET_SETS`), layer names
    separated by commas, or a sequence of names."""
    if isinstance(targets, str):
        return TARGET_SETS.get(targets, tuple(t.strip() for t in targets.split(",") if t.strip()))
    return tuple(targets)


def enable_lora(model, rank, alpha=None, targets=DEFAULT_TARGETS):
    """Enables LoRA of `rank` (scale `alpha` / rank; alpha None: rank, a
    scale of 1) on the backbone's Dense layers named in `targets`, and
    freezes the backbone's other variables (see the module docstring). Call
    it on a built model, before `compile`. Returns the number of trainable
    parameters left."""
    check_rank(rank)
    if alpha is not None and (
        isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha)
    ):
        raise LoraError(f"LoRA alpha must be a finite number or None, got {alpha!r}.")
    targets = resolve_targets(targets)
    backbone = _backbone(model)
    quantized = [
        layer.name
        for layer in backbone._flatten_layers(include_self=False)
        if layer.quantization_mode is not None
    ]
    if quantized:
        raise LoraError(
            f"{backbone.name} is quantized ({len(quantized)} layers, e.g. {quantized[0]}): "
            "enable LoRA on the float model, and quantize after merging."
        )
    if litert.attached_runner(model) is not None:
        raise LoraError(
            f"{model.name} is quantized (int8, run by LiteRT): enable LoRA on the float "
            "model, and quantize after merging."
        )
    if lora_layers(model):
        raise LoraError(
            f"LoRA is already enabled on this model ({lora_settings(model)}); enable it once."
        )
    layers = _dense_layers(backbone, targets)
    if not layers:
        names = sorted(
            {
                layer.name
                for layer in backbone._flatten_layers(include_self=False)
                if isinstance(layer, keras.layers.Dense)
            }
        )
        raise LoraError(
            f"LoRA targets {list(targets)} match no Dense layer of {backbone.name}; its Dense "
            f"layers are named {names} (named sets: {', '.join(TARGET_SETS)})."
        )
    # Checked before any factor is made: a rank above a projection's own
    # (its smaller side) adds nothing, and a hostile one (1e6) would
    # allocate factors of that width on every projection.
    full = min(min(int(d) for d in layer.kernel.shape) for layer in layers)
    if rank > full:
        smallest = next(layer for layer in layers if min(layer.kernel.shape) == full)
        raise LoraError(
            f"LoRA rank {rank:,} is above the rank of the target projections ({smallest.name} "
            f"is {' x '.join(str(int(d)) for d in smallest.kernel.shape)}): use a rank of at "
            f"most {full} (adapters usually take 4 to 64)."
        )
    # A classifier's pooled head starts at the backbone's pooler (dense ->
    # tanh on the first token, the role RoBERTa's head gives its own dense
    # layer): it trains with the head.
    keep = set()
    if backbone is not model and getattr(backbone, "use_pooler", False):
        pooler = backbone.get_layer("pooler_dense")
        if pooler.trainable:
            keep = {id(v) for v in pooler.weights}
    for layer in layers:
        layer.enable_lora(rank, lora_alpha=alpha)
    keep |= {id(v) for layer in layers for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    for variable in backbone.weights:
        if id(variable) not in keep:
            variable.trainable = False
    return sum(int(np.prod(v.shape)) for v in model.trainable_weights)


def _head_variables(model):
    """What trains beside the LoRA factors: a task model's head (its own
    variables, and the backbone's pooler when the head starts there)."""
    if _backbone(model) is model:
        return []
    adapters = {id(v) for v in lora_variables(model)}
    inside = {id(v) for v in model.backbone.weights}
    return [
        v for v in model.weights if id(v) not in adapters and (id(v) not in inside or v.trainable)
    ]


def base_fingerprint(model):
    """SHA-256 of the frozen base weights the adapters sit on: each LoRA
    layer's kernel without its adapter, in order."""
    digest = hashlib.sha256()
    for layer in lora_layers(model):
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(layer._kernel)).tobytes())
    return digest.hexdigest()


def adapter_arrays(model):
    """{name: array} of the adapter: A and B of each LoRA layer, and the
    head's variables."""
    arrays = {}
    for i, layer in enumerate(lora_layers(model)):
        arrays[f"lora/{i}/{layer.name}/a"] = keras.ops.convert_to_numpy(layer.lora_kernel_a)
        arrays[f"lora/{i}/{layer.name}/b"] = keras.ops.convert_to_numpy(layer.lora_kernel_b)
    for i, variable in enumerate(_head_variables(model)):
        arrays[f"head/{i}/{variable.name}"] = keras.ops.convert_to_numpy(variable)
    return arrays


def save_lora_adapter(model, directory, overwrite=True):
    """Writes the adapter alone (A and B of each LoRA layer, the head) to
    `directory`, published atomically with a manifest."""
    settings = lora_settings(model)
    if settings is None:
        raise LoraError("This model has no LoRA adapters: call enable_lora(rank) first.")
    arrays = adapter_arrays(model)
    document = {
        "format": FORMAT,
        "version": VERSION,
        **settings,
        "model_class": type(model).__name__,
        "base_fingerprint": base_fingerprint(model),
        "arrays": {name: list(a.shape) for name, a in arrays.items()},
    }
    with publish_directory(directory, "adapter", overwrite=overwrite) as staging:
        with open(Path(staging) / ADAPTER_FILE, "wb") as f:
            np.savez(f, **arrays)
        (Path(staging) / ADAPTER_CONFIG).write_text(
            json.dumps(document, indent=2) + "\n", encoding="utf-8"
        )
    return Path(directory)


def load_lora_adapter(model, directory):
    """Loads an adapter written by `save_lora_adapter` into `model`, a model
    of the same class built from the adapter's base (LoRA is enabled with
    the adapter's settings when the model has none). Every file is verified
    and every array checked before anything is assigned."""
    directory = Path(directory)
    config_path = directory / ADAPTER_CONFIG
    if not config_path.is_file():
        raise LoraError(f"{directory} is not a LoRA adapter: {ADAPTER_CONFIG} is missing.")
    try:
        manifest_lib.verify_directory(directory)
    except IntegrityError as e:
        raise LoraError(str(e)) from None
    try:
        document = json.loads(
            read_bounded_text(config_path, CONFIG_BYTES, "LoRA adapter description", LoraError)
        )
    except LoraError:
        raise
    except (OSError, ValueError) as e:
        raise LoraError(f"{config_path} cannot be read ({e}).") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise LoraError(f"{config_path} is not a bertzoo LoRA adapter description.")
    if document.get("version", 0) > VERSION:
        raise LoraError(
            f"{directory} is LoRA adapter format {document['version']}, written by a newer "
            f"bertzoo; this one reads format {VERSION}."
        )
    if document.get("model_class") != type(model).__name__:
        raise LoraError(
            f"{directory} is an adapter of a {document.get('model_class')}, not of a "
            f"{type(model).__name__}."
        )
    settings = lora_settings(model)
    wanted = {k: document.get(k) for k in ("rank", "alpha", "targets")}
    if settings is None:
        enable_lora(model, check_rank(wanted["rank"]), wanted["alpha"], wanted["targets"])
    elif settings != wanted:
        raise LoraError(f"{directory} holds a LoRA adapter {wanted}; this model has {settings}.")
    if document.get("base_fingerprint") != base_fingerprint(model):
        raise LoraError(
            f"{directory} was trained on other base weights than this model's (their "
            "fingerprints differ): load it into the model it was fine-tuned from."
        )
    expected = adapter_arrays(model)
    _check_members(directory / ADAPTER_FILE, expected)
    with np.load(directory / ADAPTER_FILE, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    if sorted(arrays) != sorted(expected) or any(
        arrays[k].shape != expected[k].shape for k in expected
    ):
        raise LoraError(
            f"{directory} holds {len(arrays)} adapter arrays that do not match this model's "
            f"{len(expected)} (another architecture or head?)."
        )
    bad = [k for k in sorted(expected) if not np.all(np.isfinite(arrays[k]))]
    if bad:
        raise LoraError(
            f"{directory}: adapter array {bad[0]} holds NaN or infinite values "
            f"({len(bad)} array(s) do): the adapter is damaged."
        )
    for i, layer in enumerate(lora_layers(model)):
        layer.lora_kernel_a.assign(arrays[f"lora/{i}/{layer.name}/a"])
        layer.lora_kernel_b.assign(arrays[f"lora/{i}/{layer.name}/b"])
    for i, variable in enumerate(_head_variables(model)):
        variable.assign(arrays[f"head/{i}/{variable.name}"])
    return model


# An .npy member's header before its data (numpy writes 128 bytes or a
# multiple of 64 for long headers; this bounds it generously).
_NPY_HEADER_BYTES = 4096


def _check_members(path, expected):
    """Reads the zip directory of the adapter's `.npz` (nothing is
    inflated) and refuses members this model does not expect, or larger
    than its arrays: a small file whose member inflates to gigabytes is
    refused before it is read."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info.file_size for info in archive.infolist()}
    except (OSError, zipfile.BadZipFile) as e:
        raise LoraError(f"{path} cannot be read as an adapter file ({e}).") from None
    wanted = {f"{name}.npy": array.nbytes + _NPY_HEADER_BYTES for name, array in expected.items()}
    unexpected = sorted(set(members) - set(wanted))
    if unexpected:
        raise LoraError(
            f"{path} holds {unexpected[0]!r}, not an array of this model's adapter "
            f"({len(wanted)} arrays): another architecture or head?"
        )
    for name, size in sorted(members.items()):
        if size > wanted[name]:
            raise LoraError(
                f"{path}: {name} inflates to {size:,} bytes, more than this model's array "
                f"({wanted[name] - _NPY_HEADER_BYTES:,} bytes): the adapter is damaged or "
                "hostile."
            )


def checkpoint_arrays(model):
    """What a training checkpoint keeps of the LoRA layers beside
    `save_weights` (which writes their merged kernels and drops A and B):
    the frozen kernel, A and B of each, by index."""
    arrays = {}
    for i, layer in enumerate(lora_layers(model)):
        arrays[f"{i}/kernel"] = keras.ops.convert_to_numpy(layer._kernel)
        arrays[f"{i}/a"] = keras.ops.convert_to_numpy(layer.lora_kernel_a)
        arrays[f"{i}/b"] = keras.ops.convert_to_numpy(layer.lora_kernel_b)
    return arrays


def restore_checkpoint_arrays(model, arrays):
    """Puts back what `checkpoint_arrays` saved (after `load_weights`, which
    loaded the merged kernels and zeroed A and B). Returns False when the
    arrays do not fit the model's LoRA layers."""
    layers = lora_layers(model)
    names = {f"{i}/{part}" for i in range(len(layers)) for part in ("kernel", "a", "b")}
    if set(arrays) != names:
        return False
    for i, layer in enumerate(layers):
        parts = (layer._kernel, layer.lora_kernel_a, layer.lora_kernel_b)
        for part, variable in zip(("kernel", "a", "b"), parts):
            if tuple(arrays[f"{i}/{part}"].shape) != tuple(variable.shape):
                return False
    for i, layer in enumerate(layers):
        layer._kernel.assign(arrays[f"{i}/kernel"])
        layer.lora_kernel_a.assign(arrays[f"{i}/a"])
        layer.lora_kernel_b.assign(arrays[f"{i}/b"])
    return True


def lora_variables(model):
    """The A and B variables (which `save_weights` does not write)."""
    return [v for layer in lora_layers(model) for v in (layer.lora_kernel_a, layer.lora_kernel_b)]


class LoraMethods:
    """`enable_lora`, `save_lora_adapter` and `load_lora_adapter` as
    methods of backbones and task models."""

    def enable_lora(self, rank, alpha=None, targets=DEFAULT_TARGETS):
        """LoRA of `rank` on the backbone's `targets` ("all" projections
        of the encoder blocks, "attention": query and value, or names),
        everything else of the backbone frozen (`bertzoo.models.lora`).
        Call it before `compile`. Returns the trainable parameter count."""
        return enable_lora(self, rank, alpha, targets)

    def save_lora_adapter(self, directory, overwrite=True):
        """Writes the LoRA factors and the head alone to `directory`."""
        return save_lora_adapter(self, directory, overwrite)

    def load_lora_adapter(self, directory):
        """Loads an adapter of this model's base (see `load_lora_adapter`)."""
        return load_lora_adapter(self, directory)
