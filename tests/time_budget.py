"""The test suite's time guard: each test file's worker time (setup, call
and teardown of its tests, module fixtures included) is summed in every
run, printed as a table at its end, and, in CI (`CI` set) or with
`--time-guard`, checked against a budget. A file over its budget fails the
run with one line naming it, so that a test file whose time jumps is seen
the day it happens, not when CI outgrows its limit.

A file may take longer only if it is listed in `OVER_BUDGET`, with its own
limit and the reason it needs it: this is the one place for those."""

import os
from collections import defaultdict

BUDGET_S = 120.0

# path (from the repository root) -> (its limit in seconds, why it needs more
# than BUDGET_S). Keep each limit about 1.5x the file's measured CI time.
OVER_BUDGET: dict[str, tuple[float, str]] = {}

# How many of the slowest files the closing table shows.
TABLE_ROWS = 40


def budget(path):
    return OVER_BUDGET.get(path, (BUDGET_S, ""))[0]


class TimeGuard:
    """A pytest plugin (registered by tests/conftest.py on the controlling
    process only: under pytest-xdist the workers' reports reach it there)."""

    def __init__(self, enforce):
        self.enforce = enforce
        self.seconds = defaultdict(float)
        self.tests = defaultdict(int)

    def pytest_runtest_logreport(self, report):
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] += report.duration
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.tests[path] += 1

    def over_budget(self):
        return sorted(
            (path, seconds, budget(path))
            for path, seconds in self.seconds.items()
            if seconds > budget(path)
        )

    def pytest_terminal_summary(self, terminalreporter):
        if not self.seconds:
            return
        write = terminalreporter.write_line
        total = sum(self.seconds.values())
        terminalreporter.section("time per test file (worker seconds)")
        write(f"{'seconds':>8} {'budget':>7} {'tests':>5}  file")
        rows = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        for path, seconds in rows[:TABLE_ROWS]:
            write(f"{seconds:8.1f} {budget(path):7.0f} {self.tests[path]:5d}  {path}")
        rest = rows[TABLE_ROWS:]
        if rest:
            write(f"{sum(s for _, s in rest):8.1f} {'':7} {'':5}  {len(rest)} more files")
        write(f"{total:8.1f} {'':7} {sum(self.tests.values()):5d}  in all")
        for path, seconds, limit in self.over_budget():
            flag = "FAILED" if self.enforce else "warning"
            write(
                f"time guard {flag}: {path} took {seconds:.0f} s of worker time, over its "
                f"budget of {limit:.0f} s: make it faster, or list it with its reason in "
                "tests/time_budget.py (OVER_BUDGET)",
                red=self.enforce,
                yellow=not self.enforce,
            )

    def pytest_sessionfinish(self, session, exitstatus):
        if self.enforce and exitstatus == 0 and self.over_budget():
            session.exitstatus = 1


def enforced(config):
    """In CI, or when asked; never at full size (`--full`), whose trials are
    meant to take their time."""
    if config.getoption("--full"):
        return False
    return bool(config.getoption("--time-guard") or os.environ.get("CI"))
