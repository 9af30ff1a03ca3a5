"""Publishing files and directories so that nothing is lost and nothing is
seen half-written.

- `atomic_path(path)` / `atomic_write_text(path, text)`: one file, written
  beside its target and renamed onto it.
- `publish_directory(target, kind)`: a whole directory (a preset, an export)
  is written into a hidden staging folder beside the target, its manifest
  (`bertzoo.io.manifest`) is written last, and one atomic exchange of the two
  folders (Linux `renameat2(RENAME_EXCHANGE)`) makes it the target. At any
  moment, a kill included, the target holds the complete old directory or
  the complete new one. Leftover staging folders of killed writers are
  removed by the next publish of the same target.

A full disk (ENOSPC, or a quota) during either is a one-line
`DiskFullError` (`bertzoo.io.diskfull`): the target unchanged, the partial
copy removed, HDF5 files left open by the failed write closed first.

Nothing a user wrote is lost: files in the target that its manifest does
not list (a user's notes, a vocabulary put there by hand) are carried over
into the new directory, and a new file of the same name as one of them
stops the publication with an `OutputError`, the target unchanged. A
bertzoo directory of another kind, and for an export any non-empty
directory that is not an earlier export, is refused before anything is
written.
"""

import contextlib
import ctypes
import errno
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from bertzoo.errors import OutputError
from bertzoo.io import manifest as manifest_lib
from bertzoo.io import snapshot
from bertzoo.io.diskfull import disk_full_guard

# Staging folders of publications in progress in this process: a save into
# one of them (a task model saving its backbone into the folder its own
# publication staged) writes there directly; the outermost publication
# publishes. Each maps to the name it is published as.
_active = {}
_active_lock = threading.Lock()


def fsync_path(path, directory=False):
    """fsyncs a file, or with `directory=True` a folder (its entries)."""
    fd = os.open(path, os.O_RDONLY if directory else os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask():
    """The process's umask, read without changing it where the system tells
    (Linux's /proc/self/status); else set and restored at once."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _pid_alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent, name, pattern):
    """Removes `parent`'s entries whose names match `pattern` (group `pid`)
    and whose writing process is gone: leftovers of a killed writer of
    `name`. The patterns match only names bertzoo makes."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry.name)
        if not match:
            continue
        pid = match.group("pid")
        if pid is not None and _pid_alive(int(pid)):
            continue
        if entry.is_dir(follow_symlinks=False):
            # An old version a reader still holds stays (its last reader
            # removes it).
            snapshot.remove_unless_read(entry.path)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _temp_pattern(name, kind):
    # .NAME.tmp-PID-RANDOM[...]: this module's; .NAME.XXXXXXXX.tmp[...]: bertzoo
    # 0.1's (no pid: always stale by the time a new writer runs).
    escaped = re.escape(name)
    return re.compile(
        rf"^\.{escaped}\.(?:{kind}-(?P<pid>\d+)-[a-z0-9_]+|[a-z0-9_]{{8}}\.tmp|old)(?:\..*)?$"
    )


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """Yields a temporary path beside `path`; on success it is fsynced and
    renamed onto `path` in one `os.replace`, on error it is removed and
    `path` is untouched.

    `suffix` keeps the temporary name's ending for writers that check it
    (Keras wants `.weights.h5`). Temporary files of killed writers of the
    same path are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path.parent, path.name, _temp_pattern(path.name, "tmp"))
    state = "is unchanged" if path.exists() else "was not written"

    def disk_full(free):
        return (
            f"No space left on the device while writing {path} ({free} free there): {path} "
            f"{state}, and the partial copy was removed. Free some space and rerun."
        )

    tmp = None
    try:
        with disk_full_guard(lambda: tmp, disk_full, location=path.parent):
            fd, tmp = tempfile.mkstemp(
                prefix=f".{path.name}.tmp-{os.getpid()}-", suffix=suffix, dir=path.parent
            )
            os.close(fd)
            os.unlink(tmp)  # writers such as h5py want to create the file themselves
            yield Path(tmp)
            fsync_path(tmp)
            os.replace(tmp, path)
            # Make the rename itself durable, so files written in order stay in
            # that order after a crash.
            fsync_path(path.parent, directory=True)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path, text):
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


# === Directories ===

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a, b):
    """Atomically swaps the directories `a` and `b` (Linux renameat2 with
    RENAME_EXCHANGE). Returns False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"cannot swap {a} and {b}: {os.strerror(code)}")


def check_target(target, kind, overwrite=True):
    """Raises `OutputError` when publishing a `kind` directory at `target`
    would replace something bertzoo did not write (a file; for an export,
    any non-empty directory without a bertzoo manifest), a bertzoo directory
    of another kind, or (with `overwrite=False`) an earlier one of the same
    kind. `kind` may be a tuple of the kinds that may be updated (the first
    for a new directory). Returns the target's manifest: None when it is
    new or empty, one listing no files when it holds only files bertzoo did
    not write (they are carried over, and writing one of their names is an
    error)."""
    target = Path(target)
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    kind = kinds[0]
    if not target.exists():
        if target.is_symlink():
            raise OutputError(
                f"{target} is a dangling symbolic link; remove it or choose another path."
            )
        return None
    if not target.is_dir():
        raise OutputError(
            f"{target} exists and is not a directory; bertzoo writes a {kind} directory there "
            "and never replaces files it did not write: choose another path."
        )
    found = manifest_lib.read_manifest(target)
    if found is None:
        if not any(target.iterdir()):
            return None
        if kind == "export":
            raise OutputError(
                f"{target} is not empty and is not a bertzoo export (it has no "
                f"{manifest_lib.MANIFEST_FILE}); bertzoo never replaces files it did not "
                "write: choose an empty or new directory."
            )
        return {"kind": kind, "files": {}}
    if found.get("kind") not in kinds:
        article = "an" if kind[0] in "aeiou" else "a"
        raise OutputError(
            f"{target} holds a bertzoo {found.get('kind')}, not {article} {kind}; choose another path."
        )
    if not overwrite:
        raise OutputError(
            f"{target} holds an earlier bertzoo {kind}; pass --overwrite (overwrite=True) to "
            "replace it, or choose another path."
        )
    return found


def check_output_directory(output, kind, what, owned, journal, always=()):
    """Refuses, before anything is written, an `output` that is a file, a
    directory bertzoo wrote as another kind than `kind` (its manifest says),
    or a directory holding files bertzoo did not write; `what` names the
    kind for the user ("a prepared corpus").

    `owned(name)` says which names a command of this kind writes there. It
    claims them only in a directory that is its own: one whose manifest is
    of `kind`, or that holds its `journal` (which it writes before anything
    else). Anywhere else such a name is the user's file, refused and kept.
    `always`: names claimed in any directory (the run lock)."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise OutputError(f"--output {output} is a file; it must name a directory.")
    if not output.is_dir():
        return
    found = manifest_lib.read_manifest(output)
    if found is not None and found.get("kind") != kind:
        raise OutputError(
            f"{output} holds a bertzoo {found.get('kind')}, not {what}; choose another --output."
        )
    ours = found is not None or (output / journal).is_file()
    foreign = sorted(
        p.name for p in output.iterdir() if not (p.name in always or ours and owned(p.name))
    )
    if foreign:
        raise OutputError(
            f"{output} holds files bertzoo did not write ({', '.join(foreign[:3])}); "
            f"choose a new or empty directory, or one that holds {what} already."
        )


def is_staging(path):
    """True for a staging folder of a publication in progress in this
    process (saves into it write directly)."""
    with _active_lock:
        return str(Path(path).resolve()) in _active


def published_name(path):
    """The name `path` has once published: for a staging folder of a
    publication in progress in this process, its target's name (what a
    preset records as its `name`), else `path`'s own."""
    with _active_lock:
        return _active.get(str(Path(path).resolve()), Path(path).name)


@contextlib.contextmanager
def publish_directory(target, kind, overwrite=True, replaces=None):
    """Yields a staging folder to fill; on success it becomes `target`
    atomically (see the module docstring).

    Args:
        target: the directory to publish.
        kind: what it is, one of `bertzoo.io.manifest.KINDS`; recorded in
            the manifest, and an existing target must be of the same kind
            (a tuple: any of these; the first for a new directory).
        overwrite: False: an existing bertzoo directory at `target` is an
            `OutputError` (exports without --overwrite).
        replaces: None: the new directory replaces every file bertzoo wrote
            in the old one. A collection of relative names: a merge; bertzoo
            files of the old directory are kept unless listed here or
            written anew (a tokenizer saving its vocabulary into a preset).

    Every check runs before the first byte is written. Inside another
    publication's staging folder this writes there directly and leaves the
    manifest to the outer publication.
    """
    target = Path(target)
    if is_staging(target):
        yield target
        return
    old = check_target(target, kind, overwrite)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(parent, target.name, _temp_pattern(target.name, "tmp"))
    staging = Path(
        tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=parent)
    ).resolve()
    state = "is unchanged" if target.exists() else "was not written"

    def disk_full(free):
        what = kind if isinstance(kind, str) else kind[0]
        return (
            f"No space left on the device while writing the {what} {target} ({free} free "
            f"there): {target} {state}, and the partial copy was removed. Free some space "
            "and rerun."
        )

    # mkdtemp makes it private (0700); published, it gets the mode any new
    # folder gets (the umask's), so a model server running as another user
    # can read it.
    os.chmod(staging, 0o777 & ~current_umask())
    with _active_lock:
        _active[str(staging)] = target.name
    published = False
    try:
        with disk_full_guard(staging, disk_full):
            yield staging
            kept_kind = (
                old["kind"] if old is not None else (kind if isinstance(kind, str) else kind[0])
            )
            _finish(staging, target, kept_kind, old, replaces)
        published = True  # `staging` is the target now, or the retired old version
    finally:
        with _active_lock:
            _active.pop(str(staging), None)
        if not published and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _carry(source, destination):
    """Hard-links (or copies) `source` to `destination`."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, destination, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(source, destination)


def _link_or_copy(source, destination):
    try:
        os.link(source, destination, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, destination, follow_symlinks=False)


def _finish(staging, target, kind, old, replaces):
    written = manifest_lib.list_files(staging)
    entries = manifest_lib.describe_files(staging, written)
    if old is not None:
        old_files = old["files"]
        if replaces is not None:
            # A merge: earlier bertzoo files this save neither replaces nor rewrites.
            keep = [n for n in old_files if n not in entries and n not in set(replaces)]
            for name in keep:
                if (target / name).is_file():
                    _carry(target / name, staging / name)
                    entries[name] = old_files[name]
        # Files bertzoo did not write (not in the old manifest) stay.
        for entry in target.iterdir():
            if entry.name not in (manifest_lib.MANIFEST_FILE, *old_files):
                _carry_foreign(entry, staging / entry.name, entry.name, old_files)
    for name in written:
        fsync_path(staging / name)
    manifest_path = staging / manifest_lib.MANIFEST_FILE
    manifest_path.write_text(manifest_lib.manifest_text(kind, entries), encoding="utf-8")
    fsync_path(manifest_path)
    for root, dirs, _ in os.walk(staging):
        for d in dirs:
            fsync_path(Path(root) / d, directory=True)
    fsync_path(staging, directory=True)
    if target.exists() and any(target.iterdir()):
        if not _exchange(staging, target):
            # No atomic exchange here: move the old one aside first; a kill
            # between the two renames leaves it complete beside the target.
            aside = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent)
            )
            os.rmdir(aside)
            os.replace(target, aside)
            os.replace(staging, target)
            staging = aside
        # `staging` now holds the old version: removed, unless a reader
        # holds it (bertzoo.io.snapshot), then by its last reader.
        snapshot.retire(staging, target.name)
    else:
        os.replace(staging, target)  # onto nothing, or onto an empty folder
    fsync_path(target.parent, directory=True)


def _carry_foreign(source, destination, name, old_files):
    """Carries what bertzoo did not write below `source` (relative name
    `name`) into the new version at `destination`: files the old manifest
    does not list, folder by folder. A file the new version would replace
    stops the publication."""
    if source.is_dir() and not source.is_symlink():
        for child in source.iterdir():
            child_name = f"{name}/{child.name}"
            if child_name not in old_files:
                _carry_foreign(child, destination / child.name, child_name, old_files)
        return
    if destination.exists() or destination.is_symlink():
        raise OutputError(
            f"{source} exists and was not written by bertzoo, which would replace it; "
            "move it or choose another directory (nothing was changed)."
        )
    _carry(source, destination)


def atomic_directory(path):
    """`publish_directory(path, "preset")`: a preset directory replaced as
    one unit."""
    return publish_directory(path, "preset")
