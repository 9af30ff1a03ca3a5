"""What every fine-tuning data reader shares: the `TaskDataError`, the
example dataclasses the readers return, `LabelSet` (class names <-> ids)
and the file/text helpers that make errors read "path:line: message".

Pure Python (standard library only), so it imports without TensorFlow.
Files must be UTF-8 (a leading byte-order mark is ignored).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from bertzoo.errors import BertzooError

MAX_LISTED = 20  # how many valid labels / columns an error message lists


class TaskDataError(BertzooError, ValueError):
    """A fine-tuning data file is missing, malformed or inconsistent.
    The message reads "path:line: what is wrong; what is valid"."""


@dataclass
class TextExample:
    """One row of a classification / regression table.

    texts: one text, or two for sentence-pair tasks.
    label: str (classification), float (regression) or None (no labels).
    line: 1-based line of the row in its file.
    """

    texts: tuple[str, ...]
    label: str | float | None
    line: int


@dataclass
class TaggedSentence:
    """One sentence of a token tagging file; tags is None for untagged
    (prediction) input. line: 1-based line of the first token."""

    words: list[str]
    tags: list[str] | None
    line: int


@dataclass
class QAExample:
    """One SQuAD question. answers: (text, character start in context);
    empty for impossible (SQuAD 2.0) questions. line: 1-based line of the
    question's "id" in the file."""

    id: str
    question: str
    context: str
    answers: list[tuple[str, int]]
    is_impossible: bool
    line: int


def data_error(path, line, message):
    """A TaskDataError reading "path:line: message" ("path: message" when
    `line` is None)."""
    where = f"{path}:{line}" if line is not None else f"{path}"
    return TaskDataError(f"{where}: {message}")


def listing(items):
    """'a', 'b', 'c' (at most MAX_LISTED, then '... and N more')."""
    items = [repr(i) for i in items]
    if len(items) > MAX_LISTED:
        rest = len(items) - MAX_LISTED
        items = items[:MAX_LISTED] + [f"... and {rest} more"]
    return ", ".join(items)


def read_text(path):
    """Whole file as str. Missing file or non-UTF-8 bytes -> TaskDataError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise data_error(path, None, "file not found") from None
    except IsADirectoryError:
        raise data_error(path, None, "is a directory, not a data file") from None
    except OSError as e:
        raise data_error(path, None, f"cannot read the file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        raise data_error(
            path,
            line,
            f"the file is not valid UTF-8 (byte 0x{data[e.start]:02x} at byte "
            f"column {column}); re-save the file as UTF-8",
        ) from None
    return text.removeprefix("\ufeff")


def numbered_lines(text):
    """(1-based line number, line with its ending). Lines end at \\n, \\r\\n
    or \\r, as the csv module counts them."""
    return enumerate(io.StringIO(text, newline=""), start=1)


def no_examples_error(path, text, what):
    """The 'has no examples' error, at the line after the file's last line."""
    if not text.strip():
        return data_error(path, 1, "the file has no examples (it is empty)")
    last = sum(1 for _ in numbered_lines(text))
    return data_error(path, last + 1, f"the file has no examples ({what})")


def json_type(value):
    """The JSON type name of a parsed JSON value ("object", "array", ...)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _sorted_labels(labels):
    """Numeric order when every label is an integer, else lexicographic."""
    try:
        return sorted(labels, key=lambda label: (int(label), label))
    except ValueError:
        return sorted(labels)


def _number(label):
    """The finite number a label spells ("1", "1.0", "01", "1e0"), or None."""
    try:
        value = float(label)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _check_spellings(source, first_line):
    """Labels that spell one number in different ways ("1", "1.0", "01")
    would be separate classes: a TaskDataError naming them, at the line
    where the second spelling first appears. `first_line`: {label: the
    line it first appears on}."""
    spellings = {}
    for label, line in first_line.items():
        number = _number(label)
        if number is not None:
            spellings.setdefault(number, []).append((line, label))
    for number, found in spellings.items():
        if len(found) > 1:
            found.sort(key=lambda x: (x[0] is None, x[0] or 0))
            names = " and ".join(", ".join(repr(label) for _, label in found).rsplit(", ", 1))
            raise data_error(
                source,
                found[1][0],
                f"labels {names} {'both' if len(found) == 2 else 'all'} spell the number {number:g} and would become "
                f"{len(found)} different classes; write each class one way throughout "
                f"the training and validation files (e.g. {found[0][1]!r})",
            )


class LabelSet:
    """An ordered set of class names; a label's id is its position.

    labels = LabelSet.from_examples(train, "train.tsv")   # sorted
    labels.index(example.label, "dev.tsv", example.line)  # -> int
    """

    def __init__(self, names):
        names = tuple(names)
        if not names:
            raise TaskDataError("a LabelSet needs at least one label")
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"label names must be str, got {names!r}")
        if len(set(names)) != len(names):
            raise TaskDataError(f"label names must be distinct, got {names!r}")
        self._names = names
        self._ids = {name: i for i, name in enumerate(names)}

    @classmethod
    def from_examples(cls, examples, source):
        """The sorted set of labels of (training) examples; `source` (e.g.
        the file path) names them in errors."""
        first_line = {}
        for example in examples:
            if not isinstance(example.label, str):
                raise data_error(
                    source,
                    example.line,
                    f"label {example.label!r:.80} is not a class name; a label set is "
                    "built from classification examples that all have labels",
                )
            first_line.setdefault(example.label, example.line)
        if not first_line:
            raise data_error(source, None, "has no examples to build a label set from")
        _check_spellings(source, first_line)
        return cls(_sorted_labels(first_line))

    @property
    def names(self):
        return self._names

    def index(self, label, source, line):
        """The label's id; an unknown label -> TaskDataError at source:line."""
        try:
            return self._ids[label]
        except (KeyError, TypeError):
            number = _number(label) if isinstance(label, str) else None
            same = [n for n in self._names if number is not None and _number(n) == number]
            hint = f" (the training file writes this number {same[0]!r})" if same else ""
            raise data_error(
                source,
                line,
                f"label {label!r:.80} is not in the label set{hint}; valid labels: "
                f"{listing(self._names)}",
            ) from None

    def encode(self, examples, source):
        """Label ids of `examples` (read from `source`)."""
        return [self.index(e.label, source, e.line) for e in examples]

    def __len__(self):
        return len(self._names)

    def __iter__(self):
        return iter(self._names)

    def __contains__(self, label):
        return label in self._ids

    def __eq__(self, other):
        return isinstance(other, LabelSet) and self._names == other._names

    def __hash__(self):
        return hash(self._names)

    def __repr__(self):
        return f"LabelSet({list(self._names)!r})"
