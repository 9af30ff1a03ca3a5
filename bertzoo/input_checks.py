"""Checks on what users hand to bertzoo's models and preprocessors, so that an
input that would silently change the answer is a clear error instead.

- Model inputs (`check_model_inputs`): exactly the expected dict keys (an
  extra key such as "label" would otherwise reorder Keras' flattened inputs),
  and integer dtypes (float ids would be truncated: 3.7 -> 3).
- Id ranges (`check_id_range`): when the values are known (numpy arrays,
  eager tensors), an id outside `[0, size)` is an `InputError` naming the
  input, the value, its position and the valid range. Inside a traced graph
  (tf.function, jax.jit, `fit`/`predict`) the values are not known when
  Python runs and an exception cannot be raised under XLA; there
  `BertEmbeddings` turns the embedding of an out-of-range id into NaN
  (`in_range`), so that a wrong id gives a loud result, never a finite
  wrong one.
- `check_padding_mask`: 0/1, or the sequence numbers of packed rows in
  their documented layout (`bertzoo.layers.sequence_numbers`).
- `check_sequence_length`: an int (not a bool, not 5.7) with room for
  `[CLS] text [SEP]`.
"""

from collections.abc import Mapping

import keras
import numpy as np

from bertzoo.errors import InputError, InputTypeError

try:  # Keras' shape-inference scope (compute_output_spec); private API
    from keras.src.backend.common.symbolic_scope import in_symbolic_scope
except ImportError:  # pragma: no cover - other Keras versions

    def in_symbolic_scope():
        return False


def values_known(x):
    """True when `x`'s values can be read now: numpy data, eager TensorFlow
    tensors, concrete JAX arrays, torch tensors outside compilation. False
    for symbolic tensors (Keras, tf.function, jax tracers)."""
    if isinstance(x, np.ndarray | np.generic | int | list | tuple):
        return True
    if isinstance(x, keras.KerasTensor):
        return False
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return isinstance(x, tf.Tensor) and not tf.is_symbolic_tensor(x)
    if backend == "jax":
        import jax

        return isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        return isinstance(x, torch.Tensor) and not torch.compiler.is_compiling()
    return backend == "numpy"


def in_range(ids, size):
    """Boolean mask of the ids in `[0, size)` (keras.ops: any backend, in
    graphs too)."""
    ids = keras.ops.convert_to_tensor(ids)
    return keras.ops.logical_and(
        keras.ops.greater_equal(ids, 0), keras.ops.less(ids, keras.ops.cast(size, ids.dtype))
    )


def check_id_range(name, ids, size, size_name):
    """Raises `InputError` when the (known) values of `ids` leave
    `[0, size)`. Does nothing for symbolic tensors: see the module
    docstring. Costs one reduction and one device-to-host read of a bool."""
    if not values_known(ids):
        return
    if isinstance(ids, np.ndarray | np.generic | int | list | tuple):
        array = np.asarray(ids)
        if array.size == 0 or (array.min() >= 0 and array.max() < size):
            return
    else:
        if 0 in tuple(ids.shape):
            return
        ok = keras.ops.all(in_range(ids, size))
        if bool(keras.ops.convert_to_numpy(ok)):
            return
        array = keras.ops.convert_to_numpy(ids)
    bad = np.argwhere((array < 0) | (array >= size))
    first = tuple(int(i) for i in bad[0])
    value = int(array[first])
    what = "negative ids are not wrapped around" if value < 0 else f"ids >= {size} are not clipped"
    raise InputError(
        f"{name} holds {value} at position {list(first)} ({len(bad)} id(s) out of range): "
        f"valid {name} are in [0, {size}) ({size_name}={size}); {what}"
    )


def _dtype_name(x):
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.asarray(x).dtype
    try:
        return keras.backend.standardize_dtype(dtype)
    except ValueError:
        return str(dtype)


def check_integer_ids(name, x, allow_bool=False):
    """Refuses a non-integer dtype: float ids would be silently truncated.

    Not inside Keras' own shape inference (`compute_output_spec`), where no
    value is computed and Keras may hand float placeholders (under a
    tf.distribute strategy, `fit` builds the model from a MEAN-reduced int
    batch, which is float): the real call is checked when it runs."""
    if in_symbolic_scope():
        return
    dtype = _dtype_name(x)
    if dtype.startswith(("int", "uint")) or (allow_bool and dtype == "bool"):
        return
    kind = "integer (or bool) 1/0 values" if allow_bool else "integer ids"
    raise InputError(
        f"{name} must hold {kind}, got dtype {dtype}: non-integer values would be "
        f"silently truncated (3.7 -> 3). Convert them, e.g. with .astype('int32')."
    )


def check_model_inputs(inputs, expected, owner):
    """`inputs` must be a dict with exactly the keys `expected` (names in
    order), each an integer tensor (padding_mask may also be bool).

    Keras' functional models flatten a dict input by sorted key and pair the
    values with their inputs in that order, so an extra key (e.g. "label")
    shifts the others onto the wrong inputs with only a warning. Cheap: a
    few dict look-ups, no tensor is read.
    """
    expected = list(expected)
    keys = ", ".join(expected)
    if not isinstance(inputs, Mapping):
        raise InputTypeError(
            f"{owner} takes a dict with the keys {keys}; got {type(inputs).__name__}."
        )
    unexpected = [k for k in inputs if k not in expected]
    missing = [k for k in expected if k not in inputs]
    if unexpected or missing:
        problems = []
        if unexpected:
            problems.append(f"unexpected key(s) {', '.join(repr(k) for k in unexpected)}")
        if missing:
            problems.append(f"missing key(s) {', '.join(repr(k) for k in missing)}")
        hint = ""
        if "segment_ids" in unexpected:
            hint = " This model has no segment embeddings (num_segments=0): drop segment_ids."
        elif unexpected:
            hint = " Pass labels and other data separately (e.g. model.fit(x, y))."
        raise InputError(
            f"{owner} inputs have {' and '.join(problems)}; expected exactly the keys {keys}.{hint}"
        )
    for key in expected:
        if inputs[key] is None:
            raise InputError(f"{owner} input {key!r} is None; expected exactly the keys {keys}.")
        check_integer_ids(key, inputs[key], allow_bool=key == "padding_mask")


_PACKED_LAYOUT = (
    "padding_mask holds 0/1 (one sequence per row, any pattern) or, in a packed row, "
    "the numbers 1, 2, ..., k of its sequences: sequence 1 from the row's first "
    "position, each sequence one contiguous run in increasing order, padding (0) "
    "only after the last"
)


def _numpy(x):
    if isinstance(x, np.ndarray | np.generic | int | list | tuple):
        return np.asarray(x)
    return keras.ops.convert_to_numpy(x)


def check_padding_mask(mask):
    """Raises `InputError` when the (known) values of `mask` are negative,
    or when a row that numbers packed sequences (a value above 1) has
    another layout than `1..1 2..2 ... k..k 0..0` (see
    `bertzoo.layers.sequence_numbers`). 0/1 rows pass whatever their
    pattern. Does nothing for symbolic tensors: inside compiled graphs
    other layouts are undefined. Costs one reduction for a 0/1 tensor;
    rows are read only when they hold numbers."""
    if not values_known(mask) or in_symbolic_scope():
        return
    if _dtype_name(mask) == "bool" or 0 in tuple(np.shape(mask)):
        return
    if not isinstance(mask, np.ndarray | np.generic | int | list | tuple):
        low, high = keras.ops.min(mask), keras.ops.max(mask)
        if 0 <= int(keras.ops.convert_to_numpy(low)) and int(keras.ops.convert_to_numpy(high)) <= 1:
            return
    array = _numpy(mask).astype(np.int64)
    if array.ndim != 2:
        return  # the model's own shape checks speak for other ranks
    if array.min() < 0:
        row, col = (int(i) for i in np.argwhere(array < 0)[0])
        raise InputError(
            f"padding_mask holds {array[row, col]} at position [{row}, {col}]; {_PACKED_LAYOUT}."
        )
    packed = array.max(axis=1) > 1
    rows = array[packed]
    if not len(rows):
        return
    real = rows > 0
    steps = np.diff(rows, axis=1)
    ok = (rows[:, 0] == 1) & np.all(real[:, :-1] >= real[:, 1:], axis=1)
    ok &= np.all(((steps == 0) | (steps == 1)) | ~real[:, 1:], axis=1)
    if not ok.all():
        row = int(np.flatnonzero(packed)[np.flatnonzero(~ok)[0]])
        shown = " ".join(map(str, array[row][:24])) + (" ..." if array.shape[1] > 24 else "")
        raise InputError(
            f"padding_mask row {row} ({shown}) is not a valid layout: {_PACKED_LAYOUT}."
        )


def check_sequence_length(value, minimum=3, name="sequence_length"):
    """An int >= `minimum` (bools and floats such as 5.7 refused: they would
    be silently truncated); returns it as a Python int."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InputError(
            f"{name} must be an integer (the packed length, special tokens included), "
            f"got {value!r} of type {type(value).__name__}."
        )
    if value < minimum:
        raise InputError(
            f"{name} must be at least {minimum} ([CLS] A [SEP] with one token), got {value}."
        )
    return int(value)
