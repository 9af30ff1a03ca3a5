"""The run lifecycle the three runs share (`bertzoo.training.lifecycle`):
lock and claim, resume or start over, the settings record, publish."""

import dataclasses
import json

import pytest

from bertzoo.errors import BertzooError, OutputError
from bertzoo.training import runs
from bertzoo.training.lifecycle import Run

# Files and settings only: no model.
pytestmark = pytest.mark.backend_independent


class ToyError(BertzooError, ValueError):
    pass


@dataclasses.dataclass
class Toy(runs.RunConfig):
    rate: float = runs.setting(0.1, "learning rate")
    output: str = runs.setting("out", "run directory", compared=False)
    resume: bool = runs.setting(True, "resume", compared=False)


def _checkpoint(output):
    (output / runs.CHECKPOINTS_DIR / "ckpt-000000002").mkdir(parents=True)


def test_open_locks_and_claims_once_and_refuses_a_users_file(tmp_path):
    (tmp_path / "mine.json").write_text("{}")
    with Run(Toy(output=str(tmp_path)), ToyError) as run:
        with pytest.raises(OutputError, match="was not written by bertzoo"):
            run.open(["metrics.json", "mine.json"])
    with Run(Toy(output=str(tmp_path)), ToyError) as run:
        run.open(["metrics.json"]).open(["not-claimed-again"])
        assert run.recorded == ["metrics.json"]
        with pytest.raises(OutputError, match="in use by another run"):
            Run(Toy(output=str(tmp_path)), ToyError).lock()


def test_resume_needs_a_checkpoint_and_the_same_settings(tmp_path):
    config = Toy(output=str(tmp_path))
    with Run(config, ToyError, start_over="this deletes the checkpoints") as run:
        run.open([runs.RUN_SETTINGS_FILE, runs.CHECKPOINTS_DIR])
        assert not run.resumes(run.any_checkpoint())  # none yet
        run.start_over(runs.CHECKPOINTS_DIR)
        assert json.loads((tmp_path / runs.RUN_SETTINGS_FILE).read_text())["rate"] == 0.1
        _checkpoint(tmp_path)
        assert run.resumes(run.any_checkpoint())
    other = Run(dataclasses.replace(config, rate=0.3), ToyError, start_over="this deletes x")
    with pytest.raises(ToyError) as refused:
        other.resumes(other.any_checkpoint())
    message = str(refused.value)
    assert "other settings (rate)" in message and "rate: 0.1 -> 0.3" in message
    assert "--no-resume" in message and "(this deletes x)" in message
    fresh = Run(dataclasses.replace(config, rate=0.3, resume=False), ToyError)
    assert not fresh.resumes(fresh.any_checkpoint())  # --no-resume: nothing is compared


def test_a_checkpoint_without_recorded_settings(tmp_path):
    _checkpoint(tmp_path)
    run = Run(Toy(output=str(tmp_path)), ToyError)
    with pytest.raises(ToyError, match="other settings \\(rate\\)"):
        run.resumes(run.any_checkpoint())
    assert run.resumes(run.any_checkpoint(), unrecorded_resumes=True)


def test_start_over_removes_only_bertzoos_files_and_publish_writes_json(tmp_path):
    with Run(Toy(output=str(tmp_path)), ToyError) as run:
        run.open([runs.CHECKPOINTS_DIR, runs.METRICS_FILE, runs.RUN_SETTINGS_FILE])
        _checkpoint(tmp_path)
        (tmp_path / "notes").mkdir()
        run.start_over(runs.CHECKPOINTS_DIR, "notes")
        assert not (tmp_path / runs.CHECKPOINTS_DIR).exists() and (tmp_path / "notes").is_dir()
        run.publish(runs.METRICS_FILE, {"a": 1})
        assert run.read(runs.METRICS_FILE) == {"a": 1} and run.read("absent.json") is None
        assert (tmp_path / runs.METRICS_FILE).read_text() == '{\n  "a": 1\n}\n'


def test_other_workers_record_nothing(tmp_path):
    run = Run(Toy(output=str(tmp_path / "out")), ToyError, chief=False)
    run.open([runs.RUN_SETTINGS_FILE]).start_over()
    assert not (tmp_path / "out").exists()


@dataclasses.dataclass
class CorpusToy(runs.RunConfig):
    input_files = ("corpus",)
    corpus: tuple = runs.setting((), "text files or glob patterns")
    output: str = runs.setting("out", "run directory", compared=False)
    resume: bool = runs.setting(True, "resume", compared=False)


def test_a_setting_of_several_files_fingerprints_each_file_its_patterns_name(tmp_path):
    """A corpus (a tuple of paths and glob patterns, as distillation's
    --corpus) is fingerprinted file by file: a resume refuses one that grew."""
    texts = tmp_path / "texts"
    texts.mkdir()
    for name in ("a.txt", "b.txt"):
        (texts / name).write_text("one sentence.\nanother one.\n", encoding="utf-8")
    config = CorpusToy(corpus=(str(texts / "*.txt"),), output=str(tmp_path / "run"))
    with Run(config, ToyError) as run:
        run.open([runs.RUN_SETTINGS_FILE, runs.RUN_INFO_FILE, runs.CHECKPOINTS_DIR])
        run.start_over()
        assert set(run.inputs) == {f"corpus:{texts / 'a.txt'}", f"corpus:{texts / 'b.txt'}"}
    Run(config, ToyError).check_inputs()  # unchanged: resumes
    with open(texts / "b.txt", "a", encoding="utf-8") as f:
        f.write("appended after the run started.\n")
    with pytest.raises(ToyError) as refused:
        Run(config, ToyError).check_inputs()
    message = str(refused.value)
    assert f"--corpus {texts / 'b.txt'} changed since the run" in message
    assert "grew from" in message and "--no-resume" in message
