"""CoNLL BIO tagging files (bertzoo.tasks.tagging.conll)."""

import pytest

from bertzoo.data.readers import TaggedSentence
from bertzoo.tasks.tagging.conll import read_conll
from tests.data.readers.helpers import raises_at, write

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
"""


def test_conll_sentences(tmp_path):
    path = write(tmp_path, "eng.train", CONLL)
    assert read_conll(path) == [
        TaggedSentence(["EU", "rejects", "German"], ["B-ORG", "O", "I-MISC"], 3),
        TaggedSentence(["Peter", "Blackburn"], ["B-PER", "I-PER"], 7),
        TaggedSentence(["BRUSSELS"], ["B-LOC"], 11),
    ]
    assert read_conll(path, tag_column=3)[1].tags == ["B-PER", "I-PER"]
    assert read_conll(path, tag_column=2)[0].tags == ["B-NP", "B-VP", "B-NP"]


def test_conll_untagged(tmp_path):
    path = write(tmp_path, "predict.txt", "EU\nrejects\n\n\nPeter\n")
    assert read_conll(path) == [
        TaggedSentence(["EU", "rejects"], None, 1),
        TaggedSentence(["Peter"], None, 5),
    ]


def test_conll_bad_tag(tmp_path):
    path = write(tmp_path, "eng.train", "EU B-ORG\nrejects O\n\nPeter B-\n")
    with raises_at(
        path, 4, "tag 'B-' is not a BIO tag; valid tags are 'O', 'B-<type>' and 'I-<type>'"
    ):
        read_conll(path)
    path = write(tmp_path, "bioes.train", "EU S-ORG\n")
    with raises_at(path, 1, "tag 'S-ORG' is not a BIO tag"):
        read_conll(path)


def test_conll_too_few_columns(tmp_path):
    path = write(tmp_path, "eng.train", "EU NNP B-ORG\nrejects\n")
    with raises_at(path, 2, "expected at least 2 whitespace-separated columns"):
        read_conll(path)
    path = write(tmp_path, "three.train", "EU NNP B-ORG\n")
    with raises_at(path, 1, "expected at least 4 whitespace-separated columns"):
        read_conll(path, tag_column=3)


def test_conll_only_docstart(tmp_path):
    path = write(tmp_path, "empty.conll", "-DOCSTART- -X- O O\n\n")
    with raises_at(path, 3, "has no examples"):
        read_conll(path)
