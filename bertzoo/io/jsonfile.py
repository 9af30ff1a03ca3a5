"""Reading JSON configuration files with one-line errors."""

import json

from bertzoo.io.bounded import CONFIG_BYTES, read_bounded_text


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


def load_json(path, cap=CONFIG_BYTES, what="JSON file"):
    """The JSON value in the plain file `path` of at most `cap` bytes
    (`bertzoo.io.bounded`): where `json.loads(path.read_text())` was, with
    the same error classes (a missing or unreadable file is an `OSError`;
    a file that is not plain, too large, not UTF-8 or not JSON a
    `ValueError`)."""
    return parse_json(read_bounded_text(path, cap, what))


def read_json_object(path, error, cap=CONFIG_BYTES, what="JSON file"):
    """The JSON object in `path`, a plain file of at most `cap` bytes
    (`bertzoo.io.bounded`). An unreadable, oversized or non-UTF-8 file,
    invalid JSON or a value that is not an object raises `error` (the
    caller's error class) with a one-line message naming the file."""
    try:
        text = read_bounded_text(path, cap, what, error)
    except OSError as e:
        raise error(f"Cannot read {path}: {e}") from e
    try:
        data = parse_json(text)
    except ValueError as e:
        raise error(f"Cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object, got {type(data).__name__}.")
    return data
