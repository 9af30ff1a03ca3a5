"""Every distillation loss against values computed by hand from its
definition (REFERENCE.md: DistilBERT and TinyBERT)."""

import math

import keras
import numpy as np
import pytest

from bertzoo.distill import losses

F = lambda x: float(keras.ops.convert_to_numpy(x))  # noqa: E731


def test_soft_target_kl_by_hand():
    t = np.array([[0.0, math.log(3.0)]], "float32")  # softmax: [1/4, 3/4]
    s = np.zeros((1, 2), "float32")  # softmax: [1/2, 1/2]
    kl_t1 = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert F(losses.soft_target_kl(t, s, temperature=1.0)) == pytest.approx(kl_t1, abs=1e-6)
    # T = 2: softmax(t / 2) = [1, sqrt 3] / (1 + sqrt 3), scaled by T^2 = 4.
    p = np.array([1.0, math.sqrt(3.0)]) / (1 + math.sqrt(3.0))
    kl_t2 = 4 * sum(pi * math.log(pi / 0.5) for pi in p)
    assert F(losses.soft_target_kl(t, s, temperature=2.0)) == pytest.approx(kl_t2, abs=1e-6)
    # Weighted positions: the second (weight 0) is left out of the mean.
    t2 = np.stack([t[0], [5.0, -5.0]])[None]
    s2 = np.stack([s[0], [0.0, 0.0]])[None]
    w = np.array([[1.0, 0.0]], "float32")
    assert F(losses.soft_target_kl(t2, s2, 1.0, w)) == pytest.approx(kl_t1, abs=1e-6)
    assert F(losses.soft_target_kl(t, t, 2.0)) == pytest.approx(0.0, abs=1e-7)


def test_soft_cross_entropy_by_hand():
    t = np.array([[0.0, math.log(3.0)]], "float32")
    s = np.zeros((1, 2), "float32")
    assert F(losses.soft_cross_entropy(t, s)) == pytest.approx(math.log(2.0), abs=1e-6)
    # It is the KL plus the teacher's entropy.
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    s3 = np.array([[1.0, -2.0]], "float32")
    assert F(losses.soft_cross_entropy(t, s3)) == pytest.approx(
        F(losses.soft_target_kl(t, s3, 1.0)) + entropy, abs=1e-6
    )


def test_hidden_cosine_loss_by_hand():
    t = np.array([[[1.0, 0.0], [1.0, 0.0]]], "float32")
    s = np.array([[[1.0, 1.0], [-1.0, 0.0]]], "float32")
    mask = np.array([[1, 0]], "int32")
    assert F(losses.hidden_cosine_loss(t, s, mask)) == pytest.approx(1 - 1 / math.sqrt(2), abs=1e-6)
    assert F(losses.hidden_cosine_loss(t, s)) == pytest.approx(
        (1 - 1 / math.sqrt(2) + 2) / 2, abs=1e-6
    )


def test_hidden_mse_by_hand():
    t = np.array([[[1.0, 2.0], [9.0, 9.0]]], "float32")
    s = np.zeros((1, 2, 2), "float32")
    assert F(losses.hidden_mse(t, s, np.array([[1, 0]]))) == pytest.approx(2.5, abs=1e-6)
    assert F(losses.hidden_mse(t, s)) == pytest.approx((2.5 + 81) / 2, abs=1e-5)


def test_attention_score_mse_excludes_padding():
    # batch 1, 2 heads, 3 tokens of which the last is padding.
    rng = np.random.default_rng(0)
    t = rng.normal(size=(1, 2, 3, 3)).astype("float32")
    s = t.copy()
    s[0, 0, 0, 1] += 1.0  # real pair: counts
    s[0, 1, 1, 0] += 2.0  # real pair: counts
    s[0, 0, 2, 0] += 50.0  # padded query: ignored
    s[0, 1, 0, 2] += 50.0  # padded key: ignored
    mask = np.array([[1, 1, 0]], "int32")
    # 2 heads x 4 real (query, key) pairs = 8 terms.
    assert F(losses.attention_score_mse(t, s, mask)) == pytest.approx((1 + 4) / 8, abs=1e-6)
    assert F(losses.attention_score_mse(t, s)) == pytest.approx(
        (1 + 4 + 2500 + 2500) / 18, abs=1e-4
    )


def test_temperature_is_checked():
    t = np.zeros((1, 2), "float32")
    for bad in (0, -1.0, True, "2"):
        with pytest.raises(ValueError, match="temperature"):
            losses.soft_target_kl(t, t, temperature=bad)


def test_keras_logits_distillation_as_used_matches_the_kl():
    """The prediction-layer distiller uses keras.distillation's
    LogitsDistillation with a KLDivergence instance; its value is our KL
    (the string "kl_divergence" would compare raw logits in Keras 3.15)."""
    from keras.distillation import LogitsDistillation

    rng = np.random.default_rng(1)
    t, s = rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=(5, 3)).astype("float32")
    for temperature in (1.0, 2.0):
        ours = F(losses.soft_target_kl(t, s, temperature))
        keras_loss = LogitsDistillation(temperature=temperature, loss=keras.losses.KLDivergence())
        assert F(keras_loss.compute_loss(t, s)) == pytest.approx(ours, rel=1e-5)
