"""TSV / CSV / JSON Lines tables (bertzoo.data.readers.tables)."""

import pytest

from bertzoo.data.readers import TaskDataError, TextExample, read_table
from tests.data.readers.helpers import raises_at, tsv, write

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


def test_csv_with_quoted_commas_and_newline(tmp_path):
    path = write(
        tmp_path,
        "reviews.csv",
        'text,label,other\n"funny, warm",pos,x\n"line one\nline two",neg,y\n"she said ""hi""",pos,z\n',
    )
    assert read_table(path, "text", "label") == [
        TextExample(("funny, warm",), "pos", 2),
        TextExample(("line one\nline two",), "neg", 3),
        TextExample(('she said "hi"',), "pos", 5),
    ]


def test_jsonl_classification_and_regression(tmp_path):
    path = write(
        tmp_path,
        "pairs.jsonl",
        '{"a": "first", "b": "second", "label": 1}\n\n{"a": "x \\"y\\"", "b": "z", "label": "0"}\n',
    )
    assert read_table(path, ["a", "b"], "label") == [
        TextExample(("first", "second"), "1", 1),
        TextExample(('x "y"', "z"), "0", 3),
    ]
    assert read_table(path, ["a", "b"], "label", task="regression") == [
        TextExample(("first", "second"), 1.0, 1),
        TextExample(('x "y"', "z"), 0.0, 3),
    ]
    assert read_table(path, "a") == [
        TextExample(("first",), None, 1),
        TextExample(('x "y"',), None, 3),
    ]


def test_headerless_tsv_with_indexes(tmp_path):
    path = write(
        tmp_path,
        "cola.txt",
        tsv(
            ["gj04", "1", "", "Our friends won't buy this."],
            ["gj04", "0", "*", "They drank the pub."],
        ),
    )
    assert read_table(path, [3], 1, format="tsv") == [
        TextExample(("Our friends won't buy this.",), "1", 1),
        TextExample(("They drank the pub.",), "0", 2),
    ]
    with raises_at(path, 1, "column index 4 is out of range: the row has 4 fields"):
        read_table(path, [4], 1, format="tsv")


def test_unknown_suffix_lists_formats(tmp_path):
    path = write(tmp_path, "data.txt", "a\n")
    with pytest.raises(
        TaskDataError, match=r"data\.txt: cannot tell the format .*'tsv', 'csv', 'jsonl'"
    ):
        read_table(path, "a")


def test_missing_column_lists_columns(tmp_path):
    path = write(tmp_path, "train.csv", "sentence,label\nhello,1\n")
    with raises_at(
        path, 1, "the header row has no column 'text'; its columns are: 'sentence', 'label'"
    ):
        read_table(path, "text", "label")
    with raises_at(path, 1, "no column 'gold'"):
        read_table(path, "sentence", "gold")


def test_jsonl_missing_key(tmp_path):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "label": "x"}\n{"txt": "b", "label": "y"}\n')
    with raises_at(path, 2, "the record has no key 'text'; its keys are: 'txt', 'label'"):
        read_table(path, "text", "label")


def test_jsonl_malformed_line(tmp_path):
    path = write(tmp_path, "d.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "b", "label": }\n')
    with raises_at(path, 3, "malformed JSON (Expecting value at column 24)"):
        read_table(path, "text", "label")


def test_jsonl_non_object_line(tmp_path):
    path = write(tmp_path, "d.jsonl", '{"text": "a"}\n["b"]\n')
    with raises_at(path, 2, "expected a JSON object ({...}), got a JSON array"):
        read_table(path, "text")


def test_wrong_number_of_fields(tmp_path):
    path = write(
        tmp_path, "train.tsv", tsv(["sentence", "label"], ["ok", "1"], ["has\ta tab", "0"])
    )
    with raises_at(path, 3, "the row has 3 fields but the header row (line 1) has 2"):
        read_table(path, "sentence", "label")


def test_empty_text_cell(tmp_path):
    path = write(tmp_path, "train.csv", "premise,hypothesis,label\nA.,B.,x\nC., ,y\n")
    with raises_at(path, 3, "column 'hypothesis' is empty"):
        read_table(path, ["premise", "hypothesis"], "label")


def test_regression_label_not_a_number(tmp_path):
    path = write(tmp_path, "scores.csv", "text,score\na,0.5\nb,n/a\n")
    with raises_at(path, 3, "label 'n/a' in column 'score' is not a finite number"):
        read_table(path, "text", "score", task="regression")


def test_malformed_csv_quoting(tmp_path):
    path = write(tmp_path, "bad.csv", 'text,label\n"ok",1\n"broken"x,0\n')
    with raises_at(path, 3, "malformed CSV row"):
        read_table(path, "text", "label")


@pytest.mark.parametrize(
    "name, text, line, phrase",
    [
        ("empty.tsv", "", 1, "has no examples (it is empty)"),
        ("header.tsv", "sentence\tlabel\n", 2, "has no examples (only a header row"),
        ("blank.jsonl", "\n\n", 1, "has no examples"),
        ("header.csv", "text,label\n\n", 3, "has no examples"),
    ],
)
def test_no_examples(tmp_path, name, text, line, phrase):
    path = write(tmp_path, name, text)
    with raises_at(path, line, phrase):
        read_table(path, "sentence" if "tsv" in name else "text", "label")
