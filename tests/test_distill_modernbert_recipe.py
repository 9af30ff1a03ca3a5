"""Distillation of a ModernBERT teacher through the recipe's library function
(`run_distillation`): a tiny ModernBERT teacher (rotary positions, GeGLU,
pre-norm, no biases, local and global layers; its byte-level BPE with
ModernBERT's special tokens) into the default student, narrower and
shallower with the teacher's switches, which loads and predicts."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer
from bertzoo.tokenizers.train_bpe import train_byte_level_bpe
from bertzoo.training.distill import DistillConfig, run_distillation
from bertzoo.training.students import STUDENT_SWITCHES
from tests.conftest import seed_everything

ROOT = Path(__file__).resolve().parent
KOREAN = ROOT / "fixtures" / "korean_documents.txt"
SPECIALS = {"cls": "[CLS]", "pad": "[PAD]", "sep": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}


def modernbert_teacher(directory):
    """A random-init 3-layer ModernBERT (layer 0 global, 1 and 2 local) of width 32 with its masked-LM head
    (bias-free, as ModernBERT's), saved as a preset with a byte-level BPE
    trained on the corpus with ModernBERT's special tokens."""
    seed_everything()
    vocab = train_byte_level_bpe([str(KOREAN)], 400, directory, special_tokens=SPECIALS)
    tokenizer = ByteLevelBPETokenizer(vocab, **{f"{r}_token": t for r, t in SPECIALS.items()})
    base = json.loads((ROOT.parent / "presets" / "modernbert_base.json").read_text("utf-8"))
    arch = {**base["backbone"], "vocabulary_size": tokenizer.vocabulary_size, "num_layers": 3}
    arch.update(num_heads=2, hidden_dim=32, intermediate_dim=48, max_sequence_length=64)
    backbone = bertzoo.BertBackbone(**{**arch, "local_attention_window": 8})
    backbone.head_tensors = BertPretrainer(backbone, objective="none").head_tensors()
    backbone.preset_info = {"tokenizer": tokenizer.preset_section(), "metadata": base["metadata"]}
    backbone.save_to_preset(directory)
    return directory


def _train_losses(log_dir):
    """(step, train/loss) from the run's TensorBoard files, in step order:
    Keras' running means over the steps so far."""
    out = []
    for path in Path(log_dir).rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "train/loss":
                    out.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(out)


# TensorFlow pass only: what this adds to the distillation unit tests, which
# run under both backends (ModernBERT initialisation, the windowed attention
# loss, the losses between the families), is the recipe's part: the default
# student's settings, its start, training through the stage and the
# published preset (the recipe trains under JAX in test_distill_recipe).
@pytest.mark.slow
@pytest.mark.backend_independent
def test_a_modernbert_teacher_distils_into_a_smaller_modernbert(tmp_path):
    teacher_dir = modernbert_teacher(tmp_path / "teacher")
    teacher = bertzoo.BertBackbone.from_preset(teacher_dir)
    report = run_distillation(
        DistillConfig(
            method="tinybert-general",
            teacher=str(teacher_dir),
            corpus=(str(KOREAN),),
            steps=20,
            batch_size=8,
            sequence_length=32,
            learning_rate=2e-3,
            benchmark_batch_size=4,
            benchmark_sequence_length=32,
            verbose=0,
            output=str(tmp_path / "run"),
        )
    )
    # The default student: 2 x 2 heads wide steps (rotary pairs), 5/16 of 32
    # -> 8 wide, GeGLU's 1.5x, all 3 layers (no more than 4), the switches.
    assert report["student_init"] == "teacher embeddings, projected 32 -> 8 (PCA)"
    assert (report["student_layers"], report["student_hidden_dim"]) == (3, 8)
    stage = report["stages"]["tinybert-general"]
    assert all(np.isfinite(v) and v > 0 for v in stage.values()), stage
    # The mean loss of steps 11-20 is below that of steps 1-10 (measured:
    # 3.82 -> 3.66 TensorFlow).
    (step_a, first), (step_b, both) = _train_losses(tmp_path / "run" / "logs")
    assert (step_a, step_b) == (10, 20) and 2 * both - first < first, (first, both)

    student_dir = tmp_path / "run" / "student"
    student = bertzoo.BertBackbone.from_preset(student_dir)
    for name in STUDENT_SWITCHES:
        assert getattr(student, name) == getattr(teacher, name), name
    assert student.intermediate_dim == 12 and student.count_params() == report["student_params"]
    tokenizer = ByteLevelBPETokenizer.from_preset(student_dir)
    assert tokenizer.cls_token == "[CLS]" and tokenizer.vocabulary_size == teacher.vocabulary_size
    ids = [tokenizer.cls_token_id, *np.asarray(tokenizer("배송이 빨라서 좋았어요.")).tolist()]
    ids = np.array([[*ids, tokenizer.sep_token_id]], "int32")
    features = student({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    assert features["sequence_output"].shape == (1, ids.shape[1], 8)
    assert np.isfinite(np.asarray(features["sequence_output"])).all()
