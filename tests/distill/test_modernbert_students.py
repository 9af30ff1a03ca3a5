"""Distillation with ModernBERT-shaped models (rotary positions, GeGLU,
pre-norm, no biases, local/global attention): student initialisation, the
default student, the attention loss of local layers, and the losses
training a student from a teacher of the other family."""

import numpy as np
import pytest

import bertzoo
from bertzoo.distill import (
    DistillationError,
    init_embeddings_from_teacher,
    init_student_from_teacher,
    losses,
)
from bertzoo.distill.distillers import DistilBertDistiller, TinyBertDistiller
from bertzoo.layers.rotary import sliding_window_mask
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.training.students import STUDENT_SWITCHES, default_student_config
from tests.conftest import make_inputs, tiny_backbone

# ModernBERT's switches at a tiny size: layers 0 and 3 global, 1 and 2 local.
MODERN = dict(
    num_segments=0,
    use_pooler=False,
    norm_first=True,
    use_bias=False,
    gated_feedforward=True,
    rope_theta=160000.0,
    local_rope_theta=10000.0,
    local_attention_window=4,
    global_attention_every=3,
    layer_norm_epsilon=1e-5,
)


def modern_backbone(**overrides):
    return tiny_backbone(**{**MODERN, "hidden_dim": 12, "intermediate_dim": 18, **overrides})


def _inputs(seq=9):
    return make_inputs(seq=seq, num_segments=0)


def test_a_modernbert_student_starts_as_its_teacher():
    """Embeddings (no position table), layers, the final LayerNorm and the
    bias-free MLM head are copied: a student of the teacher's depth is the
    teacher, logits included; a shallower one holds the mapped layers."""
    teacher = BertPretrainer(modern_backbone(), objective="none")
    twin = BertPretrainer(modern_backbone(), objective="none")
    init_student_from_teacher(twin, teacher)
    x = {**_inputs(), "mask_positions": np.tile(np.arange(4, dtype="int32"), (3, 1))}
    x["segment_ids"] = np.zeros_like(x["token_ids"])
    t, s = teacher(x), twin(x)
    np.testing.assert_allclose(np.asarray(s["mlm"]), np.asarray(t["mlm"]), atol=1e-5)
    student = modern_backbone(num_layers=2)
    assert init_student_from_teacher(student, teacher) == (0, 3)
    for j, i in enumerate((0, 3)):
        for a, b in zip(
            student.transformer_layers[j].get_weights(),
            teacher.backbone.transformer_layers[i].get_weights(),
        ):
            np.testing.assert_array_equal(a, b)


@pytest.mark.backend_independent
def test_layer_copies_need_the_teachers_switches():
    teacher = modern_backbone()
    for switch, value in (("gated_feedforward", False), ("norm_first", False)):
        with pytest.raises(DistillationError, match=f"{switch} \\(teacher True, student False\\)"):
            init_student_from_teacher(modern_backbone(num_layers=2, **{switch: value}), teacher)
    with pytest.raises(DistillationError) as e:
        init_student_from_teacher(tiny_backbone(num_layers=2, hidden_dim=12), teacher)
    message = str(e.value)
    assert "\n" not in message and "rope_theta (teacher 160000.0, student None)" in message


@pytest.mark.backend_independent
def test_the_default_student_keeps_the_teachers_switches():
    teacher = modern_backbone(hidden_dim=48, num_heads=4, intermediate_dim=72, num_layers=6)
    config = default_student_config(teacher)
    assert {k: config[k] for k in STUDENT_SWITCHES} == {k: MODERN[k] for k in STUDENT_SWITCHES}
    # 5/16 of 48 is 15: a multiple of 2 x 4 heads (rotary pairs), 8; GeGLU's 1.5x.
    assert (config["hidden_dim"], config["intermediate_dim"], config["num_layers"]) == (8, 12, 4)
    assert (config["num_segments"], config["use_pooler"]) == (0, False)
    student = bertzoo.BertBackbone(**config)
    assert [layer.attention_window for layer in student.transformer_layers] == [None, 4, 4, None]


def test_local_layers_compare_the_scores_inside_their_window():
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=(2, 2, 6, 6)).astype("float32") for _ in range(2))
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2], "int32")
    band = np.asarray(sliding_window_mask(6, 4), "float32")
    pairs = mask[:, None, :, None] * mask[:, None, None, :] * band[None, None]
    expected = float(((a - b) ** 2 * pairs).sum() / (pairs.sum() * 2))
    assert float(losses.attention_score_mse(a, b, mask, window=4)) == pytest.approx(expected)
    # Without a window: every real pair, as before.
    full = mask[:, None, :, None] * mask[:, None, None, :]
    expected = float(((a - b) ** 2 * full).sum() / (full.sum() * 2))
    assert float(losses.attention_score_mse(a, b, mask)) == pytest.approx(expected)


def _pairs():
    bert = dict(num_segments=0, use_pooler=False)
    small = dict(num_layers=2, hidden_dim=8, intermediate_dim=12)
    return {
        "modernbert": (modern_backbone(), modern_backbone(**small)),
        "bert -> modernbert": (tiny_backbone(**bert), modern_backbone(**small)),
        "modernbert -> bert": (modern_backbone(), tiny_backbone(**{**small, **bert})),
    }


@pytest.mark.backend_independent
def test_local_layers_attention_losses_use_the_narrower_window():
    """Each pair's attention loss counts what both layers see: the
    teacher's layer 1 is local (window 4) and layer 3 global; a ModernBERT
    student's layer 0 global and layer 1 local. Pure bookkeeping: the
    windowed loss itself runs under both backends below."""
    windows = {"modernbert": [4, 4], "bert -> modernbert": [None, 4]}
    windows["modernbert -> bert"] = [4, None]
    for name, (teacher, student) in _pairs().items():
        distiller = TinyBertDistiller(teacher, student)
        assert distiller.layer_map == (1, 3) and distiller.attention_windows == windows[name]


def test_tinybert_losses_between_the_families():
    """A BERT teacher gives a ModernBERT student TinyBERT's losses (they
    compare hidden states and scores, whatever made them); the recipe test
    trains a ModernBERT pair."""
    teacher, student = _pairs()["bert -> modernbert"]
    x = _inputs()
    distiller = TinyBertDistiller(teacher, student)
    loss = distiller.compute_loss(x, None, distiller(x))
    parts = [float(t.result()) for t in distiller.trackers.values()]
    assert np.isfinite(float(loss)) and all(np.isfinite(v) and v > 0 for v in parts)


def test_distilbert_losses_of_a_halved_modernbert_student():
    """DistilBERT's KL (the bias-free MLM head's logits), MLM and cosine
    losses, on a student initialised from the teacher's layers."""
    teacher = BertPretrainer(modern_backbone(), objective="none")
    student = BertPretrainer(modern_backbone(num_layers=2), objective="none")
    init_student_from_teacher(student, teacher)
    x = _inputs()
    x["segment_ids"] = np.zeros_like(x["token_ids"])
    x["mask_positions"] = np.tile(np.array([1, 3], "int32"), (3, 1))
    y = {"mlm": np.take_along_axis(x["token_ids"], x["mask_positions"], axis=1)}
    distiller = DistilBertDistiller(teacher, student)
    loss = distiller.compute_loss(x, y, distiller(x), {"mlm": np.ones((3, 2), "float32")})
    parts = {name: float(t.result()) for name, t in distiller.trackers.items()}
    assert np.isfinite(float(loss)) and all(np.isfinite(v) for v in parts.values())
    # Half the teacher's layers, copied: the last hidden states still agree closely.
    assert 0 <= parts["cosine_loss"] < 0.5 and parts["kl_loss"] > 0, parts


def test_embeddings_between_the_families_start_from_the_token_table():
    """A BERT teacher's tokens (with its segment-0 row: single-segment
    inputs) start a ModernBERT student's, which has no position table; a
    ModernBERT teacher leaves a BERT student's position table as it was."""
    bert = tiny_backbone(hidden_dim=12)
    student = modern_backbone(num_layers=2)
    init_embeddings_from_teacher(student, bert)
    expected = _table(bert.token_embedding) + _table(bert.embeddings_layer.segment_embedding)[0]
    np.testing.assert_allclose(_table(student.token_embedding), expected, atol=1e-6)
    teacher = modern_backbone()
    student = tiny_backbone(num_layers=2, hidden_dim=12, num_segments=0)
    before = np.asarray(student.embeddings_layer.position_embeddings)
    init_embeddings_from_teacher(student, teacher)
    np.testing.assert_array_equal(_table(student.token_embedding), _table(teacher.token_embedding))
    np.testing.assert_array_equal(np.asarray(student.embeddings_layer.position_embeddings), before)


def _table(layer):
    return np.asarray(layer.embeddings, "float64")
