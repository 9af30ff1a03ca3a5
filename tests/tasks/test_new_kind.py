"""A task kind added from outside the package, in one class, trains through
the fine-tune run unchanged: the run has no per-kind branches left.

The kind is what `bertzoo/tasks/multiple_choice.py` would hold: JSONL rows
{"question", "choices", "answer"}; each (question, choice) pair is scored by
a two-class `BertClassifier`; the predicted answer is the best-scored choice
of its question."""

import json
from pathlib import Path

import numpy as np
import pytest

from bertzoo import metrics, tasks
from bertzoo.models.tasks import BertClassifier, task_model_from_preset
from bertzoo.tasks import sentences
from bertzoo.tasks.base import TaskData, TaskKind
from bertzoo.training.finetune import FinetuneConfig, FinetuneError, run_finetuning
from tests.synthetic import FILLER, POSITIVE, majority_sentiment
from tests.test_finetune_recipe import task_files, tiny_preset

__all__ = ["task_files", "tiny_preset"]  # fixtures used here


class _Pair:
    def __init__(self, question, choice):
        self.texts = (question, choice)


class MultipleChoice(TaskKind):
    name = "multiple_choice"
    description = "multiple choice (JSONL: question, choices, answer)"
    model_class = BertClassifier
    main_metric = "accuracy"
    file_formats = ("jsonl",)

    def load(self, settings, path, tokenizer, sequence_length, segment_ids, label_set=None):
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        pairs = [_Pair(r["question"], c) for r in rows for c in r["choices"]]
        features = sentences.example_features(pairs, tokenizer, sequence_length, segment_ids)
        targets = np.array(
            [int(i == r["answer"]) for r in rows for i in range(len(r["choices"]))], "int32"
        )
        return TaskData(features, targets, rows, {}), None

    def evaluate(self, settings, predictions, data):
        logits = np.asarray(predictions)
        scores, picked, start = logits[:, 1] - logits[:, 0], [], 0
        for row in data.examples:
            n = len(row["choices"])
            picked.append(int(np.argmax(scores[start : start + n])))
            start += n
        return {"accuracy": metrics.accuracy([r["answer"] for r in data.examples], picked)}

    def build_model(self, settings, preset, label_set, **kwargs):
        return BertClassifier.from_preset(preset, num_classes=2, **kwargs)


def _rows(seed, n):
    """The right choice is a positive word, the others filler words."""
    rng = np.random.default_rng(seed)
    rows = []
    for text, _ in majority_sentiment(seed, n, "train"):
        choices = [str(rng.choice(POSITIVE)), *rng.choice(FILLER, 2, replace=False).tolist()]
        order = rng.permutation(3)
        rows.append(
            {
                "question": text,
                "choices": [choices[i] for i in order],
                "answer": int(np.argmax(order == 0)),
            }
        )
    return rows


@pytest.fixture
def multiple_choice():
    kind = tasks.register(MultipleChoice())
    yield kind
    tasks.unregister(kind.name)


@pytest.mark.slow
def test_a_kind_registered_from_outside_trains_through_the_fine_tune_run(
    tmp_path, tiny_preset, multiple_choice
):
    files = {}
    for split, seed, n in (("train", 0, 160), ("validation", 1, 60)):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in _rows(seed, n)))
    config = FinetuneConfig(
        task="multiple_choice",
        train=str(files["train"]),
        validation=str(files["validation"]),
        init=str(tiny_preset),
        output=str(tmp_path / "run"),
        learning_rate=3e-3,
        epochs=3,
        batch_size=16,
        sequence_length=32,
        dropout=0.0,
        verbose=0,
    )
    result = run_finetuning(config)
    # Chance is 1/3; the right choice's word alone gives it away.
    assert result["validation"]["accuracy"] >= 0.9, result
    assert result["task"] == "multiple_choice"
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["validation"] == result["validation"]
    model = task_model_from_preset(tmp_path / "run" / "best")
    assert isinstance(model, BertClassifier) and model.num_classes == 2


def test_an_unregistered_kind_is_refused_before_any_work(tmp_path, tiny_preset):
    config = FinetuneConfig(
        task="multiple_choice", train="x.jsonl", init=str(tiny_preset), output=str(tmp_path / "r")
    )
    with pytest.raises((FinetuneError, tasks.UnknownTaskKindError), match="classification"):
        run_finetuning(config)
    assert not (tmp_path / "r").exists()
