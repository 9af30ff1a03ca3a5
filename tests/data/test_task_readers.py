"""Fine-tuning data readers (bertzoo.data.tasks): tiny files in every format."""

import json
import re

import pytest

from bertzoo.data.tasks import (
    GLUE_TASKS,
    LabelSet,
    QAExample,
    TaggedSentence,
    TaskDataError,
    TextExample,
    read_conll,
    read_glue,
    read_squad,
    read_table,
)

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

T = "\t"


@pytest.fixture(autouse=True)
def _seed():
    """Overrides tests/conftest.py's autouse Keras seeding / clear_session
    (about 0.25 s per test): these readers are pure Python."""
    yield


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def tsv(*rows):
    return "".join(T.join(row) + "\n" for row in rows)


def raises_at(path, line, phrase):
    """pytest.raises for a TaskDataError at path:line whose message has `phrase`."""
    return pytest.raises(TaskDataError, match=rf"^{re.escape(f'{path}:{line}: ')}.*{re.escape(phrase)}")


# ---------------------------------------------------------------- GLUE


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
        ["1", "702876", "702977", "Amrozi accused his brother .", "Referring to him as only \" the witness \" ."],
        ["0", "2108705", "2108831", "Yucaipa owned Dominick 's .", "Yucaipa bought Dominick 's in 1995 ."],
    )
    examples = read_glue(write(tmp_path, "train.tsv", text), "mrpc")
    assert examples == [
        TextExample(("Amrozi accused his brother .", 'Referring to him as only " the witness " .'), "1", 2),
        TextExample(("Yucaipa owned Dominick 's .", "Yucaipa bought Dominick 's in 1995 ."), "0", 3),
    ]


def mnli_row(index, s1, s2, label):
    return [index, "31193", "31193n", "government", "( ( x ) )", "( y )", "(ROOT x)", "(ROOT y)", s1, s2, label, label]


def test_mnli_label_order_and_rows(tmp_path):
    assert GLUE_TASKS["mnli"]["labels"] == ("contradiction", "entailment", "neutral")
    path = write(
        tmp_path,
        "train.tsv",
        tsv(
            MNLI_TRAIN_HEADER,
            mnli_row("0", "Conceptually cream skimming has two dimensions .", "Product and geography are what make it work .", "neutral"),
            mnli_row("1", "you know during the season", "You lose the things .", "entailment"),
        ),
    )
    examples = read_glue(path, "mnli")
    assert [e.texts for e in examples] == [
        ("Conceptually cream skimming has two dimensions .", "Product and geography are what make it work ."),
        ("you know during the season", "You lose the things ."),
    ]
    assert [e.label for e in examples] == ["neutral", "entailment"]
    assert [LabelSet(GLUE_TASKS["mnli"]["labels"]).index(e.label, path, e.line) for e in examples] == [2, 1]


def test_mnli_label_outside_label_set(tmp_path):
    path = write(
        tmp_path,
        "dev_matched.tsv",
        tsv(MNLI_TRAIN_HEADER, mnli_row("0", "a b", "c d", "neutral"), mnli_row("1", "a b", "c d", "-")),
    )
    with raises_at(path, 3, "label '-' is not in the label set; valid labels: 'contradiction', 'entailment', 'neutral'"):
        read_glue(path, "mnli")


def test_stsb_regression_floats(tmp_path):
    path = write(
        tmp_path,
        "dev.tsv",
        tsv(
            STSB_HEADER,
            ["0", "main-captions", "MSRvid", "2012test", "0000", "none", "none", "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", "5.000"],
            ["1", "main-captions", "MSRvid", "2012test", "0002", "none", "none", "A young child is riding a horse.", "A child is riding a horse.", "4.750"],
        ),
    )
    examples = read_glue(path, "stsb")
    assert examples == [
        TextExample(("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing."), 5.0, 2),
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
    qnli = write(tmp_path, "qnli.tsv", tsv(["index", "question", "sentence", "label"], ["0", "What?", "This.", "not_entailment"]))
    rte = write(tmp_path, "rte.tsv", tsv(["index", "sentence1", "sentence2", "label"], ["0", "A.", "B.", "entailment"]))
    qqp = write(
        tmp_path,
        "qqp.tsv",
        tsv(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], ["7", "15", "16", "How?", "Why?", "0"]),
    )
    assert read_glue(qnli, "qnli") == [TextExample(("What?", "This."), "not_entailment", 2)]
    assert read_glue(rte, "rte") == [TextExample(("A.", "B."), "entailment", 2)]
    assert read_glue(qqp, "qqp") == [TextExample(("How?", "Why?"), "0", 2)]
    with raises_at(rte, 2, "label 'entailment' is not in the label set; valid labels: '0', '1'"):
        read_glue(rte, "wnli")  # same columns, labels "0"/"1"


def test_unknown_glue_task(tmp_path):
    path = write(tmp_path, "train.tsv", tsv(["sentence", "label"], ["a", "1"]))
    with pytest.raises(TaskDataError, match=r"unknown GLUE task 'cola'; valid tasks: 'sst2', 'mrpc', 'mnli'"):
        read_glue(path, "cola")


def test_glue_missing_text_column(tmp_path):
    path = write(tmp_path, "train.tsv", tsv(["text", "label"], ["a", "1"]))
    with raises_at(path, 1, "the header row has no column 'sentence'; its columns are: 'text', 'label'"):
        read_glue(path, "sst2")


# ---------------------------------------------------------------- read_table


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
    assert read_table(path, "a") == [TextExample(("first",), None, 1), TextExample(('x "y"',), None, 3)]


def test_headerless_tsv_with_indexes(tmp_path):
    path = write(tmp_path, "cola.txt", tsv(["gj04", "1", "", "Our friends won't buy this."], ["gj04", "0", "*", "They drank the pub."]))
    assert read_table(path, [3], 1, format="tsv") == [
        TextExample(("Our friends won't buy this.",), "1", 1),
        TextExample(("They drank the pub.",), "0", 2),
    ]
    with raises_at(path, 1, "column index 4 is out of range: the row has 4 fields"):
        read_table(path, [4], 1, format="tsv")


def test_unknown_suffix_lists_formats(tmp_path):
    path = write(tmp_path, "data.txt", "a\n")
    with pytest.raises(TaskDataError, match=r"data\.txt: cannot tell the format .*'tsv', 'csv', 'jsonl'"):
        read_table(path, "a")


def test_missing_column_lists_columns(tmp_path):
    path = write(tmp_path, "train.csv", "sentence,label\nhello,1\n")
    with raises_at(path, 1, "the header row has no column 'text'; its columns are: 'sentence', 'label'"):
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
    path = write(tmp_path, "train.tsv", tsv(["sentence", "label"], ["ok", "1"], ["has\ta tab", "0"]))
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


def test_glue_header_only_file(tmp_path):
    path = write(tmp_path, "dev.tsv", tsv(STSB_HEADER))
    with raises_at(path, 2, "has no examples"):
        read_glue(path, "stsb")


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


# ---------------------------------------------------------------- LabelSet


def test_label_set_sorting_and_index(tmp_path):
    numeric = [TextExample(("t",), label, i + 1) for i, label in enumerate(["10", "2", "1", "2"])]
    labels = LabelSet.from_examples(numeric, "train.tsv")
    assert labels.names == ("1", "2", "10")
    assert len(labels) == 3
    assert labels.index("10", "dev.tsv", 4) == 2
    words = [TextExample(("t",), label, 1) for label in ["neutral", "contradiction", "entailment"]]
    assert LabelSet.from_examples(words, "train.tsv").names == ("contradiction", "entailment", "neutral")
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


# ---------------------------------------------------------------- CoNLL


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
    assert read_conll(path) == [TaggedSentence(["EU", "rejects"], None, 1), TaggedSentence(["Peter"], None, 5)]


def test_conll_bad_tag(tmp_path):
    path = write(tmp_path, "eng.train", "EU B-ORG\nrejects O\n\nPeter B-\n")
    with raises_at(path, 4, "tag 'B-' is not a BIO tag; valid tags are 'O', 'B-<type>' and 'I-<type>'"):
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


# ---------------------------------------------------------------- SQuAD


CONTEXT = "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy."


def squad(qas, version="1.1"):
    return {"version": version, "data": [{"title": "Normans", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}


def write_json(tmp_path, name, value):
    return write(tmp_path, name, json.dumps(value, indent=2))


def id_line(path, qid):
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if f'"id": "{qid}"' in line)


def test_squad_v1(tmp_path):
    qas = [
        {
            "answers": [{"answer_start": 82, "text": "Normandy"}, {"answer_start": 82, "text": "Normandy"}],
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
        {"question": "Who?", "id": "a1", "answers": [{"text": "The Normans", "answer_start": 0}], "is_impossible": False},
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
    assert (a2.id, a2.question, a2.answers, a2.is_impossible) == ("a2", "Who gave their name to France?", [], True)
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
        {"question": "Where?", "id": "off-by-one", "answers": [{"text": "Normandy", "answer_start": 81}]},
    ]
    path = write_json(tmp_path, "train.json", squad(qas))
    line = id_line(path, "off-by-one")
    with raises_at(path, line, "question 'off-by-one': answer 'Normandy' is not in its context at character 81"):
        read_squad(path)


def test_squad_missing_key(tmp_path):
    qas = [{"id": "q1", "question": "Who?", "answers": [{"text": "Normans"}]}]
    path = write_json(tmp_path, "train.json", squad(qas))
    with raises_at(path, id_line(path, "q1"), "an answer of question 'q1' has no 'answer_start' key"):
        read_squad(path)
    qas = [{"id": "q2", "answers": []}]
    path = write_json(tmp_path, "train2.json", squad(qas))
    with raises_at(path, id_line(path, "q2"), "question 'q2' has no 'question' key"):
        read_squad(path)


def test_squad_answerable_without_answers(tmp_path):
    path = write_json(tmp_path, "train.json", squad([{"id": "q1", "question": "Who?", "answers": []}]))
    with raises_at(path, id_line(path, "q1"), "question 'q1' has no answers but is not marked"):
        read_squad(path)


def test_squad_duplicate_ids(tmp_path):
    qa = {"id": "same", "question": "Who?", "answers": [{"text": "Normans", "answer_start": 4}]}
    path = write_json(tmp_path, "train.json", squad([qa, dict(qa)]))
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if '"id": "same"' in line]
    with raises_at(path, lines[1], f"question id 'same' is used more than once (first at line {lines[0]})"):
        read_squad(path)


def test_squad_no_questions(tmp_path):
    path = write_json(tmp_path, "empty.json", {"version": "1.1", "data": []})
    with raises_at(path, 1, "has no examples"):
        read_squad(path)
    path = write_json(tmp_path, "nodata.json", {"version": "1.1"})
    with raises_at(path, 1, "has no 'data' key"):
        read_squad(path)


def test_glue_task_table():
    """The layout recipes rely on: GLUE_TASKS[name]["labels"] etc."""
    assert set(GLUE_TASKS) >= {"sst2", "mrpc", "mnli", "stsb", "qnli", "rte", "qqp"}
    assert GLUE_TASKS["mrpc"]["text_columns"] == ("#1 String", "#2 String")
    assert GLUE_TASKS["mrpc"]["label_column"] == "Quality"
    assert GLUE_TASKS["qnli"]["labels"] == ("entailment", "not_entailment")
    assert GLUE_TASKS["stsb"]["labels"] is None and GLUE_TASKS["stsb"]["task"] == "regression"
    assert LabelSet(GLUE_TASKS["sst2"]["labels"]).names == ("0", "1")


def test_squad_impossible_with_answers(tmp_path):
    qas = [{"id": "q1", "question": "Who?", "is_impossible": True, "answers": [{"text": "Normans", "answer_start": 4}]}]
    path = write_json(tmp_path, "train.json", squad(qas, "v2.0"))
    with raises_at(path, id_line(path, "q1"), "question 'q1' is marked is_impossible but lists 1 answer(s)"):
        read_squad(path)
