"""Token + position + segment embeddings, with ALBERT's factorised projection,
RoBERTa's padding-aware positions and ModernBERT's tokens-only embeddings."""

import keras
from keras import ops

from bertzoo.input_checks import check_id_range, check_integer_ids, check_padding_mask, in_range
from bertzoo.layers.common import constructor_config, kernel_initializer
from bertzoo.layers.sequence_numbers import token_positions, tokens_before_sequence


@keras.saving.register_keras_serializable(package="bertzoo")
class BertEmbeddings(keras.layers.Layer):
    """Sum of token, learned absolute position and (optional) segment
    embeddings, then LayerNorm and dropout.

    When `embedding_dim != hidden_dim` (ALBERT, ELECTRA-small) the tables and
    the LayerNorm are `embedding_dim` wide and a Dense layer
    (`embedding_projection`) maps the result to `hidden_dim`.

    Positions are `0 .. S-1` (BERT), or, with `position_padding_id=p`
    (RoBERTa, XLM-R, KLUE-RoBERTa: p = 1, their padding token id), counted
    over the non-padding tokens from `p + 1` on, with every token whose id
    is `p` at position `p`, as fairseq and transformers'
    `create_position_ids_from_input_ids` do: `cumsum(id != p) * (id != p) + p`.
    Rows `0 .. p` of the table then serve padding only, so a sequence may be
    `max_sequence_length - p - 1` tokens long (RoBERTa: 514 rows, 512 tokens).

    Given a `padding_mask` that numbers the sequences of packed rows
    (`bertzoo.layers.sequence_numbers`), positions restart with each
    sequence: `0 ..` for BERT, `p + 1 ..` counted over the sequence's own
    tokens for RoBERTa. A 0/1 mask (or none) gives the positions above.

    With `learned_positions=False` there is no position table (ModernBERT:
    the attention layers rotate queries and keys by their positions
    instead); `max_sequence_length` still bounds the input length.

    Ids must be integers in `[0, vocabulary_size)` (tokens) and
    `[0, num_segments)` (segments); nothing is wrapped around or clipped.
    On values known when the layer runs (eager calls) another id is an
    `InputError` naming the input, the value and the valid range. Inside a
    traced graph (tf.function, jax.jit, `fit`/`predict`), where no exception
    can be raised under XLA, the embedding of such a token is NaN, which
    spreads through attention to its whole sequence (and makes a training
    loss NaN): a loud result instead of a silently wrong one. For valid ids
    this is an exact select, so results are bit-identical.

    Args:
        vocabulary_size: number of token ids.
        embedding_dim: width of the embedding tables.
        hidden_dim: width of the encoder; a projection is added when it
            differs from `embedding_dim`.
        max_sequence_length: number of learned positions.
        num_segments: number of segment (token type) ids; 0 for none
            (DistilBERT); 1 for RoBERTa (a single, always-added row).
        position_padding_id: None for positions `0 .. S-1`; RoBERTa's
            padding token id for its padding-aware positions (see above).
        dropout: dropout rate after the LayerNorm.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initialiser.
        learned_positions: add a learned position table.
        use_bias: biases in the LayerNorm and the projection.

    Example:
    >>> layer = BertEmbeddings(100, 16, 32, max_sequence_length=64, num_segments=2)
    >>> ids = np.zeros((2, 8), "int32")
    >>> layer(ids, ids).shape
    (2, 8, 32)
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim,
        hidden_dim,
        max_sequence_length,
        num_segments=2,
        position_padding_id=None,
        dropout=0.0,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        learned_positions=True,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.position_padding_id = position_padding_id
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.learned_positions = learned_positions
        self.use_bias = use_bias
        if position_padding_id is not None and not learned_positions:
            raise ValueError(
                "position_padding_id numbers the rows of a learned position table; "
                "learned_positions=False has none."
            )

        init = kernel_initializer(initializer_range)
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size,
            embedding_dim,
            embeddings_initializer=init,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.segment_embedding = None
        if num_segments > 0:
            self.segment_embedding = keras.layers.Embedding(
                num_segments,
                embedding_dim,
                embeddings_initializer=init,
                dtype=self.dtype_policy,
                name="segment_embedding",
            )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, center=use_bias, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="dropout")
        self.projection = None
        if embedding_dim != hidden_dim:
            self.projection = keras.layers.Dense(
                hidden_dim,
                use_bias=use_bias,
                kernel_initializer=init,
                dtype=self.dtype_policy,
                name="embedding_projection",
            )

    def build(self, token_ids_shape, segment_ids_shape=None, padding_mask_shape=None):
        self.token_embedding.build(token_ids_shape)
        self.position_embeddings = None
        if self.learned_positions:
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_sequence_length, self.embedding_dim),
                initializer=kernel_initializer(self.initializer_range),
            )
        if self.segment_embedding is not None:
            self.segment_embedding.build(token_ids_shape)
        table_shape = tuple(token_ids_shape) + (self.embedding_dim,)
        self.layer_norm.build(table_shape)
        if self.projection is not None:
            self.projection.build(table_shape)
        self.built = True

    @property
    def max_input_length(self):
        """The longest sequence the position table can embed."""
        if self.position_padding_id is None:
            return self.max_sequence_length
        return self.max_sequence_length - self.position_padding_id - 1

    def _positions(self, token_ids, padding_mask=None):
        """Position vectors `(B or 1, S, E)` for `token_ids`; with a
        `padding_mask`, restarting with each sequence of a packed row."""
        table = ops.convert_to_tensor(self.position_embeddings)
        if self.position_padding_id is None:
            seq_len = ops.shape(token_ids)[1]
            rows = ops.slice(table, (0, 0), (seq_len, self.embedding_dim))[None, :, :]  # (1, S, E)
            if padding_mask is None:
                return rows
            # Packed rows: each sequence from position 0. Where no sequence
            # restarts (everywhere under a 0/1 mask) the sliced rows
            # themselves are selected: XLA then compiles the sum it compiled
            # before packing, to the bit (a gather in their place moved
            # MiniLM's compiled outputs by 2e-6).
            before = tokens_before_sequence(padding_mask)  # (B, S)
            restarted = ops.take(table, token_positions(padding_mask), axis=0)  # (B, S, E)
            return ops.where(ops.equal(before, 0)[:, :, None], rows, restarted)
        pad = self.position_padding_id
        real = ops.cast(ops.not_equal(token_ids, pad), "int32")  # (B, S)
        counts = ops.cumsum(real, axis=1)  # (B, S)
        if padding_mask is not None:
            # Packed rows: count each sequence's own tokens only.
            counts = counts - tokens_before_sequence(padding_mask, counted=real)
        # A packed row of another layout than the documented one (unchecked
        # in graphs) must not index before the table.
        position_ids = ops.maximum(counts * real + pad, 0)  # (B, S)
        return ops.take(table, position_ids, axis=0)  # (B, S, E)

    @property
    def embeddings(self):
        """The token embedding table `(vocabulary_size, embedding_dim)`, which
        MLM heads tie their output projection to."""
        return self.token_embedding.embeddings

    def call(self, token_ids, segment_ids=None, padding_mask=None, training=None, project=True):
        """`padding_mask` (optional) restarts the positions of each
        sequence of a packed row (see above). `project=False` returns the
        `embedding_dim`-wide vectors before the E->H projection: ELECTRA's
        generator reads the discriminator's embeddings this way, through its
        own projection."""
        seq_len = token_ids.shape[1]
        if seq_len is not None and seq_len > self.max_input_length:
            reserved = ""
            if self.position_padding_id is not None:
                reserved = (
                    f", of which the first {self.position_padding_id + 1} serve padding "
                    f"(position_padding_id={self.position_padding_id}): at most "
                    f"{self.max_input_length} tokens"
                )
            raise ValueError(
                f"Input sequence length {seq_len} is longer than the model's "
                f"max_sequence_length={self.max_sequence_length} "
                f"{'learned ' if self.learned_positions else ''}positions{reserved}."
            )
        if self.segment_embedding is not None and segment_ids is None:
            raise ValueError(
                f"segment_ids are required: this model has num_segments={self.num_segments}."
            )
        # Out-of-range ids (issue 14): with known values (eager) an error;
        # in traced graphs, where none can be raised, the lookup reads row 0
        # instead and the token's output becomes NaN. Valid ids are untouched
        # (exact selects), so their results are bit-identical.
        check_integer_ids("token_ids", token_ids)
        check_id_range("token_ids", token_ids, self.vocabulary_size, "vocabulary_size")
        valid = in_range(token_ids, self.vocabulary_size)
        x = self.token_embedding(ops.where(valid, token_ids, 0))  # (B, S, E)
        if padding_mask is not None:
            check_padding_mask(padding_mask)
        if self.learned_positions:
            # Packed rows are for inference: a training step takes 0/1 masks
            # (the task models, pre-training and distillation write no other)
            # and skips the restart, whose gather of the table has a scatter
            # for its gradient (4x XLA's CPU step of bert_tiny).
            packed_mask = None if training else padding_mask
            x = x + ops.cast(self._positions(token_ids, packed_mask), x.dtype)
        if self.segment_embedding is not None:
            check_integer_ids("segment_ids", segment_ids)
            check_id_range("segment_ids", segment_ids, self.num_segments, "num_segments")
            valid_segment = in_range(segment_ids, self.num_segments)
            x = x + self.segment_embedding(ops.where(valid_segment, segment_ids, 0))
            valid = ops.logical_and(valid, valid_segment)
        x = self.layer_norm(x)
        # After the LayerNorm, not before: there XLA keeps the LayerNorm one
        # fused kernel, and the select costs nothing measurable.
        x = ops.where(valid[:, :, None], x, ops.cast(float("nan"), x.dtype))
        x = self.dropout_layer(x, training=training)
        if project and self.projection is not None:
            x = self.projection(x)  # (B, S, E) -> (B, S, H)
        return x

    def compute_output_shape(
        self, token_ids_shape, segment_ids_shape=None, padding_mask_shape=None
    ):
        return tuple(token_ids_shape) + (self.hidden_dim,)

    def get_config(self):
        return {**super().get_config(), **constructor_config(self)}
