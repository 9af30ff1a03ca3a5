"""The distillers: their loss is the documented sum of the library losses
over the mapped layers, training lowers it with the teacher untouched, and
pairs that cannot be distilled fail before any step."""

import keras
import numpy as np
import pytest

import bertzoo
from bertzoo import batching
from bertzoo.distill import (
    DistilBertDistiller,
    DistillationError,
    LogitsStudent,
    TinyBertDistiller,
    losses,
    prediction_distiller,
    teacher_logits,
)
from bertzoo.models.pretrainer import BertPretrainer
from tests.conftest import make_inputs, tiny_backbone

F = lambda x: float(keras.ops.convert_to_numpy(x))  # noqa: E731


def _weights(model):
    return [np.array(w) for w in model.get_weights()]


def test_tinybert_loss_is_the_sum_over_the_mapped_layers():
    teacher, student = (
        tiny_backbone(),
        tiny_backbone(num_layers=2, hidden_dim=6, intermediate_dim=12),
    )
    d = TinyBertDistiller(
        teacher, student, attention_weight=0.5, hidden_weight=2.0, embedding_weight=3.0
    )
    assert d.layer_map == (1, 3)
    x = make_inputs()
    out = d(x, training=False)
    t = teacher.feature_model()(x, training=False)
    s = student.feature_model()(x, training=False)
    w, b = (np.asarray(v) for v in d.projections[0].weights)
    proj = lambda h: np.asarray(h) @ w + b  # noqa: E731
    mask = x["padding_mask"]
    expected = (
        0.5
        * sum(
            F(losses.attention_score_mse(t["attention_scores"][i], s["attention_scores"][j], mask))
            for j, i in enumerate((1, 3))
        )
        + 3.0 * F(losses.hidden_mse(t["hidden_states"][0], proj(s["hidden_states"][0]), mask))
        + 2.0
        * sum(
            F(losses.hidden_mse(t["hidden_states"][i + 1], proj(s["hidden_states"][j + 1]), mask))
            for j, i in enumerate((1, 3))
        )
    )
    d.compile(optimizer="adam")
    assert F(d.compute_loss(x, None, out, training=False)) == pytest.approx(expected, rel=1e-5)


def test_tinybert_training_lowers_the_loss_and_leaves_the_teacher():
    teacher = tiny_backbone()
    student = tiny_backbone(num_layers=2, hidden_dim=6, intermediate_dim=12, dropout=0.0)
    before = _weights(teacher)
    d = TinyBertDistiller(teacher, student)
    d.compile(optimizer=keras.optimizers.Adam(1e-2))
    x = make_inputs(batch=6)
    history = d.fit(x, batch_size=6, epochs=40, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0], history
    for a, b in zip(before, _weights(teacher)):
        np.testing.assert_array_equal(a, b)
    assert student.pooler_dense.trainable is False
    d.release()
    assert student.pooler_dense.trainable is True


def test_tinybert_pairs_that_cannot_be_distilled():
    teacher = tiny_backbone()
    with pytest.raises(DistillationError, match="teacher has 2 heads and the student 1"):
        TinyBertDistiller(teacher, tiny_backbone(num_layers=2, num_heads=1))
    TinyBertDistiller(
        teacher, tiny_backbone(num_layers=2, num_heads=1), attention_weight=0
    )  # allowed
    with pytest.raises(DistillationError, match="vocabulary has 61 tokens and the student's 70"):
        TinyBertDistiller(teacher, tiny_backbone(num_layers=2, vocabulary_size=70))
    with pytest.raises(DistillationError, match="multiple of the student's 3"):
        TinyBertDistiller(teacher, tiny_backbone(num_layers=3))
    TinyBertDistiller(teacher, tiny_backbone(num_layers=3), layer_map=(1, 2, 3))  # explicit map


def _mlm_batch(batch=4, seq=7, predictions=2, seed=0):
    x = make_inputs(batch=batch, seq=seq, seed=seed, lengths=[seq] * batch)
    rng = np.random.default_rng(seed)
    x["mask_positions"] = np.tile(np.arange(1, 1 + predictions, dtype="int32"), (batch, 1))
    y = {"mlm": rng.integers(1, 61, (batch, predictions)).astype("int32")}
    w = {"mlm": np.ones((batch, predictions), "float32")}
    return x, y, w


def test_distilbert_loss_is_the_weighted_sum():
    teacher = BertPretrainer(tiny_backbone(), objective="nsp")
    student = BertPretrainer(tiny_backbone(num_layers=2), objective="none")
    d = DistilBertDistiller(teacher, student, temperature=2.0)
    x, y, w = _mlm_batch()
    out = d(x, training=False)
    positions = np.tile(np.arange(7, dtype="int32"), (4, 1))
    bx = {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    t_seq = teacher.backbone(bx)["sequence_output"]
    s_seq = student.backbone(bx)["sequence_output"]
    t_logits = teacher.mlm_head(t_seq, positions)
    s_logits = student.mlm_head(s_seq, positions)
    mlm_logits = student.mlm_head(s_seq, x["mask_positions"])
    expected = (
        5.0 * F(losses.soft_target_kl(t_logits, s_logits, 2.0, x["padding_mask"]))
        + 2.0 * F(bertzoo.models.pretrainer.masked_lm_loss(y["mlm"], mlm_logits, w["mlm"]))
        + 1.0 * F(losses.hidden_cosine_loss(t_seq, s_seq, x["padding_mask"]))
    )
    d.compile(optimizer="adam")
    assert F(d.compute_loss(x, y, out, w, training=False)) == pytest.approx(expected, rel=1e-5)


def test_distilbert_training_lowers_the_loss():
    teacher = BertPretrainer(tiny_backbone(), objective="none")
    student = BertPretrainer(tiny_backbone(num_layers=2), objective="none")
    before = _weights(teacher)
    d = DistilBertDistiller(teacher, student)
    d.compile(optimizer=keras.optimizers.Adam(1e-2))
    x, y, w = _mlm_batch()
    history = d.fit(x, y, sample_weight=w, batch_size=4, epochs=30, verbose=0).history
    assert history["loss"][-1] < 0.7 * history["loss"][0], history["loss"]
    assert history["mlm_loss"][-1] < 0.5 * history["mlm_loss"][0], history["mlm_loss"]
    for a, b in zip(before, _weights(teacher)):
        np.testing.assert_array_equal(a, b)


def test_distilbert_teacher_needs_its_outputs():
    student = tiny_backbone(num_layers=2)
    with pytest.raises(DistillationError, match="no masked-LM head"):
        DistilBertDistiller(tiny_backbone(), student)  # a bare backbone: no vocabulary logits
    DistilBertDistiller(tiny_backbone(), student, kl_weight=0)  # MLM + cosine need no teacher head
    with pytest.raises(DistillationError, match="cosine loss"):
        DistilBertDistiller(
            BertPretrainer(tiny_backbone(), "none"), tiny_backbone(num_layers=2, hidden_dim=12)
        )
    with pytest.raises(DistillationError, match="kl_positions"):
        DistilBertDistiller(BertPretrainer(tiny_backbone(), "none"), student, kl_positions="some")


def test_prediction_distiller_makes_the_student_agree_with_the_teacher():
    teacher = bertzoo.BertClassifier(tiny_backbone(), 3, dropout=0.0)
    student = bertzoo.BertClassifier(
        tiny_backbone(num_layers=1, hidden_dim=8, intermediate_dim=16, num_heads=2, dropout=0.0),
        3,
        dropout=0.0,
    )
    x = make_inputs(batch=32, seed=3)
    # Make the teacher's decisions sharp and varied.
    teacher.head.kernel.assign(np.asarray(teacher.head.kernel) * 30)
    d = prediction_distiller(teacher, student, temperature=1.0)
    d.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy")
    t_logits = np.asarray(teacher(x))
    start = F(losses.soft_target_kl(t_logits, student(x), 1.0))
    d.fit(x, batch_size=32, epochs=60, verbose=0)
    end = F(losses.soft_target_kl(t_logits, student(x), 1.0))
    assert end < 0.3 * start, (start, end)


def test_training_on_teacher_logits_computed_once_equals_running_the_teacher_each_step():
    """The recipe's prediction stage (`LogitsStudent` on `teacher_logits`,
    computed once in length-sorted trimmed batches) takes the same steps as
    `prediction_distiller`, which runs the teacher in every step on the
    padded batch: same student weights after 3 SGD steps (float32; the
    distiller's KLDivergence clips probabilities at 1e-7, so the teacher's
    are kept well above that). The teacher has as many classes as the
    batches have positions, the case where class logits could be taken for
    per-token labels and cut."""
    seq = 8
    teacher = bertzoo.BertClassifier(tiny_backbone(), seq, dropout=0.0)
    lengths = [1 + (i * 5) % seq for i in range(32)]  # every length 1..8, mixed
    x = make_inputs(batch=32, seq=seq, lengths=lengths, seed=4)

    def student():
        keras.utils.set_random_seed(7)
        backbone = tiny_backbone(num_layers=1, hidden_dim=8, intermediate_dim=16, num_heads=2)
        return bertzoo.BertClassifier(backbone, seq, dropout=0.0)

    logits = teacher_logits(teacher, x, batch_size=5)
    assert logits.shape == (32, seq) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, np.asarray(teacher(x, training=False)), atol=2e-5)
    assert np.asarray(keras.ops.softmax(logits)).min() > 1e-4

    a, b = student(), student()
    np.testing.assert_array_equal(_weights(a)[0], _weights(b)[0])
    reference = prediction_distiller(teacher, a, temperature=2.0)
    reference.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    cached = LogitsStudent(teacher, b, temperature=2.0)
    cached.compile(optimizer=keras.optimizers.SGD(0.5))
    for step in range(3):
        rows = slice(8 * step, 8 * step + 8)
        batch = {k: v[rows] for k, v in x.items()}
        want = reference.train_on_batch(batch, np.zeros(8, "int32"), return_dict=True)
        got = cached.train_on_batch(batch, logits[rows], return_dict=True)
        # The same metrics, so a run's history reads as before.
        assert set(got) == set(want), (got, want)
        for name in want:
            np.testing.assert_allclose(float(got[name]), float(want[name]), atol=1e-6, rtol=1e-4)
    for got, want in zip(_weights(b), _weights(a), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(_weights(b)[-1], _weights(student())[-1])  # the steps moved it

    # In the recipe's batches the logits travel whole, the features trimmed.
    ds = batching.training_dataset(x, logits, 8, 0, seq, mode="buckets", per_token_targets=False)
    for features, targets in ds:
        assert targets.shape == (8, seq)
        assert features["token_ids"].shape[1] <= seq
    with pytest.raises(ValueError, match="sets its own loss"):
        cached.compile(optimizer="sgd", loss="mse")


def test_prediction_distiller_needs_class_logits():
    with pytest.raises(DistillationError, match="regression"):
        prediction_distiller(
            bertzoo.BertClassifier(tiny_backbone(), 1), bertzoo.BertClassifier(tiny_backbone(), 1)
        )
    with pytest.raises(DistillationError, match="BertClassifier"):
        prediction_distiller(tiny_backbone(), bertzoo.BertClassifier(tiny_backbone(), 2))
    with pytest.raises(DistillationError, match="3 classes and the student 2"):
        prediction_distiller(
            bertzoo.BertClassifier(tiny_backbone(), 3), bertzoo.BertClassifier(tiny_backbone(), 2)
        )


_MIRRORED_SCRIPT = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np
import bertzoo
from bertzoo.distill import TinyBertDistiller

def run(strategy):
    keras.utils.set_random_seed(7)
    with strategy.scope():
        cfg = dict(vocabulary_size=40, num_heads=2, max_sequence_length=16, dropout=0.0)
        teacher = bertzoo.BertBackbone(num_layers=2, hidden_dim=8, intermediate_dim=16, **cfg)
        student = bertzoo.BertBackbone(num_layers=1, hidden_dim=4, intermediate_dim=8, **cfg)
        d = TinyBertDistiller(teacher, student)
        d.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=False)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 40, (8, 6)).astype("int32")
    x = {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": np.ones_like(ids)}
    d.fit(tf.data.Dataset.from_tensor_slices(x).batch(8).repeat(), steps_per_epoch=3, epochs=1, verbose=0)
    return [np.asarray(w) for w in student.get_weights()]

single = run(tf.distribute.get_strategy())
mirrored = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
print(json.dumps(max(float(np.max(np.abs(a - b))) for a, b in zip(single, mirrored))))
"""


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="tf.distribute MirroredStrategy"
)
def test_distiller_loss_is_scaled_for_replicas():
    """Two mirrored replicas train the student exactly as one device does
    (SGD, so a gradient summed over replicas without the 1/replicas scale
    would show as a 2x step)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", _MIRRORED_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-5, done.stdout
