"""The task-kind registry (bertzoo.tasks): lookups, errors for unknown kinds,
the list of valid kinds, and a toy kind declared here in one class."""

import numpy as np
import pytest

from bertzoo import tasks
from bertzoo.models.tasks import BertClassifier, BertSpanQA, BertTokenClassifier
from bertzoo.tasks import TaskData, TaskKind, UnknownTaskKindError

pytestmark = pytest.mark.backend_independent


class TwoChoice(TaskKind):
    """A toy kind: a text and two candidate answers -> which one is right."""

    name = "two_choice"
    description = "two choice (toy)"
    model_class = BertClassifier
    main_metric = "accuracy"
    file_formats = ("jsonl",)

    def load(self, settings, path, tokenizer, sequence_length, segment_ids, label_set=None):
        features = {"token_ids": np.zeros((2, sequence_length), "int32")}
        return TaskData(features, np.array([0, 1]), ["a", "b"], {}), None

    def evaluate(self, settings, predictions, data):
        predicted = np.argmax(np.asarray(predictions), axis=-1)
        return {"accuracy": float(np.mean(predicted == data.targets))}

    def serving_inputs(self, pairs):
        return ("text", "choice_a", "choice_b")


@pytest.fixture
def two_choice():
    kind = tasks.register(TwoChoice())
    yield kind
    tasks.unregister(kind.name)


def test_builtin_kinds():
    assert tasks.names() == ("classification", "regression", "tagging", "qa")
    assert tasks.get("classification").model_class is BertClassifier
    assert tasks.get("regression").model_class is BertClassifier
    assert tasks.get("tagging").model_class is BertTokenClassifier
    assert tasks.get("qa").model_class is BertSpanQA
    mains = {name: tasks.get(name).main_metric for name in tasks.names()}
    assert mains == {
        "classification": "accuracy",
        "regression": "pearson",
        "tagging": "f1",
        "qa": "f1",
    }
    assert tasks.get("qa").serving_inputs(pairs=False) == ("question", "context")
    assert tasks.get("classification").serving_inputs(pairs=True) == ("text", "text_pair")
    assert tasks.get("tagging").serving_inputs(pairs=False) == ("text",)


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(
        UnknownTaskKindError,
        match=r"unknown task kind 'ner'; valid kinds: "
        r"classification, regression, tagging, qa$",
    ):
        tasks.get("ner")
    with pytest.raises(ValueError, match="valid kinds"):  # also a ValueError
        tasks.get(None)


def test_registering_a_toy_kind(two_choice):
    assert tasks.get("two_choice") is two_choice
    assert tasks.names() == ("classification", "regression", "tagging", "qa", "two_choice")
    data, label_set = two_choice.load(None, "x.jsonl", None, 8, True)
    assert label_set is None and data.num_rows == 2
    assert two_choice.evaluate(None, [[0.9, 0.1], [0.8, 0.2]], data) == {"accuracy": 0.5}
    assert two_choice.serving_inputs(pairs=False) == ("text", "choice_a", "choice_b")
    assert two_choice.serving_settings(None, data) == {}
    with pytest.raises(ValueError, match="'two_choice' is already registered"):
        tasks.register(TwoChoice())
    with pytest.raises(UnknownTaskKindError, match="valid kinds: .*, qa, two_choice"):
        tasks.get("three_choice")


def test_unregistered_toy_kind_is_gone(two_choice):
    tasks.unregister("two_choice")
    assert "two_choice" not in tasks.names()
    with pytest.raises(UnknownTaskKindError):
        tasks.get("two_choice")


def test_register_needs_a_named_kind():
    with pytest.raises(TypeError, match="TaskKind instance with a name"):
        tasks.register(TaskKind())
    with pytest.raises(TypeError):
        tasks.register("classification")
