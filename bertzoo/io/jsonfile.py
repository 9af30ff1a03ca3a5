"""Reading a JSON file that must hold an object (configuration files)."""

import json
from pathlib import Path


def read_json_object(path, error):
    """The JSON object in `path`. An unreadable file, invalid JSON or a
    value that is not an object raises `error` (the caller's error class)
    with a one-line message naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"Cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object, got {type(data).__name__}.")
    return data
