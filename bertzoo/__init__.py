"""bertzoo: BERT and its derived variants (ALBERT, DistilBERT, TinyBERT, ELECTRA) for
Keras 3, from named presets.

`import bertzoo` is light: each name below is imported on first use (PEP 562),
so `bertzoo.metrics` and the task-file readers work without TensorFlow. Once
Keras is imported (before or after bertzoo), bertzoo's Keras classes are
registered, so `keras.saving.load_model` reads bertzoo's `.keras` files.
"""

import importlib
import sys

from bertzoo import quiet
from bertzoo.lazy import lazy_exports, when_imported
from bertzoo.loader_registry import set_loader_module, set_preprocessor_module

# Importing bertzoo before TensorFlow hides TensorFlow's banner and C++ log
# lines, unless the user set TF_CPP_MIN_LOG_LEVEL or BERTZOO_TF_LOGS=1; a
# process a quiet one started (a spawned worker) is quiet too (bertzoo.quiet).
quiet.on_import()

__version__ = "0.1.0"

_EXPORTS = {
    "BertBackbone": "bertzoo.models.backbone",
    "BertClassifier": "bertzoo.models.tasks",
    "BertPreprocessor": "bertzoo.preprocessing",
    "BertPretrainer": "bertzoo.models.pretrainer",
    "BertSpanQA": "bertzoo.models.tasks",
    "BertTokenClassifier": "bertzoo.models.tasks",
    "BertTokenizer": "bertzoo.tokenizers",
    "BertzooError": "bertzoo.errors",
    "ElectraPretrainer": "bertzoo.models.electra",
    "PresetError": "bertzoo.errors",
    "ServingModel": "bertzoo.serving",
    "TextEmbedder": "bertzoo.embedder",
    "TokenizerError": "bertzoo.tokenizers",
    "export_model": "bertzoo.export",
    "export_serving": "bertzoo.serving",
    "fill_mask": "bertzoo.models.fill_mask",
    "list_presets": "bertzoo.presets",
    "plan": "bertzoo.planner",
}
_SUBMODULES = (
    "attention_maps",
    "convert",
    "data",
    "distill",
    "embedder",
    "errors",
    "export",
    "io",
    "layers",
    "metrics",
    "models",
    "planner",
    "presets",
    "serving",
    "tasks",
    "tokenizers",
    "training",
)

__all__ = sorted(_EXPORTS) + ["data", "layers", "tokenizers", "training", "__version__"]


def _register_keras_objects():
    """Imports the modules that register bertzoo's Keras classes (layers,
    models, task models, the serving model, optimizers, schedules), once.

    Keras first imported by a bertzoo module that is still being imported
    cannot register here (that would import the half-made module); the next
    name looked up on the package does it instead."""
    global _keras_registered
    if _keras_registered or "keras" not in sys.modules or _importing_a_submodule():
        return
    _keras_registered = True
    for module in ("bertzoo.models", "bertzoo.serving", "bertzoo.training.optimizers"):
        importlib.import_module(module)


def _importing_a_submodule():
    """Whether the body of a bertzoo module is running on this thread's call
    stack, i.e. the module is being imported (the import system's own record
    of that is private): its top-level code is a `<module>` frame."""
    import inspect  # here, not at the top: `import bertzoo` stays light

    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>" and str(
            frame.f_globals.get("__name__", "")
        ).startswith("bertzoo."):
            return True
        frame = frame.f_back
    return False


# The preset loader the models reach through bertzoo.loader_registry: imported
# by name on first use, so `import bertzoo` stays light.
set_loader_module("bertzoo.convert.loader")
# The text preprocessor a task model's from_preset attaches, the same way.
set_preprocessor_module("bertzoo.preprocessing")

_keras_registered = False
_lazy_getattr, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)


def __getattr__(name):
    value = _lazy_getattr(name)
    _register_keras_objects()
    return value


when_imported("keras", _register_keras_objects)
