"""The measurements of a distillation report (`bertzoo.distill.evaluate`)."""

import numpy as np
import pytest

from bertzoo.distill.evaluate import accuracy, benchmark_inputs, measure_speedup
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


def test_accuracy_is_the_share_of_argmax_hits():
    logits = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert accuracy(_Fixed(logits), None, np.array([1, 0, 0, 0]), 2) == 0.75
