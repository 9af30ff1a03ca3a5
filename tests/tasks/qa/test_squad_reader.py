"""SQuAD JSON files (bertzoo.tasks.qa.squad)."""

import json

import pytest

from bertzoo.data.readers import QAExample
from bertzoo.tasks.qa.squad import read_squad
from tests.data.readers.helpers import raises_at, write

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


CONTEXT = (
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy."
)


def squad(qas, version="1.1"):
    return {
        "version": version,
        "data": [{"title": "Normans", "paragraphs": [{"context": CONTEXT, "qas": qas}]}],
    }


def write_json(tmp_path, name, value):
    return write(tmp_path, name, json.dumps(value, indent=2))


def id_line(path, qid):
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if f'"id": "{qid}"' in line)


def test_squad_v1(tmp_path):
    qas = [
        {
            "answers": [
                {"answer_start": 82, "text": "Normandy"},
                {"answer_start": 82, "text": "Normandy"},
            ],
            "question": "What did the Normans give their name to?",
            "id": "56ddde6b9a695914005b9628",
        },
        {
            "answers": [{"answer_start": 39, "text": "10th and 11th centuries"}],
            "question": "When?",
            "id": "56ddde6b9a695914005b9629",
        },
    ]
    path = write_json(tmp_path, "dev-v1.1.json", squad(qas))
    examples = read_squad(path)
    assert examples == [
        QAExample(
            "56ddde6b9a695914005b9628",
            "What did the Normans give their name to?",
            CONTEXT,
            [("Normandy", 82), ("Normandy", 82)],
            False,
            id_line(path, "56ddde6b9a695914005b9628"),
        ),
        QAExample(
            "56ddde6b9a695914005b9629",
            "When?",
            CONTEXT,
            [("10th and 11th centuries", 39)],
            False,
            id_line(path, "56ddde6b9a695914005b9629"),
        ),
    ]
    assert examples[0].line > 1 and examples[1].line > examples[0].line


def test_squad_v2_impossible(tmp_path):
    qas = [
        {
            "question": "Who?",
            "id": "a1",
            "answers": [{"text": "The Normans", "answer_start": 0}],
            "is_impossible": False,
        },
        {
            "plausible_answers": [{"text": "Normandy", "answer_start": 82}],
            "question": "Who gave their name to France?",
            "id": "a2",
            "answers": [],
            "is_impossible": True,
        },
    ]
    path = write_json(tmp_path, "dev-v2.0.json", squad(qas, "v2.0"))
    a1, a2 = read_squad(path)
    assert (a1.id, a1.answers, a1.is_impossible) == ("a1", [("The Normans", 0)], False)
    assert (a2.id, a2.question, a2.answers, a2.is_impossible) == (
        "a2",
        "Who gave their name to France?",
        [],
        True,
    )
    assert a2.line == id_line(path, "a2")


def test_squad_one_line_file(tmp_path):
    qas = [{"question": "Who?", "id": "q", "answers": [{"text": "Normans", "answer_start": 4}]}]
    path = write(tmp_path, "train.json", json.dumps(squad(qas)))
    assert read_squad(path)[0].line == 1


def test_squad_malformed_json(tmp_path):
    path = write(tmp_path, "bad.json", '{"version": "1.1",\n "data": [\n  {"title": "x",, }\n ]}\n')
    with raises_at(path, 3, "malformed JSON (Expecting property name enclosed in double quotes"):
        read_squad(path)


def test_squad_answer_not_in_context(tmp_path):
    qas = [
        {"question": "Who?", "id": "ok", "answers": [{"text": "Normans", "answer_start": 4}]},
        {
            "question": "Where?",
            "id": "off-by-one",
            "answers": [{"text": "Normandy", "answer_start": 81}],
        },
    ]
    path = write_json(tmp_path, "train.json", squad(qas))
    line = id_line(path, "off-by-one")
    with raises_at(
        path, line, "question 'off-by-one': answer 'Normandy' is not in its context at character 81"
    ):
        read_squad(path)


def test_squad_missing_key(tmp_path):
    qas = [{"id": "q1", "question": "Who?", "answers": [{"text": "Normans"}]}]
    path = write_json(tmp_path, "train.json", squad(qas))
    with raises_at(
        path, id_line(path, "q1"), "an answer of question 'q1' has no 'answer_start' key"
    ):
        read_squad(path)
    qas = [{"id": "q2", "answers": []}]
    path = write_json(tmp_path, "train2.json", squad(qas))
    with raises_at(path, id_line(path, "q2"), "question 'q2' has no 'question' key"):
        read_squad(path)


def test_squad_answerable_without_answers(tmp_path):
    path = write_json(
        tmp_path, "train.json", squad([{"id": "q1", "question": "Who?", "answers": []}])
    )
    with raises_at(path, id_line(path, "q1"), "question 'q1' has no answers but is not marked"):
        read_squad(path)


def test_squad_duplicate_ids(tmp_path):
    qa = {"id": "same", "question": "Who?", "answers": [{"text": "Normans", "answer_start": 4}]}
    path = write_json(tmp_path, "train.json", squad([qa, dict(qa)]))
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if '"id": "same"' in line]
    with raises_at(
        path, lines[1], f"question id 'same' is used more than once (first at line {lines[0]})"
    ):
        read_squad(path)


def test_squad_no_questions(tmp_path):
    path = write_json(tmp_path, "empty.json", {"version": "1.1", "data": []})
    with raises_at(path, 1, "has no examples"):
        read_squad(path)
    path = write_json(tmp_path, "nodata.json", {"version": "1.1"})
    with raises_at(path, 1, "has no 'data' key"):
        read_squad(path)


def test_squad_impossible_with_answers(tmp_path):
    qas = [
        {
            "id": "q1",
            "question": "Who?",
            "is_impossible": True,
            "answers": [{"text": "Normans", "answer_start": 4}],
        }
    ]
    path = write_json(tmp_path, "train.json", squad(qas, "v2.0"))
    with raises_at(
        path, id_line(path, "q1"), "question 'q1' is marked is_impossible but lists 1 answer(s)"
    ):
        read_squad(path)
