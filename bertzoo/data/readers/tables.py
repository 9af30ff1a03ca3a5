"""Sentence (pair) tables for classification and regression: TSV, CSV and
JSON Lines (`read_table`)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from bertzoo.data.readers.common import (
    TextExample,
    data_error,
    json_type,
    listing,
    no_examples_error,
    numbered_lines,
    read_text,
)

FORMATS = ("tsv", "csv", "jsonl")
# The longest field (a text, a label) a table may hold, in characters: far
# beyond any text a model reads (the runs cut each text to 64 characters
# per token of the sequence length before tokenizing it). A longer field is
# reported as such; in a CSV file it is most likely a quote left open.
MAX_FIELD_CHARS = 1 << 26
TABLE_TASKS = ("classification", "regression")
_SUFFIX_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


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
        raise data_error(
            path,
            None,
            f"text_columns must name one or two columns (a sentence or a sentence "
            f"pair), got {len(columns)}: {columns!r}",
        )
    wanted = columns + (() if label_column is None else (label_column,))
    kinds = {_column_kind(c) for c in wanted}
    if len(kinds) > 1:
        raise data_error(
            path,
            None,
            "columns must be all names (files with a header row) or all integer "
            f"indexes (header-less TSV/CSV), got {wanted!r}",
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
            raise data_error(
                path,
                None,
                f"cannot tell the format from the suffix {path.suffix!r}; valid "
                f"suffixes are {listing(_SUFFIX_FORMATS)} or pass format= one of "
                f"{listing(FORMATS)}",
            )
    if format not in FORMATS:
        raise data_error(
            path, None, f"unknown format {format!r}; valid formats: {listing(FORMATS)}"
        )
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
            if "field larger than field limit" in str(e):
                raise _long_field(path, start, fmt) from None
            raise data_error(path, start, f"malformed {fmt.upper()} row ({e})") from None
        if fields:
            yield start, fields


def _long_field(path, line, fmt):
    quote = (
        "; if the text is not that long, a quote is left open on this line or after it"
        if fmt == "csv"
        else ""
    )
    return data_error(
        path,
        line,
        f"a field is longer than {MAX_FIELD_CHARS:,} characters, the most a table field "
        f"may hold{quote}",
    )


@contextlib.contextmanager
def _field_limit():
    """The csv module's field limit (131,072 characters by default, for the
    whole process) raised to MAX_FIELD_CHARS while a table is read."""
    previous = csv.field_size_limit(MAX_FIELD_CHARS)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _check_width(path, line, fields, width, reference, fmt):
    if len(fields) == width:
        return
    hint = (
        "fields are separated by tabs, so a text must not contain a tab"
        if fmt == "tsv"
        else 'quote fields that contain commas, e.g. "a, b"'
    )
    raise data_error(
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
            raise data_error(
                path,
                line,
                f"the header row has no column {name!r}; its columns are: {listing(header)}",
            )
        if header.count(name) > 1:
            raise data_error(path, line, f"the header row has column {name!r} more than once")
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
            raise data_error(
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
    for line, raw in numbered_lines(text):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:
            raise data_error(
                path,
                line,
                f"malformed JSON ({e.msg} at column {e.colno}); a JSON Lines file "
                "holds one complete JSON object per line",
            ) from None
        if not isinstance(value, dict):
            raise data_error(
                path,
                line,
                f"expected a JSON object ({{...}}), got a JSON {json_type(value)}; "
                "a JSON Lines file holds one JSON object per line",
            )
        yield line, value


def _jsonl_rows(path, text, columns, label_required):
    if columns.by_index:
        raise data_error(
            path, None, "JSON Lines records have keys, not column indexes; name the keys"
        )
    has_label = None
    for line, record in _jsonl_objects(path, text):
        if has_label is None:  # decided by the first record when optional
            has_label = columns.label is not None and (label_required or columns.label in record)
        wanted = columns.wanted if has_label else columns.text
        for key in wanted:
            if key not in record:
                raise data_error(
                    path,
                    line,
                    f"the record has no key {key!r}; its keys are: {listing(record)}",
                )
        yield line, {key: record[key] for key in wanted}


def _text_value(path, line, column, value):
    if not isinstance(value, str):
        raise data_error(
            path,
            line,
            f"{_column_name(column)} must be a text string, got JSON {json_type(value)} "
            f"{value!r:.200}",
        )
    if len(value) > MAX_FIELD_CHARS:
        raise _long_field(path, line, "jsonl")
    if not value.strip():
        raise data_error(
            path, line, f"{_column_name(column)} is empty; every example needs a non-empty text"
        )
    return value


def _class_label(path, line, column, value):
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise data_error(
            path,
            line,
            f"label {value!r:.80} in {_column_name(column)} is not a class name; "
            "classification labels are strings or integers",
        )
    if not value.strip():
        raise data_error(
            path, line, f"the label in {_column_name(column)} is empty; every example needs a label"
        )
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
        raise data_error(
            path,
            line,
            f"label {value!r:.80} in {_column_name(column)} is not a finite number; "
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
        raise data_error(path, None, f"unknown task {task!r}; valid tasks: {listing(TABLE_TASKS)}")
    fmt = _table_format(path, format)
    text = read_text(path)
    if fmt == "jsonl":
        rows = _jsonl_rows(path, text, columns, label_required)
    else:
        records = _csv_records(path, text, fmt)
        make_rows = _indexed_rows if columns.by_index else _named_rows
        rows = make_rows(path, records, columns, label_required, fmt)
    with _field_limit():
        examples = [_text_example(path, line, row, columns, task) for line, row in rows]
    if not examples:
        only = "only blank lines" if fmt == "jsonl" else "only a header row or blank lines"
        raise no_examples_error(path, text, only)
    return examples
