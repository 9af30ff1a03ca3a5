"""The suite's numeric checks can fail: each of eight plausible bugs in the
numeric core, made in a copy of the package, makes a parity test fail
(tests/mutation_check.py)."""

import pytest

from tests.mutation_check import MUTATIONS, run

pytestmark = pytest.mark.backend_independent  # the copy's tests run under TensorFlow


@pytest.mark.slow
def test_every_planted_bug_fails_a_test(capsys):
    caught = run()
    assert sorted(caught) == sorted(MUTATIONS)
    survived = [bug for bug, test in caught.items() if test is None]
    assert not survived, f"bugs no test caught: {survived}"
