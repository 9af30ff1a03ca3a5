"""Pooling token vectors into one vector per sequence: per row, or per
sequence of packed rows."""

import keras
from keras import ops

from bertzoo.layers.common import constructor_config

POOLING_MODES = ("cls", "mean", "max")


class TokenPooling(keras.layers.Layer):
    """`(batch, seq, dim)` + padding mask -> `(batch, dim)`; with
    `num_sequences=K`, packed rows -> `(batch, K, dim)`.

    Modes: "cls" (the first token's vector), "mean" (average over real
    tokens: sum / max(count, 1e-9), as sentence-transformers computes it) and
    "max" (elementwise maximum over real tokens). `normalize=True` divides by
    the L2 norm (floored at 1e-12, as torch's `normalize`).

    Per row (the default), every token whose mask is not 0 is the row's.
    With `num_sequences=K` the mask numbers the sequences of packed rows
    (`bertzoo.layers.sequence_numbers`) and sequence k of row b pools into
    `[b, k - 1]`: its first token for "cls", its tokens for "mean" and
    "max"; slots of a row with fewer than K sequences are zeros.

    Example:
    >>> pool = TokenPooling("mean")
    >>> x = np.ones((2, 5, 4), "float32")
    >>> pool(x, np.array([[1, 1, 2, 2, 0], [1, 1, 1, 1, 1]])).shape
    (2, 4)
    >>> pool(x, np.array([[1, 1, 2, 2, 0], [1, 1, 1, 1, 1]]), num_sequences=2).shape
    (2, 2, 4)
    """

    def __init__(self, mode="mean", normalize=False, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(f"Unknown pooling {mode!r}. Valid: {', '.join(POOLING_MODES)}.")
        self.mode = mode
        self.normalize = bool(normalize)

    def call(self, sequence, padding_mask, num_sequences=None):
        sequence = ops.cast(sequence, "float32")
        if num_sequences is not None:
            return self._normalized(_pool_packed(sequence, padding_mask, self.mode, num_sequences))
        mask = ops.cast(ops.greater(padding_mask, 0), "float32")[:, :, None]
        if self.mode == "cls":
            pooled = sequence[:, 0, :]
        elif self.mode == "mean":
            pooled = ops.sum(sequence * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
        else:
            pooled = ops.max(ops.where(mask > 0, sequence, -1e9), axis=1)
        return self._normalized(pooled)

    def _normalized(self, pooled):
        if not self.normalize:
            return pooled
        norm = ops.sqrt(ops.sum(ops.square(pooled), axis=-1, keepdims=True))
        return pooled / ops.maximum(norm, 1e-12)

    def compute_output_spec(self, sequence, padding_mask, num_sequences=None):
        shape = (sequence.shape[0], sequence.shape[-1])
        if num_sequences is not None:
            shape = (sequence.shape[0], num_sequences, sequence.shape[-1])
        return keras.KerasTensor(shape, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), **constructor_config(self)}


def _pool_packed(sequence, padding_mask, mode, num_sequences):
    """`(B, S, H)` float32 + sequence numbers `(B, S)` -> `(B, K, H)`,
    `K = num_sequences` (a Python int): one segment per (row, sequence),
    tokens numbered above K (and padding) in a last, dropped slot."""
    k = int(num_sequences)
    shape = ops.shape(sequence)
    batch, seq_len, width = shape[0], shape[1], sequence.shape[-1]
    numbers = ops.cast(padding_mask, "int32")
    slot = ops.where(ops.logical_and(numbers > 0, numbers <= k), numbers - 1, k)  # (B, S)
    segments = ops.reshape(slot + ops.arange(batch, dtype="int32")[:, None] * (k + 1), (-1,))
    count = batch * (k + 1)
    ones = ops.ones_like(segments, dtype="float32")
    counts = ops.reshape(ops.segment_sum(ones, segments, count), (batch, k + 1))[:, :k]  # (B, K)
    tokens = ops.reshape(sequence, (-1, width))  # (B * S, H)
    if mode == "mean":
        sums = ops.reshape(ops.segment_sum(tokens, segments, count), (batch, k + 1, width))
        pooled = sums[:, :k] / ops.maximum(counts, 1e-9)[:, :, None]
    elif mode == "max":
        maxima = ops.reshape(ops.segment_max(tokens, segments, count), (batch, k + 1, width))
        pooled = maxima[:, :k]
    else:
        # Sequence k starts after sequences 1 .. k - 1 (the packed layout).
        starts = ops.cast(ops.cumsum(counts, axis=1) - counts, "int32")  # (B, K)
        starts = ops.minimum(starts, seq_len - 1)
        pooled = ops.take_along_axis(sequence, starts[:, :, None], axis=1)  # (B, K, H)
    # Empty slots (a row with fewer sequences): zeros, not -inf or NaN.
    return ops.where(counts[:, :, None] > 0, pooled, 0.0)
