"""A full disk while bertzoo writes: one line, nothing lost, a clean exit.

    with disk_full_guard(staging, lambda free: f"... ({free} free there) ..."):
        model.save_weights(staging / "model.weights.h5")

Every write bertzoo makes goes to a staging file or folder first (see
`bertzoo.io.publish` and `bertzoo.training.checkpoint`), so on ENOSPC (or a
quota, EDQUOT) the previous version is still complete; what is left to do:

- close the HDF5 files the failed write left open under the staging path.
  h5py cannot close a file whose last data cannot be flushed: it stays open,
  every later close attempt prints an "Exception ignored" traceback and the
  process segfaults at exit. Its descriptor is first pointed at an anonymous
  in-memory file (`memfd`), where the flush succeeds and is thrown away;
- raise `DiskFullError` (a `BertzooError` and an `OSError` with errno
  ENOSPC) with the caller's one-line message, for the caller's clean-up (the
  staging copy removed) to run.

`is_disk_full(error)` recognises the condition in an `OSError` of errno
ENOSPC or EDQUOT, and in the errors of libraries that report it in their
message (h5py's RuntimeError on close, TensorFlow's file writers), following
the exception's cause and context.
"""

import contextlib
import errno
import os
import shutil
import sys
from pathlib import Path

from bertzoo.errors import DiskFullError

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_MESSAGES = ("No space left on device", "Disk quota exceeded", "errno = 28,", "errno = 122,")


def is_disk_full(error):
    """Whether `error` (or an exception it was raised from) reports a full
    disk or an exceeded quota."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DiskFullError):
            return True
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if any(text in str(error) for text in _MESSAGES):
            return True
        error = error.__cause__ or error.__context__
    return False


def free_space(path):
    """The free space on `path`'s file system ("1.2 MB"), or "?"."""
    path = Path(path)
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                free = shutil.disk_usage(candidate).free
            except OSError:
                return "?"
            return f"{free / 1e6:.1f} MB"
    return "?"


def _inside(name, directory):
    try:
        return Path(os.path.abspath(name)).is_relative_to(Path(os.path.abspath(directory)))
    except (TypeError, ValueError):
        return False


def close_files_written_under(directory):
    """Closes the HDF5 files open for writing under `directory` (a staging
    path about to be removed), whatever their last writes: a descriptor
    that cannot be flushed is pointed at an in-memory file first. Returns
    how many were closed."""
    h5py = sys.modules.get("h5py")  # nothing to close if h5py was never used
    if h5py is None:
        return 0
    closed = 0
    for fid in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
        try:
            name = os.fsdecode(fid.name)
            if not fid.valid or not _inside(name, directory):
                continue
            if fid.get_intent() == h5py.h5f.ACC_RDONLY:
                continue
            fd = fid.get_vfd_handle()
        except Exception:  # an id closed meanwhile
            continue
        sink = (
            os.memfd_create("bertzoo-discarded")
            if hasattr(os, "memfd_create")
            else os.open(os.devnull, os.O_RDWR)
        )
        try:
            os.dup2(sink, fd)
        finally:
            os.close(sink)
        with contextlib.suppress(Exception):
            h5py.File(fid).close()
        closed += 1
    return closed


@contextlib.contextmanager
def disk_full_guard(staging, message, location=None):
    """Turns a full disk inside the block into `DiskFullError(message(free))`
    (`free`: the free space where `staging` is, "1.2 MB"), after closing the
    HDF5 files left open under `staging` (a path, or a function that returns
    it, or None when nothing was staged yet); other errors pass unchanged.
    The caller removes `staging` (its `finally`). `location`: where the free
    space is measured, when not at `staging`."""
    try:
        yield
    except Exception as e:
        if not is_disk_full(e):
            raise
        where = staging() if callable(staging) else staging
        if where is not None:
            close_files_written_under(where)
        raise DiskFullError(message(free_space(location or where or "."))) from e
