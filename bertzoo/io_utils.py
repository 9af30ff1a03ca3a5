"""Atomic file writes: a reader never sees a half-written file."""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """Yields a temporary path beside `path`; on success it is renamed onto
    `path` in one `os.replace`, on error it is removed and `path` is untouched.

    `suffix` keeps the temporary name's ending for writers that check it
    (Keras wants `.weights.h5`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # writers such as h5py want to create the file themselves
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        # Make the rename itself durable, so files written in order stay in
        # that order after a crash.
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path, text):
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(path):
    """Yields an empty folder beside `path` to fill; on success it replaces
    `path` (an earlier folder there is removed), on error it is removed and
    `path` is untouched. Readers see the old folder or the new one, complete
    (at worst, after a crash between the two renames, no folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = path.with_name(f".{path.name}.old")
    try:
        yield staging
        if old.exists():
            shutil.rmtree(old)
        if path.exists():
            os.replace(path, old)
        os.replace(staging, path)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
