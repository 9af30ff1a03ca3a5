"""The fine-tuning recipe's learning-rate default, decided in one place
(`bertzoo.training.finetune.default_learning_rate`), in its stated order:
LoRA, then a kind's built-in dataset, then BERT's usual rate."""

from pathlib import Path

import pytest

from bertzoo.models.tasks import BertClassifier
from bertzoo.training.finetune import (
    DEFAULT_LEARNING_RATE,
    LORA_LEARNING_RATE,
    resolve_defaults,
)
from bertzoo.training.finetune_config import FinetuneConfig
from bertzoo.training.runs import recipe_parser

pytestmark = pytest.mark.backend_independent  # settings, no model is built


@pytest.mark.parametrize(
    "task, train, lora, expected",
    [
        ("classification", "train.tsv", None, DEFAULT_LEARNING_RATE),
        ("classification", None, None, DEFAULT_LEARNING_RATE),  # built-in sentiment: no own rate
        ("tagging", None, None, 1e-4),
        ("qa", None, None, 1e-4),
        ("tagging", "train.conll", None, DEFAULT_LEARNING_RATE),
        ("classification", "train.tsv", 8, LORA_LEARNING_RATE),
        # LoRA first: before, the built-in tagging and QA sets' 1e-4 replaced it.
        ("tagging", None, 8, LORA_LEARNING_RATE),
        ("qa", None, 8, LORA_LEARNING_RATE),
    ],
)
def test_the_learning_rate_default_is_the_first_that_applies(tmp_path, task, train, lora, expected):
    files = {}
    if train is not None:
        suffix = train[len("train") :]
        for name in ("train", "validation"):
            files[name] = str(tmp_path / (name + suffix))
            Path(files[name]).write_text("x\n")
        if task == "classification":
            files["glue_task"] = "sst2"
    config = resolve_defaults(FinetuneConfig(task=task, lora_rank=lora, **files))
    assert config.learning_rate == expected
    # A rate given is kept, whatever applies.
    given = resolve_defaults(FinetuneConfig(task=task, lora_rank=lora, learning_rate=3e-3, **files))
    assert given.learning_rate == 3e-3


def test_one_constant_behind_the_defaults_and_the_help():
    assert DEFAULT_LEARNING_RATE == BertClassifier.default_learning_rate == 5e-5
    assert LORA_LEARNING_RATE == 1e-3
    parser = recipe_parser("Fine-tunes.\n\nExamples.", FinetuneConfig, ("training",))
    help_text = " ".join(parser.format_help().split())
    assert "1e-3 with --lora-rank" in help_text and "5e-5" in help_text
