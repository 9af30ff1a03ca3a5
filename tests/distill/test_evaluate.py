"""The measurements of a distillation report (`bertzoo.distill.evaluate`)."""

import numpy as np
import pytest

from bertzoo import BertClassifier, batching
from bertzoo.distill.evaluate import (
    accuracy,
    benchmark_inputs,
    measure_speedup,
    measure_speedup_on_features,
)
from tests.conftest import tiny_backbone


def test_benchmark_inputs_and_speedup_of_a_smaller_student():
    teacher = tiny_backbone(num_layers=2)
    student = tiny_backbone(num_layers=1, hidden_dim=6)
    x = benchmark_inputs(teacher, 2, 8)
    assert x["token_ids"].shape == (2, 8) and x["padding_mask"].all()
    assert x["token_ids"].min() >= 5  # no special tokens
    speed = measure_speedup(teacher, student, batch_size=2, sequence_length=8, repeats=3)
    assert speed["teacher_seconds"] > 0 and speed["student_seconds"] > 0
    assert speed["speedup"] == pytest.approx(
        speed["teacher_seconds"] / speed["student_seconds"], rel=0.05
    )
    assert (speed["batch_size"], speed["sequence_length"], speed["repeats"]) == (2, 8, 3)


class _Fixed:
    def __init__(self, logits):
        self.logits = logits

    def predict(self, features, batch_size, verbose):
        return self.logits


@pytest.mark.backend_independent  # numpy on a stand-in model
def test_accuracy_is_the_share_of_argmax_hits():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert accuracy(_Fixed(logits), None, np.array([1, 0, 0, 0]), 2) == 0.75


def test_speedup_on_real_inputs_runs_every_row_at_its_own_length(monkeypatch):
    """The speed on held-out texts times whole prediction passes over every
    row, batched by length (not one padded batch): the rows and lengths the
    models saw are the features' own."""
    teacher = BertClassifier(tiny_backbone(num_layers=2), num_classes=3)
    student = BertClassifier(tiny_backbone(num_layers=1, hidden_dim=6), num_classes=3)
    rng = np.random.default_rng(0)
    lengths = np.array([3, 5, 16, 2, 9, 4, 7])  # real tokens per row, padded to 16
    mask = (np.arange(16)[None, :] < lengths[:, None]).astype("int32")
    features = {
        "token_ids": rng.integers(5, 40, (7, 16)).astype("int32") * mask,
        "segment_ids": np.zeros((7, 16), "int32"),
        "padding_mask": mask,
    }
    seen = []
    real = batching.compiled_forward

    def spy(model):
        forward = real(model)

        def counted(inputs):
            seen.append((id(model), inputs["token_ids"].shape))
            return forward(inputs)

        return counted

    monkeypatch.setattr(batching, "compiled_forward", spy)
    speed = measure_speedup_on_features(teacher, student, features, batch_size=3, repeats=2)
    assert (speed["texts"], speed["max_tokens"]) == (7, 16)
    assert speed["mean_tokens"] == pytest.approx(lengths.mean(), abs=0.05)
    assert speed["speedup"] == pytest.approx(
        speed["teacher_seconds"] / speed["student_seconds"], rel=0.05
    )
    # 1 warm-up + 2 timed passes per model, each over all 7 rows in batches
    # of at most 3, trimmed below the padded 16 where the rows are short.
    for model in (teacher, student):
        shapes = [shape for owner, shape in seen if owner == id(model)]
        assert sum(rows for rows, _ in shapes) == 3 * 7, shapes
        assert max(rows for rows, _ in shapes) <= 3
        assert min(length for _, length in shapes) < 16, shapes
