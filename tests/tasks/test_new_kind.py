"""The worked example of a new task kind: everything the kind is, its
settings with their flag included, lives in one module, and it trains
through the fine-tune run unchanged (the run has no per-kind branches).

The module below is what `bertzoo/tasks/multiple_choice.py` would hold:
JSONL rows {"question", "choices", "answer"}; each (question, choice) pair
is scored by a two-class `BertClassifier`; the predicted answer is the
best-scored choice of its question. Its own setting, `max_choices`, becomes
the `--max-choices` flag of the fine-tune recipe. The test writes only that
module (in a temporary folder), imports it, and runs it end to end from
the command line's flags; nothing else in the package changes. A module in
`bertzoo/tasks/` is imported with the package, so its settings are in
`FinetuneConfig` itself; one imported later is composed into it here with
`compose_config`."""

import ast
import dataclasses
import importlib.util
import json
import sys
import textwrap

import numpy as np
import pytest

from bertzoo import tasks
from bertzoo.models.tasks import BertClassifier, task_model_from_preset
from bertzoo.training.finetune import FinetuneConfig, FinetuneError, run_finetuning
from bertzoo.training.kind_settings import compose_config
from bertzoo.training.runs import RUN_SETTINGS_FILE, config_from_args, recipe_parser
from tests.synthetic import FILLER, POSITIVE, majority_sentiment
from tests.test_finetune_recipe import task_files, tiny_preset

__all__ = ["task_files", "tiny_preset"]  # fixtures used here

KIND_MODULE = textwrap.dedent(
    '''
    """Multiple choice: JSONL rows {"question", "choices", "answer"} in, the
    best-scored choice out; a two-class `BertClassifier` scores each
    (question, choice) pair; best epoch by accuracy."""

    import dataclasses
    import json
    from pathlib import Path

    import numpy as np

    from bertzoo import metrics
    from bertzoo.models.tasks import BertClassifier
    from bertzoo.tasks import sentences
    from bertzoo.tasks.base import TaskData, TaskKind, TaskSettings, register, setting


    @dataclasses.dataclass
    class ChoiceSettings(TaskSettings):
        max_choices: int = setting(4, "multiple choice: choices scored per question")

        def problem(self):
            if self.max_choices < 2:
                return f"max_choices must be at least 2, got {self.max_choices}."
            return None


    SEEN = []  # the settings objects the run handed the kind


    class _Pair:
        def __init__(self, question, choice):
            self.texts = (question, choice)


    class MultipleChoice(TaskKind):
        name = "multiple_choice"
        description = "multiple choice (JSONL: question, choices, answer)"
        model_class = BertClassifier
        settings_class = ChoiceSettings
        main_metric = "accuracy"
        file_formats = ("jsonl",)

        def load(self, settings, path, tokenizer, sequence_length, segment_ids, label_set=None):
            SEEN.append(settings)
            lines = Path(path).read_text(encoding="utf-8").splitlines()
            rows = [json.loads(line) for line in lines if line.strip()]
            rows = [dict(r, choices=r["choices"][: settings.max_choices]) for r in rows]
            pairs = [_Pair(r["question"], c) for r in rows for c in r["choices"]]
            features = sentences.example_features(pairs, tokenizer, sequence_length, segment_ids)
            targets = np.array(
                [int(i == r["answer"]) for r in rows for i in range(len(r["choices"]))], "int32"
            )
            return TaskData(features, targets, rows, {}), None

        def evaluate(self, settings, predictions, data):
            SEEN.append(settings)
            logits = np.asarray(predictions)
            scores, picked, start = logits[:, 1] - logits[:, 0], [], 0
            for row in data.examples:
                n = len(row["choices"])
                picked.append(int(np.argmax(scores[start : start + n])))
                start += n
            return {"accuracy": metrics.accuracy([r["answer"] for r in data.examples], picked)}

        def build_model(self, settings, preset, label_set, **kwargs):
            SEEN.append(settings)
            return BertClassifier.from_preset(preset, num_classes=2, **kwargs)


    register(MultipleChoice())
    '''
)


def _rows(seed, n):
    """The right choice is a positive word, the others filler words."""
    rng = np.random.default_rng(seed)
    rows = []
    for text, _ in majority_sentiment(seed, n, "train"):
        choices = [str(rng.choice(POSITIVE)), *rng.choice(FILLER, 2, replace=False).tolist()]
        order = rng.permutation(3)
        rows.append(
            {
                "question": text,
                "choices": [choices[i] for i in order],
                "answer": int(np.argmax(order == 0)),
            }
        )
    return rows


@pytest.fixture
def kind_module(tmp_path):
    """The kind's module, written to a temporary folder and imported (which
    registers the kind); unregistered afterwards."""
    path = tmp_path / "kind" / "multiple_choice.py"
    path.parent.mkdir()
    path.write_text(KIND_MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("multiple_choice_kind", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        tasks.unregister("multiple_choice")
        sys.modules.pop(spec.name, None)


def _config_from_flags(argv):
    """The fine-tune recipe's flags, with the kinds registered now."""
    cls = compose_config("FinetuneConfig", FinetuneConfig, tasks.settings_classes())
    parser = recipe_parser("Fine-tune.\n\nExamples.", cls, ("data", "model", "training", "output"))
    return config_from_args(cls, parser.parse_args(argv))


def _files(tmp_path, sizes=(("train", 0, 160), ("validation", 1, 60))):
    files = {}
    for split, seed, n in sizes:
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in _rows(seed, n)))
    return files


@pytest.mark.backend_independent  # reads the module's source
def test_the_kind_is_one_module_that_never_reads_a_run_config():
    tree = ast.parse(KIND_MODULE)
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not any(m.startswith("bertzoo.training") for m in imported), imported


@pytest.mark.backend_independent  # flags, refused before any work
def test_the_kind_s_setting_is_a_flag_checked_before_any_work(tmp_path, kind_module):
    files = _files(tmp_path, (("train", 0, 4), ("validation", 1, 4)))
    argv = ["--task", "multiple_choice", "--train", str(files["train"])]
    argv += ["--validation", str(files["validation"]), "--output", str(tmp_path / "run")]
    config = _config_from_flags([*argv, "--max-choices", "3"])
    assert config.max_choices == 3 and config.to_json()["max_choices"] == 3
    assert _config_from_flags(argv).max_choices == 4  # the field's default
    with pytest.raises(FinetuneError, match="max_choices must be at least 2, got 1"):
        run_finetuning(_config_from_flags([*argv, "--max-choices", "1"]))
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_kind_in_its_own_module_trains_through_the_fine_tune_run_with_its_own_flag(
    tmp_path, tiny_preset, kind_module
):
    files = _files(tmp_path)
    config = _config_from_flags(
        [
            *("--task", "multiple_choice", "--max-choices", "3"),
            *("--train", str(files["train"]), "--validation", str(files["validation"])),
            *("--init", str(tiny_preset), "--output", str(tmp_path / "run")),
            *("--learning-rate", "3e-3", "--epochs", "3", "--batch-size", "16"),
            *("--sequence-length", "32", "--dropout", "0", "--verbose", "0"),
        ]
    )
    result = run_finetuning(config)
    # Chance is 1/3; the right choice's word alone gives it away.
    assert result["validation"]["accuracy"] >= 0.9, result
    assert result["task"] == "multiple_choice"
    # The kind was handed its own settings object, never the run's config.
    assert kind_module.SEEN
    for settings in kind_module.SEEN:
        assert type(settings) is kind_module.ChoiceSettings
        assert dataclasses.asdict(settings) == {"max_choices": 3}
    # The setting is recorded with the run's (a resume compares it).
    recorded = json.loads((tmp_path / "run" / RUN_SETTINGS_FILE).read_text())
    assert recorded["max_choices"] == 3
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["validation"] == result["validation"]
    model = task_model_from_preset(tmp_path / "run" / "best")
    assert isinstance(model, BertClassifier) and model.num_classes == 2


def test_an_unregistered_kind_is_refused_before_any_work(tmp_path, tiny_preset):
    config = FinetuneConfig(
        task="multiple_choice", train="x.jsonl", init=str(tiny_preset), output=str(tmp_path / "r")
    )
    with pytest.raises((FinetuneError, tasks.UnknownTaskKindError), match="classification"):
        run_finetuning(config)
    assert not (tmp_path / "r").exists()
