"""BERT-family pre-training model: masked LM plus NSP or SOP."""

import logging
import sys

import keras
import numpy as np
from keras import ops

from bertzoo import presets as preset_lib
from bertzoo.layers.common import kernel_initializer
from bertzoo.layers.heads import MaskedLMHead
from bertzoo.loader_registry import preset_loader
from bertzoo.models.quantize import check_float

logger = logging.getLogger(__name__)

# The pre-training objectives of the sentence head ("none": MLM only), for
# the models and the example builders (bertzoo.data).
OBJECTIVES = ("nsp", "sop", "none")


def _scale_for_replicas(loss):
    """Divides by the number of tf.distribute replicas (gradients are summed
    across replicas), as Keras' own losses do."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            loss = loss / replicas
    return loss


def shuffle_default(x, shuffle):
    """`fit`'s `shuffle` when the caller gave None: True for in-memory data,
    False for a `tf.data.Dataset` (Keras ignores it there and warns when it
    is True; a dataset shuffles itself)."""
    if shuffle is not None:
        return bool(shuffle)
    tf = sys.modules.get("tensorflow")
    return not (tf is not None and isinstance(x, tf.data.Dataset))


def build_before_tracing(model, x):
    """Builds `model`'s optimizer, compiled metrics and loss from the batch
    structure of the `tf.data.Dataset` `x`, before `fit` traces its step.

    Under TensorFlow without a `tf.distribute` strategy, Keras builds them
    inside the first trace of the train function; their variables are then
    created in that trace, and TensorFlow traces the whole step a second
    time to run it without creating variables. Building first (what Keras
    itself does under a strategy, and always under JAX) traces the step
    once: the first `fit` of a 2-layer classifier starts in 2.1 s instead of
    4.2, and every model's first step costs one trace less. Other inputs
    (arrays, generators), other backends and models already built are left
    to Keras."""
    if keras.backend.backend() != "tensorflow" or getattr(model, "_distribute_strategy", None):
        return
    if getattr(model, "optimizer", None) is None or model.optimizer.built:
        return
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(x, tf.data.Dataset):
        return
    spec = x.element_spec
    if not all(type(s) is tf.TensorSpec for s in tf.nest.flatten(spec)):
        return  # ragged or sparse parts: Keras' own path
    # The batch's structure as symbolic tensors: nothing is read from `x`.
    model._symbolic_build(data_batch=spec)


class DatasetFit:
    """Mixin: `fit(dataset)` passes Keras no `shuffle` it would ignore (and
    warn about); in-memory data is still shuffled by default. A dataset's
    model is built before its step is traced (`build_before_tracing`)."""

    def fit(self, x=None, y=None, *args, **kwargs):
        if len(args) < 7:  # shuffle is fit's ninth argument
            kwargs["shuffle"] = shuffle_default(x, kwargs.get("shuffle"))
        build_before_tracing(self, x)
        return super().fit(x, y, *args, **kwargs)


def compile_from_saved_config(model, config):
    """`Model.compile_from_config` for models whose `compile` builds its own
    loss: loading a compiled `.keras` file recompiles with the saved optimizer
    and settings (Keras' default only warns for an overridden `compile`)."""
    if not config:
        return
    config = keras.saving.deserialize_keras_object(config)
    config.pop("loss", None)
    model.compile(**config)
    if getattr(model, "optimizer", None) is not None and model.built:
        model.optimizer.build(model.trainable_variables)


def finish_loss(model, loss):
    """A custom `compute_loss`'s last step: adds the model's own losses
    (`model.losses`, e.g. regularisers) and scales for tf.distribute
    replicas."""
    if model.losses:
        loss = loss + ops.sum([ops.cast(extra, "float32") for extra in model.losses])
    return _scale_for_replicas(loss)


def masked_lm_loss(labels, logits, weights=None):
    """The reference MLM loss: `sum(CE * w) / (sum(w) + 1e-5)` over masked
    positions. labels `(B, P)`, logits `(B, P, V)`, weights `(B, P)` (1 for a
    real prediction, 0 for padding; all ones when None)."""
    logits = ops.cast(logits, "float32")
    ce = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    if weights is None:
        weights = ops.ones_like(ce)
    weights = ops.cast(weights, "float32")
    return ops.sum(ce * weights) / (ops.sum(weights) + 1e-5)


def sentence_loss(labels, logits):
    """Mean cross-entropy of the NSP/SOP logits `(B, 2)`."""
    logits = ops.cast(logits, "float32")
    return ops.mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def tied_mlm_head(encoder, tables, name, activation=None):
    """A `MaskedLMHead` over `encoder`'s output (its activation unless
    `activation` is given, epsilon, initialiser, biases, dtype policy) tied to
    `tables`' token embedding table: the backbone's own, or for ELECTRA's
    generator the discriminator's."""
    for model in {id(m): m for m in (encoder, tables)}.values():
        check_float(model, "pre-training (or filling masks with a masked-LM head)")
    return MaskedLMHead(
        vocabulary_size=tables.vocabulary_size,
        embedding_dim=tables.embedding_dim,
        token_embedding=tables.token_embedding,
        activation=encoder.activation if activation is None else activation,
        layer_norm_epsilon=encoder.layer_norm_epsilon,
        initializer_range=encoder.initializer_range,
        use_bias=getattr(encoder, "use_bias", True),
        dtype=tables.dtype_policy,
        name=name,
    )


# Model types (preset metadata) pre-trained without a sentence objective
# (defined with the presets, so that settings checks need no Keras).
MLM_ONLY_FAMILIES = preset_lib.MLM_ONLY_FAMILIES


@keras.saving.register_keras_serializable(package="bertzoo")
class BertPretrainer(DatasetFit, keras.Model):
    """Masked LM (+ NSP or SOP) pre-training model over a `BertBackbone`.

    Inputs: a dict with `token_ids`, `segment_ids`, `padding_mask` (each
    `(B, S)` int32) and `mask_positions` `(B, P)` int32. `segment_ids` is
    accepted and ignored when the backbone has no segment embeddings.

    Outputs: `{"mlm": (B, P, V) float32 logits at the masked positions,
    "sentence": (B, 2) float32 logits}` ("sentence" only when `objective` is
    "nsp" or "sop").

    The MLM head (`MaskedLMHead`) is tied to the backbone's (possibly
    factorised, E-wide) token table; the sentence head is `Dense(2)` on the
    pooled output. Loss and metrics are built in: `compile(optimizer=...)` and
    `fit` on `(x, {"mlm": ids, "sentence": labels}, {"mlm": weights})`
    batches. Loss = `sum(CE_mlm * w) / (sum(w) + 1e-5)` + mean `CE_sentence`;
    metrics `loss`, `masked_lm_accuracy` (weighted by the MLM weights) and
    `nsp_accuracy` / `sop_accuracy`.

    When `backbone.head_tensors` holds a converted checkpoint's MLM head
    (and the sentence head of the same objective), the heads start from it.

    Args:
        backbone: a `bertzoo.BertBackbone`.
        objective: "nsp" (BERT), "sop" (ALBERT) or "none" (MLM only, e.g.
            DistilBERT or RoBERTa-style training).

    Example:
    >>> backbone = BertBackbone(vocabulary_size=100, num_layers=2, num_heads=2,
    ...                         hidden_dim=16, intermediate_dim=32)
    >>> model = BertPretrainer(backbone, objective="nsp")
    >>> model.compile(optimizer=bertzoo.training.make_optimizer(
    ...     "adamw", 1e-4, total_steps=1000, warmup_steps=100))
    >>> model.fit(dataset, steps_per_epoch=10)  # doctest: +SKIP
    """

    def __init__(self, backbone, objective="nsp", **kwargs):
        if objective not in OBJECTIVES:
            raise ValueError(
                f"objective={objective!r} is not supported. Valid: {', '.join(OBJECTIVES)}."
            )
        family = (getattr(backbone, "preset_info", None) or {}).get("metadata", {})
        family = family.get("model_type")
        if objective != "none" and family in MLM_ONLY_FAMILIES:
            raise ValueError(
                f"objective={objective!r}: {family} is pre-trained with masked LM only "
                "(no NSP/SOP head, and none in its Hugging Face format); use "
                "objective='none'."
            )
        if objective != "none" and not backbone.use_pooler:
            raise ValueError(
                f"objective={objective!r} needs a pooled output, but the backbone "
                "has use_pooler=False (e.g. DistilBERT). Use objective='none' for "
                "MLM-only training."
            )

        # === Layers ===
        # RoBERTa's LM head applies GELU whatever the encoder's hidden_act.
        head_activation = "gelu" if family in MLM_ONLY_FAMILIES else None
        mlm_head = tied_mlm_head(backbone, backbone, "mlm_head", activation=head_activation)
        sentence_head = None
        if objective != "none":
            # float32: (B, 2) is tiny, and the logits feed a float32 loss.
            sentence_head = keras.layers.Dense(
                2,
                kernel_initializer=kernel_initializer(backbone.initializer_range),
                dtype="float32",
                name=f"{objective}_head",
            )

        # === Functional graph ===
        inputs = {
            name: keras.Input((None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask", "mask_positions")
        }
        backbone_inputs = {
            "token_ids": inputs["token_ids"],
            "padding_mask": inputs["padding_mask"],
        }
        if backbone.num_segments > 0:
            backbone_inputs["segment_ids"] = inputs["segment_ids"]
        features = backbone(backbone_inputs)
        outputs = {"mlm": mlm_head(features["sequence_output"], inputs["mask_positions"])}
        if sentence_head is not None:
            outputs["sentence"] = sentence_head(features["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config and state ===
        self.backbone = backbone
        self.objective = objective
        self.mlm_head = mlm_head
        self.sentence_head = sentence_head
        self.masked_lm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")
        self.sentence_accuracy = None
        if objective != "none":
            self.sentence_accuracy = keras.metrics.SparseCategoricalAccuracy(
                name=f"{objective}_accuracy"
            )
        self.head_weights_loaded = ()
        if getattr(backbone, "head_tensors", None):
            self.head_weights_loaded = self.load_head_tensors(backbone.head_tensors)

    # === Checkpoint heads ===

    def _head_variables(self):
        dense, ln = self.mlm_head.dense, self.mlm_head.layer_norm
        variables = {
            "dense_kernel": dense.kernel,
            "dense_bias": dense.bias,
            "ln_gamma": ln.gamma,
            "ln_beta": ln.beta,
            "mlm_bias": self.mlm_head.bias,
        }
        if self.sentence_head is not None:
            variables["sentence_kernel"] = self.sentence_head.kernel
            variables["sentence_bias"] = self.sentence_head.bias
        # A head without biases (ModernBERT's) has no dense_bias, ln_beta.
        return {k: v for k, v in variables.items() if v is not None}

    def load_head_tensors(self, tensors, source="backbone.head_tensors"):
        """Initialises the heads from Hugging Face task-head tensors
        (`cls.predictions.*` / `cls.seq_relationship.*` for BERT,
        `predictions.*` / `sop_classifier.*` for ALBERT, `vocab_transform.*`
        etc. for DistilBERT), with name and shape checks. The sentence head is
        loaded only when the checkpoint's head matches `objective` (BERT: nsp,
        ALBERT: sop). Returns the names loaded."""
        return preset_loader().load_pretraining_heads(
            tensors, self._head_variables(), self.objective, source
        )

    def head_tensors(self):
        """The heads as Hugging Face-named float32 arrays (BERT names for the
        MLM and NSP heads, ALBERT's for SOP): the inverse of
        `load_head_tensors`. Saved as the backbone's `head_tensors`
        (`save_to_preset(..., head_tensors=...)`), they are loaded back by the
        next `BertPretrainer` built on it."""
        variables = {
            k: np.asarray(ops.convert_to_numpy(v), "float32")
            for k, v in self._head_variables().items()
        }
        # An ELECTRA generator's MLM head keeps ELECTRA's names (save_hf
        # writes it as ElectraForMaskedLM).
        loader = preset_loader()
        family = loader.head_family(self.backbone)
        return loader.pretraining_head_tensors(variables, self.objective, family=family)

    # === Training ===

    def compile(self, optimizer="adam", loss=None, **kwargs):
        """`keras.Model.compile` with the pre-training loss built in: pass the
        optimizer (and e.g. `jit_compile`, `steps_per_execution`), not
        `loss`."""
        if loss is not None:
            raise ValueError(
                "BertPretrainer computes the reference pre-training loss itself; "
                "call compile() without loss=."
            )
        super().compile(optimizer=optimizer, **kwargs)

    def compile_from_config(self, config):
        compile_from_saved_config(self, config)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        mlm_weights = None
        if isinstance(sample_weight, dict):
            mlm_weights = sample_weight.get("mlm")
        elif sample_weight is not None:
            raise ValueError("sample_weight must be a dict {'mlm': (batch, predictions) weights}.")
        total = masked_lm_loss(y["mlm"], y_pred["mlm"], mlm_weights)
        if self.objective != "none":
            if "sentence" not in y:
                raise ValueError(f"objective={self.objective!r} needs y['sentence'] labels.")
            total = total + sentence_loss(y["sentence"], y_pred["sentence"])
        return finish_loss(self, total)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        mlm_weights = sample_weight.get("mlm") if isinstance(sample_weight, dict) else None
        self.masked_lm_accuracy.update_state(y["mlm"], y_pred["mlm"], mlm_weights)
        if self.sentence_accuracy is not None:
            self.sentence_accuracy.update_state(y["sentence"], y_pred["sentence"])
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    # === Serialisation ===

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "objective": self.objective,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
