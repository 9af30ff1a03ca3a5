"""The post-LayerNorm BERT transformer block."""

import keras

from bertzoo.layers.attention import BertSelfAttention
from bertzoo.layers.common import constructor_config, get_activation, kernel_initializer


@keras.saving.register_keras_serializable(package="bertzoo")
class BertTransformerBlock(keras.layers.Layer):
    """One post-LN encoder block, as in BERT:

        x = LN(x + Dropout(SelfAttention(x)))
        x = LN(x + Dropout(Dense_H(act(Dense_I(x)))))

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

        init = kernel_initializer(initializer_range)
        policy = self.dtype_policy
        self.self_attention = BertSelfAttention(
            num_heads,
            hidden_dim,
            attention_dropout=attention_dropout,
            initializer_range=initializer_range,
            dtype=policy,
            name="self_attention",
        )
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="attention_layer_norm"
        )
        self.intermediate_dense = keras.layers.Dense(
            intermediate_dim,
            activation=get_activation(activation),
            kernel_initializer=init,
            dtype=policy,
            name="intermediate_dense",
        )
        self.output_dense = keras.layers.Dense(
            hidden_dim, kernel_initializer=init, dtype=policy, name="output_dense"
        )
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="output_layer_norm"
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=policy, name="dropout")

    def build(self, inputs_shape, padding_mask_shape=None):
        inputs_shape = tuple(inputs_shape)
        self.self_attention.build(inputs_shape)
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
        attended = self.self_attention(
            inputs,
            padding_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            attended, scores = attended
        x = self.attention_layer_norm(inputs + self.dropout_layer(attended, training=training))
        h = self.output_dense(self.intermediate_dense(x))  # H -> I -> H
        x = self.output_layer_norm(x + self.dropout_layer(h, training=training))
        if return_attention_scores:
            return x, scores
        return x

    def get_config(self):
        return {**super().get_config(), **constructor_config(self)}
