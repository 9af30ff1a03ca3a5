"""Pre-training warns, in one line, when its held-out evaluation is too
small to mean anything, and says how to get a bigger one."""

import logging
from types import SimpleNamespace

import pytest

from bertzoo.training.pretrain_data import MIN_EVAL_EXAMPLES, warn_small_eval

pytestmark = pytest.mark.backend_independent


def _warnings(caplog, examples, batch, eval_batches=8, eval_fraction=0.05):
    caplog.clear()
    config = SimpleNamespace(eval_batches=eval_batches, eval_fraction=eval_fraction)
    with caplog.at_level(logging.WARNING, logger="bertzoo"):
        warn_small_eval(config, examples, batch)
    return [r.getMessage() for r in caplog.records]


def test_few_held_out_examples_warn_how_to_get_more(caplog):
    assert MIN_EVAL_EXAMPLES == 100
    (line,) = _warnings(caplog, 16, 16, eval_fraction=0.2)
    assert line == (
        "The held-out evaluation has 16 examples, fewer than 100: its accuracy and loss are "
        "noisy; hold out more documents with --eval-fraction (now 0.2) or give more text."
    )
    # Enough held-out examples, but too few evaluation batches to see them.
    (line,) = _warnings(caplog, 500, 8, eval_batches=4)
    assert "has 32 examples" in line and line.endswith("raise --eval-batches (now 4).")


def test_a_big_enough_evaluation_is_quiet(caplog):
    assert _warnings(caplog, 100, 16) == []
    assert _warnings(caplog, 5000, 32) == []
