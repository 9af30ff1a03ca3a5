"""Task kinds: one module per kind, each declaring and registering a
`TaskKind` (reader, feature builder, model class, metrics and main metric,
postprocessing, serving signature); see `bertzoo.tasks.base`.

    from bertzoo import tasks
    kind = tasks.get("tagging")          # unknown name: lists valid kinds
    data, label_set = kind.load(kind.settings_class(), "train.conll", tokenizer, 128, True)
    tasks.names()                        # ("classification", "regression", ...)
    tasks.settings_classes()             # the kinds' settings dataclasses

Importing this package imports every module in it, so a new kind is one new
module that calls `register`; the built-in kinds come first, in this order.
The built-in kinds import TensorFlow, their feature modules and model classes
when first used (`bertzoo.lazy`): the names, settings and readers need none.
"""

import importlib
import pkgutil

# isort: off
from bertzoo.tasks import classification, regression, tagging, qa  # noqa: F401 (registers them)

# isort: on
from bertzoo.tasks.base import (
    REGISTERED,
    TaskData,
    TaskKind,
    TaskSettings,
    UnknownTaskKindError,
    get,
    kinds_taking,
    names,
    register,
    setting,
    settings_classes,
    unregister,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "REGISTERED",
    "TaskData",
    "TaskKind",
    "TaskSettings",
    "UnknownTaskKindError",
    "get",
    "kinds_taking",
    "names",
    "register",
    "setting",
    "settings_classes",
    "unregister",
]
