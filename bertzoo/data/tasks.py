"""Fine-tuning data readers: sentence (pair) tables, GLUE, CoNLL tagging and
SQuAD question answering.

Pure Python (standard library only), so it can be imported and tested
without TensorFlow. Every reader returns plain dataclasses:

    read_table("train.tsv", ["sentence"], "label")   -> list[TextExample]
    read_glue("MNLI/dev_matched.tsv", "mnli")        -> list[TextExample]
    read_conll("eng.train")                          -> list[TaggedSentence]
    read_squad("train-v2.0.json")                    -> list[QAExample]

Every problem with a file is a `TaskDataError` whose message starts with
"path:line: " (1-based line number) and says what is wrong and what is
valid. Only problems with the whole file (missing file, unknown format)
carry no line number. Files must be UTF-8 (a leading byte-order mark is
ignored).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from bertzoo.errors import BertzooError

FORMATS = ("tsv", "csv", "jsonl")
TABLE_TASKS = ("classification", "regression")
_SUFFIX_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
_MAX_LISTED = 20  # how many valid labels / columns an error message lists


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


# --------------------------------------------------------------------------
# Shared helpers


def _error(path, line, message):
    where = f"{path}:{line}" if line is not None else f"{path}"
    return TaskDataError(f"{where}: {message}")


def _listing(items):
    """'a', 'b', 'c' (at most _MAX_LISTED, then '... and N more')."""
    items = [repr(i) for i in items]
    if len(items) > _MAX_LISTED:
        rest = len(items) - _MAX_LISTED
        items = items[:_MAX_LISTED] + [f"... and {rest} more"]
    return ", ".join(items)


def _read_text(path):
    """Whole file as str. Missing file or non-UTF-8 bytes -> TaskDataError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise _error(path, None, "file not found") from None
    except IsADirectoryError:
        raise _error(path, None, "is a directory, not a data file") from None
    except OSError as e:
        raise _error(path, None, f"cannot read the file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        raise _error(
            path,
            line,
            f"the file is not valid UTF-8 (byte 0x{data[e.start]:02x} at byte "
            f"column {column}); re-save the file as UTF-8",
        ) from None
    return text.removeprefix("\ufeff")


def _numbered_lines(text):
    """(1-based line number, line with its ending). Lines end at \\n, \\r\\n
    or \\r, as the csv module counts them."""
    return enumerate(io.StringIO(text, newline=""), start=1)


def _no_examples(path, text, what):
    """The 'has no examples' error, at the line after the file's last line."""
    if not text.strip():
        return _error(path, 1, "the file has no examples (it is empty)")
    last = sum(1 for _ in _numbered_lines(text))
    return _error(path, last + 1, f"the file has no examples ({what})")


# --------------------------------------------------------------------------
# Generic tables: TSV, CSV, JSON Lines


@dataclass(frozen=True)
class _Columns:
    text: tuple  # column names (str) or indexes (int)
    label: str | int | None
    by_index: bool

    @property
    def wanted(self):
        return self.text + (() if self.label is None else (self.label,))


def _column_spec(path, text_columns, label_column):
    columns = (text_columns,) if isinstance(text_columns, str | int) else tuple(text_columns)
    if not 1 <= len(columns) <= 2:
        raise _error(
            path,
            None,
            f"text_columns must name one or two columns (a sentence or a sentence "
            f"pair), got {len(columns)}: {columns!r}"
        )
    wanted = columns + (() if label_column is None else (label_column,))
    kinds = {_column_kind(c) for c in wanted}
    if len(kinds) > 1:
        raise _error(
            path,
            None,
            "columns must be all names (files with a header row) or all integer "
            f"indexes (header-less TSV/CSV), got {wanted!r}"
        )
    return _Columns(columns, label_column, by_index=kinds == {"index"})


def _column_kind(column):
    if isinstance(column, bool) or not isinstance(column, str | int):
        raise TypeError(f"a column is a name (str) or an index (int), got {column!r}")
    return "name" if isinstance(column, str) else "index"


def _column_name(column):
    return f"column {column!r}" if isinstance(column, str) else f"column {column}"


def _table_format(path, format):
    if format is None:
        format = _SUFFIX_FORMATS.get(path.suffix.lower())
        if format is None:
            raise _error(
                path,
                None,
                f"cannot tell the format from the suffix {path.suffix!r}; valid "
                f"suffixes are {_listing(_SUFFIX_FORMATS)} or pass format= one of "
                f"{_listing(FORMATS)}",
            )
    if format not in FORMATS:
        raise _error(path, None, f"unknown format {format!r}; valid formats: {_listing(FORMATS)}")
    return format


def _csv_records(path, text, fmt):
    """(line where the record starts, fields) for every non-blank record.
    TSV: tab-separated, no quoting at all (GLUE texts contain quotes).
    CSV: comma-separated with standard double-quote quoting."""
    source = io.StringIO(text, newline="")
    if fmt == "tsv":
        reader = csv.reader(source, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(source, strict=True)
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise _error(path, start, f"malformed {fmt.upper()} row ({e})") from None
        if fields:
            yield start, fields


def _check_width(path, line, fields, width, reference, fmt):
    if len(fields) == width:
        return
    hint = (
        "fields are separated by tabs, so a text must not contain a tab"
        if fmt == "tsv"
        else "quote fields that contain commas, e.g. \"a, b\""
    )
    raise _error(
        path,
        line,
        f"the row has {len(fields)} fields but {reference} has {width}; {hint}",
    )


def _resolve_names(path, line, header, columns, label_required):
    """{column name: field index} from the header row."""
    wanted = columns.text
    if columns.label is not None and (label_required or columns.label in header):
        wanted = columns.wanted
    index = {}
    for name in wanted:
        if name not in header:
            raise _error(
                path,
                line,
                f"the header row has no column {name!r}; its columns are: {_listing(header)}",
            )
        if header.count(name) > 1:
            raise _error(path, line, f"the header row has column {name!r} more than once")
        index[name] = header.index(name)
    return index


def _resolve_indexes(path, line, width, columns, label_required):
    """{column index: field index} for header-less rows of `width` fields."""
    index = {}
    for column in columns.wanted:
        if -width <= column < width:
            index[column] = column % width
        elif column == columns.label and not label_required:
            continue
        else:
            raise _error(
                path,
                line,
                f"column index {column} is out of range: the row has {width} fields "
                f"(valid indexes 0..{width - 1}, or -{width}..-1)",
            )
    return index


def _named_rows(path, records, columns, label_required, fmt):
    first = next(records, None)
    if first is None:
        return
    header_line, header = first[0], [h.strip() for h in first[1]]
    index = _resolve_names(path, header_line, header, columns, label_required)
    reference = f"the header row (line {header_line})"
    for line, fields in records:
        _check_width(path, line, fields, len(header), reference, fmt)
        yield line, {key: fields[i] for key, i in index.items()}


def _indexed_rows(path, records, columns, label_required, fmt):
    index = reference = width = None
    for line, fields in records:
        if index is None:
            width, reference = len(fields), f"the first row (line {line})"
            index = _resolve_indexes(path, line, width, columns, label_required)
        _check_width(path, line, fields, width, reference, fmt)
        yield line, {key: fields[i] for key, i in index.items()}


def _jsonl_objects(path, text):
    """(line, dict) for every non-blank line of a JSON Lines file."""
    for line, raw in _numbered_lines(text):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise _error(
                path,
                line,
                f"malformed JSON ({e.msg} at column {e.colno}); a JSON Lines file "
                "holds one complete JSON object per line",
            ) from None
        if not isinstance(value, dict):
            raise _error(
                path,
                line,
                f"expected a JSON object ({{...}}), got a JSON {_json_type(value)}; "
                "a JSON Lines file holds one JSON object per line",
            )
        yield line, value


def _json_type(value):
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _jsonl_rows(path, text, columns, label_required):
    if columns.by_index:
        raise _error(path, None, "JSON Lines records have keys, not column indexes; name the keys")
    has_label = None
    for line, record in _jsonl_objects(path, text):
        if has_label is None:  # decided by the first record when optional
            has_label = columns.label is not None and (label_required or columns.label in record)
        wanted = columns.wanted if has_label else columns.text
        for key in wanted:
            if key not in record:
                raise _error(
                    path,
                    line,
                    f"the record has no key {key!r}; its keys are: {_listing(record)}",
                )
        yield line, {key: record[key] for key in wanted}


def _text_value(path, line, column, value):
    if not isinstance(value, str):
        raise _error(
            path,
            line,
            f"{_column_name(column)} must be a text string, got JSON {_json_type(value)} {value!r}",
        )
    if not value.strip():
        raise _error(path, line, f"{_column_name(column)} is empty; every example needs a non-empty text")
    return value


def _class_label(path, line, column, value):
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise _error(
            path,
            line,
            f"label {value!r} in {_column_name(column)} is not a class name; "
            "classification labels are strings or integers",
        )
    if not value.strip():
        raise _error(path, line, f"the label in {_column_name(column)} is empty; every example needs a label")
    return value.strip()


def _number_label(path, line, column, value):
    number = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if number is None or not math.isfinite(number):
        raise _error(
            path,
            line,
            f"label {value!r} in {_column_name(column)} is not a finite number; "
            "regression labels are numbers such as 3.8",
        )
    return number


def _text_example(path, line, row, columns, task):
    texts = tuple(_text_value(path, line, c, row[c]) for c in columns.text)
    label = None
    if columns.label is not None and columns.label in row:
        parse = _number_label if task == "regression" else _class_label
        label = parse(path, line, columns.label, row[columns.label])
    return TextExample(texts, label, line)


def read_table(
    path,
    text_columns,
    label_column=None,
    format=None,
    task="classification",
    *,
    label_required=True,
):
    """Reads a sentence (pair) classification or regression table.

    Args:
        path: the file.
        text_columns: one or two column names (TSV/CSV with a header row,
            JSONL keys), or integer column indexes for header-less TSV/CSV.
        label_column: the label's column name / index, or None (no labels).
        format: "tsv", "csv" or "jsonl"; None infers it from the suffix
            (.tsv, .csv, .jsonl or .json).
        task: "classification" (labels are str; JSON integers become str)
            or "regression" (labels are float).
        label_required: False makes a missing label column mean "no labels"
            (labels None, as in GLUE test files) instead of an error. For
            JSONL the first record decides.

    Returns:
        list of TextExample in file order.

    Formats (TSV is read with quoting disabled: quotes are ordinary text):

        sentence<TAB>label              CSV (standard "..." quoting):
        a "fine" film<TAB>1             text,label
                                        "funny, warm",1
        JSONL (one object per line, blank lines skipped):
        {"text": "funny, warm", "label": "pos"}

    Empty texts, missing columns, rows with the wrong number of fields,
    non-numeric regression labels and malformed JSON are TaskDataErrors
    naming the file and line.
    """
    path = Path(path)
    columns = _column_spec(path, text_columns, label_column)
    if task not in TABLE_TASKS:
        raise _error(path, None, f"unknown task {task!r}; valid tasks: {_listing(TABLE_TASKS)}")
    fmt = _table_format(path, format)
    text = _read_text(path)
    if fmt == "jsonl":
        rows = _jsonl_rows(path, text, columns, label_required)
    else:
        records = _csv_records(path, text, fmt)
        make_rows = _indexed_rows if columns.by_index else _named_rows
        rows = make_rows(path, records, columns, label_required, fmt)
    examples = [_text_example(path, line, row, columns, task) for line, row in rows]
    if not examples:
        only = "only blank lines" if fmt == "jsonl" else "only a header row or blank lines"
        raise _no_examples(path, text, only)
    return examples


# --------------------------------------------------------------------------
# Label sets


def _sorted_labels(labels):
    """Numeric order when every label is an integer, else lexicographic."""
    try:
        return sorted(labels, key=lambda label: (int(label), label))
    except ValueError:
        return sorted(labels)


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
        labels = set()
        for example in examples:
            if not isinstance(example.label, str):
                raise _error(
                    source,
                    example.line,
                    f"label {example.label!r} is not a class name; a label set is "
                    "built from classification examples that all have labels",
                )
            labels.add(example.label)
        if not labels:
            raise _error(source, None, "has no examples to build a label set from")
        return cls(_sorted_labels(labels))

    @property
    def names(self):
        return self._names

    def index(self, label, source, line):
        """The label's id; an unknown label -> TaskDataError at source:line."""
        try:
            return self._ids[label]
        except (KeyError, TypeError):
            raise _error(
                source,
                line,
                f"label {label!r} is not in the label set; valid labels: {_listing(self._names)}",
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


# --------------------------------------------------------------------------
# GLUE


def _glue(text_columns, label_column, labels, label_range=None):
    return {
        "text_columns": text_columns,
        "label_column": label_column,
        "labels": labels,
        "task": "regression" if labels is None else "classification",
        "label_range": label_range,
    }


# name -> {"text_columns", "label_column", "labels" (class names in label-id
# order; None for regression), "task", "label_range" (regression only)}.
GLUE_TASKS = {
    "sst2": _glue(("sentence",), "label", ("0", "1")),
    "mrpc": _glue(("#1 String", "#2 String"), "Quality", ("0", "1")),
    # The order of the BERT reference run_classifier.py (MnliProcessor).
    # Hugging Face `datasets` uses entailment=0, neutral=1, contradiction=2.
    "mnli": _glue(
        ("sentence1", "sentence2"), "gold_label", ("contradiction", "entailment", "neutral")
    ),
    "stsb": _glue(("sentence1", "sentence2"), "score", None, (0.0, 5.0)),
    "qnli": _glue(("question", "sentence"), "label", ("entailment", "not_entailment")),
    "rte": _glue(("sentence1", "sentence2"), "label", ("entailment", "not_entailment")),
    "qqp": _glue(("question1", "question2"), "is_duplicate", ("0", "1")),
    "wnli": _glue(("sentence1", "sentence2"), "label", ("0", "1")),
}


def _glue_task(path, task):
    key = str(task).lower().replace("-", "").replace("_", "")
    if key not in GLUE_TASKS:
        raise _error(path, None, f"unknown GLUE task {task!r}; valid tasks: {_listing(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def _check_glue_labels(path, spec, examples):
    labels = None if spec["labels"] is None else LabelSet(spec["labels"])
    for example in examples:
        if example.label is None:
            continue
        if labels is not None:
            labels.index(example.label, path, example.line)
        elif spec["label_range"] is not None:
            low, high = spec["label_range"]
            if not low <= example.label <= high:
                raise _error(
                    path,
                    example.line,
                    f"score {example.label!r} is outside the valid range {low:g}..{high:g}",
                )


def read_glue(path, task):
    """Reads a GLUE task's TSV file (train, dev or test) -> list[TextExample].

    task: one of GLUE_TASKS ("sst2", "mrpc", "mnli", "stsb", "qnli", "rte",
    "qqp", "wnli"; case, "-" and "_" are ignored: "SST-2" works). Columns
    and labels (label ids follow the order given):

        sst2  sentence                     label         "0", "1"
        mrpc  #1 String, #2 String         Quality       "0", "1"
        mnli  sentence1, sentence2         gold_label    "contradiction",
                                                         "entailment", "neutral"
        stsb  sentence1, sentence2         score         float in 0..5
        qnli  question, sentence           label         "entailment",
                                                         "not_entailment"
        rte   sentence1, sentence2         label         (as qnli)
        qqp   question1, question2         is_duplicate  "0", "1"
        wnli  sentence1, sentence2         label         "0", "1"

    The MNLI order is that of the original BERT reference implementation
    (run_classifier.py, MnliProcessor.get_labels), so checkpoints
    fine-tuned there keep their meaning; it differs from the Hugging Face
    `datasets` GLUE order (entailment, neutral, contradiction).

    Example (SST-2 train.tsv, tab-separated, quotes are plain text):

        sentence<TAB>label
        it 's a "charming" journey<TAB>1

    Test files have no label column: their labels are None. A label outside
    the task's label set is a TaskDataError naming the file and line. CoLA's
    train/dev files have no header row; read them with
    read_table(path, [3], 1, format="tsv").
    """
    path = Path(path)
    spec = _glue_task(path, task)
    examples = read_table(
        path,
        spec["text_columns"],
        spec["label_column"],
        format="tsv",
        task=spec["task"],
        label_required=False,
    )
    _check_glue_labels(path, spec, examples)
    return examples


# --------------------------------------------------------------------------
# CoNLL token tagging


def _is_bio(tag):
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def _columns_needed(*indexes):
    return max(2, *(i + 1 if i >= 0 else -i for i in indexes))


def _conll_token(path, line, fields, token_column, tag_column):
    """(word, tag) of a tagged token line."""
    width = len(fields)
    in_range = all(-width <= i < width for i in (token_column, tag_column))
    if not in_range or token_column % width == tag_column % width:
        needed = _columns_needed(token_column, tag_column)
        raise _error(
            path,
            line,
            f"expected at least {needed} whitespace-separated columns (token in "
            f"column {token_column}, tag in column {tag_column}), found {width}: "
            f"{' '.join(fields)!r}",
        )
    tag = fields[tag_column]
    if not _is_bio(tag):
        raise _error(
            path,
            line,
            f"tag {tag!r} is not a BIO tag; valid tags are 'O', 'B-<type>' and "
            "'I-<type>' with a non-empty type, e.g. 'B-PER'",
        )
    return fields[token_column], tag


def _conll_tokens(path, text, token_column, tag_column):
    """(line, word, tag or None) per token; None marks a sentence break.
    The first token line decides: one column = untagged file."""
    tagged = None
    for line, raw in _numbered_lines(text):
        fields = raw.split()
        if not fields or fields[0].startswith("-DOCSTART-"):
            yield line, None, None
            continue
        if tagged is None:
            tagged, first = len(fields) > 1, line
        if tagged:
            yield line, *_conll_token(path, line, fields, token_column, tag_column)
        elif len(fields) == 1:
            yield line, fields[0], None
        else:
            raise _error(
                path,
                line,
                f"the line has {len(fields)} columns but the file's first token line "
                f"(line {first}) has one (untagged input); use one column on every "
                "line, or token and tag columns on every line",
            )


def read_conll(path, token_column=0, tag_column=-1):
    """Reads a CoNLL-style BIO tagging file -> list[TaggedSentence].

    One token per line, whitespace-separated columns, a blank line between
    sentences; "-DOCSTART-" lines are skipped. Tags must be "O", "B-<type>"
    or "I-<type>" (IOB1, as in CoNLL-2003, and IOB2 are both accepted). A
    file with one column per line is untagged input: tags are None (the
    one column is the token, whatever token_column says).

        -DOCSTART- -X- -X- O

        EU NNP B-NP B-ORG
        rejects VBZ B-VP O
        German JJ B-NP B-MISC

        Peter NNP B-NP B-PER
        Blackburn NNP I-NP I-PER

    Args:
        token_column / tag_column: column indexes (negative from the end);
            the defaults take the first and the last column.
    """
    path = Path(path)
    text = _read_text(path)
    sentences, current = [], None
    for line, word, tag in _conll_tokens(path, text, token_column, tag_column):
        if word is None:
            current = None
            continue
        if current is None:
            current = TaggedSentence([], None if tag is None else [], line)
            sentences.append(current)
        current.words.append(word)
        if tag is not None:
            current.tags.append(tag)
    if not sentences:
        raise _no_examples(path, text, "no token lines, only blank or -DOCSTART- lines")
    return sentences


# --------------------------------------------------------------------------
# SQuAD


class _IdLines:
    """Line numbers of the `"id": "<id>"` strings of a raw JSON text, found
    in one pass; the n-th occurrence of an id is asked for with nth=n."""

    _PATTERN = re.compile(r'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')

    def __init__(self, text):
        self._text = text
        self._lines = {}
        line, pos = 1, 0
        for match in self._PATTERN.finditer(text):
            line += text.count("\n", pos, match.start())
            pos = match.start()
            raw = match.group(1)
            if raw[0] == '"' and "\\" not in raw:
                key = raw[1:-1]  # fast path: no escapes to decode
            else:
                try:
                    key = str(json.loads(raw))
                except ValueError:
                    continue
            self._lines.setdefault(key, []).append(line)

    def line(self, qid, nth=0):
        lines = self._lines.get(str(qid), [])
        if nth < len(lines):
            return lines[nth]
        position = self._text.find(json.dumps(qid))
        return 1 if position < 0 else self._text.count("\n", 0, position) + 1


class _SquadReader:
    """Walks a parsed SQuAD file; `line` is the line of the last question
    seen, used for errors about keys above the question level."""

    def __init__(self, path, text):
        self.path, self.lines, self.line = path, _IdLines(text), 1
        self.seen = {}

    def fail(self, message, line=None):
        return _error(self.path, self.line if line is None else line, message)

    def get(self, obj, key, kind, where, default=...):
        if not isinstance(obj, dict):
            raise self.fail(f"{where} must be a JSON object, got a JSON {_json_type(obj)}")
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(f"{where} has no {key!r} key")
        value = obj[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            names = {str: "string", list: "array", int: "integer", bool: "boolean"}
            expected = names.get(kind, "string or integer")
            raise self.fail(f"{where}: {key!r} must be a JSON {expected}, got {value!r}")
        return value

    def examples(self, root):
        articles = self.get(root, "data", list, "the top-level object (SQuAD format)")
        for a, article in enumerate(articles):
            title = article.get("title") if isinstance(article, dict) else None
            where = f"article {a} ({title!r})"
            for p, paragraph in enumerate(self.get(article, "paragraphs", list, where)):
                yield from self.paragraph(paragraph, f"paragraph {p} of {where}")

    def paragraph(self, paragraph, where):
        qas = self.get(paragraph, "qas", list, where)
        self.locate(qas)
        context = self.get(paragraph, "context", str, where)
        for qa in qas:
            yield self.question(qa, context, where)

    def locate(self, qas):
        """Moves `line` to the first question of a paragraph, if it has an id."""
        if qas and isinstance(qas[0], dict) and isinstance(qas[0].get("id"), str | int):
            self.line = self.lines.line(qas[0]["id"], self.seen.get(str(qas[0]["id"]), 0))

    def question(self, qa, context, where):
        qid = self.get(qa, "id", str | int, f"a question in {where}")
        qid = str(qid)
        self.line = self.lines.line(qa["id"], self.seen.get(qid, 0))
        self.check_unique(qid)
        name = f"question {qid!r}"
        question = self.get(qa, "question", str, name)
        if not question.strip():
            raise self.fail(f"{name} has an empty 'question' text")
        impossible = self.get(qa, "is_impossible", bool, name, default=False)
        answers = self.answers(qa, context, name, impossible)
        return QAExample(qid, question, context, answers, impossible, self.line)

    def check_unique(self, qid):
        if qid in self.seen:
            raise self.fail(
                f"question id {qid!r} is used more than once (first at line "
                f"{self.lines.line(qid)}); every question needs a unique id"
            )
        self.seen[qid] = 1

    def answers(self, qa, context, name, impossible):
        if impossible:
            answers = self.get(qa, "answers", list, name, default=[])
            if answers:
                raise self.fail(
                    f"{name} is marked is_impossible but lists {len(answers)} answer(s); "
                    "impossible questions have \"answers\": [] (plausible answers go in "
                    "\"plausible_answers\")"
                )
            return []
        answers = self.get(qa, "answers", list, name)
        if not answers:
            raise self.fail(
                f"{name} has no answers but is not marked \"is_impossible\": true; "
                "answerable questions need at least one answer"
            )
        return [self.answer(a, context, name) for a in answers]

    def answer(self, answer, context, name):
        text = self.get(answer, "text", str, f"an answer of {name}")
        start = self.get(answer, "answer_start", int, f"an answer of {name}")
        if not text:
            raise self.fail(f"{name} has an answer with an empty 'text'")
        if start < 0 or context[start : start + len(text)] != text:
            found = context[max(start, 0) : max(start, 0) + len(text)]
            raise self.fail(
                f"{name}: answer {text!r} is not in its context at character {start} "
                f"(the context there reads {found!r}); answer_start must be the "
                "character offset of the answer text in the context"
            )
        return text, start


def read_squad(path):
    """Reads a SQuAD 1.1 or 2.0 JSON file -> list[QAExample].

        {"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [
          {"context": "The Normans were ...",
           "qas": [{"id": "56ddde6b9a695914005b9628",
                    "question": "Who were the Normans?",
                    "answers": [{"text": "The Normans", "answer_start": 0}],
                    "is_impossible": false}]}]}]}

    "is_impossible" (SQuAD 2.0) is optional and defaults to false; an
    impossible question has answers [] ("plausible_answers" are ignored).
    Every answer must be found at context[answer_start:answer_start +
    len(text)]. QAExample.line (and error lines) is the line of the
    question's "id"; official SQuAD files are one long line, so there all
    lines are 1. Duplicate ids, missing keys and answerable questions
    without answers are TaskDataErrors.
    """
    path = Path(path)
    text = _read_text(path)
    try:
        root = json.loads(text)
    except json.JSONDecodeError as e:
        raise _error(path, e.lineno, f"malformed JSON ({e.msg} at column {e.colno})") from None
    examples = list(_SquadReader(path, text).examples(root))
    if not examples:
        raise _error(path, 1, "the file has no examples (no questions in 'data')")
    return examples
