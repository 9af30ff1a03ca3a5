"""Atomic file writes (kept for imports written before `bertzoo.io`; the
implementation is `bertzoo.io.publish`)."""

from bertzoo.io.publish import atomic_directory, atomic_path, atomic_write_text  # noqa: F401
