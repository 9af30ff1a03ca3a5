"""Lazy attribute loading for package `__init__` modules (PEP 562).

A package lists what it exports and where each name lives; nothing is
imported until the name is first used. `import bertzoo` therefore costs
milliseconds, and TensorFlow-free modules (`bertzoo.metrics`, the task-file
readers) import without TensorFlow.

    __getattr__, __dir__ = lazy_exports(__name__, {
        "BertBackbone": "bertzoo.models.backbone",          # same name there
        "MASKING_KINDS": "bertzoo.data.masking:KINDS",      # another name there
    }, submodules=("data", "layers"))
"""

import importlib
import importlib.util
import sys


def lazy_exports(package, exports, submodules=()):
    """The module-level `__getattr__` and `__dir__` of `package`.

    `exports` maps an exported name to "module" (the same name in that module)
    or "module:name". `submodules` are subpackages/modules loaded on first
    attribute access (`bertzoo.training`). A loaded value is cached in the
    package's namespace, so each name is resolved once.
    """
    exports = dict(exports)
    submodules = tuple(submodules)

    def __getattr__(name):
        if name in exports:
            module_name, _, attribute = exports[name].partition(":")
            value = getattr(importlib.import_module(module_name), attribute or name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(submodules))

    return __getattr__, __dir__


class _Loader:
    """The loader of a hooked module: the original one, then the callback."""

    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._callback()

    def __getattr__(self, name):  # resources, source, etc.: the original loader's
        return getattr(self._loader, name)


class _ImportHook:
    """A meta-path finder that fires once, when `name` is first imported."""

    def __init__(self, name, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.callback)
        return spec


def when_imported(name, callback):
    """Calls `callback()` once `name` is imported: now if it already is,
    otherwise right after its first import (whoever imports it)."""
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _ImportHook(name, callback))


class LazyModule:
    """A stand-in for the module `name`, imported on first attribute access
    (and not before: `name` stays out of `sys.modules` until then). For
    modules that import TensorFlow, used only inside functions, by modules
    that must import without it (the task kinds):

        tf = LazyModule("tensorflow")
    """

    def __init__(self, name):
        self._lazy_name = name
        self._lazy_module = None

    def __getattr__(self, attribute):
        if self._lazy_module is None:
            self._lazy_module = importlib.import_module(self._lazy_name)
        return getattr(self._lazy_module, attribute)

    def __repr__(self):
        return f"<lazy module {self._lazy_name!r}>"


class LazyAttribute:
    """A class attribute that is "module:name" until first read, then that
    object (imported then):

        model_class = LazyAttribute("bertzoo.models.tasks:BertClassifier")
    """

    def __init__(self, path):
        self.path = path
        self._value = None

    def __get__(self, instance, owner=None):
        if self._value is None:
            module_name, _, attribute = self.path.partition(":")
            self._value = getattr(importlib.import_module(module_name), attribute)
        return self._value
