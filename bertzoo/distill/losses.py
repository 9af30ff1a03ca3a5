"""Distillation losses (DistilBERT and TinyBERT), written with `keras.ops` so
they run on every backend. Every loss computes in float32 and returns a
scalar.

Weights/masks: `weights` are per-position weights (e.g. the padding mask or
MLM weights) of shape `logits.shape[:-1]`; a loss averages over weighted
positions, `sum(loss * w) / sum(w)`. `None` averages over all positions.
"""

from keras import ops

from bertzoo.layers.losses import weighted_mean
from bertzoo.layers.rotary import sliding_window_mask


def _f32(x):
    return ops.cast(x, "float32")


def check_temperature(temperature):
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or temperature <= 0
    ):
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}.")


def soft_target_kl(teacher_logits, student_logits, temperature=2.0, weights=None):
    """DistilBERT's soft-target loss: `T^2 * KL(softmax(t/T) || softmax(s/T))`,
    summed over the last axis and averaged over (weighted) positions. The
    `T^2` factor keeps gradient sizes independent of `T` (Hinton et al.)."""
    check_temperature(temperature)
    t = _f32(teacher_logits) / temperature
    s = _f32(student_logits) / temperature
    log_p_t = ops.log_softmax(t, axis=-1)
    kl = ops.sum(ops.exp(log_p_t) * (log_p_t - ops.log_softmax(s, axis=-1)), axis=-1)
    return (temperature**2) * weighted_mean(kl, weights)


def soft_cross_entropy(teacher_logits, student_logits, temperature=1.0, weights=None):
    """TinyBERT's prediction-layer loss: `-softmax(t/T) . log_softmax(s/T)`,
    averaged over (weighted) examples. It differs from the KL divergence by
    the teacher's entropy, a constant for the student, so both give the same
    gradients."""
    check_temperature(temperature)
    p_t = ops.softmax(_f32(teacher_logits) / temperature, axis=-1)
    ce = -ops.sum(p_t * ops.log_softmax(_f32(student_logits) / temperature, axis=-1), axis=-1)
    return weighted_mean(ce, weights)


def hidden_cosine_loss(teacher_hidden, student_hidden, weights=None):
    """DistilBERT's cosine loss: `1 - cos(h_t, h_s)` per token, averaged over
    (weighted, e.g. non-padding) tokens. Needs equal widths."""
    t = _f32(teacher_hidden)
    s = _f32(student_hidden)
    dot = ops.sum(t * s, axis=-1)
    norms = ops.sqrt(ops.sum(t * t, axis=-1) * ops.sum(s * s, axis=-1))
    cos = dot / ops.maximum(norms, 1e-12)
    return weighted_mean(1.0 - cos, weights)


def hidden_mse(teacher_hidden, student_hidden, weights=None):
    """TinyBERT's embedding/hidden-state loss: the mean squared difference
    over features and (weighted, e.g. non-padding) tokens. Pass the student
    states already projected to the teacher width (`h_s W`)."""
    diff = _f32(teacher_hidden) - _f32(student_hidden)
    per_token = ops.mean(diff * diff, axis=-1)
    return weighted_mean(per_token, weights)


def attention_score_mse(teacher_scores, student_scores, padding_mask=None, window=None):
    """TinyBERT's attention loss: the mean squared difference of pre-softmax
    attention scores `(batch, heads, query, key)`, over heads and the
    (query, key) pairs where both tokens are real; padded positions are left
    out of the sum and the count. Needs equal head counts.

    `window`: the sliding window of a local attention layer (ModernBERT's;
    `sliding_window_mask`): only the pairs within it count, the scores a
    local layer's softmax reads. For a teacher and a student layer of
    different windows pass the narrower: the pairs both layers see."""
    diff = _f32(teacher_scores) - _f32(student_scores)
    squared = diff * diff
    if padding_mask is None and window is None:
        return ops.mean(squared)
    shape = ops.shape(squared)
    if padding_mask is None:
        pairs = ops.ones((1, 1, shape[2], shape[3]), "float32")
    else:
        m = _f32(padding_mask)
        pairs = m[:, None, :, None] * m[:, None, None, :]  # (B, 1, Q, K)
    if window is not None:
        pairs = pairs * _f32(sliding_window_mask(shape[2], window))[None, None]
    count = ops.sum(ops.broadcast_to(pairs, (shape[0], 1, shape[2], shape[3])))
    heads = ops.cast(shape[1], "float32")
    return ops.sum(squared * pairs) / ops.maximum(count * heads, 1e-9)
