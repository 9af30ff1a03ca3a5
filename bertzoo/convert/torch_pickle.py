"""Reading `pytorch_model.bin` (torch.save's zip of pickles) without torch,
for Hugging Face checkpoints that ship no safetensors file."""

import collections
import io
import os
import pickle
import pickletools
import zipfile
from pathlib import Path

import numpy as np

from bertzoo.convert.common import CheckpointError

# torch.save writes a zip: <root>/data.pkl, a pickle of the state dict in
# which each tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size,
# stride, requires_grad, hooks)` and each storage a persistent id
# `("storage", torch.<Type>Storage, key, device, numel)` whose bytes are
# <root>/data/<key>. The unpickler below resolves exactly those globals (to
# numpy stand-ins) and refuses every other one, so reading runs no code from
# the file.

_STORAGE_DTYPES = {
    "FloatStorage": "f4",
    "DoubleStorage": "f8",
    "HalfStorage": "f2",
    "BFloat16Storage": "bf16",
    "LongStorage": "i8",
    "IntStorage": "i4",
    "ShortStorage": "i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}
_ALLOWED_GLOBALS = "collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.<Type>Storage"


class _StorageType:
    """Stands for a `torch.<Type>Storage` class inside the pickle."""

    def __init__(self, name):
        self.name = name


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


class _TorchUnpickler(pickle.Unpickler):
    def __init__(self, file, archive, root, source):
        super().__init__(file)
        self._archive, self._root, self._source = archive, root, source
        self._storages = {}
        order = "<"
        if f"{root}/byteorder" in archive.namelist():
            order = {"little": "<", "big": ">"}.get(
                _read_member(archive, f"{root}/byteorder", 64).decode("ascii", "replace").strip(),
                "?",
            )
            if order == "?":
                raise CheckpointError(f"{source}: unknown byte order.")
        self._order = order

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self._rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise CheckpointError(
            f"{self._source}: refused to load: the pickle references the global "
            f"{module}.{name}, which is not needed to rebuild tensors (allowed: "
            f"{_ALLOWED_GLOBALS}). The file is not a plain state dict, or it is "
            "malicious."
        )

    def persistent_load(self, pid):
        if not (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
            and isinstance(pid[2], str)
            and _is_int(pid[4])
            and pid[4] >= 0
        ):
            raise CheckpointError(f"{self._source}: unexpected persistent id {pid!r}.")
        _, storage_type, key, _, numel = pid
        if key not in self._storages:
            kind = _STORAGE_DTYPES[storage_type.name]
            dtype = np.dtype(f"{self._order}u2" if kind == "bf16" else f"{self._order}{kind}")
            member = f"{self._root}/data/{key}"
            try:
                info = self._archive.getinfo(member)
            except KeyError:
                raise CheckpointError(f"{self._source}: missing storage {member}.") from None
            # The size is checked before a byte is read (the archive's total
            # was bounded by the file's size when it was opened).
            if info.file_size != numel * dtype.itemsize:
                raise CheckpointError(
                    f"{self._source}: storage {member} has {info.file_size} bytes, expected "
                    f"{numel} x {dtype.itemsize}."
                )
            raw = _read_member(self._archive, member, info.file_size)
            if len(raw) != info.file_size:
                raise CheckpointError(f"{self._source}: storage {member} is truncated.")
            array = np.frombuffer(raw, dtype=dtype)
            if kind == "bf16":  # bfloat16 is the top half of a float32
                array = (array.astype(np.uint32) << 16).view(np.float32)
            self._storages[key] = array.astype(array.dtype.newbyteorder("="))
        return self._storages[key]

    def _rebuild_tensor(self, storage, offset, size, stride, *unused):
        ok = (
            isinstance(storage, np.ndarray)
            and _is_int(offset)
            and isinstance(size, tuple)
            and isinstance(stride, tuple)
            and len(size) == len(stride)
            and all(_is_int(n) and n >= 0 for n in size)
            and all(_is_int(s) and s >= 0 for s in stride)
            and offset >= 0
        )
        if ok and all(size):
            # The last element read must lie inside the storage.
            ok = offset + sum((n - 1) * s for n, s in zip(size, stride)) < storage.size
        if not ok:
            raise CheckpointError(
                f"{self._source}: invalid tensor (offset {offset!r}, size {size!r}, "
                f"stride {stride!r}) for a storage of {getattr(storage, 'size', '?')} "
                "elements."
            )
        if not all(size):
            return np.zeros(size, storage.dtype)
        view = np.lib.stride_tricks.as_strided(
            storage[offset:],
            shape=size,
            strides=tuple(s * storage.itemsize for s in stride),
            writeable=False,
        )
        return np.array(view)


# The pickle of a state dict holds names and small tuples: a few hundred
# bytes per tensor (bert_large: 0.1 MB). A larger one is refused unread.
MAX_PICKLE_BYTES = 64 << 20
# torch.save stores its members uncompressed, so what they hold adds up to
# about the file's size; a zip whose members declare more than this many
# times its size (plus MAX_PICKLE_BYTES) is refused before any is read.
MAX_EXPANSION = 4


class ArchiveSizeError(CheckpointError):
    """A torch zip declares members larger than it can honestly hold (a zip
    bomb, or a damaged file)."""


def _check_sizes(archive, path, file_size):
    """Refuses, before reading anything, a torch zip whose members declare
    more bytes than such a file holds: each member's uncompressed size is
    read from the zip's directory (`ZipInfo.file_size`), and reading never
    yields more than it (zipfile stops there)."""
    members = archive.infolist()
    declared = sum(info.file_size for info in members)
    bound = MAX_EXPANSION * file_size + MAX_PICKLE_BYTES
    if declared > bound:
        biggest = max(members, key=lambda info: info.file_size)
        raise ArchiveSizeError(
            f"{path}: its members declare {declared:,} bytes uncompressed "
            f"({biggest.filename}: {biggest.file_size:,}) in a {file_size:,}-byte file; a torch "
            f"checkpoint holds at most about its own size ({bound:,} allowed). The file is "
            "damaged or a zip bomb: refused before reading."
        )


def _torch_archive(path):
    """`(ZipFile, root)` of a torch.save zip file, its declared sizes
    checked (`_check_sizes`)."""
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path} is not a zip-format torch checkpoint (the legacy format of "
            "torch < 1.6 is not supported): re-save it with a current torch or "
            "convert it to safetensors."
        )
    archive = zipfile.ZipFile(path)
    try:
        _check_sizes(archive, path, os.fstat(archive.fp.fileno()).st_size)
        roots = [n[: -len("/data.pkl")] for n in archive.namelist() if n.endswith("/data.pkl")]
        roots = [r for r in roots if "/" not in r]
        if len(roots) != 1:
            raise CheckpointError(f"{path}: expected one <root>/data.pkl in the archive.")
        info = archive.getinfo(f"{roots[0]}/data.pkl")
        if info.file_size > MAX_PICKLE_BYTES:
            raise ArchiveSizeError(
                f"{path}: {info.filename} declares {info.file_size:,} bytes; the pickle of a "
                f"state dict holds far less (at most {MAX_PICKLE_BYTES:,} read). The file is "
                "damaged or hostile: refused before reading."
            )
    except BaseException:
        archive.close()
        raise
    return archive, roots[0]


def _read_member(archive, name, limit):
    """A member's bytes, never more than `limit` (its declared size was
    checked already; this holds even if the zip lies about it)."""
    with archive.open(name) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ArchiveSizeError(f"{archive.filename}: {name} holds more than {limit:,} bytes.")
    return data


def pickle_strings(path):
    """The string constants of a torch.save pickle (its tensor names among
    them), read by decoding opcodes only: nothing is constructed or run.
    A file that is not a torch zip gives none; one whose sizes are hostile
    (`ArchiveSizeError`) is an error."""
    try:
        archive, root = _torch_archive(path)
        with archive:
            data = _read_member(archive, f"{root}/data.pkl", MAX_PICKLE_BYTES)
        return {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}
    except ArchiveSizeError:
        raise
    except (CheckpointError, ValueError, zipfile.BadZipFile, OSError):
        return set()


def read_torch_pickle(path):
    """Reads a `torch.save` state dict (`pytorch_model.bin`) as
    `{name: np.ndarray}` without torch, with a restricted unpickler: only the
    globals that rebuild tensors are resolved, any other one raises a
    `CheckpointError` naming it, before anything it names is called.
    bfloat16 tensors are widened to float32 exactly."""
    path = Path(path)
    try:
        archive, root = _torch_archive(path)
        with archive:
            data = _read_member(archive, f"{root}/data.pkl", MAX_PICKLE_BYTES)
            state = _TorchUnpickler(io.BytesIO(data), archive, root, path).load()
    except CheckpointError:
        raise
    except Exception as e:  # malformed pickles raise all sorts of errors
        raise CheckpointError(f"{path}: cannot read the torch checkpoint: {e!r}") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} does not hold a state dict (got {type(state).__name__}).")
    bad = sorted(
        str(k) for k, v in state.items() if not isinstance(k, str) or not isinstance(v, np.ndarray)
    )
    if bad:
        raise CheckpointError(f"{path}: entries that are not named tensors: {', '.join(bad)}.")
    return dict(state)
