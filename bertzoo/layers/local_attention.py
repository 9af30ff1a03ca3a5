"""Sliding-window attention in blocks: local attention whose cost grows with
sequence x window instead of sequence squared (keras.ops only).

A query at position i sees the keys at `|i - j| <= half`, `half = window //
2` (ModernBERT: window 128, 64 each side). The sequence is cut into blocks
of `half` positions; the queries of block k can only see keys in blocks
k - 1, k and k + 1, so each block attends to those `3 * half` keys, with
the band and the padding masked inside them. Scores: `S x 1.5 window`
instead of `S x S`. Masked keys get zero weight in both forms, so the result
equals the banded `S x S` computation (float summation order aside:
within 1e-6 in float32) for any length, padding included: a query with no
visible key (in a padded tail longer than `half`) gets the average of all
values, as the banded form's softmax over `S` equally masked logits gives.
In packed rows (a padding mask numbering sequences) a query's keys are
those of its own sequence within the window, in both forms alike.
"""

import numpy as np
from keras import ops

from bertzoo.layers.sequence_numbers import attention_mask

# The layout's length switch and block length live without Keras, for the
# planner too.
from bertzoo.local_layout import BLOCKED_MIN_LENGTH, local_attention_blocks

__all__ = ["BLOCKED_MIN_LENGTH", "blocked_sliding_window_attention", "local_attention_blocks"]


def _block_band(window):
    """`(b, 3b)` bool, `b` the block length: query t of a block (position
    `k b + t`) may see key s of its three-block span (position `(k - 1) b +
    s`) when `|t + b - s| <= window // 2`."""
    b = local_attention_blocks(window)
    t = np.arange(b)[:, None]
    s = np.arange(3 * b)[None, :]
    return np.abs(t + b - s) <= window // 2


def blocked_sliding_window_attention(query, key, value, padding_mask, window, attend):
    """Local attention of `query`, `key`, `value` `(B, S, heads, D)` (rotary
    positions already applied) in blocks; `padding_mask` `(B, S)` (1: a
    token, 0: padding; or packed rows' sequence numbers, a query seeing its
    own sequence only) or None.

    `attend(q, k, v, mask)` computes the attention of `q` `(B', T, heads, D)`
    over `k`, `v` `(B', S', heads, D)` under a bool `mask` broadcastable to
    `(B', heads, T, S')`, and returns `(B', T, heads, D)`: the layer's own
    fused or explicit path, run here on `B' = B * blocks` rows of `T =
    window // 2` queries and `S' = 3 T` keys. Returns `(B, S, heads, D)`."""
    b = local_attention_blocks(window)
    shape = ops.shape(query)
    batch, seq_len, heads, depth = shape[0], shape[1], query.shape[2], query.shape[3]
    num_blocks = (seq_len + b - 1) // b
    tail = num_blocks * b - seq_len  # queries and keys past the end, masked
    if padding_mask is None:
        numbers = ops.ones((batch, seq_len), "int32")
    else:
        numbers = ops.cast(padding_mask, "int32")

    def pad(x, before, after):
        widths = [[0, 0], [before, after]] + [[0, 0]] * (len(x.shape) - 2)
        return ops.pad(x, widths)

    def spans(x):
        # (B, S, ...) -> (B * blocks, 3b, ...): block k's keys are blocks
        # k - 1, k, k + 1, with a block of zeros (masked) before and after.
        x = pad(x, b, tail + b)
        x = ops.reshape(x, (batch, num_blocks + 2, b) + tuple(x.shape[2:]))
        x = ops.concatenate([x[:, :-2], x[:, 1:-1], x[:, 2:]], axis=2)
        return ops.reshape(x, (-1, 3 * b) + tuple(x.shape[3:]))

    q = ops.reshape(pad(query, 0, tail), (-1, b, heads, depth))  # (B * blocks, b, heads, D)
    k, v = spans(key), spans(value)  # (B * blocks, 3b, heads, D)
    query_numbers = ops.reshape(pad(numbers, 0, tail), (-1, b))  # (B * blocks, b)
    visible = attention_mask(query_numbers, spans(numbers))  # (B * blocks, 1, b, 3b)
    mask = ops.logical_and(visible, ops.convert_to_tensor(_block_band(window))[None, None])
    context = attend(q, k, v, mask)  # (B * blocks, b, heads, D)
    context = ops.reshape(context, (batch, num_blocks * b, heads, depth))[:, :seq_len]
    if padding_mask is not None:
        # A query with no visible key (in a padded tail longer than `half`):
        # the banded form's softmax over `S` equal masked logits averages
        # every value; so does this, to stay equal at padding positions too.
        seen = ops.any(ops.reshape(mask, (batch, num_blocks * b, 3 * b)), axis=-1)
        seen = seen[:, :seq_len, None, None]  # (B, S, 1, 1)
        average = ops.mean(ops.cast(value, "float32"), axis=1, keepdims=True)
        context = ops.where(seen, context, ops.cast(average, context.dtype))
    return context
