"""Pooling token vectors into one vector per sequence."""

import keras
from keras import ops

from bertzoo.layers.common import constructor_config

POOLING_MODES = ("cls", "mean", "max")


class TokenPooling(keras.layers.Layer):
    """`(batch, seq, dim)` + padding mask -> `(batch, dim)`.

    Modes: "cls" (the first token's vector), "mean" (average over real
    tokens: sum / max(count, 1e-9), as sentence-transformers computes it) and
    "max" (elementwise maximum over real tokens). `normalize=True` divides by
    the L2 norm (floored at 1e-12, as torch's `normalize`).
    """

    def __init__(self, mode="mean", normalize=False, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(f"Unknown pooling {mode!r}. Valid: {', '.join(POOLING_MODES)}.")
        self.mode = mode
        self.normalize = bool(normalize)

    def call(self, sequence, padding_mask):
        sequence = ops.cast(sequence, "float32")
        mask = ops.cast(padding_mask, "float32")[:, :, None]
        if self.mode == "cls":
            pooled = sequence[:, 0, :]
        elif self.mode == "mean":
            pooled = ops.sum(sequence * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
        else:
            pooled = ops.max(ops.where(mask > 0, sequence, -1e9), axis=1)
        if self.normalize:
            norm = ops.sqrt(ops.sum(ops.square(pooled), axis=-1, keepdims=True))
            pooled = pooled / ops.maximum(norm, 1e-12)
        return pooled

    def compute_output_shape(self, sequence_shape, padding_mask_shape=None):
        return (sequence_shape[0], sequence_shape[-1])

    def get_config(self):
        return {**super().get_config(), **constructor_config(self)}
