"""The registry through which the models reach the preset loader.

The models (floor 2) build graphs; reading and writing preset directories
and checkpoints is the loader's work (`bertzoo.convert`, floor 3). A model's
`from_preset` and `save_to_preset` ask this module for the loader instead of
importing it, the way tokenizer kinds are found by name
(`bertzoo.tokenizers.tokenizer_class`):

- the loader calls `register_loader(loader)` when it is imported;
- `bertzoo/__init__.py`, the package's top floor, names the loader's module
  with `set_loader_module`, so `preset_loader()` can import it on first use.

`preset_loader()` returns the registered loader: an object (the loader's
module) with the operations listed in `LOADER_OPERATIONS`.
"""

import importlib

from bertzoo.errors import PresetError

# What a loader provides (module-level functions of the loader's module).
LOADER_OPERATIONS = (
    "resolve_preset",
    "load_backbone",
    "save_backbone",
    "load_task_model",
    "save_task_model",
    "read_int8_graph",
    "hf_num_classes",
    "load_pretraining_heads",
    "pretraining_head_tensors",
    "load_discriminator_head",
    "discriminator_head_tensors",
    "mlm_head_names",
    "head_family",
)

_loader = None
_loader_module = None


def register_loader(loader):
    """Makes `loader` the preset loader (called by the loader's module when
    it is imported). It must provide every name in `LOADER_OPERATIONS`."""
    global _loader
    missing = [name for name in LOADER_OPERATIONS if not callable(getattr(loader, name, None))]
    if missing:
        raise TypeError(f"{loader!r} is not a preset loader: it lacks {', '.join(missing)}.")
    _loader = loader


def set_loader_module(name):
    """Names the module that registers the loader when imported; it is
    imported by `preset_loader()` on first use."""
    global _loader_module
    _loader_module = name


def preset_loader():
    """The registered preset loader; importing the named loader module first
    if none is registered yet. A `PresetError` when there is none."""
    if _loader is None and _loader_module is not None:
        importlib.import_module(_loader_module)
    if _loader is None:
        raise PresetError(
            "No preset loader is registered: import bertzoo.convert (which "
            "registers it) before loading or saving presets."
        )
    return _loader


# === The preprocessor factory ===
# A task model's `from_preset` attaches the preset's preprocessor
# (`bertzoo.preprocessing`, floor 3) the same way: that module registers a
# factory when imported, and `bertzoo/__init__.py` names it.

_preprocessor_factory = None
_preprocessor_module = None


def register_preprocessor_factory(factory):
    """Makes `factory(preset, **kwargs)` the maker of a preset's text
    preprocessor (called by `bertzoo.preprocessing` when it is imported). It
    returns a preprocessor, or None when the preset carries no vocabulary."""
    global _preprocessor_factory
    if not callable(factory):
        raise TypeError(f"A preprocessor factory must be callable, got {factory!r}.")
    _preprocessor_factory = factory


def set_preprocessor_module(name):
    """Names the module that registers the preprocessor factory when imported."""
    global _preprocessor_module
    _preprocessor_module = name


def preprocessor_factory():
    """The registered preprocessor factory (importing the named module first
    if needed), or None when there is none."""
    if _preprocessor_factory is None and _preprocessor_module is not None:
        importlib.import_module(_preprocessor_module)
    return _preprocessor_factory
