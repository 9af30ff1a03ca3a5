"""The tokenizer kinds: the registry that maps a preset's `tokenizer.kind`
to its class, the special-token roles and the tokenizers' error.

It sits below both `bertzoo.tokenizers.base` (the `Tokenizer` base class,
whose `register_tokenizer` fills the registry) and
`bertzoo.tokenizers.hf_config` (Hugging Face tokenizer settings), so that
neither imports the other's importer.
"""

import importlib
import inspect

from bertzoo.errors import PresetError

# Role -> attribute holding that token's string.
SPECIAL_ROLES = ("cls", "sep", "pad", "unk", "mask")


class TokenizerError(PresetError):
    """A vocabulary or tokenizer setting is invalid."""


# Tokenizer kind (a preset's `tokenizer.kind`) -> class, filled by
# `bertzoo.tokenizers.base.register_tokenizer` as the kinds' modules are
# imported: the built-in ones by name on the first lookup (they import this
# module, through `base`, and `bertzoo.tokenizers` loads its names lazily).
_REGISTRY = {}
BUILTIN_KIND_MODULES = (
    "bertzoo.tokenizers.wordpiece",
    "bertzoo.tokenizers.sentencepiece",
    "bertzoo.tokenizers.byte_bpe",
    "bertzoo.tokenizers.fairseq",
)
_builtins_loaded = False


def _load_builtin_kinds():
    global _builtins_loaded
    if not _builtins_loaded:
        for name in BUILTIN_KIND_MODULES:
            importlib.import_module(name)
        _builtins_loaded = True


def add_kind(cls):
    """Registers the tokenizer class `cls` under its `kind` (a kind taken by
    another class is a `ValueError`)."""
    if _REGISTRY.get(cls.kind, cls) is not cls:
        raise ValueError(
            f"Tokenizer kind {cls.kind!r} is already registered to {_REGISTRY[cls.kind].__name__}."
        )
    _REGISTRY[cls.kind] = cls


def tokenizer_kinds():
    """The registered tokenizer kinds, sorted ("sentencepiece", "wordpiece")."""
    _load_builtin_kinds()
    return tuple(sorted(_REGISTRY))


def tokenizer_class(kind):
    """The tokenizer class registered for `kind`; an unknown kind is a
    `TokenizerError` listing the valid ones."""
    if kind not in _REGISTRY:
        _load_builtin_kinds()
    if kind not in _REGISTRY:
        raise TokenizerError(
            f"Unknown tokenizer kind {kind!r}. Valid kinds: {', '.join(tokenizer_kinds())}."
        )
    return _REGISTRY[kind]


def check_settings(cls, settings, where):
    """`settings` (a dict of keyword arguments read from a file) when the
    tokenizer class `cls` takes each of them; an unknown one is a one-line
    TokenizerError naming it, `where` it was read, and the settings `cls`
    takes (before, it was a raw TypeError)."""
    if not isinstance(settings, dict):
        raise TokenizerError(f"{where}: the tokenizer settings must be a JSON object.")
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return settings
    # The first argument after self is the vocabulary (a file or its tokens).
    valid = [n for n in list(params)[2:] if params[n].kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(k for k in settings if k not in valid)
    if unknown:
        raise TokenizerError(
            f"{where}: unknown {cls.kind} tokenizer setting(s) {', '.join(map(repr, unknown))}. "
            f"Valid: {', '.join(valid)}."
        )
    return settings
