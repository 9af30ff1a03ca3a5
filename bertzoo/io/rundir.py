"""A run's output directory: one run at a time, and a record of what it wrote.

    run = RunDirectory(config.output, chief=distribution.is_chief)
    with run:                                     # the lock, for the whole run
        run.claim("checkpoints", "logs/events.out.tfevents.*", "metrics.json")
        if not config.resume:
            run.remove("checkpoints")             # only if bertzoo wrote it
        ...                                       # then write them

The lock. `.bertzoo.lock` inside the output, locked with `fcntl.flock`
(exclusive, non-blocking) and holding the holder's pid. A second run on the
same output fails at once with an `OutputError` that names the directory and
that pid. The kernel releases the lock when its process ends, however it ends
(`kill -9` included), so a lock is never stale. The file itself stays:
deleting a lock file races with a run that has just opened it.

The record. `.bertzoo-run.json` lists the output-relative paths that
bertzoo's runs write there: a file, a directory (with everything in it), or
a pattern in the last part, such as `logs/events.out.tfevents.*` (so a
user's own files in `logs/` are not bertzoo's). `claim(*paths)` checks every
path first: one that exists and is not recorded is not bertzoo's, an
`OutputError` ("... exists and was not written by bertzoo; move it or choose
another --output"), and nothing is recorded or written. Then it records the
new ones, atomically, before the run writes them. A run claims everything it
will write at its start. `remove(*paths)` and `clear()` delete recorded
paths only (removing does not unclaim; `clear()` also empties the record):
bertzoo never deletes or replaces a file it did not write.

Errors. An output that is a file, or that cannot be created or written, is an
`OutputError` too, found by creating the lock file, or else by the first
`claim` writing the record (permission bits do not stop root; `os.access`
would not tell).

Distributed runs: only the chief worker (`Distribution.is_chief`) locks,
claims and removes; on the other workers every method does nothing.
"""

import errno
import fcntl
import fnmatch
import json
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from bertzoo.errors import OutputError
from bertzoo.io.publish import atomic_write_text

LOCK_FILE = ".bertzoo.lock"
RECORD_FILE = ".bertzoo-run.json"
FORMAT_VERSION = 1


class RunDirectory:
    """The output directory `path` of one run (see the module docstring).

    `lock()` (or `with RunDirectory(...)`) takes the lock and reads the
    record; `release()` lets go. `recorded` lists the recorded paths."""

    def __init__(self, path, chief=True):
        self.path = Path(path)
        self.chief = bool(chief)
        self._fd = None
        self._paths = set()

    def __enter__(self):
        return self.lock()

    def __exit__(self, *exc):
        self.release()

    @property
    def locked(self):
        return self._fd is not None

    @property
    def recorded(self):
        return sorted(self._paths)

    # === The lock ===

    def lock(self):
        """Creates the directory if needed and takes its lock (a no-op when
        held, and on non-chief workers). Returns self."""
        if not self.chief or self._fd is not None:
            return self
        if self.path.exists() and not self.path.is_dir():
            raise OutputError(
                f"--output {self.path} is a file; it must name a directory (a new one, or one a run wrote)."
            )
        lock_path = self.path / LOCK_FILE
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            # Never through a link: a symlink (or hard link) planted as the
            # lock file would have another file emptied and overwritten.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(lock_path, flags, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OutputError(
                    f"{lock_path} is a symbolic link, not a lock file bertzoo wrote; remove it "
                    "or choose another --output."
                ) from None
            raise OutputError(
                f"--output {self.path} cannot be created or written ({e.strerror or e}); choose a writable directory."
            ) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise OutputError(
                f"{lock_path} is not a lock file bertzoo wrote (a hard link or a special file); "
                "remove it or choose another --output."
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_pid(fd)
            readers_only = isinstance(e, BlockingIOError) and _try_lock(fd, fcntl.LOCK_SH)
            os.close(fd)
            if readers_only:
                raise OutputError(
                    f"--output {self.path} is being read by a training run (it holds the "
                    "directory shared): writing into it would change its data under it; wait "
                    "for it to end or choose another --output."
                ) from None
            if isinstance(e, BlockingIOError):
                raise OutputError(
                    f"--output {self.path} is in use by another run (pid {holder}); wait for it to end or "
                    "choose another --output."
                ) from None
            raise OutputError(
                f"--output {self.path} cannot be locked ({e.strerror or e}); choose a local directory."
            ) from None
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._paths = self._load()
        except BaseException:
            self.release()
            raise
        return self

    def release(self):
        """Lets go of the lock (closing the file releases it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    # === The record ===

    def claim(self, *paths):
        """Records `paths` (relative to the output) as written by bertzoo,
        before they are written. Raises `OutputError`, recording nothing, if
        one of them (or a file where one of their folders goes) exists and
        is not recorded."""
        if not self.chief:
            return
        self._require_lock()
        names = [self._name(p) for p in paths]
        for name in names:
            parts = PurePosixPath(name).parts
            blocked = []  # a file where one of the path's folders goes
            for i in range(1, len(parts)):
                blocked = [
                    p for p in self._matches("/".join(parts[:i])) if not (self.path / p).is_dir()
                ]
                if blocked:
                    break
            for found in blocked or self._matches(name):
                if not self.owns(found):
                    raise OutputError(
                        f"{self.path / found} exists and was not written by bertzoo; move it or choose "
                        "another --output."
                    )
        new = set(names) - self._paths
        if new:
            self._paths |= new
            self._save()

    def owns(self, path):
        """Whether `path` is recorded (itself, a pattern matching it, or a
        recorded folder holding it)."""
        parts = PurePosixPath(self._name(path)).parts
        for entry in self._paths:
            pattern = PurePosixPath(entry).parts
            if len(pattern) <= len(parts) and all(map(fnmatch.fnmatchcase, parts, pattern)):
                return True
        return False

    def remove(self, *paths):
        """Deletes what exists of `paths` and is recorded; anything else
        (a user's file) stays. The paths stay claimed."""
        if not self.chief:
            return
        self._require_lock()
        for name in map(self._name, paths):
            for found in self._matches(name):
                if self.owns(found):
                    _delete(self.path / found)

    def clear(self):
        """Deletes every recorded path and empties the record."""
        if not self.chief:
            return
        self.remove(*self._paths)
        self._paths = set()
        self._save()

    # === Helpers ===

    def _require_lock(self):
        if self._fd is None:
            raise RuntimeError(
                "Lock the run directory (lock() or `with`) before claiming or removing paths."
            )

    def _name(self, path):
        """An output-relative POSIX path; absolute paths must be inside."""
        path = Path(path)
        if path.is_absolute():
            try:
                path = Path(os.path.abspath(path)).relative_to(os.path.abspath(self.path))
            except ValueError:
                raise ValueError(f"{path} is not inside the output {self.path}.") from None
        name = PurePosixPath(path.as_posix())
        if not name.parts or ".." in name.parts or name.parts[0] in (LOCK_FILE, RECORD_FILE):
            raise ValueError(f"{path!s} is not a path a run may claim in {self.path}.")
        return str(name)

    def _matches(self, name):
        """The existing paths that `name` (maybe a pattern) names, relative."""
        if any(c in name for c in "*?["):
            return sorted(str(p.relative_to(self.path).as_posix()) for p in self.path.glob(name))
        path = self.path / name
        return [name] if path.exists() or path.is_symlink() else []

    def _load(self):
        path = self.path / RECORD_FILE
        if not path.exists():
            return set()
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            paths = document["paths"]
            if not all(isinstance(p, str) for p in paths):
                raise TypeError("paths must be strings")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise OutputError(
                f"{path} cannot be read ({e}); it lists the files bertzoo wrote in {self.path}. "
                "Move the directory aside or choose another --output."
            ) from None
        return set(paths)

    def _save(self):
        """Writes the record atomically (temporary file, fsync, rename)."""
        text = (
            json.dumps({"format_version": FORMAT_VERSION, "paths": sorted(self._paths)}, indent=1)
            + "\n"
        )
        try:
            atomic_write_text(self.path / RECORD_FILE, text)
        except OSError as e:
            raise OutputError(
                f"--output {self.path} cannot be written ({e.strerror or e}); choose a writable directory."
            ) from None


def _read_pid(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"


def _delete(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _try_lock(fd, kind):
    """`flock(fd, kind | LOCK_NB)`: True when taken."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


class ReaderLock:
    """A shared lock on a run directory's `.bertzoo.lock`, held by a process
    that reads what a run wrote there (training from a prepared corpus)
    for as long as it reads: the run that writes the directory (`prepare`)
    takes the lock exclusively, so neither starts while the other holds it.
    Before, re-running `prepare` into a directory a training run streamed
    from killed the run at step ~220, unable to resume.

    A directory without a lock file (or on a file system without `flock`)
    is read without one: nothing is created in a directory being read.
    `error` is the caller's error class."""

    def __init__(self, directory, error):
        self.fd = None
        path = Path(directory) / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise error(
                f"{directory} is being written by another run (pid {holder}, e.g. a `prepare` "
                "into it); wait for it to end, then train from it."
            ) from None
        except OSError:
            os.close(fd)
            return
        self.fd = fd

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __getstate__(self):
        # A copy in another process (pickled with what holds it) holds no
        # lock: the number of this process's descriptor means nothing there,
        # and closing it would close another file.
        return {"fd": None}

    def __del__(self):
        self.release()
