"""What a run records of its input files, to tell on resume whether they
changed since it started (issue 30).

    recorded = fingerprint("train.tsv")     # at the run's start
    ...
    change(recorded, fingerprint("train.tsv"))   # on resume: None, or what changed

A fingerprint is the file's size, modification time and the SHA-256 of its
size, first MiB and last MiB: constant time and memory for a file of any
size. A file whose size or first or last MiB differ has changed (appending,
truncating, replacing, editing near either end). One whose only the
modification time differs (copied, touched, fetched again) is taken as
unchanged: an edit of the same length in the middle of a file over 2 MiB is
the one change this does not see.
"""

import hashlib
import os

ENDS = 1 << 20  # bytes hashed at each end of a file


def fingerprint(path):
    """{"size", "mtime_ns", "sha256_ends"} of the file at `path` (read
    through one open file, so the three agree). OSError when it cannot be
    read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        digest = hashlib.sha256(str(st.st_size).encode())
        digest.update(f.read(ENDS))
        if st.st_size > ENDS:
            f.seek(max(ENDS, st.st_size - ENDS))
            digest.update(f.read(ENDS))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256_ends": digest.hexdigest()}


def change(recorded, current):
    """What changed between two fingerprints of one file, as words for a
    message ("it grew from 10 to 12 bytes"), or None when nothing did (the
    modification time alone does not count; see the module docstring).
    `current` None: the file is gone or unreadable."""
    if current is None:
        return "it is gone or cannot be read"
    old, new = recorded.get("size"), current["size"]
    if old != new:
        if not isinstance(old, int):
            return f"its size is now {new:,} bytes"
        return f"it {'grew' if new > old else 'shrank'} from {old:,} to {new:,} bytes"
    if recorded.get("sha256_ends") != current["sha256_ends"]:
        return f"its content changed (same size, {new:,} bytes)"
    return None
