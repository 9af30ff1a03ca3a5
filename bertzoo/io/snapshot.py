"""Reading one published version of a directory while new ones are
published.

Publishing (`bertzoo.io.publish`) swaps a complete new version of a
directory in with one atomic exchange, then removes the old one. A reader
that opens `config.json`, the weights and the heads by path at different
moments could get parts of two versions (the config of one save, the
weights of the next), or find the old version's files removed under it.

`pinned_directory(path)` opens the directory once, takes a shared lock on
it (`flock`), and yields a *view*: `/proc/<pid>/fd/<n>`, a path that leads
to that opened folder. Whatever is read through the view, by any reader
(h5py, safetensors, json), comes from the version that `path` named when
it was opened. Errors raised while reading are rewritten to name `path`
(`show_original`), and what a reader records or logs names it too
(`shown_path`). A publisher retires the
version it replaces (`retire`): it is removed at once when no reader holds
it, else by the last reader to let it go (`pinned_directory`'s exit) or by
the next publication of the same directory.

Where the system cannot do this (no `/proc/<pid>/fd`, or a file system
without `flock` on folders), the path itself is read, as before. Views
nest: pinning a path inside a view returns it.
"""

import contextlib
import errno
import fcntl
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

from bertzoo.errors import IntegrityError

# A directory replaced while it is being opened is opened again, this often.
ATTEMPTS = 50

_views = {}  # view path -> the directory it shows
_views_lock = threading.Lock()


def supported():
    """Whether this system can pin a directory (Linux, /proc mounted)."""
    return sys.platform.startswith("linux") and os.path.isdir(f"/proc/{os.getpid()}/fd")


def view_of(path):
    """The directory a view (or a path inside one) shows, else None."""
    text = os.path.abspath(path)
    with _views_lock:
        for view, shown in _views.items():
            if text == view or text.startswith(view + os.sep):
                return shown
    return None


def shown_path(path):
    """The path a reader should show or record for `path`: inside a view,
    the same path in the directory the view shows; else `path` itself
    (whatever it is: a name such as "backbone.head_tensors" too)."""
    if not isinstance(path, str | os.PathLike):
        return path
    text = os.path.abspath(path)
    with _views_lock:
        for view, shown in _views.items():
            if text == view or text.startswith(view + os.sep):
                return Path(shown + text[len(view) :])
    return path


def retired_name(name):
    """The name a publisher gives the version of `name` it replaced (a
    hidden folder beside it, removed once no reader holds it)."""
    return f".{name}.old.{os.getpid()}-{os.urandom(4).hex()}"


def _retired_pattern(name):
    return re.compile(rf"^\.{re.escape(name)}\.old\.")


def _lock(fd, kind):
    """`flock(fd, kind | LOCK_NB)`: True when taken, False when another
    process holds a conflicting lock, None where the file system has no
    locks."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        return None
    return True


def remove_unless_read(path):
    """Removes the directory `path` (a version bertzoo published and
    replaced) unless a reader holds it pinned. Returns whether it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        shutil.rmtree(path, ignore_errors=True)  # not a folder, or no lock there
        return not os.path.lexists(path)
    try:
        if _lock(fd, fcntl.LOCK_EX) is False:
            return False  # a reader holds it: the last one removes it
        # Held exclusively until it is gone: a reader that opens it meanwhile
        # cannot lock it, and opens the current version instead.
        shutil.rmtree(path, ignore_errors=True)
        return not os.path.lexists(path)
    finally:
        os.close(fd)


def retire(path, name):
    """A publisher's old version of `name`, at `path` after the exchange:
    renamed to a retired name beside it and removed unless a reader holds
    it (then the last reader, or the next publication, removes it)."""
    path = Path(path)
    retired = path.parent / retired_name(name)
    try:
        os.rename(path, retired)
    except OSError:
        retired = path
    remove_unless_read(retired)


class _Pin:
    """A directory opened once and locked shared."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.locked = _lock(self.fd, fcntl.LOCK_SH)

    def current(self, path):
        """Whether `path` still names the opened folder, now that it is
        locked: then it had not been replaced, so no publisher was removing
        it, and none will while the lock is held."""
        if self.locked is False:
            return False  # a publisher is removing it: it was replaced
        try:
            now = os.stat(path)
        except OSError:
            return False
        was = os.fstat(self.fd)
        return (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino)

    @property
    def view(self):
        """The opened folder as a path (`/proc/<pid>/fd/<n>`): files below
        it are looked up in that folder, whatever `path` names meanwhile.
        Nothing is created for it, so nothing is left behind by a kill."""
        return Path(f"/proc/{os.getpid()}/fd/{self.fd}")

    def close(self, name=None):
        """Lets the folder go; the last reader of a retired version
        (`name`: the directory's name) removes it."""
        if self.fd is None:
            return
        try:
            where = os.readlink(f"/proc/{os.getpid()}/fd/{self.fd}")
        except OSError:
            where = ""
        os.close(self.fd)
        self.fd = None
        if name and _retired_pattern(name).match(os.path.basename(where)):
            remove_unless_read(where)


@contextlib.contextmanager
def pinned_directory(path):
    """Yields a view of the directory `path` (see the module docstring):
    read through it, every file comes from one published version. A path
    that is not a directory, or a system that cannot pin one, yields `path`
    itself. Raises `IntegrityError` when `path` is replaced by a new version
    every time it is opened (`ATTEMPTS` times)."""
    path = Path(path)
    if not supported() or view_of(path) is not None or not path.is_dir():
        yield path
        return
    pin = None
    for attempt in range(ATTEMPTS):
        try:
            pin = _Pin(path)
        except FileNotFoundError:
            pin = None  # replaced between two system calls
        else:
            if pin.locked is None:
                pin.close()  # no locks on this file system: read the path
                yield path
                return
            if pin.current(path):
                break
            pin.close()
            pin = None
        time.sleep(0.001 * attempt)
    if pin is None:
        if not path.is_dir():
            yield path  # gone: the reader reports it
            return
        raise IntegrityError(
            f"{path} was replaced by a new version each of the {ATTEMPTS} times it was "
            "opened (another process publishes it continuously); try again."
        )
    view = pin.view
    key = os.path.abspath(view)
    with _views_lock:
        _views[key] = str(path)
    try:
        yield view
    finally:
        with _views_lock:
            _views.pop(key, None)
        pin.close(Path(os.path.abspath(path)).name)


def _replace_in(value, replacements):
    if isinstance(value, str):
        for old, new in replacements:
            # The view's own path, not a longer one (fd 7, not fd 70).
            value = re.sub(re.escape(old) + r"(?![0-9])", new.replace("\\", "\\\\"), value)
        return value
    if isinstance(value, Path):
        return Path(_replace_in(str(value), replacements))
    return value


def show_original(error, view, original):
    """Rewrites the messages of `error` and of the errors it was raised
    from, so they name the directory `original` (the argument the caller
    gave, a str or a path) instead of its view `view`."""
    replacements = [(repr(Path(view)), repr(original)), (str(view), str(Path(original)))]
    if str(view) == str(Path(original)):
        return
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        with contextlib.suppress(Exception):
            error.args = tuple(_replace_in(a, replacements) for a in error.args)
            if isinstance(error, OSError):
                error.filename = _replace_in(error.filename, replacements)
                error.filename2 = _replace_in(error.filename2, replacements)
        error = error.__cause__ or error.__context__
