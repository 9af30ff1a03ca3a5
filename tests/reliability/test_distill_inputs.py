"""What a task-distillation run is given and what it prints (issues 30 and
31):

- its --train and --validation files are fingerprinted with the run
  (`run_info.json`, as fine-tuning's): a resumed run refuses a file changed
  since the run started, in one line, and leaves the output as it was;
- the recipe's final printout has the speed-up on the validation texts and
  the run's wall time, and Keras warns of no `shuffle=True` passed with a
  dataset."""

import json
import os
import shutil

import pytest

from tests.conftest import command_main
from tests.reliability import test_preemption
from tests.reliability.test_fine_tuning_inputs import _listing

files = test_preemption.files  # the fixtures: task files, a tiny preset
distill_args = test_preemption.distill_args  # a fine-tuned teacher, the flags

pytestmark = pytest.mark.backend_independent


@pytest.fixture(scope="module")
def finished(files, distill_args, tmp_path_factory):
    """A finished task distillation on copies of the task files."""
    d = tmp_path_factory.mktemp("distill_inputs")
    args = list(distill_args)
    for name in ("train", "validation"):
        shutil.copy(files / f"{name}.tsv", d / f"{name}.tsv")
        args[args.index(str(files / f"{name}.tsv"))] = str(d / f"{name}.tsv")
    args += ["--output", str(d / "run")]
    return d, args, command_main("recipes.distill", args)


@pytest.mark.slow
def test_the_printout_has_the_speedup_on_validation_and_the_wall_time(finished):
    d, _, (rc, out, err, caught) = finished
    assert rc == 0, err[-3000:]
    printed = json.loads(out[: out.rindex("}") + 1])
    report = json.loads((d / "run" / "report.json").read_text())
    assert printed["speedup_on_validation"] == report["speedup_on_validation"] > 0
    # The whole run's: at least the part the report times.
    assert printed["wall_seconds"] >= report["seconds"] > 0
    assert not [w for w in caught if "shuffle=True" in w], caught


def test_a_resumed_run_refuses_a_task_file_changed_since_it_started(finished):
    d, args, (rc, _, err, _) = finished
    assert rc == 0, err[-3000:]
    recorded = json.loads((d / "run" / "run_info.json").read_text())
    assert recorded["kind"] == "distill" and set(recorded["inputs"]) == {"train", "validation"}
    train = d / "train.tsv"
    assert recorded["inputs"]["train"]["size"] == train.stat().st_size
    listing = _listing(d / "run")

    # Touched only (copied again): the same bytes, not a change.
    os.utime(d / "validation.tsv", ns=(1, 1))
    before = train.stat().st_size
    rows = train.read_text().splitlines()[1:]
    with open(train, "a", encoding="utf-8") as f:
        f.write("".join(row + "\n" for row in rows))  # twice the examples
    rc, _, err, _ = command_main("recipes.distill", args)
    lines = [line for line in err.splitlines() if not test_preemption._noise(line)]
    assert rc != 0 and len(lines) == 1, err[-3000:]
    assert (
        f"--train {train} changed since the run in {d / 'run'} started (it grew from "
        f"{before:,} to {train.stat().st_size:,} bytes)"
    ) in lines[0], lines
    assert "--no-resume" in lines[0]
    assert _listing(d / "run") == listing  # nothing written, nothing removed

    # The validation file too.
    train.write_text("sentence\tlabel\n" + "".join(row + "\n" for row in rows))
    with open(d / "validation.tsv", "a", encoding="utf-8") as f:
        f.write("a good day good\t1\n")
    rc, _, err, _ = command_main("recipes.distill", args)
    assert rc != 0 and f"--validation {d / 'validation.tsv'} changed" in err, err[-3000:]
    assert _listing(d / "run") == listing
