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
# than BUDGET_S). The limits were set (2026-12-07) from a TensorFlow pass under
# coverage on a loaded machine, 1.5-2.5x slower than CI; files that took under 45 s
# in that day's clean-clone CI are not listed. Lower the limits as files get faster.
OVER_BUDGET: dict[str, tuple[float, str]] = {
    "tests/test_finetune_recipe.py": (
        1500.0,
        "every task kind's whole fine-tuning run (4 kinds, shared by the learning and export checks), LoRA, bf16, resume, RoBERTa and ModernBERT runs",
    ),
    "tests/test_default_runs.py": (
        700.0,
        "the README's default runs: pre-training bert_tiny (700 steps), MiniLM fine-tuned, then distilled",
    ),
    "tests/test_distill_recipe.py": (
        500.0,
        "whole distillation runs: TinyBERT task, general and DistilBERT methods, an interrupted run resumed",
    ),
    "tests/test_pretrain_recipe.py": (
        480.0,
        "whole pre-training runs, among them a kill -9 of the recipe in a subprocess and its resume",
    ),
    "tests/reliability/test_preemption.py": (
        520.0,
        "SIGTERM at random steps of each recipe: every signal restarts a whole run",
    ),
    "tests/reliability/test_faults.py": (
        300.0,
        "kill -9 at random moments of every kind of write, each in a fresh worker process",
    ),
    "tests/reliability/test_runs.py": (
        400.0,
        "locks and NaN guards checked on whole runs of each recipe (50 tests)",
    ),
    "tests/training/test_distribute.py": (
        380.0,
        "multi-worker and mirrored strategies run whole pre-trainings in several processes",
    ),
    "tests/models/test_backbone.py": (
        350.0,
        "builds every preset's architecture at full size to check its exact parameter count",
    ),
    "tests/models/test_strings.py": (
        350.0,
        "fit, evaluate and predict on strings for every task model, on real checkpoints",
    ),
    "tests/tasks/test_one_segment.py": (
        300.0,
        "whole fine-tuning and distillation runs of one-segment (RoBERTa-style) models",
    ),
    "tests/reliability/test_publish_race.py": (
        280.0,
        "readers racing writer processes that publish presets and tokenizers",
    ),
    "tests/test_readme.py": (
        270.0,
        "every README snippet and command runs as written in a fresh interpreter",
    ),
    "tests/test_pretrain_prepared.py": (
        240.0,
        "whole pre-training runs from prepared corpora, resumed mid-shard",
    ),
    "tests/tokenizers/test_fidelity.py": (
        220.0,
        "reference ids of every tokenizer configuration on generated messy strings",
    ),
    "tests/test_compat.py": (
        250.0,
        "each recipe's run written by bertzoo 0.1.0, resumed and finished (under JAX too)",
    ),
    "tests/test_keras_docs.py": (
        200.0,
        "docs/keras.md's snippets as one script on the real MiniLM checkpoint, fit included",
    ),
    "tests/models/test_int8_litert.py": (
        160.0,
        "int8 LiteRT conversion of real task models and their quality checks",
    ),
    "tests/test_batching.py": (
        150.0,
        "predictions over many batch shapes, compiled and traced",
    ),
    "tests/tokenizers/test_fairseq.py": (
        150.0,
        "the XLM-R tokenizer against Hugging Face's ids on the generated fuzz strings",
    ),
    "tests/test_mutations.py": (
        150.0,
        "eight planted bugs, each followed by a run of the parity tests",
    ),
    "tests/distill/test_distillers.py": (
        150.0,
        "each distiller trains a student for a few steps, one in a subprocess",
    ),
    "tests/reliability/test_fine_tuning_inputs.py": (
        140.0,
        "whole fine-tuning runs on hostile input files",
    ),
    "tests/test_embedder_int8.py": (
        140.0,
        "int8 conversion of the real MiniLM embedder and its cosine goals",
    ),
    "tests/training/test_checkpoint.py": (
        140.0,
        "checkpoint and resume of training runs, one in a subprocess",
    ),
    "tests/test_export.py": (
        140.0,
        "SavedModel, ONNX and LiteRT exports, each checked against the Keras model",
    ),
}

# How many of the slowest files the closing table shows.
TABLE_ROWS = 40


def budget(path):
    return OVER_BUDGET.get(path, (BUDGET_S, ""))[0]


def file_of(nodeid):
    """The test file (from the repository root) of a pytest node id."""
    return nodeid.split("::", 1)[0]


def longest_first(items):
    """The collected tests, files with the larger budgets first (a stable
    sort: each file's tests stay together, in their order). pytest-xdist's
    `--dist loadfile` hands files to the workers in this order, so the long
    ones start early instead of ending a pass on one busy core."""
    return sorted(items, key=lambda item: -budget(file_of(item.nodeid)))


class TimeGuard:
    """A pytest plugin (registered by tests/conftest.py on the controlling
    process only: under pytest-xdist the workers' reports reach it there)."""

    def __init__(self, enforce):
        self.enforce = enforce
        self.seconds = defaultdict(float)
        self.tests = defaultdict(int)

    def pytest_runtest_logreport(self, report):
        path = file_of(report.nodeid)
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
    """In CI (both backends' passes, against the same limits), or when
    asked; never at full size (`--full`), whose trials are meant to take
    their time."""
    if config.getoption("--full"):
        return False
    return config.getoption("--time-guard") or bool(os.environ.get("CI"))
