"""Fine-tuning and distillation from ELECTRA: the fine-tune recipe's
`--init` takes an ELECTRA preset (the pre-training recipe's output, with
the generator beside it), the classifier gets ELECTRA's head (no pooler:
dense -> GELU -> dropout -> output on the first token) and keeps it when
saved and reloaded, and an ELECTRA classifier distils into a student."""

import json
import math

import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.models.electra import ElectraPretrainer
from bertzoo.tokenizers.train import train_wordpiece
from bertzoo.training.distill import run_distillation
from tests.conftest import seed_everything
from tests.test_distill_recipe import (
    TOKENIZER,
    _task_config,
    finetune_teacher,
    write_student,
    write_task_files,
)


@pytest.fixture(scope="module")
def electra_setup(tmp_path_factory):
    seed_everything()
    d = tmp_path_factory.mktemp("electra")
    files = write_task_files(d)
    tokens = train_wordpiece([files["train"]], 300, min_frequency=1, output=d / "pre" / "vocab.txt")
    disc = bertzoo.BertBackbone(
        vocabulary_size=len(tokens),
        num_layers=2,
        num_heads=2,
        hidden_dim=64,
        intermediate_dim=128,
        embedding_dim=24,
        use_pooler=False,
        activation="gelu",
        max_sequence_length=64,
        dropout=0.0,
    )
    disc.preset_info = {"tokenizer": TOKENIZER, "metadata": {"model_type": "electra"}}
    model = ElectraPretrainer(ElectraPretrainer.generator_for(disc, 0.25), disc)
    model.save_to_preset(d / "pre")  # as the pre-training recipe saves it
    result = finetune_teacher(files, d / "pre", d / "ft")
    student = write_student(d)
    return {
        "files": files,
        "pre": d / "pre",
        "teacher": d / "ft" / "best",
        "student": student,
        "finetune": result,
    }


@pytest.mark.slow
def test_finetune_from_an_electra_preset_uses_and_keeps_electras_head(electra_setup):
    result = electra_setup["finetune"]
    print("fine-tuned from ELECTRA:", result["validation"], "best epoch", result["best_epoch"])
    # Measured (2026-11-25; chance 0.5) on the majority-of-three sentiment
    # task with noisy training labels: 0.9 (TensorFlow) and 0.8375 (JAX) with
    # the seeded fixture; unseeded runs gave 0.8375-0.9625.
    assert result["validation"]["accuracy"] >= 0.8, result
    teacher = electra_setup["teacher"]
    task = json.loads((teacher / "config.json").read_text())["task"]
    assert task["head"] == "electra"
    classifier = bertzoo.BertClassifier.from_preset(teacher)
    assert classifier.head_loaded and classifier.head_style == "electra"
    # The head's arithmetic: Dense(H) -> erf GELU -> Dense(classes) on the
    # first token's vector (dropout is off at inference).
    ids = np.array([[2, 9, 14, 3, 0]], "int32")
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": (ids > 0) * 1}
    x["padding_mask"] = x["padding_mask"].astype("int32")
    first = ops.convert_to_numpy(classifier.backbone(x)["sequence_output"])[:, 0]
    k1, b1 = (ops.convert_to_numpy(v) for v in classifier.head_dense.weights)
    k2, b2 = (ops.convert_to_numpy(v) for v in classifier.head.weights)
    h = first @ k1 + b1
    h = 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(ops.convert_to_numpy(classifier(x)), h @ k2 + b2, atol=1e-5)


@pytest.mark.slow
def test_an_electra_teacher_distils_into_a_student(tmp_path, electra_setup):
    report = run_distillation(_task_config(electra_setup, tmp_path / "run"))
    print({k: report[k] for k in ("teacher_metric", "student_metric", "quality_retained")})
    # Measured (2026-11-25): teacher / student / kept 0.9 / 0.9 / 1.0
    # (TensorFlow), 0.8375 / 0.85 / 1.015 (JAX); unseeded runs kept
    # 1.028-1.042. The student classifier takes the teacher's head kind
    # (ELECTRA's: dense -> GELU -> dense on the first token), initialised
    # from the teacher's 24-wide embeddings.
    assert report["teacher_metric"] >= 0.8, report
    assert report["quality_retained"] >= 0.92, report
    student = bertzoo.BertClassifier.from_preset(tmp_path / "run" / "student")
    assert student.head_loaded and student.head_style == "electra"
