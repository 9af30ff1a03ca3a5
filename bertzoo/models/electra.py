"""ELECTRA pre-training: replaced-token detection on the one encoder.

A small masked-LM generator fills the masked positions with tokens sampled
from its own predictions; the discriminator (the model that is kept) labels
every token as original or replaced. Both are `BertBackbone`s (ELECTRA is a
configuration: `embedding_dim` may differ from `hidden_dim`, no pooler, no
sharing); the generator reads the discriminator's token, position and
segment embeddings (and their LayerNorm) through its own E -> H_gen
projection, as the reference code shares them.

    loss = MLM_generator + rtd_weight * BCE_discriminator        (rtd_weight 50)

The sample carries no gradient; the discriminator's label is "replaced"
only where the sampled token differs from the original (a correct guess
counts as original).
"""

import keras
import numpy as np
from keras import ops

from bertzoo import presets as preset_lib
from bertzoo.layers.common import get_activation, group_of_layer, kernel_initializer
from bertzoo.loader_registry import preset_loader
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.pretrainer import (
    DatasetFit,
    compile_from_saved_config,
    finish_loss,
    masked_lm_loss,
    tied_mlm_head,
)
from bertzoo.models.quantize import check_float


def electra_batch(x, y=None, sample_weight=None):
    """A masked-LM batch as the data pipelines make it for `BertPretrainer`,
    `(x, {"mlm": ids}, {"mlm": weights})`, as `ElectraPretrainer`'s input:
    `x` with `mask_ids` and `mask_weights` added (the discriminator needs
    the original tokens inside the model). Use with `dataset.map`."""
    x = dict(x)
    x["mask_ids"] = y["mlm"]
    x["mask_weights"] = sample_weight["mlm"]
    return x


def _scatter(positions, values, seq_len):
    """`(B, P)` values at `(B, P)` positions -> `(B, S)`, 0 elsewhere (the
    positions are distinct where `values` is non-zero)."""
    one_hot = ops.cast(ops.one_hot(positions, seq_len), "int32")  # (B, P, S)
    return ops.sum(one_hot * values[:, :, None], axis=1)  # (B, S)


@keras.saving.register_keras_serializable(package="bertzoo")
class ElectraPretrainer(DatasetFit, keras.Model):
    """ELECTRA's replaced-token-detection pre-training model.

    Inputs: a dict with `token_ids` (masked), `segment_ids`, `padding_mask`,
    `mask_positions` `(B, P)`, `mask_ids` (the original ids there) and
    `mask_weights` (1 for a real prediction, 0 for a padding slot);
    `electra_batch` makes it from the `BertPretrainer` data pipelines'
    batches. `fit` takes these dicts alone (no `y`).

    Outputs: `{"mlm": (B, P, V) generator logits, "rtd": (B, S)
    discriminator logits, "rtd_labels": (B, S) 1 where the token was
    replaced, "rtd_weights": (B, S) the padding mask}`, float32.

    Loss: `masked_lm_loss + rtd_weight * mean BCE over real tokens`.
    Metrics: `loss`, `mlm_loss`, `rtd_loss`, `masked_lm_accuracy` (the
    generator), `rtd_accuracy`, `rtd_precision` and `rtd_recall` (the
    discriminator, "replaced" as the positive class).

    Args:
        generator: a `BertBackbone` with the discriminator's vocabulary,
            `embedding_dim`, segments and positions, usually narrower
            (`ElectraPretrainer.generator_for(discriminator, 0.25)`).
        discriminator: a `BertBackbone` without pooler; it is what is kept.
        rtd_weight: lambda, the weight of the discriminator's loss.
        temperature: sampling temperature of the generator's softmax.
        seed: seed of the sampling.

    Example:
    >>> disc = BertBackbone.from_preset("electra_small")
    >>> gen = BertBackbone.from_preset("electra_small_generator")
    >>> model = ElectraPretrainer(gen, disc)
    >>> model.compile(optimizer=keras.optimizers.AdamW(5e-4))
    >>> model.fit(dataset.map(electra_batch))  # doctest: +SKIP
    """

    def __init__(
        self, generator, discriminator, rtd_weight=50.0, temperature=1.0, seed=None, **kwargs
    ):
        _check_pair(generator, discriminator)
        if not float(rtd_weight) > 0:
            raise ValueError(f"rtd_weight must be > 0, got {rtd_weight!r}.")
        if not float(temperature) > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}.")
        super().__init__(**kwargs)
        policy = discriminator.dtype_policy
        self.generator = generator
        self.discriminator = discriminator
        self.rtd_weight = float(rtd_weight)
        self.temperature = float(temperature)
        self.seed = seed
        _freeze_own_embeddings(generator)

        # === Layers ===
        self.mlm_head = tied_mlm_head(generator, discriminator, "generator_mlm_head")
        self.rtd_dense = keras.layers.Dense(
            discriminator.hidden_dim,
            activation=get_activation(discriminator.activation),
            kernel_initializer=kernel_initializer(discriminator.initializer_range),
            dtype=policy,
            name="rtd_dense",
        )
        self.rtd_output = keras.layers.Dense(
            1,
            kernel_initializer=kernel_initializer(discriminator.initializer_range),
            dtype="float32",
            name="rtd_output",
        )
        self.seed_generator = keras.random.SeedGenerator(seed)

        # === Metrics ===
        self.masked_lm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")
        self.rtd_accuracy = keras.metrics.BinaryAccuracy(name="rtd_accuracy", threshold=0.5)
        self.rtd_precision = keras.metrics.Precision(name="rtd_precision")
        self.rtd_recall = keras.metrics.Recall(name="rtd_recall")
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.rtd_loss_tracker = keras.metrics.Mean(name="rtd_loss")

        # Build every layer now (checkpoint restore and head loading need
        # the variables).
        self._build_all()
        self.head_weights_loaded = ()
        if generator.head_tensors or discriminator.head_tensors:
            self.head_weights_loaded = self.load_head_tensors(
                {**generator.head_tensors, **discriminator.head_tensors}
            )

    @classmethod
    def from_preset(cls, preset, generator=None, load_weights=True, **kwargs):
        """The pretrainer of a saved ELECTRA pair: the discriminator from
        `preset` (a bertzoo preset directory, a Hugging Face
        `ElectraForPreTraining` directory, or a built-in name such as
        "electra_small") and the generator from `generator` (default:
        `preset/generator` for a directory, `<name>_generator` for a
        built-in name), with both heads when the checkpoints have them.
        `kwargs`: the constructor's (rtd_weight, temperature, seed)."""
        from pathlib import Path

        # Both backbones come from one published version of the directory.
        with preset_lib.pinned(preset) as preset:
            if generator is None:
                builtin = isinstance(preset, str) and preset in preset_lib.builtin_presets()
                generator = (
                    f"{preset}_generator" if builtin else Path(preset) / preset_lib.GENERATOR_DIR
                )
            discriminator = BertBackbone.from_preset(preset, load_weights=load_weights)
            generator = BertBackbone.from_preset(generator, load_weights=load_weights)
        return cls(generator, discriminator, **kwargs)

    @staticmethod
    def generator_for(discriminator, size=0.25, **overrides):
        """A generator for `discriminator`: `size` times its hidden width,
        feed-forward width and heads (at least one head), with the same
        embedding width, layers, positions and vocabulary. The ELECTRA paper
        uses 1/4 for Small and Large and 1/3 for Base; the released Small
        generator is 1.0 (`electra_small_generator`)."""
        if not 0 < size <= 1:
            raise ValueError(f"size must be in (0, 1], got {size!r}.")
        check_float(discriminator, "ELECTRA pre-training")
        heads = max(1, round(discriminator.num_heads * size))
        hidden = max(heads, round(discriminator.hidden_dim * size))
        hidden -= hidden % heads
        config = {
            **discriminator.get_config(),
            "hidden_dim": hidden,
            "num_heads": heads,
            "intermediate_dim": max(1, round(discriminator.intermediate_dim * size)),
            "name": "generator",
            **overrides,
        }
        generator = BertBackbone.from_config(config)
        generator.preset_info = {"metadata": {"model_type": "electra"}}
        return generator

    def _build_all(self):
        disc, gen = self.discriminator, self.generator
        self.mlm_head.build((None, None, gen.hidden_dim), (None, None))
        self.rtd_dense.build((None, None, disc.hidden_dim))
        self.rtd_output.build((None, None, disc.hidden_dim))
        self.built = True  # the backbones are functional models, built already

    # === Forward ===

    def _generator_sequence(self, inputs, training):
        """The generator on the masked ids, reading the discriminator's
        embeddings (E-wide) through its own projection."""
        gen = self.generator
        x = self.discriminator.embeddings_layer(
            inputs["token_ids"],
            inputs.get("segment_ids"),
            padding_mask=inputs["padding_mask"],
            training=training,
            project=False,
        )
        if gen.embeddings_layer.projection is not None:
            x = gen.embeddings_layer.projection(x)  # (B, S, E) -> (B, S, H_gen)
        for i in range(gen.num_layers):
            block = gen.transformer_layers[group_of_layer(i, gen.num_layers, gen.num_groups)]
            x = block(x, inputs["padding_mask"], training=training)
        return x

    def call(self, inputs, training=None):
        token_ids = ops.cast(inputs["token_ids"], "int32")
        positions = ops.cast(inputs["mask_positions"], "int32")
        weights = ops.cast(inputs["mask_weights"], "int32")  # (B, P) 1 real, 0 padding
        originals = ops.cast(inputs["mask_ids"], "int32")
        seq_len = ops.shape(token_ids)[1]

        # --- generator: MLM logits at the masked positions ---
        sequence = self._generator_sequence(inputs, training)
        mlm_logits = self.mlm_head(sequence, positions)  # (B, P, V) float32

        # --- sample replacements (Gumbel-max; no gradient through them) ---
        logits = ops.stop_gradient(mlm_logits) / self.temperature
        uniform = keras.random.uniform(
            ops.shape(logits), minval=1e-9, maxval=1.0, dtype="float32", seed=self.seed_generator
        )
        sampled = ops.cast(ops.argmax(logits - ops.log(-ops.log(uniform)), axis=-1), "int32")

        # --- the discriminator's input: originals with samples at the masked positions ---
        replaced_at = _scatter(positions, weights, seq_len)  # (B, S) 1 at a masked position
        original_ids = ops.where(
            replaced_at > 0, _scatter(positions, originals * weights, seq_len), token_ids
        )
        corrupted = ops.where(
            replaced_at > 0, _scatter(positions, sampled * weights, seq_len), token_ids
        )
        disc_inputs = {"token_ids": corrupted, "padding_mask": inputs["padding_mask"]}
        if self.discriminator.num_segments > 0:
            disc_inputs["segment_ids"] = inputs["segment_ids"]
        return {
            "mlm": mlm_logits,
            "rtd": self.discriminator_logits(disc_inputs, training=training),
            "rtd_labels": ops.cast(ops.not_equal(corrupted, original_ids), "float32"),
            "rtd_weights": ops.cast(inputs["padding_mask"], "float32"),
        }

    def generator_logits(self, inputs, training=None):
        """The generator's masked-LM logits `(B, P, V)` float32 at
        `inputs["mask_positions"]` (with the backbone inputs), on the shared
        embeddings, as the training step computes them before sampling."""
        sequence = self._generator_sequence(inputs, training)
        return self.mlm_head(sequence, inputs["mask_positions"])

    def discriminator_logits(self, inputs, training=None):
        """The discriminator's replaced-token logits `(B, S)` float32 for the
        backbone inputs `inputs` (`token_ids`, `segment_ids`,
        `padding_mask`): > 0 where it judges a token replaced. This is
        `ElectraForPreTraining`'s output."""
        hidden = self.discriminator(inputs, training=training)["sequence_output"]
        hidden = self.rtd_dense(hidden)  # Dense(H, hidden_act), as ELECTRA's head
        return ops.cast(ops.squeeze(self.rtd_output(hidden), -1), "float32")  # (B, S)

    # === Training ===

    def compile(self, optimizer="adam", loss=None, **kwargs):
        """`keras.Model.compile` with ELECTRA's loss built in: pass the
        optimizer, not `loss`."""
        if loss is not None:
            raise ValueError(
                "ElectraPretrainer computes ELECTRA's loss itself; call compile() without loss=."
            )
        super().compile(optimizer=optimizer, **kwargs)

    def compile_from_config(self, config):
        compile_from_saved_config(self, config)

    @staticmethod
    def _rtd_loss(y_pred):
        bce = ops.binary_crossentropy(y_pred["rtd_labels"], y_pred["rtd"], from_logits=True)
        weights = y_pred["rtd_weights"]
        return ops.sum(bce * weights) / (ops.sum(weights) + 1e-6)

    def _loss_parts(self, x, y_pred):
        mlm = masked_lm_loss(x["mask_ids"], y_pred["mlm"], x["mask_weights"])
        return mlm, self._rtd_loss(y_pred)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        mlm, rtd = self._loss_parts(x, y_pred)
        return finish_loss(self, mlm + self.rtd_weight * rtd)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        mlm, rtd = self._loss_parts(x, y_pred)
        self.mlm_loss_tracker.update_state(mlm)
        self.rtd_loss_tracker.update_state(rtd)
        self.masked_lm_accuracy.update_state(x["mask_ids"], y_pred["mlm"], x["mask_weights"])
        probability = ops.sigmoid(y_pred["rtd"])
        labels, weights = y_pred["rtd_labels"], y_pred["rtd_weights"]
        self.rtd_accuracy.update_state(labels, probability, weights)
        self.rtd_precision.update_state(labels, probability, weights)
        self.rtd_recall.update_state(labels, probability, weights)
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    # === Checkpoint heads ===

    def _generator_head_variables(self):
        dense, ln = self.mlm_head.dense, self.mlm_head.layer_norm
        return {
            "dense_kernel": dense.kernel,
            "dense_bias": dense.bias,
            "ln_gamma": ln.gamma,
            "ln_beta": ln.beta,
            "mlm_bias": self.mlm_head.bias,
        }

    def _discriminator_head_variables(self):
        return {
            "dense_kernel": self.rtd_dense.kernel,
            "dense_bias": self.rtd_dense.bias,
            "output_kernel": self.rtd_output.kernel,
            "output_bias": self.rtd_output.bias,
        }

    def load_head_tensors(self, tensors, source="head_tensors"):
        """Initialises the generator's MLM head (`generator_predictions.*`,
        `generator_lm_head.bias`) and the discriminator's head
        (`discriminator_predictions.*`) from Hugging Face-named tensors,
        with name and shape checks; a head absent from `tensors` keeps its
        initialiser. Returns the names loaded."""
        loader = preset_loader()
        generator = loader.load_pretraining_heads(
            tensors, self._generator_head_variables(), "none", source
        )
        discriminator = loader.load_discriminator_head(
            tensors, self._discriminator_head_variables(), source
        )
        return tuple(generator) + tuple(discriminator)

    @staticmethod
    def _numpy(variables):
        return {k: np.asarray(ops.convert_to_numpy(v), "float32") for k, v in variables.items()}

    def discriminator_head_tensors(self):
        """The discriminator's head as Hugging Face-named float32 arrays
        (`ElectraForPreTraining`'s `discriminator_predictions.*`)."""
        return preset_loader().discriminator_head_tensors(
            self._numpy(self._discriminator_head_variables())
        )

    def generator_head_tensors(self):
        """The generator's MLM head as Hugging Face-named float32 arrays
        (`ElectraForMaskedLM`'s `generator_predictions.*` and
        `generator_lm_head.bias`)."""
        return preset_loader().pretraining_head_tensors(
            self._numpy(self._generator_head_variables()), "none", family="electra"
        )

    def sync_generator_embeddings(self):
        """Copies the shared embeddings (tables and their LayerNorm) into the
        generator's own, so that the generator saved alone is the model that
        was trained."""
        source, target = self.discriminator.embeddings_layer, self.generator.embeddings_layer
        pairs = [
            (source.token_embedding.embeddings, target.token_embedding.embeddings),
            (source.position_embeddings, target.position_embeddings),
            (source.layer_norm.gamma, target.layer_norm.gamma),
            (source.layer_norm.beta, target.layer_norm.beta),
        ]
        if source.segment_embedding is not None:
            pairs.append((source.segment_embedding.embeddings, target.segment_embedding.embeddings))
        for src, dst in pairs:
            dst.assign(src)

    def save_to_preset(self, preset_dir, tokenizer=None, preset_info=None, generator_dir=None):
        """Writes the discriminator as a backbone preset at `preset_dir` (its
        head as `discriminator_predictions.*` head tensors) and the generator,
        with the shared embeddings copied in and its MLM head, as a preset of
        its own in `generator_dir` (default: `preset_dir/generator`), each
        published as one unit (`BertBackbone.save_to_preset`)."""
        from pathlib import Path

        self.sync_generator_embeddings()
        preset_dir = Path(preset_dir)
        generator_dir = (
            preset_dir / preset_lib.GENERATOR_DIR if generator_dir is None else Path(generator_dir)
        )
        info = dict(self.discriminator.preset_info if preset_info is None else preset_info)
        info["metadata"] = {**info.get("metadata", {}), "model_type": "electra"}
        for backbone, directory, heads in (
            (self.discriminator, preset_dir, self.discriminator_head_tensors()),
            (self.generator, generator_dir, self.generator_head_tensors()),
        ):
            if tokenizer is not None:
                tokenizer.save_to_preset(directory)
                info["tokenizer"] = tokenizer.preset_section()
            backbone.save_to_preset(directory, preset_info=info, head_tensors=heads)
        return preset_dir

    # === Serialisation ===

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "generator": keras.saving.serialize_keras_object(self.generator),
            "discriminator": keras.saving.serialize_keras_object(self.discriminator),
            "rtd_weight": self.rtd_weight,
            "temperature": self.temperature,
            "seed": self.seed,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("generator", "discriminator"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def _check_pair(generator, discriminator):
    """The generator reads the discriminator's embeddings: same table sizes."""
    problems = [
        f"{key} {getattr(generator, key)} != {getattr(discriminator, key)}"
        for key in ("vocabulary_size", "embedding_dim", "num_segments", "max_sequence_length")
        if getattr(generator, key) != getattr(discriminator, key)
    ]
    if problems:
        raise ValueError(
            "The generator shares the discriminator's embeddings, so their tables must "
            f"match: {'; '.join(problems)} (generator vs discriminator)."
        )
    if discriminator.use_pooler:
        raise ValueError(
            "The ELECTRA discriminator has no pooler; build it with use_pooler=False "
            "(the electra_* presets do)."
        )


def _freeze_own_embeddings(generator):
    """The generator's own tables are not used in training (it reads the
    discriminator's): no gradients or optimizer slots for them;
    `sync_generator_embeddings` refreshes them before it is saved."""
    emb = generator.embeddings_layer
    for layer in (emb.token_embedding, emb.segment_embedding, emb.layer_norm):
        if layer is not None:
            layer.trainable = False
    emb.position_embeddings.trainable = False
