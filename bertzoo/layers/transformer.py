"""The BERT transformer block: post-LayerNorm (BERT), or pre-LayerNorm with
a gated feed-forward layer (ModernBERT)."""

import keras

from bertzoo.layers.attention import BertSelfAttention
from bertzoo.layers.common import constructor_config, get_activation, kernel_initializer


@keras.saving.register_keras_serializable(package="bertzoo")
class BertTransformerBlock(keras.layers.Layer):
    """One encoder block. Post-LN, as in BERT:

        x = LN(x + Dropout(SelfAttention(x)))
        x = LN(x + Dropout(Dense_H(act(Dense_I(x)))))

    With `norm_first=True`, pre-LN, as in ModernBERT (the same LayerNorm
    layers, applied to each branch's input; none before the attention when
    `attention_norm=False`):

        x = x + Dropout(SelfAttention(LN(x)))
        x = x + Dropout(FeedForward(LN(x)))

    With `gated_feedforward=True` the feed-forward layer is a GLU (GeGLU for
    a GELU activation): `intermediate_dense` is `2 * intermediate_dim` wide,
    its first half activated and multiplied by its second half (the gate):
    `Dense_H(act(a) * g)` where `[a, g] = Dense_2I(x)`.

    Args:
        num_heads: attention heads.
        hidden_dim: model width.
        intermediate_dim: width of the feed-forward layer.
        activation: one of `bertzoo.layers.ACTIVATION_NAMES` ("gelu" is exact
            erf GELU, "gelu_approximate" the tanh form of Google's BERT/ALBERT).
        dropout: dropout on the residual branches.
        attention_dropout: dropout on the attention probabilities.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initialiser.
        norm_first: pre-LN instead of post-LN.
        attention_norm: with `norm_first`, a LayerNorm before the attention
            (ModernBERT's first block has none: the embedding LayerNorm
            comes just before it).
        use_bias: biases in the Dense layers and LayerNorms.
        gated_feedforward: a GLU feed-forward layer instead of BERT's.
        rope_theta: None, or the base of the attention's rotary positions.
        attention_window: None (global attention), or the width of the
            attention's sliding window (local attention).

    Example:
    >>> block = BertTransformerBlock(num_heads=2, hidden_dim=8, intermediate_dim=16)
    >>> block(np.random.rand(3, 5, 8).astype("float32")).shape
    (3, 5, 8)
    """

    def __init__(
        self,
        num_heads,
        hidden_dim,
        intermediate_dim,
        activation="gelu_approximate",
        dropout=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        norm_first=False,
        attention_norm=True,
        use_bias=True,
        gated_feedforward=False,
        rope_theta=None,
        attention_window=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.norm_first = norm_first
        self.attention_norm = attention_norm
        self.use_bias = use_bias
        self.gated_feedforward = gated_feedforward
        self.rope_theta = rope_theta
        self.attention_window = attention_window
        if not attention_norm and not norm_first:
            raise ValueError("attention_norm=False needs norm_first=True (a pre-LN block).")

        init = kernel_initializer(initializer_range)
        policy = self.dtype_policy

        def layer_norm(name):
            return keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, center=use_bias, dtype=policy, name=name
            )

        self.self_attention = BertSelfAttention(
            num_heads,
            hidden_dim,
            attention_dropout=attention_dropout,
            initializer_range=initializer_range,
            use_bias=use_bias,
            rope_theta=rope_theta,
            attention_window=attention_window,
            dtype=policy,
            name="self_attention",
        )
        self.attention_layer_norm = layer_norm("attention_layer_norm") if attention_norm else None
        # A gated layer activates half of its output itself (in `call`).
        self.intermediate_dense = keras.layers.Dense(
            2 * intermediate_dim if gated_feedforward else intermediate_dim,
            activation=None if gated_feedforward else get_activation(activation),
            use_bias=use_bias,
            kernel_initializer=init,
            dtype=policy,
            name="intermediate_dense",
        )
        self.output_dense = keras.layers.Dense(
            hidden_dim,
            use_bias=use_bias,
            kernel_initializer=init,
            dtype=policy,
            name="output_dense",
        )
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=policy, name="dropout")

    def build(self, inputs_shape, padding_mask_shape=None):
        inputs_shape = tuple(inputs_shape)
        self.self_attention.build(inputs_shape)
        if self.attention_layer_norm is not None:
            self.attention_layer_norm.build(inputs_shape)
        self.intermediate_dense.build(inputs_shape)
        self.output_dense.build(inputs_shape[:-1] + (self.intermediate_dim,))
        self.output_layer_norm.build(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        x = inputs
        if self.norm_first and self.attention_layer_norm is not None:
            x = self.attention_layer_norm(x)
        attended = self.self_attention(
            x,
            padding_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            attended, scores = attended
        x = inputs + self.dropout_layer(attended, training=training)
        if not self.norm_first:
            x = self.attention_layer_norm(x)
        h = self._feedforward(self.output_layer_norm(x) if self.norm_first else x)
        x = x + self.dropout_layer(h, training=training)
        if not self.norm_first:
            x = self.output_layer_norm(x)
        if return_attention_scores:
            return x, scores
        return x

    def _feedforward(self, x):
        h = self.intermediate_dense(x)  # (B, S, H) -> (B, S, I), or (B, S, 2I) gated
        if self.gated_feedforward:
            h = (
                get_activation(self.activation)(h[..., : self.intermediate_dim])
                * (h[..., self.intermediate_dim :])
            )  # (B, S, 2I) -> (B, S, I)
        return self.output_dense(h)  # (B, S, I) -> (B, S, H)

    def get_config(self):
        return {**super().get_config(), **constructor_config(self)}
