"""What the readers share (bertzoo.data.readers.common): file errors and LabelSet."""

import pytest

from bertzoo.data.readers import (
    LabelSet,
    TaskDataError,
    TextExample,
    read_glue,
    read_table,
)
from bertzoo.tasks.qa.squad import read_squad
from bertzoo.tasks.tagging.conll import read_conll
from tests.data.readers.helpers import raises_at, write

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


def test_non_utf8_bytes(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("sentence\tlabel\nfine\t1\ncaf".encode() + b"\xe9\t0\n")
    with raises_at(path, 3, "not valid UTF-8 (byte 0xe9"):
        read_glue(path, "sst2")
    conll = tmp_path / "latin1.conll"
    conll.write_bytes(b"a O\n\n\xffb O\n")
    with raises_at(conll, 3, "not valid UTF-8"):
        read_conll(conll)


def test_missing_file(tmp_path):
    with pytest.raises(TaskDataError, match=r"nope\.tsv: file not found"):
        read_table(tmp_path / "nope.tsv", "sentence")
    with pytest.raises(TaskDataError, match=r"nope\.json: file not found"):
        read_squad(tmp_path / "nope.json")


def test_label_set_sorting_and_index(tmp_path):
    numeric = [TextExample(("t",), label, i + 1) for i, label in enumerate(["10", "2", "1", "2"])]
    labels = LabelSet.from_examples(numeric, "train.tsv")
    assert labels.names == ("1", "2", "10")
    assert len(labels) == 3
    assert labels.index("10", "dev.tsv", 4) == 2
    words = [TextExample(("t",), label, 1) for label in ["neutral", "contradiction", "entailment"]]
    assert LabelSet.from_examples(words, "train.tsv").names == (
        "contradiction",
        "entailment",
        "neutral",
    )
    assert LabelSet(["b", "a"]).names == ("b", "a")


def test_validation_label_outside_training_labels(tmp_path):
    train = write(tmp_path, "train.csv", "text,label\na,pos\nb,neg\n")
    dev = write(tmp_path, "dev.csv", "text,label\nc,neg\nd,neutral\n")
    labels = LabelSet.from_examples(read_table(train, "text", "label"), train)
    examples = read_table(dev, "text", "label")
    assert labels.index(examples[0].label, dev, examples[0].line) == 0
    with raises_at(dev, 3, "label 'neutral' is not in the label set; valid labels: 'neg', 'pos'"):
        labels.encode(examples, dev)


def test_label_set_rejects_unlabelled_examples():
    with raises_at("test.tsv", 2, "label None is not a class name"):
        LabelSet.from_examples([TextExample(("a",), None, 2)], "test.tsv")
