"""Reading and writing the safetensors format, on top of the `safetensors`
package.

Layout: an 8-byte little-endian header length N, a JSON header of N bytes
mapping tensor names to `{"dtype", "shape", "data_offsets": [begin, end]}`
(offsets relative to the end of the header), then the raw little-endian data.

A file is read only when it is well formed, checked twice: by bertzoo (so
that every error names the file and, where one is at fault, the tensor) and
by the `safetensors` package itself, which is the authority on the format.
A valid file holds each tensor exactly once, sorted by offset, contiguous,
non-overlapping, with exactly the bytes its dtype and shape need, and
nothing after the last tensor. On top of the package's checks, bertzoo
refuses dtypes it has no numpy type for (only those in `_DTYPES` and BF16
are read), duplicate JSON keys and non-standard JSON constants (NaN, ...).
Every failure is a `SafetensorsError` with a one-line message.
"""

import json
import math
import os
import re
import struct
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

from bertzoo.errors import PresetError
from bertzoo.io.publish import atomic_path

_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}
# Every dtype that can be read, with its item size (BF16 is widened to F32).
_ITEMSIZE = {**{k: np.dtype(v).itemsize for k, v in _DTYPES.items()}, "BF16": 2}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
_METADATA = "__metadata__"
# The `safetensors` package refuses longer headers.
MAX_HEADER_BYTES = 100_000_000


class SafetensorsError(PresetError):
    """A safetensors file is missing, truncated or malformed."""


class _DuplicateKey(Exception):
    pass


def _unique_object(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _refuse_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _header_length(path, head, file_size):
    """The header length in the first 8 bytes `head` of a file of
    `file_size` bytes."""
    if len(head) < 8:
        raise SafetensorsError(
            f"{path} is not a safetensors file: only {file_size} bytes (a safetensors "
            "file starts with an 8-byte header length)."
        )
    (length,) = struct.unpack("<Q", head[:8])
    if length > file_size - 8:
        raise SafetensorsError(
            f"{path} is truncated or not a safetensors file: the header claims "
            f"{length} bytes but the file has {file_size}."
        )
    if length > MAX_HEADER_BYTES:
        raise SafetensorsError(
            f"{path} is not a safetensors file: its header length {length} exceeds "
            f"the limit of {MAX_HEADER_BYTES} bytes."
        )
    return length


def _parse_header(path, raw):
    """The header bytes `raw` as a dict, in file order."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError(
            f"{path} has a corrupt safetensors header: invalid UTF-8 at byte {e.start} "
            "of the header (a wrong header length, or not a safetensors file)."
        ) from e
    try:
        header = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_refuse_constant)
    except _DuplicateKey as e:
        raise SafetensorsError(
            f"{path} has a corrupt safetensors header: the key {e.args[0]!r} appears "
            "twice in one JSON object."
        ) from None
    except ValueError as e:  # json.JSONDecodeError and NaN / Infinity
        raise SafetensorsError(
            f"{path} has a corrupt safetensors header (a wrong header length, or not "
            f"a safetensors file): {e}."
        ) from e
    if not isinstance(header, dict):
        raise SafetensorsError(
            f"{path} has a corrupt safetensors header: expected a JSON object, got "
            f"{type(header).__name__}."
        )
    return header


def _describe(entry):
    name, dtype, shape, begin, end = entry
    return f"tensor {name!r} {dtype}{list(shape)} at bytes [{begin}, {end})"


def _check_header(path, header, body_size):
    """Checks a parsed header against a body of `body_size` bytes; returns
    `[(name, dtype, shape, begin, end)]` in file order."""
    entries = []
    for name, info in header.items():
        if name == _METADATA:
            if info is not None and not (
                isinstance(info, dict) and all(isinstance(v, str) for v in info.values())
            ):
                raise SafetensorsError(
                    f"{path}: the safetensors {_METADATA} must map strings to strings, "
                    f"got {json.dumps(info)[:200]}."
                )
            continue
        where = f"{path}: tensor {name!r}"
        if not isinstance(info, dict):
            raise SafetensorsError(
                f"{where}: expected a JSON object with dtype, shape and data_offsets, "
                f"got {type(info).__name__}."
            )
        missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
        if missing:
            raise SafetensorsError(f"{where} has no {', '.join(missing)} in the header.")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str):
            raise SafetensorsError(f"{where}: dtype must be a string, got {dtype!r}.")
        if dtype not in _ITEMSIZE:
            raise SafetensorsError(
                f"{where} has unsupported dtype {dtype!r} (bertzoo reads "
                f"{', '.join(sorted(_ITEMSIZE))})."
            )
        if not (isinstance(shape, list) and all(_is_int(n) and n >= 0 for n in shape)):
            raise SafetensorsError(
                f"{where}: shape must be a list of non-negative integers, got "
                f"{json.dumps(shape)[:200]}."
            )
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(_is_int(n) and n >= 0 for n in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise SafetensorsError(
                f"{where}: data_offsets must be two integers [begin, end] with "
                f"0 <= begin <= end, got {json.dumps(offsets)[:200]}."
            )
        begin, end = offsets
        needed = math.prod(shape) * _ITEMSIZE[dtype]
        if end - begin != needed:
            raise SafetensorsError(
                f"{where}: {dtype}{shape} needs {needed} bytes but its data_offsets "
                f"[{begin}, {end}) hold {end - begin}."
            )
        entries.append((name, dtype, shape, begin, end))
    for entry in entries:
        if entry[4] > body_size:
            raise SafetensorsError(
                f"{path} is truncated or corrupt: tensor {entry[0]!r} {entry[1]}"
                f"{list(entry[2])} needs bytes [{entry[3]}, {entry[4]}) of a "
                f"{body_size}-byte body."
            )
    position, previous = 0, None
    for entry in sorted(entries, key=lambda e: (e[3], e[4])):
        begin, end = entry[3], entry[4]
        if begin < position:
            raise SafetensorsError(
                f"{path} is corrupt: {_describe(entry)} overlaps {_describe(previous)}."
            )
        if begin > position:
            after = f"after {_describe(previous)}" if previous else "at the start of the body"
            raise SafetensorsError(
                f"{path} is corrupt: {begin - position} unused bytes before "
                f"{_describe(entry)}, {after} (tensors must be contiguous)."
            )
        position, previous = end, entry
    if position < body_size:
        last = f"the last tensor, {_describe(previous)}" if previous else "no tensor"
        raise SafetensorsError(
            f"{path} is corrupt: {body_size - position} bytes follow {last}, in a "
            f"{body_size}-byte body (a wrong header length, or a corrupt file)."
        )
    return entries


def _package_error(path, error):
    """A `SafetensorsError` for what only the `safetensors` package found."""
    message = re.sub(r"^Error while deserializing( header)?: ", "", str(error)).strip()
    match = re.search(r"tensor `([^`]*)`", message)
    tensor = f" (tensor {match.group(1)!r})" if match else ""
    message = " ".join(message.split())  # one line
    return SafetensorsError(f"{path} is not a valid safetensors file{tensor}: {message}.")


def _check_float(path, entries):
    for name, dtype, *_ in entries:
        if dtype not in FLOAT_DTYPES:
            raise SafetensorsError(
                f"{path}: tensor {name!r} has dtype {dtype}, but it must be a float "
                f"weight ({', '.join(FLOAT_DTYPES)})."
            )


def _read_file(path):
    try:
        return path.read_bytes()
    except OSError as e:
        raise SafetensorsError(f"Cannot read {path}: {e}") from e


def tensor_names(path):
    """The tensor names in `path`, in file order, reading only the header
    (which is checked in full against the file's size)."""
    return list(tensor_shapes(path))


def tensor_shapes(path):
    """`{name: shape}` of the tensors in `path`, in file order, reading only
    the header (which is checked in full against the file's size)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            length = _header_length(path, f.read(8), file_size)
            raw = f.read(length)
    except OSError as e:
        raise SafetensorsError(f"Cannot read {path}: {e}") from e
    if len(raw) != length:  # the file shrank while being read
        raise SafetensorsError(f"{path} is truncated: the header is cut short.")
    entries = _check_header(path, _parse_header(path, raw), file_size - 8 - length)
    try:  # the package checks the header against the file (mapped, not read)
        with safetensors.safe_open(path, framework="numpy") as checked:
            checked.keys()
    except safetensors.SafetensorError as e:
        raise _package_error(path, e) from e
    except OSError as e:
        raise SafetensorsError(f"Cannot read {path}: {e}") from e
    return {entry[0]: tuple(entry[2]) for entry in entries}


def _to_array(dtype, shape, data):
    if dtype == "BF16":
        # bfloat16 is the top half of a float32: widening is exact.
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        array = bits.view(np.float32)
    else:
        array = np.frombuffer(data, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"))
        array = array.astype(array.dtype.newbyteorder("="), copy=False)
    if not (array.flags.writeable and array.flags.aligned):
        array = array.copy()
    return array.reshape(shape)


def read_safetensors(path, float_only=False):
    """Returns `{name: np.ndarray}` for every tensor in `path`, in file
    order; bfloat16 tensors are widened to float32 exactly, other dtypes are
    kept.

    Args:
        path: a `.safetensors` file.
        float_only: every tensor must be a float weight (F16, BF16, F32 or
            F64); an integer or bool tensor is a `SafetensorsError` naming it.

    Raises `SafetensorsError` (one line, naming the file and, where one is at
    fault, the tensor) for any file that is not well formed.
    """
    path = Path(path)
    data = _read_file(path)
    length = _header_length(path, data, len(data))
    header = _parse_header(path, memoryview(data)[8 : 8 + length])
    entries = _check_header(path, header, len(data) - 8 - length)
    if float_only:
        _check_float(path, entries)
    try:
        views = dict(safetensors.deserialize(data))
    except safetensors.SafetensorError as e:
        raise _package_error(path, e) from e
    del data
    tensors = {}
    for name, dtype, shape, _, _ in entries:
        view = views.pop(name, None)
        if view is None or view["dtype"] != dtype or list(view["shape"]) != shape:
            raise SafetensorsError(  # bertzoo and the package disagree: refuse
                f"{path}: tensor {name!r} is read differently by the safetensors "
                "package; the file is malformed."
            )
        tensors[name] = _to_array(dtype, shape, view["data"])
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Writes `{name: array}` to `path` atomically, each tensor in its own
    dtype (one of `_DTYPES`: float32 stays float32)."""
    arrays = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise SafetensorsError(f"Cannot write {path}: tensor name {name!r} is not a string.")
        array = np.asarray(value)
        native = array.dtype.newbyteorder("=")
        if native not in _NAMES:
            raise SafetensorsError(
                f"Cannot write {path}: tensor {name!r} has dtype {array.dtype} "
                f"(supported: {', '.join(str(np.dtype(t)) for t in _DTYPES.values())})."
            )
        little = np.dtype(native).newbyteorder("<")
        arrays[name] = np.asarray(array.astype(little, copy=False), order="C")
    if metadata:
        metadata = {str(k): str(v) for k, v in metadata.items()}
    try:
        blob = safetensors.numpy.save(arrays, metadata=metadata or None)
    except safetensors.SafetensorError as e:
        raise SafetensorsError(f"Cannot write {path}: {' '.join(str(e).split())}") from e
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(blob)
    return Path(path)
