"""Rotary position embeddings (RoPE) and the sliding-window attention mask:
the position handling of ModernBERT-style encoders, in keras.ops."""

import numpy as np
from keras import ops


def rotary_inverse_frequencies(head_dim, theta):
    """`1 / theta^(2i / head_dim)` for `i < head_dim / 2`, in float32 as
    transformers computes them (the exponent in float32, then the power)."""
    exponents = np.arange(0, head_dim, 2, dtype="float32") / np.float32(head_dim)
    return (1.0 / (np.float32(theta) ** exponents)).astype("float32")  # (D/2,)


def apply_rotary(x, inverse_frequencies, positions=None):
    """Rotates `x` `(B, S, heads, D)` by its positions, the "rotate half"
    form of GPT-NeoX and transformers: the first and second halves of each
    head's features are the pairs rotated together. `positions`: None for
    `0 .. S-1` in every row, or `(B, S)` integers (packed rows: each
    sequence from 0, `bertzoo.layers.sequence_numbers.token_positions`).

    The angles and the rotation are computed in float32; the result has
    `x`'s dtype."""
    dtype = x.dtype
    x = ops.cast(x, "float32")
    if positions is None:
        positions = ops.arange(ops.shape(x)[1])[None, :]  # (1, S)
    positions = ops.cast(positions, "float32")  # (B or 1, S)
    frequencies = ops.convert_to_tensor(inverse_frequencies)[None, None, :]
    angles = positions[:, :, None] * frequencies  # (B or 1, S, D/2)
    angles = ops.concatenate([angles, angles], axis=-1)[:, :, None, :]  # (B or 1, S, 1, D)
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
