"""Reading JSON configuration files with one-line errors."""

import json
from pathlib import Path


def parse_json(text):
    """`json.loads(text)`; JSON nested deeper than Python's recursion limit
    (a hostile file) is a `ValueError` saying so, not a `RecursionError`."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(
            "invalid JSON: arrays or objects nested too deeply (deeper than Python's "
            "recursion limit); the file is damaged or hostile."
        ) from None


def read_json_object(path, error):
    """The JSON object in `path`. An unreadable file, invalid JSON or a
    value that is not an object raises `error` (the caller's error class)
    with a one-line message naming the file."""
    try:
        data = parse_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise error(f"Cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object, got {type(data).__name__}.")
    return data
