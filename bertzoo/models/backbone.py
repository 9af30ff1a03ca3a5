"""The one BERT-family encoder; every variant is a configuration of it."""

import math
import sys
from collections.abc import Mapping

import keras
import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.input_checks import check_id_range, check_model_inputs, check_padding_mask
from bertzoo.layers import (
    ACTIVATION_NAMES,
    BertEmbeddings,
    BertTransformerBlock,
    kernel_initializer,
)
from bertzoo.layers.common import constructor_args, constructor_config, group_of_layer
from bertzoo.loader_registry import preset_loader
from bertzoo.models import litert
from bertzoo.models.int8 import QuantizeMethods, predict_litert, saved_graph, use_saved_graph
from bertzoo.models.lora import LoraMethods
from bertzoo.models.quantize import layer_quantization_mode, quantize

# from_preset(..., **overrides) may change only these: they do not change the
# architecture or the meaning of loaded weights.
OVERRIDABLE_KEYS = ("attention_dropout", "dropout", "dtype", "name", "trainable")


class _PresetsDescriptor:
    """`BertBackbone.presets`: the built-in presets, name -> metadata."""

    def __get__(self, obj, cls):
        return preset_lib.list_presets()


class _ScoresTap(keras.layers.Layer):
    """Calls a transformer block with `return_attention_scores=True`.

    Keras functional graphs assume every call of a layer returns the structure
    of its first call; the backbone's blocks were first called without scores,
    so the feature model calls them through this thin wrapper (same block
    object, same weights) instead of directly.
    """

    def __init__(self, block, **kwargs):
        super().__init__(name=f"{block.name}_scores", dtype=block.dtype_policy, **kwargs)
        self.block = block

    def call(self, inputs, padding_mask, training=None):
        return self.block(inputs, padding_mask, training=training, return_attention_scores=True)

    def get_config(self):
        raise NotImplementedError(
            "Models built on BertBackbone.feature_model() are not saved as one "
            "file: save the backbone (save_to_preset or .keras) and call "
            "feature_model() again after loading."
        )


def _encode(inputs, embeddings, blocks, pooler, final_norm, num_layers, num_groups, features):
    """Runs the encoder graph on (symbolic) inputs with the given layer
    objects. Called by the constructor and by `feature_model()`, so both models
    share the same layers and weights."""
    padding_mask = inputs["padding_mask"]
    x = embeddings(inputs["token_ids"], inputs.get("segment_ids"), padding_mask=padding_mask)
    hidden_states = [x]
    attention_scores = []
    if features:
        blocks = [_ScoresTap(block) for block in blocks]
    for i in range(num_layers):
        block = blocks[group_of_layer(i, num_layers, num_groups)]
        if features:
            x, scores = block(x, padding_mask)
            attention_scores.append(scores)
        else:
            x = block(x, padding_mask)
        hidden_states.append(x)
    if final_norm is not None:
        # Pre-LN encoders end with a LayerNorm; the last hidden state is the
        # normalised one, as transformers reports it.
        x = final_norm(x)
        hidden_states[-1] = x
    outputs = {"sequence_output": x}
    if pooler is not None:
        # tanh(Dense(sequence_output[:, 0])): the [CLS] vector.
        outputs["pooled_output"] = pooler(x[:, 0, :])
    if features:
        outputs["hidden_states"] = hidden_states
        outputs["attention_scores"] = attention_scores
    return outputs


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


def _check_positive(name, value, nullable=False):
    """A finite number > 0 (NaN and infinities are refused: every output
    would be NaN), or None where `nullable`."""
    if value is None and nullable:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        kind = "a finite number > 0" + (" or null" if nullable else "")
        raise ValueError(f"{name} must be {kind}, got {value!r}.")


def _check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}.")


def _layer_attention(
    num_layers,
    num_heads,
    hidden_dim,
    num_groups,
    norm_first,
    position_padding_id,
    rope_theta,
    local_rope_theta,
    local_attention_window,
    global_attention_every,
    max_sequence_length,
):
    """Checks the position and attention-pattern arguments; returns each
    block's attention window (None: global) and RoPE base (None: learned
    positions)."""
    for name, value in (("rope_theta", rope_theta), ("local_rope_theta", local_rope_theta)):
        _check_positive(name, value, nullable=True)
    if rope_theta is None and local_rope_theta is not None:
        raise ValueError(
            "local_rope_theta needs rope_theta: rotary positions are set by rope_theta "
            "(null means a learned position table)."
        )
    if rope_theta is not None and position_padding_id is not None:
        raise ValueError(
            "position_padding_id numbers the rows of a learned position table; with "
            "rope_theta (rotary positions) there is none: leave it null."
        )
    if rope_theta is not None and (hidden_dim // num_heads) % 2:
        raise ValueError(
            f"rotary positions rotate pairs of features: hidden_dim / num_heads = "
            f"{hidden_dim // num_heads} must be even."
        )
    _check_int("global_attention_every", global_attention_every, 1)
    if local_attention_window is not None:
        _check_int("local_attention_window", local_attention_window, 2)
        if local_attention_window > max_sequence_length:
            # Wider than the positions, a local layer would see everything
            # (a global one), at the cost of a band as wide as the window.
            raise ValueError(
                f"local_attention_window={local_attention_window:,} is wider than "
                f"max_sequence_length={max_sequence_length:,}: a local layer sees at most the "
                "sequence. Use a window of at most the sequence length."
            )
        if global_attention_every < 2:
            raise ValueError(
                f"local_attention_window={local_attention_window} with "
                f"global_attention_every={global_attention_every} leaves no local layer; "
                "global_attention_every must be at least 2 (ModernBERT: 3)."
            )
    shared = num_groups != num_layers
    if shared and (norm_first or local_attention_window is not None):
        feature = "norm_first" if norm_first else "local_attention_window"
        raise ValueError(
            f"{feature} needs one block per layer (num_groups == num_layers); got "
            f"num_groups={num_groups}, num_layers={num_layers}."
        )
    windows, thetas = [], []
    for i in range(num_groups):
        local = local_attention_window is not None and i % global_attention_every != 0
        windows.append(local_attention_window if local else None)
        local_theta = rope_theta if local_rope_theta is None else local_rope_theta
        thetas.append(local_theta if local else rope_theta)
    return windows, thetas


# === Input checks (issue 14) ===
# Keras' functional models flatten a dict input by sorted key: an extra key
# ("label") silently moves the others onto the wrong inputs, and float ids
# are cast to int (3.7 -> 3). The backbone and its feature model check their
# inputs in `__call__` (eager and symbolic calls, and `predict`/`fit` under
# TensorFlow) and in `call` (JAX's `predict`/`fit` run `stateless_call`,
# which calls `call` directly). Ids out of range: `BertEmbeddings`.


def _first_input(args, kwargs):
    return args[0] if args else kwargs.get("inputs")


def check_predict_inputs(model, x):
    """Checks what `model.predict` is given, for `predict` overrides.

    `predict` checks a dict of arrays (ids in range too) or a
    `tf.data.Dataset`'s element spec before Keras starts: errors come
    early, and under JAX an exception inside Keras' predict loop would leave
    the model's variables emptied (Keras releases them for the loop)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        x = x.element_spec
        if isinstance(x, tuple) and x:
            x = x[0]  # (x, y) or (x, y, sample_weight)
    if not isinstance(x, Mapping):
        return  # generators and the like: checked when called
    check_model_inputs(x, model.input, model.name)
    embeddings = model._checked_embeddings()
    check_id_range("token_ids", x["token_ids"], embeddings.vocabulary_size, "vocabulary_size")
    if "segment_ids" in x:
        check_id_range("segment_ids", x["segment_ids"], embeddings.num_segments, "num_segments")
    check_padding_mask(x["padding_mask"])


class InputChecks:
    """Mixin for the functional models that take the backbone's input dict
    (the backbone, its feature model, the task models): the checks above
    in `__call__`, `call` and `predict`. `_checked_embeddings()` is the
    `BertEmbeddings` layer whose sizes bound the ids."""

    def _checked_embeddings(self):
        return self.get_layer("embeddings")

    def __call__(self, *args, **kwargs):
        check_model_inputs(_first_input(args, kwargs), self.input, self.name)
        return super().__call__(*args, **kwargs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        check_model_inputs(inputs, self.input, self.name)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    # Models whose outputs have a known layout set this: False when no output
    # has a position axis (classifiers), True when every output has one
    # (taggers, QA). `predict` on a dict of arrays then runs length-sorted,
    # trimmed batches through a function compiled once (bertzoo.batching);
    # None keeps Keras' predict loop.
    per_token_outputs = None

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        for batch in x if isinstance(x, list) else [x]:
            check_predict_inputs(self, batch)
        if litert.attached_runner(self) is not None:  # quantize("int8") on LiteRT
            if callbacks:
                raise TypeError("A LiteRT-int8 model's predict() takes no callbacks.")
            return predict_litert(self, x, steps)
        if self.per_token_outputs is not None and steps is None and callbacks is None:
            from bertzoo import batching

            if batching.is_array_batch(x):
                return batching.predict_by_length(
                    batching.compiled_forward(self),
                    x,
                    batch_size or 32,
                    np.shape(x["padding_mask"])[1],
                    per_token=self.per_token_outputs,
                )
        return super().predict(
            x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks
        )


class _BertFeatureModel(InputChecks, keras.Model):
    """`BertBackbone.feature_model()`: a functional model with the
    backbone's input checks."""


# === End of input checks ===


@keras.saving.register_keras_serializable(package="bertzoo")
class BertBackbone(InputChecks, LoraMethods, QuantizeMethods, keras.Model):
    """The BERT-family encoder: embeddings, `num_layers` post-LN transformer
    blocks and an optional pooler, as a functional `keras.Model`.

    Variants are configurations, not classes:
    - BERT: `embedding_dim` unset (= `hidden_dim`), `num_groups` unset
      (= `num_layers`, no sharing).
    - ALBERT: `embedding_dim < hidden_dim` (factorised embeddings with an E->H
      projection) and `num_groups < num_layers` (cross-layer sharing: layer i
      uses block `int(i / num_layers * num_groups)`; shared blocks are the same
      layer objects and their weights are counted once).
    - DistilBERT: `num_segments=0, use_pooler=False`.
    - RoBERTa, XLM-R, KLUE-RoBERTa: `num_segments=1` and
      `position_padding_id=1` (positions counted over non-padding tokens
      from 2, padding at position 1; 514 table rows for 512 tokens).
    - ModernBERT: `norm_first=True, use_bias=False, gated_feedforward=True`,
      rotary positions (`rope_theta`, `local_rope_theta`) and local
      attention in all layers but every `global_attention_every`-th
      (`local_attention_window`); `num_segments=0, use_pooler=False`.
    - TinyBERT, BERT-large, ...: sizes.

    Inputs: a dict with `token_ids`, `segment_ids` (absent when
    `num_segments=0`) and `padding_mask` (1 for real tokens, 0 for padding),
    each `(batch, seq)` int32. Outputs: a dict with `sequence_output`
    `(batch, seq, hidden_dim)` and, with a pooler, `pooled_output`
    `(batch, hidden_dim)`.

    Packed rows: `padding_mask` may number several sequences in one row
    (`1 1 1 2 2 3 3 0`: sequences 1, 2, 3, then padding). Each token then
    attends only to its own sequence, and positions (learned, RoBERTa's
    offset ones, rotary) restart with each sequence, so every sequence's
    `sequence_output` is the one it has alone (float rounding aside);
    `bertzoo.packing` packs, `TextEmbedder.predict(..., packing=True)`
    embeds that way. A 0/1 mask computes exactly what it did before.
    `pooled_output` is the row's first token (sequence 1's [CLS]). Packed
    rows are for inference: in training (`training=True`) positions do not
    restart, and the task models, pre-training and the distillers feed 0/1
    masks (a restart's gather would cost a training step a scatter).

    Inputs are checked (`bertzoo.errors.InputError`, a ValueError): exactly
    these keys (an extra one such as `label` would silently reorder Keras'
    inputs), integer dtypes (a bool padding mask too), and, where the values
    are known (eager calls, `predict` on arrays), ids in
    `[0, vocabulary_size)` and `[0, num_segments)`, and a packed mask's
    layout (`bertzoo.input_checks.check_padding_mask`). Inside compiled
    graphs an out-of-range id makes its sequence's outputs NaN (see
    `BertEmbeddings`).

    Per-layer hidden states and pre-softmax attention scores come from
    `feature_model()`, a second functional model over the same layers.

    Args:
        vocabulary_size: number of token ids.
        num_layers: number of transformer layers applied.
        num_heads: attention heads per layer; must divide `hidden_dim`.
        hidden_dim: model width H.
        intermediate_dim: feed-forward width I.
        embedding_dim: width E of the embedding tables; defaults to
            `hidden_dim` (no projection).
        num_groups: number of distinct parameter groups the layers are drawn
            from; defaults to `num_layers` (no sharing).
        num_segments: segment (token type) vocabulary; 0 for none.
        use_pooler: add the tanh pooler on the first token.
        activation: feed-forward activation, one of
            `bertzoo.layers.ACTIVATION_NAMES`.
        dropout: dropout on embeddings and residual branches.
        attention_dropout: dropout on attention probabilities; defaults to
            `dropout`. While it is active (training with a rate > 0) the
            explicit attention path runs instead of the fused one.
        max_sequence_length: number of learned positions (rows of the
            position table).
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initialiser.
        position_padding_id: None (BERT): token i is at position i. An id p
            (RoBERTa: 1, its padding token): positions count the tokens
            whose id is not p from p + 1 on, tokens with id p are at
            position p (see `BertEmbeddings`); inputs are then at most
            `max_sequence_length - p - 1` tokens long.
        norm_first: pre-LN blocks (ModernBERT): each LayerNorm normalises a
            branch's input, the first block has none before its attention
            (the embedding LayerNorm precedes it), and a final LayerNorm
            (`final_layer_norm`) follows the last block. Needs
            `num_groups == num_layers`.
        use_bias: biases in every Dense layer and LayerNorm of the encoder
            (ModernBERT: none).
        gated_feedforward: GLU feed-forward layers (`act(a) * g` with
            `[a, g]` a `2 * intermediate_dim` wide Dense; GeGLU with
            "gelu"), as ModernBERT.
        rope_theta: None: learned absolute positions (a position table). A
            number: rotary position embeddings (RoPE) with this base in the
            global attention layers, and no position table.
        local_rope_theta: the RoPE base of the local attention layers;
            defaults to `rope_theta`.
        local_attention_window: None: every layer attends globally. A width
            w: layers whose index is not a multiple of
            `global_attention_every` attend locally, query i to the keys j
            with `|i - j| <= w // 2` (ModernBERT: 128, 64 each side). The
            band is applied as a mask: local layers still cost `S^2`.
        global_attention_every: with `local_attention_window`, layer i
            attends globally when `i % global_attention_every == 0`
            (ModernBERT: 3); at least 2.
        dtype: a dtype policy name such as "float32" or "mixed_bfloat16".

    Example:
    >>> backbone = BertBackbone.from_preset("bert_tiny")
    >>> ids = np.array([[101, 7592, 102, 0]], "int32")
    >>> out = backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids),
    ...                 "padding_mask": (ids != 0).astype("int32")})
    >>> out["sequence_output"].shape, out["pooled_output"].shape
    ((1, 4, 128), (1, 128))
    """

    presets = _PresetsDescriptor()
    int8_graph_owner = "backbone"

    def __init__(
        self,
        vocabulary_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        embedding_dim=None,
        num_groups=None,
        num_segments=2,
        use_pooler=True,
        activation="gelu_approximate",
        dropout=0.1,
        attention_dropout=None,
        max_sequence_length=512,
        layer_norm_epsilon=1e-12,
        initializer_range=0.02,
        position_padding_id=None,
        norm_first=False,
        use_bias=True,
        gated_feedforward=False,
        rope_theta=None,
        local_rope_theta=None,
        local_attention_window=None,
        global_attention_every=1,
        dtype=None,
        **kwargs,
    ):
        embedding_dim = hidden_dim if embedding_dim is None else embedding_dim
        num_groups = num_layers if num_groups is None else num_groups
        # None means "same as dropout"; kept as None in the config so that a
        # dropout override also moves it.
        effective_attention_dropout = dropout if attention_dropout is None else attention_dropout
        for name, value, minimum in (
            ("vocabulary_size", vocabulary_size, 1),
            ("num_layers", num_layers, 1),
            ("num_heads", num_heads, 1),
            ("hidden_dim", hidden_dim, 1),
            ("intermediate_dim", intermediate_dim, 1),
            ("embedding_dim", embedding_dim, 1),
            ("num_groups", num_groups, 1),
            ("num_segments", num_segments, 0),
            ("max_sequence_length", max_sequence_length, 1),
        ):
            _check_int(name, value, minimum)
        if position_padding_id is not None:
            _check_int("position_padding_id", position_padding_id, 0)
            if position_padding_id + 1 >= max_sequence_length:
                raise ValueError(
                    f"position_padding_id={position_padding_id} leaves no position for "
                    f"tokens: positions start at position_padding_id + 1, and "
                    f"max_sequence_length={max_sequence_length}."
                )
        if hidden_dim % num_heads:
            raise ValueError(
                f"hidden_dim={hidden_dim} must be divisible by num_heads="
                f"{num_heads} (each head gets hidden_dim / num_heads features)."
            )
        if num_groups > num_layers:
            raise ValueError(f"num_groups={num_groups} must not exceed num_layers={num_layers}.")
        if activation not in ACTIVATION_NAMES:
            raise ValueError(
                f"activation={activation!r} is not supported. Valid: {', '.join(ACTIVATION_NAMES)}."
            )
        _check_rate("dropout", dropout)
        _check_rate("attention_dropout", effective_attention_dropout)
        _check_positive("layer_norm_epsilon", layer_norm_epsilon)
        _check_positive("initializer_range", initializer_range)
        for name, value in (
            ("use_pooler", use_pooler),
            ("norm_first", norm_first),
            ("use_bias", use_bias),
            ("gated_feedforward", gated_feedforward),
        ):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}.")
        attention_windows, rope_thetas = _layer_attention(
            num_layers,
            num_heads,
            hidden_dim,
            num_groups,
            norm_first,
            position_padding_id,
            rope_theta,
            local_rope_theta,
            local_attention_window,
            global_attention_every,
            max_sequence_length,
        )
        if isinstance(dtype, dict):  # a serialized DTypePolicy from get_config
            dtype = keras.dtype_policies.get(dtype)

        # === Layers ===
        embeddings = BertEmbeddings(
            vocabulary_size=vocabulary_size,
            embedding_dim=embedding_dim,
            hidden_dim=hidden_dim,
            max_sequence_length=max_sequence_length,
            num_segments=num_segments,
            position_padding_id=position_padding_id,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            initializer_range=initializer_range,
            learned_positions=rope_theta is None,
            use_bias=use_bias,
            dtype=dtype,
            name="embeddings",
        )
        blocks = [
            BertTransformerBlock(
                num_heads=num_heads,
                hidden_dim=hidden_dim,
                intermediate_dim=intermediate_dim,
                activation=activation,
                dropout=dropout,
                attention_dropout=effective_attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                initializer_range=initializer_range,
                norm_first=norm_first,
                # Pre-LN: the embedding LayerNorm stands before block 0.
                attention_norm=not (norm_first and g == 0),
                use_bias=use_bias,
                gated_feedforward=gated_feedforward,
                rope_theta=rope_thetas[g],
                attention_window=attention_windows[g],
                dtype=dtype,
                name=f"transformer_layer_{g}",
            )
            for g in range(num_groups)
        ]
        final_norm = None
        if norm_first:
            final_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, center=use_bias, dtype=dtype, name="final_layer_norm"
            )
        pooler = None
        if use_pooler:
            pooler = keras.layers.Dense(
                hidden_dim,
                activation="tanh",
                kernel_initializer=kernel_initializer(initializer_range),
                dtype=dtype,
                name="pooler_dense",
            )

        # === Functional graph ===
        inputs = self._make_inputs(num_segments)
        outputs = _encode(
            inputs, embeddings, blocks, pooler, final_norm, num_layers, num_groups, features=False
        )
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        # Functional models do not take a dtype; record the policy the layers
        # were built with so get_config round-trips it.
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.embedding_dim = embedding_dim
        self.num_groups = num_groups
        self.num_segments = num_segments
        self.use_pooler = use_pooler
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.position_padding_id = position_padding_id
        self.norm_first = norm_first
        self.use_bias = use_bias
        self.gated_feedforward = gated_feedforward
        self.rope_theta = rope_theta
        self.local_rope_theta = local_rope_theta
        self.local_attention_window = local_attention_window
        self.global_attention_every = global_attention_every
        self.embeddings_layer = embeddings
        self.transformer_layers = blocks
        self.pooler_dense = pooler
        self.final_layer_norm = final_norm
        # Tokenizer settings and metadata carried from the preset this model
        # was loaded from; written back by save_to_preset.
        self.preset_info = {}
        # Task-head tensors (pre-training and task heads, in Hugging Face
        # names and layouts) loaded beside the backbone from a converted
        # checkpoint or a preset directory, for the task models.
        self.head_tensors = {}

    @staticmethod
    def _make_inputs(num_segments):
        inputs = {"token_ids": keras.Input((None,), dtype="int32", name="token_ids")}
        if num_segments > 0:
            inputs["segment_ids"] = keras.Input((None,), dtype="int32", name="segment_ids")
        inputs["padding_mask"] = keras.Input((None,), dtype="int32", name="padding_mask")
        return inputs

    @property
    def token_embedding(self):
        """The `keras.layers.Embedding` holding the token table (tied by MLM
        heads)."""
        return self.embeddings_layer.token_embedding

    def feature_model(self, name=None):
        """A functional model over the same layers (same weights) whose
        outputs add, to `sequence_output` and `pooled_output`:

        - `hidden_states`: `num_layers + 1` tensors `(batch, seq, hidden_dim)`,
          the embedding output (after the E->H projection) and each layer's
          output (the last one after the final LayerNorm of a `norm_first`
          backbone: `sequence_output`);
        - `attention_scores`: `num_layers` float32 tensors
          `(batch, heads, seq, seq)`, the pre-softmax scores
          `QK^T / sqrt(head_dim)` before the padding mask is applied.

        It uses the explicit attention path, so it is slower than the backbone;
        use it for distillation and feature extraction.

        Example:
        >>> features = backbone.feature_model()
        >>> out = features(inputs)
        >>> len(out["hidden_states"]) == backbone.num_layers + 1
        True
        """
        inputs = self._make_inputs(self.num_segments)
        outputs = _encode(
            inputs,
            self.embeddings_layer,
            self.transformer_layers,
            self.pooler_dense,
            self.final_layer_norm,
            self.num_layers,
            self.num_groups,
            features=True,
        )
        return _BertFeatureModel(inputs, outputs, name=name or f"{self.name}_features")

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            **constructor_config(self),
        }
        mode = layer_quantization_mode(self)
        if mode is not None:
            # Not a constructor argument: from_config quantizes the built
            # layers, so a `.keras` file's int8 weights load into int8 variables.
            config["quantization"] = mode
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        mode = config.pop("quantization", None)
        backbone = cls(**config)
        return backbone if mode is None else quantize(backbone, mode)

    # === Presets ===

    @classmethod
    def architecture_keys(cls):
        """The constructor arguments a preset's `backbone` section may hold."""
        return constructor_args(cls)

    @classmethod
    def from_preset(
        cls, preset, load_weights=True, allow_partial=False, allow_pickle=False, **overrides
    ):
        """Builds a backbone from a built-in preset name or a preset directory.

        Args:
            preset: a built-in name (see `BertBackbone.presets`), a directory
                written by `save_to_preset`, or a Hugging Face checkpoint
                directory (`config.json` + `model.safetensors`, model_type
                "bert", "albert", "distilbert", "electra", "roberta" or
                "xlm-roberta").
            load_weights: load the directory's weights. Built-in presets are
                architectures and ship no weights: the model is initialised
                with the reference initialiser (truncated normal, 0.02).
            allow_partial: for Hugging Face checkpoints, load the tensors that
                match instead of failing on missing or unused ones.
            allow_pickle: for Hugging Face checkpoints that have only
                `pytorch_model.bin` (a pickle), read it with bertzoo's
                restricted unpickler (tensors only, no torch needed).
            **overrides: non-architectural settings: one of
                `OVERRIDABLE_KEYS` (dropout, attention_dropout, dtype, name,
                trainable).

        Example:
        >>> backbone = BertBackbone.from_preset("bert_base")
        >>> backbone.count_params()
        109482240
        """
        for key in overrides:
            if key not in OVERRIDABLE_KEYS:
                kind = (
                    "is architectural (it changes the weights)"
                    if key in cls.architecture_keys()
                    else "is not a backbone argument"
                )
                raise ValueError(
                    f"from_preset() cannot override {key!r}: it {kind}. Keys that "
                    f"can be overridden: {', '.join(OVERRIDABLE_KEYS)}. To change "
                    "the architecture, build BertBackbone(**config) directly."
                )
        # Every file read comes from one published version of a directory.
        with preset_lib.pinned(preset) as source:
            loader = preset_loader()
            backbone = loader.load_backbone(
                cls,
                source,
                load_weights=load_weights,
                allow_partial=allow_partial,
                allow_pickle=allow_pickle,
                overrides=overrides,
            )
            if load_weights:  # a LiteRT-int8 preset's graph (bertzoo.models.int8)
                changed = "dtype" if "dtype" in overrides else None
                use_saved_graph(backbone, loader.read_int8_graph(source), preset, changed)
            return backbone

    def save_to_preset(self, preset_dir, extra=None, preset_info=None, head_tensors=None):
        """Writes `config.json`, `model.weights.h5` and (when there are task
        heads) `heads.safetensors` to `preset_dir`, published as one unit with
        a checksum manifest (`bertzoo.io.publish`): at any moment, a kill
        included, the directory holds the complete earlier preset or the
        complete new one. `BertBackbone.from_preset(preset_dir)` rebuilds the
        same model and verifies every file first.

        A vocabulary saved there earlier (`tokenizer.save_to_preset`) stays;
        an existing directory must be empty or a bertzoo preset (bertzoo
        never replaces files it did not write), and files in it that bertzoo
        did not write are kept.

        Args:
            preset_dir: the directory to write.
            extra: more top-level sections for `config.json` (a task model's
                `task` section).
            preset_info: the `description`, `tokenizer` and `metadata`
                sections to record; defaults to those of the preset this
                model was loaded from (`self.preset_info`).
            head_tensors: task-head tensors (Hugging Face names) to save
                beside the backbone; defaults to those it was loaded with
                (`self.head_tensors`).
        """
        return preset_loader().save_backbone(
            self,
            preset_dir,
            self.preset_info if preset_info is None else preset_info,
            self.head_tensors if head_tensors is None else head_tensors,
            extra=extra,
            int8_graph=saved_graph(self),
        )
