"""Shared helpers of the fine-tuning data reader tests: tiny files and
TaskDataError matchers."""

import re

import pytest

from bertzoo.data.readers import TaskDataError

T = "\t"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def tsv(*rows):
    return "".join(T.join(row) + "\n" for row in rows)


def raises_at(path, line, phrase):
    """pytest.raises for a TaskDataError at path:line whose message has `phrase`."""
    return pytest.raises(
        TaskDataError, match=rf"^{re.escape(f'{path}:{line}: ')}.*{re.escape(phrase)}"
    )
