"""Bidirectional multi-head self-attention under a padding mask that may
number the sequences of packed rows (`bertzoo.layers.sequence_numbers`)."""

import math

import keras
from keras import ops

from bertzoo.layers.common import constructor_config, kernel_initializer
from bertzoo.layers.local_attention import (
    BLOCKED_MIN_LENGTH,
    blocked_sliding_window_attention,
)
from bertzoo.layers.rotary import apply_rotary, rotary_inverse_frequencies, sliding_window_mask
from bertzoo.layers.sequence_numbers import attention_mask, token_positions

# Added to masked logits before the softmax. Finite (not -inf) so a row that is
# entirely masked gives a uniform distribution instead of NaNs, and the same
# order of magnitude as Keras' fused path so both paths agree exactly.
_MASK_VALUE = -0.7 * float(3.4028234663852886e38)


def _scores(q, k, scale):
    """`QK^T * scale` `(B, heads, T, S)`, in float32 so that bf16 runs keep a
    precise softmax."""
    return ops.einsum("btnh,bsnh->bnts", ops.cast(q, "float32"), ops.cast(k, "float32")) * scale


@keras.saving.register_keras_serializable(package="bertzoo")
class BertSelfAttention(keras.layers.Layer):
    """Multi-head self-attention: `query`, `key`, `value` and `attention_output`
    Dense layers, scores `QK^T / sqrt(head_dim)`, padding masked on the key side.

    `padding_mask` `(B, S)`: 1 for tokens, 0 for padding; or, in packed
    rows, 1..k numbering the row's sequences: a token then sees only its
    own sequence's tokens and rotary positions restart with each sequence
    (`bertzoo.layers.sequence_numbers`). A 0/1 mask computes what the
    key-side mask alone computes, to the bit.

    The default path is `keras.ops.dot_product_attention`: under JAX on a
    GPU with cuDNN (Ampere or newer, float16/bfloat16) cuDNN's flash
    attention, on TPUs the splash kernel; on CPU, under TensorFlow and
    JAX alike, the same einsum-softmax-einsum as the explicit path, compiled
    by XLA (measured on 2 cores: neither is faster; benchmarks/long_context.py).
    The explicit path, which also returns the pre-softmax scores, runs when
    `return_attention_scores=True` or when attention-probability dropout is
    active (training with `attention_dropout > 0`), since the fused op has
    no dropout.

    ModernBERT-style layers add rotary positions (`rope_theta`: queries and
    keys rotated by their positions before the scores) and local attention
    (`attention_window`: a query sees the keys within `attention_window // 2`
    positions on either side, besides the padding mask). Local attention
    runs banded (`S x S` scores under a band mask) up to
    `bertzoo.layers.local_attention.BLOCKED_MIN_LENGTH` tokens and in blocks
    (`S x 1.5 window` scores, the same result) on longer or
    unknown-when-traced lengths; the attribute `local_attention_path`
    ("auto", "banded", "blocked") overrides that choice. Scores requested:
    banded (they are `S x S`).

    Args:
        num_heads: number of attention heads; must divide `hidden_dim`.
        hidden_dim: model width.
        attention_dropout: dropout rate on the attention probabilities.
        initializer_range: stddev of the truncated-normal initialiser.
        use_bias: biases in the four Dense layers.
        rope_theta: None, or the base of rotary position embeddings.
        attention_window: None (global attention), or the sliding window's
            width (local attention).

    Example:
    >>> layer = BertSelfAttention(num_heads=2, hidden_dim=8)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> out, scores = layer(x, np.ones((3, 5), "int32"), return_attention_scores=True)
    >>> out.shape, scores.shape
    ((3, 5, 8), (3, 2, 5, 5))
    """

    def __init__(
        self,
        num_heads,
        hidden_dim,
        attention_dropout=0.0,
        initializer_range=0.02,
        use_bias=True,
        rope_theta=None,
        attention_window=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_dim % num_heads:
            raise ValueError(f"hidden_dim={hidden_dim} must be divisible by num_heads={num_heads}.")
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.head_dim = hidden_dim // num_heads
        self.attention_dropout = attention_dropout
        self.initializer_range = initializer_range
        self.use_bias = use_bias
        self.rope_theta = rope_theta
        self.attention_window = attention_window
        # "auto", "blocked" or "banded": how local layers compute (an
        # attribute, not a constructor argument: the result is the same).
        self.local_attention_path = "auto"
        self._inverse_frequencies = None
        if rope_theta is not None:
            if self.head_dim % 2:
                raise ValueError(
                    f"rotary positions need an even head size, got hidden_dim / num_heads = "
                    f"{self.head_dim}."
                )
            self._inverse_frequencies = rotary_inverse_frequencies(self.head_dim, rope_theta)

        def dense(name):
            return keras.layers.Dense(
                hidden_dim,
                use_bias=use_bias,
                kernel_initializer=kernel_initializer(initializer_range),
                dtype=self.dtype_policy,
                name=name,
            )

        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.attention_output = dense("attention_output")
        self.dropout_layer = keras.layers.Dropout(
            attention_dropout, dtype=self.dtype_policy, name="attention_dropout"
        )

    def build(self, inputs_shape, padding_mask_shape=None):
        for layer in (self.query, self.key, self.value, self.attention_output):
            layer.build(inputs_shape)
        self.built = True

    def _split_heads(self, x):
        # (B, S, H) -> (B, S, heads, head_dim)
        return ops.reshape(x, tuple(ops.shape(x)[:2]) + (self.num_heads, self.head_dim))

    def call(
        self,
        inputs,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        q = self._split_heads(self.query(inputs))
        k = self._split_heads(self.key(inputs))
        v = self._split_heads(self.value(inputs))
        if self._inverse_frequencies is not None:
            # Packed rows restart rotary positions at inference only (see
            # BertEmbeddings: a training step takes 0/1 masks).
            restart = padding_mask is not None and not training
            positions = token_positions(padding_mask) if restart else None
            q = apply_rotary(q, self._inverse_frequencies, positions)
            k = apply_rotary(k, self._inverse_frequencies, positions)
        use_dropout = bool(training) and self.attention_dropout > 0
        scale = 1.0 / math.sqrt(self.head_dim)
        scores = _scores(q, k, scale) if return_attention_scores else None  # (B, heads, T, S)

        def attend(q, k, v, mask):
            # (B, T, heads, D) x (B, S, heads, D) -> (B, T, heads, D): the
            # explicit path on the whole sequence or on blocks, else fused.
            if return_attention_scores or use_dropout:
                logits = scores if scores is not None else _scores(q, k, scale)
                if mask is not None:
                    logits = ops.where(mask, logits, _MASK_VALUE)
                probs = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
                probs = self.dropout_layer(probs, training=training)
                return ops.einsum("bnts,bsnh->btnh", probs, v)
            return ops.dot_product_attention(q, k, v, mask=mask, scale=scale)

        if self._blocked(q, return_attention_scores):
            context = blocked_sliding_window_attention(
                q, k, v, padding_mask, self.attention_window, attend
            )
        else:
            mask = None
            if padding_mask is not None:
                # (B, S) -> (B, 1, S, S), broadcast over heads: real keys of
                # the query's own sequence (0/1 masks: the key side only).
                mask = attention_mask(padding_mask, padding_mask)
            if self.attention_window is not None:
                # (S, S) band -> (1, 1, S, S); with padding (B, 1, S, S).
                band = sliding_window_mask(ops.shape(q)[1], self.attention_window)[None, None]
                mask = band if mask is None else ops.logical_and(mask, band)
            context = attend(q, k, v, mask)  # (B, T, heads, head_dim)
        context = ops.reshape(context, tuple(ops.shape(context)[:2]) + (self.hidden_dim,))
        output = self.attention_output(context)
        if return_attention_scores:
            return output, scores
        return output

    def _blocked(self, q, return_attention_scores):
        """Whether this call runs local attention in blocks
        (`local_attention_path`; "auto": sequences longer than
        `BLOCKED_MIN_LENGTH`, or of a length unknown in a TensorFlow graph)."""
        if self.local_attention_path not in ("auto", "banded", "blocked"):
            raise ValueError(
                f"local_attention_path must be 'auto', 'banded' or 'blocked', got "
                f"{self.local_attention_path!r}."
            )
        if self.attention_window is None or return_attention_scores:
            return False
        if self.local_attention_path != "auto":
            return self.local_attention_path == "blocked"
        seq_len = q.shape[1]
        if not isinstance(seq_len, int):
            # A TensorFlow graph traced for any length runs as traced: in
            # blocks. JAX (and torch) run at known lengths; theirs is unknown
            # (None, or JAX's symbolic dimension) only while Keras infers
            # output shapes, where either form does.
            return keras.backend.backend() == "tensorflow"
        return seq_len > BLOCKED_MIN_LENGTH

    def get_config(self):
        return {**super().get_config(), **constructor_config(self)}
