"""bertzoo's errors: one root, so a caller (or a recipe, which exits 2 on
any of them) can catch everything bertzoo reports about bad input.

Every error derives from `BertzooError`; most also derive from `ValueError`
(the input was wrong) so that generic callers keep working. Errors of one
module stay in that module (e.g. `CorpusError` in `bertzoo.data.corpus`) and
derive from these.
"""

import errno


class BertzooError(Exception):
    """Root of every error bertzoo raises on purpose."""


class PresetError(BertzooError, ValueError):
    """A preset name, file or directory is invalid."""


class IntegrityError(PresetError):
    """A file bertzoo wrote does not match the checksum in its manifest
    (damaged, truncated or replaced since it was written)."""


class OutputError(BertzooError, ValueError):
    """An output path cannot be used: it is a file, not writable, holds files
    bertzoo did not write, or another run holds it."""


class NonFiniteError(BertzooError, FloatingPointError):
    """Training produced a NaN or infinite loss or weight."""


class InputError(BertzooError, ValueError):
    """An input handed to a model, layer, tokenizer or preprocessor is
    invalid: token ids outside the vocabulary, missing or unexpected input
    keys, ids of a float dtype, text that is not valid UTF-8, a bad
    `sequence_length`.

    Keras re-raises an exception from inside a layer's `call()` as a new one
    with the call's arguments appended (a long multi-line message); this
    attribute tells it that the message already says what is wrong, so the
    one-line message reaches the caller unchanged.
    """

    _keras_call_info_injected = True


class InputTypeError(BertzooError, TypeError):
    """An input has the wrong type (e.g. None or a number where texts are
    expected)."""

    _keras_call_info_injected = True


class DiskFullError(BertzooError, OSError):
    """The disk (or the user's quota) filled up while bertzoo wrote: the
    message says what was kept (the previous version of what was being
    written; the partial copy removed). An `OSError` with errno ENOSPC, so
    callers that handle I/O errors handle it too."""

    def __init__(self, message):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self):
        return self.message
