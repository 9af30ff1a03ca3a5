"""GLUE TSV files (bertzoo.data.readers.glue)."""

import pytest

from bertzoo.data.readers import GLUE_TASKS, LabelSet, TaskDataError, TextExample, read_glue
from tests.data.readers.helpers import raises_at, tsv, write

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


MNLI_TRAIN_HEADER = (
    "index promptID pairID genre sentence1_binary_parse sentence2_binary_parse "
    "sentence1_parse sentence2_parse sentence1 sentence2 label1 gold_label"
).split()
STSB_HEADER = (
    "index genre filename year old_index source1 source2 sentence1 sentence2 score"
).split()
MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]


def test_sst2_train_quotes_are_plain_text(tmp_path):
    path = write(
        tmp_path,
        "train.tsv",
        tsv(
            ["sentence", "label"],
            ['it \'s a "charming" and often affecting journey . ', "1"],
            ['"unflinchingly bleak', "0"],  # an unbalanced quote must not swallow lines
            ["the best film", "1"],
        ),
    )
    examples = read_glue(path, "sst2")
    assert examples == [
        TextExample(('it \'s a "charming" and often affecting journey . ',), "1", 2),
        TextExample(('"unflinchingly bleak',), "0", 3),
        TextExample(("the best film",), "1", 4),
    ]


def test_sst2_test_file_has_no_labels(tmp_path):
    path = write(tmp_path, "test.tsv", tsv(["index", "sentence"], ["0", "uneasy mishmash"]))
    assert read_glue(path, "SST-2") == [TextExample(("uneasy mishmash",), None, 2)]


def test_mrpc_with_byte_order_mark(tmp_path):
    text = "\ufeff" + tsv(
        MRPC_HEADER,
        [
            "1",
            "702876",
            "702977",
            "Amrozi accused his brother .",
            'Referring to him as only " the witness " .',
        ],
        [
            "0",
            "2108705",
            "2108831",
            "Yucaipa owned Dominick 's .",
            "Yucaipa bought Dominick 's in 1995 .",
        ],
    )
    examples = read_glue(write(tmp_path, "train.tsv", text), "mrpc")
    assert examples == [
        TextExample(
            ("Amrozi accused his brother .", 'Referring to him as only " the witness " .'), "1", 2
        ),
        TextExample(
            ("Yucaipa owned Dominick 's .", "Yucaipa bought Dominick 's in 1995 ."), "0", 3
        ),
    ]


def mnli_row(index, s1, s2, label):
    return [
        index,
        "31193",
        "31193n",
        "government",
        "( ( x ) )",
        "( y )",
        "(ROOT x)",
        "(ROOT y)",
        s1,
        s2,
        label,
        label,
    ]


def test_mnli_label_order_and_rows(tmp_path):
    assert GLUE_TASKS["mnli"]["labels"] == ("contradiction", "entailment", "neutral")
    path = write(
        tmp_path,
        "train.tsv",
        tsv(
            MNLI_TRAIN_HEADER,
            mnli_row(
                "0",
                "Conceptually cream skimming has two dimensions .",
                "Product and geography are what make it work .",
                "neutral",
            ),
            mnli_row("1", "you know during the season", "You lose the things .", "entailment"),
        ),
    )
    examples = read_glue(path, "mnli")
    assert [e.texts for e in examples] == [
        (
            "Conceptually cream skimming has two dimensions .",
            "Product and geography are what make it work .",
        ),
        ("you know during the season", "You lose the things ."),
    ]
    assert [e.label for e in examples] == ["neutral", "entailment"]
    assert [
        LabelSet(GLUE_TASKS["mnli"]["labels"]).index(e.label, path, e.line) for e in examples
    ] == [2, 1]


def test_mnli_label_outside_label_set(tmp_path):
    path = write(
        tmp_path,
        "dev_matched.tsv",
        tsv(
            MNLI_TRAIN_HEADER,
            mnli_row("0", "a b", "c d", "neutral"),
            mnli_row("1", "a b", "c d", "-"),
        ),
    )
    with raises_at(
        path,
        3,
        "label '-' is not in the label set; valid labels: 'contradiction', 'entailment', 'neutral'",
    ):
        read_glue(path, "mnli")


def test_stsb_regression_floats(tmp_path):
    path = write(
        tmp_path,
        "dev.tsv",
        tsv(
            STSB_HEADER,
            [
                "0",
                "main-captions",
                "MSRvid",
                "2012test",
                "0000",
                "none",
                "none",
                "A man with a hard hat is dancing.",
                "A man wearing a hard hat is dancing.",
                "5.000",
            ],
            [
                "1",
                "main-captions",
                "MSRvid",
                "2012test",
                "0002",
                "none",
                "none",
                "A young child is riding a horse.",
                "A child is riding a horse.",
                "4.750",
            ],
        ),
    )
    examples = read_glue(path, "stsb")
    assert examples == [
        TextExample(
            ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing."), 5.0, 2
        ),
        TextExample(("A young child is riding a horse.", "A child is riding a horse."), 4.75, 3),
    ]
    assert all(type(e.label) is float for e in examples)


def test_stsb_bad_scores(tmp_path):
    row = ["0", "g", "f", "y", "0", "n", "n", "a", "b"]
    path = write(tmp_path, "bad.tsv", tsv(STSB_HEADER, row + ["1.5"], row + ["high"]))
    with raises_at(path, 3, "label 'high' in column 'score' is not a finite number"):
        read_glue(path, "stsb")
    path = write(tmp_path, "range.tsv", tsv(STSB_HEADER, row + ["5.5"]))
    with raises_at(path, 2, "score 5.5 is outside the valid range 0..5"):
        read_glue(path, "stsb")


def test_other_glue_tasks(tmp_path):
    qnli = write(
        tmp_path,
        "qnli.tsv",
        tsv(["index", "question", "sentence", "label"], ["0", "What?", "This.", "not_entailment"]),
    )
    rte = write(
        tmp_path,
        "rte.tsv",
        tsv(["index", "sentence1", "sentence2", "label"], ["0", "A.", "B.", "entailment"]),
    )
    qqp = write(
        tmp_path,
        "qqp.tsv",
        tsv(
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["7", "15", "16", "How?", "Why?", "0"],
        ),
    )
    assert read_glue(qnli, "qnli") == [TextExample(("What?", "This."), "not_entailment", 2)]
    assert read_glue(rte, "rte") == [TextExample(("A.", "B."), "entailment", 2)]
    assert read_glue(qqp, "qqp") == [TextExample(("How?", "Why?"), "0", 2)]
    with raises_at(rte, 2, "label 'entailment' is not in the label set; valid labels: '0', '1'"):
        read_glue(rte, "wnli")  # same columns, labels "0"/"1"


def test_unknown_glue_task(tmp_path):
    path = write(tmp_path, "train.tsv", tsv(["sentence", "label"], ["a", "1"]))
    with pytest.raises(
        TaskDataError, match=r"unknown GLUE task 'cola'; valid tasks: 'sst2', 'mrpc', 'mnli'"
    ):
        read_glue(path, "cola")


def test_glue_missing_text_column(tmp_path):
    path = write(tmp_path, "train.tsv", tsv(["text", "label"], ["a", "1"]))
    with raises_at(
        path, 1, "the header row has no column 'sentence'; its columns are: 'text', 'label'"
    ):
        read_glue(path, "sst2")


def test_glue_header_only_file(tmp_path):
    path = write(tmp_path, "dev.tsv", tsv(STSB_HEADER))
    with raises_at(path, 2, "has no examples"):
        read_glue(path, "stsb")


def test_glue_task_table():
    """The layout recipes rely on: GLUE_TASKS[name]["labels"] etc."""
    assert set(GLUE_TASKS) >= {"sst2", "mrpc", "mnli", "stsb", "qnli", "rte", "qqp"}
    assert GLUE_TASKS["mrpc"]["text_columns"] == ("#1 String", "#2 String")
    assert GLUE_TASKS["mrpc"]["label_column"] == "Quality"
    assert GLUE_TASKS["qnli"]["labels"] == ("entailment", "not_entailment")
    assert GLUE_TASKS["stsb"]["labels"] is None and GLUE_TASKS["stsb"]["task"] == "regression"
    assert LabelSet(GLUE_TASKS["sst2"]["labels"]).names == ("0", "1")
