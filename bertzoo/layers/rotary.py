"""Rotary position embeddings (RoPE) and the sliding-window attention mask:
the position handling of ModernBERT-style encoders, in keras.ops."""

import numpy as np
from keras import ops


def rotary_inverse_frequencies(head_dim, theta):
    """`1 / theta^(2i / head_dim)` for `i < head_dim / 2`, in float32 as
    transformers computes them (the exponent in float32, then the power)."""
    exponents = np.arange(0, head_dim, 2, dtype="float32") / np.float32(head_dim)
    return (1.0 / (np.float32(theta) ** exponents)).astype("float32")  # (D/2,)


def apply_rotary(x, inverse_frequencies):
    """Rotates `x` `(B, S, heads, D)` by its positions `0 .. S-1`, the
    "rotate half" form of GPT-NeoX and transformers: the first and second
    halves of each head's features are the pairs rotated together.

    The angles and the rotation are computed in float32; the result has
    `x`'s dtype."""
    dtype = x.dtype
    x = ops.cast(x, "float32")
    positions = ops.cast(ops.arange(ops.shape(x)[1]), "float32")  # (S,)
    angles = positions[:, None] * ops.convert_to_tensor(inverse_frequencies)[None, :]  # (S, D/2)
    angles = ops.concatenate([angles, angles], axis=-1)[None, :, None, :]  # (1, S, 1, D)
    half = x.shape[-1] // 2
    rotated = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return ops.cast(x * ops.cos(angles) + rotated * ops.sin(angles), dtype)


def sliding_window_mask(seq_len, window):
    """`(S, S)` bool: query i may attend to key j when `|i - j| <= window // 2`
    (ModernBERT's local attention: a window of 128 sees 64 tokens each side).

    This materialises the band as a full mask, so local layers still cost
    `S^2`; the mask only restricts what they see."""
    positions = ops.arange(seq_len)
    distance = ops.abs(positions[:, None] - positions[None, :])
    return ops.less_equal(distance, window // 2)
