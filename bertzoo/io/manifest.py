"""Checksum manifests: every directory bertzoo publishes (a preset, a
training checkpoint, a serving export, a converted checkpoint) holds a
`bertzoo-manifest.json`, written last, that records each file bertzoo wrote
there with its size and SHA-256:

    {"format": "bertzoo-manifest", "version": 1, "kind": "preset",
     "files": {"config.json": {"size": 1234, "sha256": "9f86d0..."}, ...}}

Readers verify the files they are about to load against it, so a damaged,
truncated or swapped file is an `IntegrityError` that names it instead of
silently different weights. Files in the directory that the manifest does
not list were not written by bertzoo (a user's notes, say): they are neither
verified nor ever removed.

Verification hashes every byte; a file that verified once is not hashed
again in the same process while its size, modification time and inode are
unchanged (only files last modified well before they were hashed are
remembered, so a change within the file system's timestamp granularity
cannot hide behind an unchanged modification time). Set the
environment variable `BERTZOO_VERIFY=0` to skip verification (e.g. for a
read-only model store with its own checks).
"""

import hashlib
import json
import os
import time
from pathlib import Path

from bertzoo.errors import IntegrityError
from bertzoo.io.bounded import CONFIG_BYTES, read_bounded_text
from bertzoo.io.jsonfile import parse_json

MANIFEST_FILE = "bertzoo-manifest.json"
FORMAT = "bertzoo-manifest"
VERSION = 1
# What a manifest's directory is: publishing refuses to replace one kind
# with another (an export is never overwritten by a preset).
KINDS = ("preset", "checkpoint", "export", "hf", "prepared", "records", "adapter")

# (path, size, mtime_ns, inode) -> sha256 of files verified in this process.
_verified = {}
# A verified file is remembered only if it was last modified this long
# before it was hashed.
_SETTLED_NS = 2_000_000_000


def verification_enabled():
    """False when the environment sets `BERTZOO_VERIFY=0` (or false/no/off)."""
    return os.environ.get("BERTZOO_VERIFY", "1").strip().lower() not in ("0", "false", "no", "off")


def sha256_file(path):
    """The hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _identity(path):
    st = os.stat(path)
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def describe_files(directory, names):
    """`{name: {"size", "sha256"}}` for files given relative to `directory`."""
    directory = Path(directory)
    entries = {}
    for name in sorted(names):
        path = directory / name
        digest = sha256_file(path)
        entries[name] = {"size": path.stat().st_size, "sha256": digest}
    return entries


def list_files(directory):
    """Every regular file below `directory`, as sorted POSIX-style relative
    names, the manifest itself left out."""
    directory = Path(directory)
    names = []
    for root, _, files in os.walk(directory):
        for file in files:
            rel = (Path(root) / file).relative_to(directory).as_posix()
            if rel != MANIFEST_FILE:
                names.append(rel)
    return sorted(names)


def manifest_text(kind, entries):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}.")
    document = {"format": FORMAT, "version": VERSION, "kind": kind, "files": entries}
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def inside(name):
    """Whether a file name stays inside its directory (a manifest's, or any
    a directory's files give): a relative POSIX path of plain parts (no
    '..', '.', empty part, backslash or NUL)."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        return False
    return not name.startswith("/") and all(part not in ("", ".", "..") for part in name.split("/"))


def read_manifest(directory):
    """The manifest document of `directory`, or None when it has none.
    A manifest that cannot be read is an `IntegrityError`."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        document = parse_json(read_bounded_text(path, CONFIG_BYTES, "manifest", IntegrityError))
    except IntegrityError:
        raise
    except (OSError, ValueError) as e:  # JSONDecodeError, nesting
        raise IntegrityError(f"{path} is damaged: {e}.") from e
    files = document.get("files") if isinstance(document, dict) else None
    if (
        not isinstance(files, dict)
        or document.get("format") != FORMAT
        or not all(
            isinstance(v, dict)
            and isinstance(v.get("sha256"), str)
            and isinstance(v.get("size"), int)
            for v in files.values()
        )
    ):
        raise IntegrityError(f"{path} is damaged: not a {FORMAT} document with a 'files' table.")
    outside = next((name for name in files if not inside(name)), None)
    if outside is not None:
        raise IntegrityError(
            f"{path} is damaged: it lists {outside!r}, which is not a file inside "
            f"{Path(directory)} (names are relative paths without '..'); write it again."
        )
    if document.get("version", 0) > VERSION:
        raise IntegrityError(
            f"{path} has manifest version {document['version']}, written by a newer bertzoo; "
            f"this one reads version {VERSION}: upgrade bertzoo."
        )
    return document


def verify_directory(directory, names=None, manifest=None, force=False):
    """Checks the files of `directory` against its manifest: all it lists,
    or only `names` (relative names; names it does not list are skipped).
    Returns the manifest (None when the directory has none: nothing to
    check). Raises `IntegrityError` naming the first file that is missing,
    has another size or another SHA-256. `force`: check even where
    `BERTZOO_VERIFY=0` turns checks off."""
    directory = Path(directory)
    if manifest is None:
        manifest = read_manifest(directory)
    if manifest is None or not (force or verification_enabled()):
        return manifest
    files = manifest["files"]
    wanted = sorted(files) if names is None else [n for n in names if n in files]
    for name in wanted:
        expected = files[name]
        path = directory / name
        if not path.is_file():
            what = "is missing" if not os.path.lexists(path) else "is not a plain file"
            raise IntegrityError(
                f"{path} {what}: the manifest {MANIFEST_FILE} lists it as a file written by "
                "bertzoo."
            )
        key = _identity(path)
        if key[1] != expected["size"]:
            raise IntegrityError(
                f"{path} is damaged: {key[1]} bytes, but bertzoo wrote {expected['size']} "
                f"(recorded in {MANIFEST_FILE}). Restore it or write it again."
            )
        started = time.time_ns()
        digest = _verified.get(key) or sha256_file(path)
        if digest != expected["sha256"]:
            raise IntegrityError(
                f"{path} is damaged: its SHA-256 differs from the one bertzoo recorded in "
                f"{MANIFEST_FILE} when it wrote the file. Restore it or write it again "
                "(BERTZOO_VERIFY=0 skips this check)."
            )
        if key[2] < started - _SETTLED_NS:
            _verified[key] = digest
    return manifest
