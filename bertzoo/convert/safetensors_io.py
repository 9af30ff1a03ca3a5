"""Reading and writing the safetensors format with numpy alone.

Layout: an 8-byte little-endian header length N, a JSON header of N bytes
mapping tensor names to `{"dtype", "shape", "data_offsets": [begin, end]}`
(offsets relative to the end of the header), then the raw little-endian data.
"""

import json
import struct
from pathlib import Path

import numpy as np

from bertzoo.io_utils import atomic_path
from bertzoo.presets import PresetError

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


class SafetensorsError(PresetError):
    """A safetensors file is missing, truncated or malformed."""


def _read_header(f, path, file_size):
    """Reads the length-prefixed JSON header from the open file `f`, leaving
    `f` at the start of the data."""
    head = f.read(8)
    if len(head) < 8:
        raise SafetensorsError(f"{path} is not a safetensors file: only {file_size} bytes.")
    (header_len,) = struct.unpack("<Q", head)
    if header_len > file_size - 8:
        raise SafetensorsError(
            f"{path} is truncated or not a safetensors file: the header claims "
            f"{header_len} bytes but the file has {file_size}."
        )
    try:
        header = json.loads(f.read(header_len))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SafetensorsError(f"{path} has a corrupt safetensors header: {e}") from e
    return header


def _open(path, read_body):
    """`(path, header, data bytes or b"")` of a safetensors file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            header = _read_header(f, path, path.stat().st_size)
            body = f.read() if read_body else b""
    except OSError as e:
        raise SafetensorsError(f"Cannot read {path}: {e}") from e
    return path, header, body


def tensor_names(path):
    """The tensor names in `path`, reading only the header."""
    _, header, _ = _open(path, read_body=False)
    return [k for k in header if k != "__metadata__"]


def read_safetensors(path):
    """Returns `{name: np.ndarray}` for every tensor in `path`; bfloat16 tensors
    are widened to float32 exactly."""
    path, header, data = _open(path, read_body=True)
    body = memoryview(data)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype == "BF16":
            itemsize = 2
        elif dtype in _DTYPES:
            itemsize = np.dtype(_DTYPES[dtype]).itemsize
        else:
            raise SafetensorsError(f"{path}: tensor {name!r} has unsupported dtype {dtype}.")
        expected = int(np.prod(shape, dtype=np.int64)) * itemsize
        if not 0 <= begin <= end <= len(body) or end - begin != expected:
            raise SafetensorsError(
                f"{path} is truncated or corrupt: tensor {name!r} {dtype}{list(shape)} "
                f"needs {expected} bytes at [{begin}, {end}) of a {len(body)}-byte body."
            )
        raw = body[begin:end]
        if dtype == "BF16":
            # bfloat16 is the top half of a float32.
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(raw, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"))
        tensors[name] = array.reshape(shape).copy()
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """Writes `{name: array}` to `path` atomically (float32 stays float32)."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])
        if array.dtype not in _NAMES:
            raise SafetensorsError(f"Cannot write tensor {name!r} of dtype {array.dtype}.")
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": _NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # keep the data 8-byte aligned
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for raw in chunks:
                f.write(raw)
    return Path(path)
