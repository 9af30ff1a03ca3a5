"""The suite's time guard (tests/time_budget.py): it sums each file's worker
time, and fails the run, naming the file, when one goes over its budget."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import time_budget

pytestmark = pytest.mark.backend_independent


def _report(nodeid, when, duration, skipped=False):
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration, skipped=skipped)


class _Terminal:
    def __init__(self):
        self.lines = []

    def section(self, title):
        self.lines.append(f"== {title}")

    def write_line(self, line, **_):
        self.lines.append(line)


def _guard(enforce, times):
    guard = time_budget.TimeGuard(enforce)
    for nodeid, seconds in times:
        for when, share in (("setup", 0.25), ("call", 0.5), ("teardown", 0.25)):
            guard.pytest_runtest_logreport(_report(nodeid, when, seconds * share))
    return guard


def test_a_file_over_its_budget_fails_the_run_and_is_named():
    slow = "tests/test_slow_thing.py"
    guard = _guard(True, [(f"{slow}::test_a", 100.0), (f"{slow}::test_b[x]", 30.0)])
    guard.pytest_runtest_logreport(_report("tests/test_fast.py::test_c", "call", 2.0))
    assert guard.seconds[slow] == pytest.approx(130.0)
    assert guard.tests[slow] == 2
    terminal = _Terminal()
    guard.pytest_terminal_summary(terminal)
    failures = [line for line in terminal.lines if line.startswith("time guard FAILED")]
    assert len(failures) == 1 and slow in failures[0] and "130 s" in failures[0], terminal.lines
    assert "tests/time_budget.py" in failures[0]
    session = SimpleNamespace(exitstatus=0)
    guard.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1


def test_within_budget_or_listed_with_a_reason_passes(monkeypatch):
    listed = "tests/test_listed.py"
    monkeypatch.setattr(time_budget, "OVER_BUDGET", {listed: (200.0, "a reason")})
    guard = _guard(True, [(f"{listed}::test_a", 150.0), ("tests/test_ok.py::test_b", 119.0)])
    assert guard.over_budget() == []
    session = SimpleNamespace(exitstatus=0)
    guard.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0
    guard = _guard(True, [(f"{listed}::test_a", 201.0)])
    assert [path for path, _, _ in guard.over_budget()] == [listed]


def test_outside_ci_it_only_warns():
    guard = _guard(False, [("tests/test_slow_thing.py::test_a", 500.0)])
    terminal = _Terminal()
    guard.pytest_terminal_summary(terminal)
    assert any(line.startswith("time guard warning") for line in terminal.lines)
    session = SimpleNamespace(exitstatus=0)
    guard.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0


def test_every_listed_file_exists_and_says_why():
    root = Path(__file__).resolve().parents[1]
    for path, (limit, reason) in time_budget.OVER_BUDGET.items():
        assert (root / path).is_file(), path
        assert limit > time_budget.BUDGET_S and len(reason) > 20, (path, limit, reason)


def test_files_with_longer_budgets_are_handed_out_first(monkeypatch):
    monkeypatch.setattr(
        time_budget,
        "OVER_BUDGET",
        {"tests/test_long.py": (900.0, "r"), "tests/test_longer.py": (1200.0, "r")},
    )
    nodeids = [
        "tests/a/test_one.py::test_x",
        "tests/test_long.py::test_b",
        "tests/test_long.py::test_a",
        "tests/a/test_one.py::test_y",
        "tests/test_longer.py::Class::test_c[1]",
        "tests/test_two.py::test_z",
    ]
    ordered = time_budget.longest_first([SimpleNamespace(nodeid=n) for n in nodeids])
    assert [item.nodeid for item in ordered] == [
        "tests/test_longer.py::Class::test_c[1]",
        "tests/test_long.py::test_b",
        "tests/test_long.py::test_a",
        "tests/a/test_one.py::test_x",
        "tests/a/test_one.py::test_y",
        "tests/test_two.py::test_z",
    ]


def test_ci_enforces_it_in_every_pass_but_not_at_full_size(monkeypatch):
    def config(full=False, guard=False):
        options = {"--full": full, "--time-guard": guard}
        return SimpleNamespace(getoption=options.__getitem__)

    monkeypatch.delenv("CI", raising=False)
    assert not time_budget.enforced(config())
    assert time_budget.enforced(config(guard=True))
    monkeypatch.setenv("CI", "true")
    assert time_budget.enforced(config())  # under any Keras backend
    assert not time_budget.enforced(config(full=True))


def test_a_missing_extra_fails_in_ci_and_skips_elsewhere(monkeypatch):
    """`tests.conftest.needs`: an optional package the tests use (the
    export extra's runtimes) is never skipped unseen in CI, which installs
    them all."""
    from tests.conftest import needs

    missing = "bertzoo_no_such_extra_package"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        needs(missing)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set but .* does not import"):
        needs(missing)
    assert needs("json").dumps([1]) == "[1]"
