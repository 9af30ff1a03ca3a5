"""BERT-family pre-training model: masked LM plus NSP or SOP."""

import logging

import keras
import numpy as np
from keras import ops

from bertzoo.convert.common import assign_tensors
from bertzoo.layers.common import kernel_initializer
from bertzoo.layers.heads import MaskedLMHead

logger = logging.getLogger(__name__)

OBJECTIVES = ("nsp", "sop", "none")

# Hugging Face task-head tensor names per model family (as kept in
# `backbone.hf_head_weights` by the converters): the MLM head, the sentence
# head with the objective it was trained for, and tensors that are tied to the
# word embeddings (or duplicate the MLM bias) and so are not loaded.
_HF_HEADS = {
    "bert": {
        "mlm": {
            "cls.predictions.transform.dense.weight": ("dense_kernel", True),
            "cls.predictions.transform.dense.bias": ("dense_bias", False),
            "cls.predictions.transform.LayerNorm.weight": ("ln_gamma", False),
            "cls.predictions.transform.LayerNorm.bias": ("ln_beta", False),
            "cls.predictions.bias": ("mlm_bias", False),
        },
        "sentence": (
            "nsp",
            {
                "cls.seq_relationship.weight": ("sentence_kernel", True),
                "cls.seq_relationship.bias": ("sentence_bias", False),
            },
        ),
        "tied": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"),
    },
    "albert": {
        "mlm": {
            "predictions.dense.weight": ("dense_kernel", True),
            "predictions.dense.bias": ("dense_bias", False),
            "predictions.LayerNorm.weight": ("ln_gamma", False),
            "predictions.LayerNorm.bias": ("ln_beta", False),
            "predictions.bias": ("mlm_bias", False),
        },
        "sentence": (
            "sop",
            {
                "sop_classifier.classifier.weight": ("sentence_kernel", True),
                "sop_classifier.classifier.bias": ("sentence_bias", False),
            },
        ),
        "tied": ("predictions.decoder.weight", "predictions.decoder.bias"),
    },
    "distilbert": {
        "mlm": {
            "vocab_transform.weight": ("dense_kernel", True),
            "vocab_transform.bias": ("dense_bias", False),
            "vocab_layer_norm.weight": ("ln_gamma", False),
            "vocab_layer_norm.bias": ("ln_beta", False),
            "vocab_projector.bias": ("mlm_bias", False),
        },
        "sentence": None,
        "tied": ("vocab_projector.weight",),
    },
}


def _scale_for_replicas(loss):
    """Divides by the number of tf.distribute replicas (gradients are summed
    across replicas), as Keras' own losses do."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            loss = loss / replicas
    return loss


def finish_loss(model, loss):
    """A custom `compute_loss`'s last step: adds the model's own losses
    (`model.losses`, e.g. regularisers) and scales for tf.distribute
    replicas."""
    if model.losses:
        loss = loss + ops.sum([ops.cast(l, "float32") for l in model.losses])
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
    return ops.mean(
        keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    )


@keras.saving.register_keras_serializable(package="bertzoo")
class BertPretrainer(keras.Model):
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

    When `backbone.hf_head_weights` holds a converted checkpoint's MLM head
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
        if objective != "none" and not backbone.use_pooler:
            raise ValueError(
                f"objective={objective!r} needs a pooled output, but the backbone "
                "has use_pooler=False (e.g. DistilBERT). Use objective='none' for "
                "MLM-only training."
            )
        policy = backbone.dtype_policy

        # === Layers ===
        mlm_head = MaskedLMHead(
            vocabulary_size=backbone.vocabulary_size,
            embedding_dim=backbone.embedding_dim,
            token_embedding=backbone.token_embedding,
            activation=backbone.activation,
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            initializer_range=backbone.initializer_range,
            dtype=policy,
            name="mlm_head",
        )
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
        self.masked_lm_accuracy = keras.metrics.SparseCategoricalAccuracy(
            name="masked_lm_accuracy"
        )
        self.sentence_accuracy = None
        if objective != "none":
            self.sentence_accuracy = keras.metrics.SparseCategoricalAccuracy(
                name=f"{objective}_accuracy"
            )
        self.head_weights_loaded = ()
        if getattr(backbone, "hf_head_weights", None):
            self.head_weights_loaded = self.load_hf_head_weights(backbone.hf_head_weights)

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
        return variables

    def load_hf_head_weights(self, tensors, source="backbone.hf_head_weights"):
        """Initialises the heads from Hugging Face task-head tensors
        (`cls.predictions.*` / `cls.seq_relationship.*` for BERT,
        `predictions.*` / `sop_classifier.*` for ALBERT, `vocab_transform.*`
        etc. for DistilBERT), with name and shape checks. The sentence head is
        loaded only when the checkpoint's head matches `objective` (BERT: nsp,
        ALBERT: sop). Returns the names loaded."""
        variables = self._head_variables()
        loaded = []
        for family, spec in _HF_HEADS.items():
            groups = [spec["mlm"]]
            sentence = spec["sentence"]
            if sentence is not None:
                objective, names = sentence
                if objective == self.objective:
                    groups.append(names)
                elif any(k in tensors for k in names):
                    logger.info(
                        "Not loading the checkpoint's %s head into a %r pretrainer.",
                        objective,
                        self.objective,
                    )
            for group in groups:
                present = [k for k in group if k in tensors]
                if not present:
                    continue
                mapping = {k: (variables[v], t) for k, (v, t) in group.items()}
                # Strict within a head: a half-present head is an error.
                assign_tensors(mapping, {k: tensors[k] for k in present}, source)
                loaded.extend(sorted(group))
        if loaded:
            logger.info("Initialised pre-training heads from %s: %s", source, ", ".join(loaded))
        return tuple(loaded)

    def head_tensors(self):
        """The heads as Hugging Face-named float32 arrays (BERT names for the
        MLM and NSP heads, ALBERT's for SOP): the inverse of
        `load_hf_head_weights`. Put in `backbone.hf_head_weights`, they are
        saved with the backbone's preset and loaded back by the next
        `BertPretrainer` built on it."""
        variables = self._head_variables()
        groups = [_HF_HEADS["bert"]["mlm"]]
        if self.objective != "none":
            family = "bert" if self.objective == "nsp" else "albert"
            groups.append(_HF_HEADS[family]["sentence"][1])
        tensors = {}
        for group in groups:
            for name, (key, transpose) in group.items():
                value = np.asarray(ops.convert_to_numpy(variables[key]), "float32")
                tensors[name] = np.ascontiguousarray(value.T) if transpose else value
        return tensors

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

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        mlm_weights = None
        if isinstance(sample_weight, dict):
            mlm_weights = sample_weight.get("mlm")
        elif sample_weight is not None:
            raise ValueError(
                "sample_weight must be a dict {'mlm': (batch, predictions) weights}."
            )
        total = masked_lm_loss(y["mlm"], y_pred["mlm"], mlm_weights)
        if self.objective != "none":
            if "sentence" not in y:
                raise ValueError(
                    f"objective={self.objective!r} needs y['sentence'] labels."
                )
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
