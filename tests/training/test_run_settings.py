"""The plumbing shared by the runs (`bertzoo.training.runs`): flags built
from the settings' field metadata, the settings record and its comparison on
resume, JSON conversion."""

import argparse
import dataclasses
import json

import pytest

from bertzoo.training import runs
from bertzoo.training.distill import DistillConfig
from bertzoo.training.finetune import FinetuneConfig
from bertzoo.training.pretrain import PretrainConfig

# Run settings, flags and resume comparison: no model.
pytestmark = pytest.mark.backend_independent

CONFIGS = (PretrainConfig, FinetuneConfig, DistillConfig)


@dataclasses.dataclass
class Toy(runs.RunConfig):
    steps: int = runs.setting(100, "training steps", group="training")
    rate: float | None = runs.setting(None, "learning rate", group="training")
    phases: tuple = runs.setting((1, 2), "lengths", parse=runs.comma_ints, flag="--lengths")
    mode: str = runs.setting("a", "the mode", choices=("a", "b"))
    jit: bool = runs.setting(True, "compile")
    output: str = runs.setting("out", "run directory", compared=False)
    verbose: int = runs.verbose_setting(1)


def _parser(cls):
    return runs.add_config_flags(argparse.ArgumentParser(), cls)


def _actions(parser):
    return {a.dest: a for a in parser._actions if a.dest != "help"}


@pytest.mark.parametrize("cls", CONFIGS + (Toy,), ids=lambda c: c.__name__)
def test_every_setting_has_a_flag_with_its_default_and_help(cls):
    actions = _actions(_parser(cls))
    fields = dataclasses.fields(cls)
    assert sorted(actions) == sorted(f.name for f in fields)
    for field in fields:
        action = actions[field.name]
        # argparse formats help with %: a plain % in the text is escaped.
        assert action.help.replace("%%", "%") == field.metadata["help"] and action.help
        assert runs.flag_name(field) in action.option_strings
        if field.metadata["piped_default"] is None:
            assert action.default == field.default, field.name
        if field.metadata["choices"] is not None:
            assert tuple(action.choices) == tuple(field.metadata["choices"])
    # The help renders (an unescaped % would raise here), percent signs intact.
    rendered = _parser(cls).format_help()
    assert "%%" not in rendered
    for field in fields:
        for word in field.metadata["help"].split():
            if "%" in word and "%(" not in word:
                assert word in rendered, (field.name, word)
    # Flags left out parse to the defaults (verbose: by stdout, tested below).
    config = runs.config_from_args(cls, _parser(cls).parse_args([]))
    assert dataclasses.replace(config, verbose=cls().verbose) == cls()


def test_flags_parse_types_choices_names_and_booleans(capsys):
    args = _parser(Toy).parse_args(
        ["--steps", "7", "--rate", "0.5", "--lengths", "3, 4", "--no-jit", "--mode", "b"]
    )
    config = runs.config_from_args(Toy, args)
    assert (config.steps, config.rate, config.phases, config.jit, config.mode) == (
        7,
        0.5,
        (3, 4),
        False,
        "b",
    )
    for bad in (["--mode", "c"], ["--lengths", "3,x"], ["--steps", "1.5"]):
        with pytest.raises(SystemExit):
            _parser(Toy).parse_args(bad)
    assert "expected comma-separated integers, got '3,x'" in capsys.readouterr().err
    help_text = _parser(Toy).format_help()
    assert "--lengths" in help_text and "training steps" in help_text and "--no-jit" in help_text


def test_recipe_flag_names_kept():
    names = {o for a in _parser(PretrainConfig)._actions for o in a.option_strings}
    assert {"--max-predictions", "--gradient-accumulation", "--seq-len", "--no-resume"} <= names
    names = {o for a in _parser(FinetuneConfig)._actions for o in a.option_strings}
    assert {"--text-column", "--format", "--glue-task", "--overwrite"} <= names
    args = _parser(DistillConfig).parse_args(["--layer-map", "2,4", "--text-column", "a"])
    assert args.layer_map == (1, 3) and args.text_columns == ("a",)


def test_verbose_defaults_to_one_line_per_epoch_when_stdout_is_not_a_terminal(monkeypatch):
    for tty, expected in ((True, 1), (False, 2)):
        monkeypatch.setattr("sys.stdout.isatty", lambda tty=tty: tty)
        assert runs.config_from_args(Toy, _parser(Toy).parse_args([])).verbose == expected
        # An explicit --verbose always wins.
        assert runs.config_from_args(Toy, _parser(Toy).parse_args(["--verbose", "0"])).verbose == 0


def test_settings_record_and_comparison(tmp_path):
    config = Toy(phases=(5,))
    assert config.changed_settings(tmp_path) is None  # nothing recorded
    config.record(tmp_path)
    recorded = json.loads((tmp_path / runs.RUN_SETTINGS_FILE).read_text())
    assert recorded == config.to_json() and recorded["phases"] == [5]
    assert Toy.from_json(recorded) == config
    assert config.changed_settings(tmp_path) == {}
    # Settings marked compared=False may change; the others are reported.
    assert (
        dataclasses.replace(config, output="elsewhere", verbose=0).changed_settings(tmp_path) == {}
    )
    changed = dataclasses.replace(config, steps=5, phases=(6,)).changed_settings(tmp_path)
    assert changed == {"phases": ([5], [6]), "steps": (100, 5)}
    # A record without the settings that are not compared (as the fine-tune
    # run wrote them) matches. A setting the record lacks (a run recorded
    # before the setting existed) counts as its default: no change at the
    # default, a change otherwise.
    (tmp_path / runs.RUN_SETTINGS_FILE).write_text(
        json.dumps({k: v for k, v in recorded.items() if k in Toy.compared_settings()})
    )
    assert config.changed_settings(tmp_path) == {}
    del recorded["mode"]
    (tmp_path / runs.RUN_SETTINGS_FILE).write_text(json.dumps(recorded))
    assert config.changed_settings(tmp_path) == {}
    other = dataclasses.replace(config, mode="b")
    assert other.changed_settings(tmp_path) == {"mode": ("a", "b")}


def test_a_path_spelt_relative_or_absolute_is_the_same_setting(tmp_path, monkeypatch):
    """A run started with `--prepared /abs/prepared` resumes when the
    command says `--prepared prepared` from the directory holding it (it
    was refused as changed settings); another directory is a change."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prepared").mkdir()
    (tmp_path / "other").mkdir()
    output = tmp_path / "run"
    output.mkdir()
    first = PretrainConfig(prepared=str(tmp_path / "prepared"), corpus=(str(tmp_path / "a.txt"),))
    first.record(output)
    relative = dataclasses.replace(first, prepared="prepared", corpus=("./a.txt",))
    assert relative.changed_settings(output) == {}
    moved = dataclasses.replace(first, prepared="other")
    assert moved.changed_settings(output) == {"prepared": (str(tmp_path / "prepared"), "other")}
    # Fine-tuning: its task files and the model it starts from.
    FinetuneConfig(train=str(tmp_path / "t.csv"), init=str(tmp_path / "prepared")).record(output)
    assert FinetuneConfig(train="t.csv", init="prepared").changed_settings(output) == {}


def test_compared_settings_of_the_runs():
    assert set(PretrainConfig.compared_settings()).isdisjoint(
        {"output", "resume", "checkpoint_every", "keep_checkpoints", "log_every", "verbose", "tpu"}
    )
    # The execution path (XLA or not), as for fine-tuning below: a run
    # recorded under the earlier default (XLA on) resumes under today's.
    assert "jit_compile" not in PretrainConfig.compared_settings()
    assert PretrainConfig().jit_compile is None
    assert "learning_rate" in PretrainConfig.compared_settings()
    assert set(FinetuneConfig().to_json()) - set(FinetuneConfig.compared_settings()) == {
        "verbose",
        "export",
        "overwrite",
        "resume",
        # The execution path, not the numbers: a resumed run may switch it.
        "jit_compile",
        # What --batch-size auto plans for; the batch it picks is compared.
        "device_memory",
    }
    assert "device_memory" not in PretrainConfig.compared_settings()
    assert "batching" in FinetuneConfig.compared_settings()
    assert (
        "mixed_float16" not in DistillConfig.__dataclass_fields__["precision"].metadata["choices"]
    )


def test_builtin_corpus_written_once(tmp_path):
    path = runs.write_builtin_corpus(tmp_path / "data" / runs.CORPUS_FILE)
    text = path.read_text(encoding="utf-8")
    assert text.count("\n\n") > 10  # documents separated by blank lines
    path.write_text("kept\n", encoding="utf-8")
    assert runs.write_builtin_corpus(path).read_text(encoding="utf-8") == "kept\n"


def test_held_out_documents_are_a_seeded_share():
    documents = [[f"doc {i}"] for i in range(20)]
    train, held = runs.split_documents(documents, 0.1, seed=3)
    assert len(held) == 2 and len(train) == 18 and sorted(train + held) == sorted(documents)
    assert (train, held) == runs.split_documents(documents, 0.1, seed=3)
    assert runs.split_documents(documents[:1], 0.5, seed=0) == (documents[:1], [])
    assert runs.split_documents(documents, 0.0, seed=0) == (documents, [])
