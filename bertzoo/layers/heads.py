"""Pre-training heads: the masked-LM head tied to the token embedding table.

(The NSP/SOP head is a plain `Dense(2)` on the pooled output; see
`bertzoo.models.pretrainer`.)
"""

import keras
from keras import ops

from bertzoo.layers.common import get_activation, kernel_initializer


def gather_positions(sequence, positions):
    """`(B, S, H)` vectors at `(B, P)` int positions -> `(B, P, H)`.

    Done as one `take` on the flattened `(B * S, H)` tensor with per-row
    offsets, which both backends lower to a single gather and which works with
    dynamic batch and sequence sizes.
    """
    batch = ops.shape(sequence)[0]
    seq_len = ops.shape(sequence)[1]
    width = sequence.shape[-1]
    flat = ops.reshape(sequence, (-1, width))  # (B*S, H)
    offsets = ops.arange(batch, dtype="int32")[:, None] * ops.cast(seq_len, "int32")
    index = ops.cast(positions, "int32") + offsets  # (B, P)
    return ops.take(flat, index, axis=0)  # (B, P, H)


@keras.saving.register_keras_serializable(package="bertzoo")
class MaskedLMHead(keras.layers.Layer):
    """BERT's masked-LM head, evaluated only at the masked positions:

        h = LN(act(Dense_E(gather(sequence, mask_positions))))   # (B, P, E)
        logits = h @ token_table^T + bias                         # (B, P, V)

    The output projection is the token embedding table itself (tied weights:
    the head owns no V x E matrix, only the V-wide bias). The transform is
    `Dense(embedding_dim)` so that, for ALBERT-style factorised embeddings
    (E < H), it maps H -> E and the logits tie to the E-wide table.

    Under a mixed dtype policy the projection runs in the compute dtype and
    the logits are returned in float32 (the bias is kept and added in
    float32), so the loss is computed in float32.

    Args:
        vocabulary_size: V, the number of token ids.
        embedding_dim: E, the width of the token table.
        token_embedding: the `keras.layers.Embedding` whose table is tied.
        activation: one of `bertzoo.layers.ACTIVATION_NAMES`.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initialiser.
        use_bias: biases in the transform's Dense layer and LayerNorm
            (ModernBERT has none there; the output bias is always kept).

    Example:
    >>> emb = keras.layers.Embedding(50, 8)
    >>> emb.build((None,))
    >>> head = MaskedLMHead(50, 8, token_embedding=emb)
    >>> seq = np.random.rand(2, 6, 12).astype("float32")
    >>> head(seq, np.array([[1, 3], [0, 5]], "int32")).shape
    (2, 2, 50)
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim,
        token_embedding=None,
        activation="gelu_approximate",
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if token_embedding is None:
            raise ValueError("MaskedLMHead needs the token_embedding layer whose table it ties to.")
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        # Not tracked as a sublayer: the table belongs to the backbone, and a
        # second owner would list (and save) it twice.
        object.__setattr__(self, "_token_embedding", token_embedding)
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.use_bias = use_bias
        self.dense = keras.layers.Dense(
            embedding_dim,
            activation=get_activation(activation),
            use_bias=use_bias,
            kernel_initializer=kernel_initializer(initializer_range),
            dtype=self.dtype_policy,
            name="transform_dense",
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, center=use_bias, dtype=self.dtype_policy, name="layer_norm"
        )

    @property
    def token_embedding(self):
        """The tied `keras.layers.Embedding` (owned by the backbone)."""
        return self._token_embedding

    def build(self, sequence_shape, mask_positions_shape=None):
        self.dense.build((None, None, sequence_shape[-1]))
        self.layer_norm.build((None, None, self.embedding_dim))
        # float32 and not autocast: added to the float32 logits.
        self.bias = self.add_weight(
            name="bias",
            shape=(self.vocabulary_size,),
            initializer="zeros",
            dtype="float32",
            autocast=False,
        )
        self.built = True

    def call(self, sequence, mask_positions):
        h = gather_positions(sequence, mask_positions)  # (B, P, H)
        h = self.layer_norm(self.dense(h))  # (B, P, E)
        table = ops.cast(self.token_embedding.embeddings, h.dtype)  # (V, E)
        logits = ops.matmul(h, ops.transpose(table))  # (B, P, V)
        return ops.cast(logits, "float32") + self.bias

    def compute_output_shape(self, sequence_shape, mask_positions_shape):
        return tuple(mask_positions_shape) + (self.vocabulary_size,)

    def compute_output_spec(self, sequence, mask_positions):
        shape = tuple(mask_positions.shape) + (self.vocabulary_size,)
        return keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        # The tied embedding layer is not serialised: the model that owns
        # both (BertPretrainer) rebuilds the head from its backbone.
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "embedding_dim": self.embedding_dim,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "initializer_range": self.initializer_range,
            "use_bias": self.use_bias,
        }
