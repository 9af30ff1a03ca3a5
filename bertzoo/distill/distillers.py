"""Distillers: Keras models that train a student against a frozen teacher
with `fit`. Only the student (and, for TinyBERT, the width projections) is
trained; save the student with its own `save_to_preset`.

- `DistilBertDistiller`: DistilBERT pre-training distillation (soft-target KL
  over vocabulary logits, MLM, hidden-state cosine).
- `TinyBertDistiller`: TinyBERT intermediate-layer distillation (attention
  scores, embedding and hidden states through learned projections): stage 1
  general distillation on backbones, and the first step of stage 2 on task
  models.
- `prediction_distiller`: TinyBERT's stage 2 prediction-layer distillation
  for classifiers, a `keras.distillation.Distiller` with `LogitsDistillation`;
  `LogitsStudent` trains the same loss on the teacher's logits computed once
  (`teacher_logits`), for epochs over the same texts.
"""

import keras
from keras import ops

from bertzoo.distill import losses
from bertzoo.distill.init import backbone_of
from bertzoo.distill.layer_map import DistillationError, resolve_layer_map
from bertzoo.models.pretrainer import BertPretrainer, DatasetFit, finish_loss, masked_lm_loss


def _check_vocabularies(teacher, student):
    if teacher.vocabulary_size != student.vocabulary_size:
        raise DistillationError(
            f"The teacher's vocabulary has {teacher.vocabulary_size} tokens and the student's "
            f"{student.vocabulary_size}: distillation feeds both the same token ids, so they "
            "need the same vocabulary (build the student with the teacher's vocabulary_size "
            "and tokenizer)."
        )


def _inputs_for(backbone, x):
    return {k: x[k] for k in backbone.input}


def _window(backbone, layer):
    """The sliding window of `backbone`'s transformer layer `layer` (None:
    global attention; shared-layer backbones have none)."""
    if backbone.num_groups != backbone.num_layers:
        return None
    return backbone.transformer_layers[layer].attention_window


def _narrower(a, b):
    """The narrower of two attention windows (None: global)."""
    return b if a is None else a if b is None else min(a, b)


def _check_weight(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise DistillationError(f"{name} must be a number >= 0, got {value!r}.")
    return float(value)


class _Distiller(DatasetFit, keras.Model):
    """Shared parts: frozen teacher, loss trackers, student-only saving."""

    loss_names = ()

    def _setup_trackers(self):
        self.trackers = {n: keras.metrics.Mean(name=n) for n in self.loss_names}

    @property
    def metrics(self):
        return [*super().metrics, *self.trackers.values()]

    def compile(self, optimizer="adam", loss=None, **kwargs):
        """`keras.Model.compile` with the distillation loss built in."""
        if loss is not None:
            raise ValueError(
                f"{type(self).__name__} computes its loss itself; call compile() without loss=."
            )
        super().compile(optimizer=optimizer, **kwargs)

    def _total(self, parts):
        """The weighted sum of the loss parts (each also tracked as a
        metric), finished like every bertzoo loss."""
        total = 0.0
        for name, value in parts.items():
            self.trackers[name].update_state(value)
            total = total + self.weights_by_loss[name] * value
        return finish_loss(self, total)

    def get_config(self):
        raise NotImplementedError(
            f"{type(self).__name__} is not saved: save the student (save_to_preset)."
        )


def as_pretrainer(model, role, need_head=False):
    """`model` as a `BertPretrainer`: a pretrainer as is, a backbone (or a
    model with one) wrapped in an MLM-only pretrainer whose head starts from
    the backbone's `head_tensors`. `role` ("teacher" or "student") names it
    in errors; with `need_head`, a missing masked-LM head is an error."""
    if isinstance(model, BertPretrainer):
        return model
    backbone = backbone_of(model, role)
    pretrainer = BertPretrainer(backbone, objective="none")
    if need_head and not pretrainer.head_weights_loaded:
        raise DistillationError(
            "The teacher has no masked-LM head: the soft-target KL loss needs its vocabulary "
            "logits. Pass a trained BertPretrainer, a checkpoint that includes the MLM head "
            "(the pre-training recipe's preset, or a Hugging Face *ForPreTraining / "
            "*ForMaskedLM checkpoint), or set kl_weight=0."
        )
    return pretrainer


class DistilBertDistiller(_Distiller):
    """DistilBERT distillation of a masked-LM teacher into a student.

    Loss = `kl_weight * T^2 * KL(teacher || student)` over vocabulary logits
    (at every real token, or only at masked ones with
    `kl_positions="masked"`) + `mlm_weight * MLM` + `cosine_weight *
    (1 - cos)` between the last hidden states at real tokens. Reference
    weights 5 / 2 / 1, T = 2.

    Args:
        teacher: a `BertPretrainer` (its MLM head is needed), or a
            `BertBackbone` whose checkpoint brought an MLM head
            (`head_tensors`).
        student: a `BertPretrainer` or `BertBackbone` (an MLM head is added)
            with the teacher's vocabulary and, for the cosine loss, width.

    Batches: the pre-training pipeline's `(x, y, sample_weight)` with
    `x = {token_ids, segment_ids, padding_mask, mask_positions}`,
    `y = {"mlm": ids}`, `sample_weight = {"mlm": weights}`
    (`make_pretraining_dataset` with objective "none").
    """

    loss_names = ("kl_loss", "mlm_loss", "cosine_loss")

    def __init__(
        self,
        teacher,
        student,
        temperature=2.0,
        kl_weight=5.0,
        mlm_weight=2.0,
        cosine_weight=1.0,
        kl_positions="all",
        **kwargs,
    ):
        super().__init__(**kwargs)
        teacher = as_pretrainer(teacher, "teacher", need_head=kl_weight > 0)
        student = as_pretrainer(student, "student")
        t, s = teacher.backbone, student.backbone
        _check_vocabularies(t, s)
        losses.check_temperature(temperature)
        self.weights_by_loss = {
            "kl_loss": _check_weight("kl_weight", kl_weight),
            "mlm_loss": _check_weight("mlm_weight", mlm_weight),
            "cosine_loss": _check_weight("cosine_weight", cosine_weight),
        }
        if self.weights_by_loss["cosine_loss"] > 0 and t.hidden_dim != s.hidden_dim:
            raise DistillationError(
                f"The cosine loss compares hidden states, but the teacher is {t.hidden_dim} wide "
                f"and the student {s.hidden_dim}. Set cosine_weight=0 or use a student of the "
                "teacher's width."
            )
        if kl_positions not in ("all", "masked"):
            raise DistillationError(
                f"kl_positions must be 'all' or 'masked', got {kl_positions!r}."
            )
        teacher.trainable = False
        self.teacher = teacher
        self.student = student
        self.temperature = float(temperature)
        self.kl_positions = kl_positions
        self._setup_trackers()

    def _logits(self, pretrainer, x, positions, training):
        backbone = pretrainer.backbone
        sequence = backbone(_inputs_for(backbone, x), training=training)["sequence_output"]
        return sequence, pretrainer.mlm_head(sequence, positions, training=training)

    def call(self, x, training=None):
        if self.kl_positions == "all":
            batch, length = ops.shape(x["token_ids"])[0], ops.shape(x["token_ids"])[1]
            positions = ops.broadcast_to(
                ops.arange(length, dtype="int32")[None, :], (batch, length)
            )
        else:
            positions = x["mask_positions"]
        t_seq, t_logits = self._logits(self.teacher, x, positions, False)
        s_seq, s_logits = self._logits(self.student, x, positions, training)
        if self.kl_positions == "all":
            mlm_logits = ops.take_along_axis(s_logits, x["mask_positions"][:, :, None], axis=1)
        else:
            mlm_logits = s_logits
        return {
            "teacher_logits": ops.stop_gradient(t_logits),
            "student_logits": s_logits,
            "mlm_logits": mlm_logits,
            "teacher_hidden": ops.stop_gradient(t_seq),
            "student_hidden": s_seq,
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y is None or "mlm" not in y:
            raise ValueError(
                "DistilBertDistiller needs y={'mlm': ids} batches (the pre-training pipeline)."
            )
        mlm_weights = sample_weight.get("mlm") if isinstance(sample_weight, dict) else None
        mask = x["padding_mask"]
        kl_weights = mask if self.kl_positions == "all" else mlm_weights
        parts = {
            "kl_loss": losses.soft_target_kl(
                y_pred["teacher_logits"], y_pred["student_logits"], self.temperature, kl_weights
            ),
            "mlm_loss": masked_lm_loss(y["mlm"], y_pred["mlm_logits"], mlm_weights),
            "cosine_loss": losses.hidden_cosine_loss(
                y_pred["teacher_hidden"], y_pred["student_hidden"], mask
            ),
        }
        return self._total(parts)


class TinyBertDistiller(_Distiller):
    """TinyBERT intermediate-layer distillation.

    Loss = `attention_weight * sum_i MSE(A_t[map[i]], A_s[i])` (pre-softmax
    scores, padded pairs excluded, and for local attention layers the pairs
    outside the narrower window of the two) + `embedding_weight * MSE(E_s W, E_t)` +
    `hidden_weight * sum_i MSE(H_s[i] W, H_t[map[i]])` (real tokens). `W` is a
    learned `Dense(teacher_width)` shared by all states (as in the reference
    code), or one per state with `shared_projection=False`; it is learned
    even when the widths are equal, initialised like the model's dense
    layers.

    Args:
        teacher, student: `BertBackbone`s (general distillation) or task models
            with a `.backbone` (task distillation); the same vocabulary and,
            with the attention loss on, the same head count.
        layer_map: teacher layer (0-based) per student layer; default the
            uniform map, which needs the student depth to divide the teacher's.

    Batches: `x` dicts with `token_ids`, `padding_mask` and `segment_ids`
    where a model has segments; labels are not used.

    The teacher is frozen; the student's pooler and task head, which these
    losses do not reach, are frozen too until `release()`.
    """

    loss_names = ("attention_loss", "embedding_loss", "hidden_loss")

    def __init__(
        self,
        teacher,
        student,
        layer_map=None,
        attention_weight=1.0,
        embedding_weight=1.0,
        hidden_weight=1.0,
        shared_projection=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        t, s = backbone_of(teacher, "teacher"), backbone_of(student, "student")
        _check_vocabularies(t, s)
        self.weights_by_loss = {
            "attention_loss": _check_weight("attention_weight", attention_weight),
            "embedding_loss": _check_weight("embedding_weight", embedding_weight),
            "hidden_loss": _check_weight("hidden_weight", hidden_weight),
        }
        if not any(self.weights_by_loss.values()):
            raise DistillationError("All TinyBERT loss weights are 0: nothing to train.")
        if self.weights_by_loss["attention_loss"] > 0 and t.num_heads != s.num_heads:
            raise DistillationError(
                f"The attention loss compares scores head by head, but the teacher has "
                f"{t.num_heads} heads and the student {s.num_heads}. Use a student with "
                f"{t.num_heads} heads (hidden_dim divisible by {t.num_heads}) or set "
                "attention_weight=0."
            )
        self.layer_map = resolve_layer_map(layer_map, t.num_layers, s.num_layers)
        # Local attention layers (ModernBERT's): each pair's attention loss
        # counts the (query, key) pairs both layers see.
        self.attention_windows = [
            _narrower(_window(t, j), _window(s, i)) for i, j in enumerate(self.layer_map)
        ]
        teacher.trainable = False
        # The pooler (and a task model's head) get no gradient from these
        # losses: frozen while this distiller trains, given back by release().
        unreached = [s.pooler_dense, *(student.head_layers() if student is not s else ())]
        self._frozen = [layer for layer in unreached if layer is not None and layer.trainable]
        for layer in self._frozen:
            layer.trainable = False
        self.teacher = teacher
        self.student = student
        self.teacher_backbone, self.student_backbone = t, s
        self.teacher_features = t.feature_model(name="teacher_features")
        self.student_features = s.feature_model(name="student_features")
        count = 1 if shared_projection else s.num_layers + 1
        self.projections = [
            keras.layers.Dense(
                t.hidden_dim,
                dtype=s.dtype_policy,
                name=f"projection_{i}",
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=s.initializer_range),
            )
            for i in range(count)
        ]
        for projection in self.projections:  # built here: fit() need not trace call()
            projection.build((None, None, s.hidden_dim))
        self.shared_projection = shared_projection
        self._setup_trackers()

    def release(self):
        """Makes the student's pooler and head trainable again (frozen by
        this distiller), e.g. before prediction-layer distillation."""
        for layer in self._frozen:
            layer.trainable = True
        self._frozen = []

    def _project(self, i, hidden):
        return self.projections[0 if self.shared_projection else i](hidden)

    def call(self, x, training=None):
        t = self.teacher_features(_inputs_for(self.teacher_backbone, x), training=False)
        s = self.student_features(_inputs_for(self.student_backbone, x), training=training)
        out = {"student_sequence": s["sequence_output"]}
        # Teacher hidden state 0 is the embedding output; state j + 1 is
        # layer j's output.
        out["teacher_hidden"] = [ops.stop_gradient(t["hidden_states"][0])] + [
            ops.stop_gradient(t["hidden_states"][j + 1]) for j in self.layer_map
        ]
        out["student_hidden"] = [self._project(i, h) for i, h in enumerate(s["hidden_states"])]
        if self.weights_by_loss["attention_loss"] > 0:
            out["teacher_scores"] = [
                ops.stop_gradient(t["attention_scores"][j]) for j in self.layer_map
            ]
            out["student_scores"] = s["attention_scores"]
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        mask = x["padding_mask"]
        t_hidden, s_hidden = y_pred["teacher_hidden"], y_pred["student_hidden"]
        parts = {
            "embedding_loss": losses.hidden_mse(t_hidden[0], s_hidden[0], mask),
            "hidden_loss": sum(
                losses.hidden_mse(a, b, mask) for a, b in zip(t_hidden[1:], s_hidden[1:])
            ),
        }
        if "teacher_scores" in y_pred:
            parts["attention_loss"] = sum(
                losses.attention_score_mse(a, b, mask, window)
                for a, b, window in zip(
                    y_pred["teacher_scores"], y_pred["student_scores"], self.attention_windows
                )
            )
        else:
            parts["attention_loss"] = ops.zeros((), "float32")
        return self._total(parts)


def _check_classifiers(teacher, student):
    """Prediction-layer distillation needs two classifiers with the same
    classes and vocabulary."""
    for role, model in (("teacher", teacher), ("student", student)):
        if not hasattr(model, "num_classes") or model.num_classes < 2:
            raise DistillationError(
                f"Prediction-layer distillation needs class logits from the {role}: pass a "
                f"BertClassifier with 2 or more classes, not a {type(model).__name__}"
                + (" (regression)" if getattr(model, "num_classes", None) == 1 else "")
                + "."
            )
    if teacher.num_classes != student.num_classes:
        raise DistillationError(
            f"The teacher has {teacher.num_classes} classes and the student {student.num_classes}."
        )
    _check_vocabularies(teacher.backbone, student.backbone)


def prediction_distiller(teacher, student, temperature=1.0):
    """TinyBERT's prediction-layer distillation for classifiers: a
    `keras.distillation.Distiller` whose only loss is `LogitsDistillation`
    (KL between `softmax(t/T)` and `softmax(s/T)`, times T^2). Its gradients
    equal those of TinyBERT's soft cross-entropy (`losses.soft_cross_entropy`)
    at T = 1: the two differ by the teacher's entropy. Labels are not used
    (the distillation data may be unlabelled augmentations), so compile it
    with any `loss` (e.g. "sparse_categorical_crossentropy"), which gets
    weight 0. It runs the teacher in every step; for several epochs over
    the same texts, `teacher_logits` + `LogitsStudent` run it once.

    `teacher` and `student` are `BertClassifier`s with the same number of
    classes and vocabulary.
    """
    from keras.distillation import Distiller, LogitsDistillation

    _check_classifiers(teacher, student)
    losses.check_temperature(temperature)
    return Distiller(
        teacher=teacher,
        student=student,
        # An instance, not the string "kl_divergence": Keras 3.15 resolves the
        # string to the plain function, which skips the softmax and compares
        # raw logits.
        distillation_losses=LogitsDistillation(
            temperature=float(temperature), loss=keras.losses.KLDivergence()
        ),
        student_loss_weight=0.0,
        name="prediction_distiller",
    )


def teacher_logits(teacher, features, batch_size=64):
    """The classifier `teacher`'s logits (float32, `(n, classes)`) for every
    row of `features` (a dict of `(n, S)` arrays), run as inference
    (`training=False`) in length-sorted trimmed batches: the targets of
    `LogitsStudent`. Padding does not change a row's logits, so these are
    the logits a `prediction_distiller` step computes for the same rows."""
    import numpy as np

    from bertzoo.batching import compiled_forward, predict_by_length

    inputs = {k: features[k] for k in teacher.input}
    length = int(np.shape(features["token_ids"])[1])
    out = predict_by_length(compiled_forward(teacher), inputs, batch_size, length)
    return np.asarray(out, np.float32)


@keras.saving.register_keras_serializable(package="bertzoo")
class TeacherLogitsLoss(keras.losses.Loss):
    """Prediction-layer distillation from logits computed beforehand:
    `y_true` the teacher's logits, `y_pred` the student's;
    `T^2 * KL(softmax(t/T) || softmax(s/T))` per example, averaged over the
    batch, computed as `prediction_distiller`'s `LogitsDistillation`
    computes it (`keras.losses.kl_divergence`, which clips probabilities at
    1e-7), in float32."""

    def __init__(self, temperature=1.0, name="teacher_logits_kl", **kwargs):
        losses.check_temperature(temperature)
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)

    def call(self, y_true, y_pred):
        t = ops.softmax(ops.cast(y_true, "float32") / self.temperature, axis=-1)
        s = ops.softmax(ops.cast(y_pred, "float32") / self.temperature, axis=-1)
        return keras.losses.kl_divergence(t, s) * (self.temperature**2)

    def get_config(self):
        return {**super().get_config(), "temperature": self.temperature}


class LogitsStudent(DatasetFit, keras.Model):
    """TinyBERT's prediction-layer distillation on the teacher's logits
    computed once (`teacher_logits`): the classifier `student`, trained by
    `fit(features, teacher_logits)` with `TeacherLogitsLoss`, so no step runs
    the teacher. Only the student trains; the frozen teacher is held as
    `prediction_distiller` holds it, so the two keep their weights in the
    same order (teacher, then student) and a checkpoint of either restores
    into the other, and it reports the same metrics (`distillation_loss`,
    `student_loss` (0: labels are not used), `total_loss`, `loss`). Compile
    it with an optimizer (the loss is set here); checks as
    `prediction_distiller`."""

    def __init__(self, teacher, student, temperature=1.0, **kwargs):
        _check_classifiers(teacher, student)
        losses.check_temperature(temperature)
        super().__init__(name=kwargs.pop("name", "logits_student"), **kwargs)
        self.teacher = teacher
        self.student = student
        self.teacher.trainable = False
        self.temperature = float(temperature)
        self._trackers = {
            name: keras.metrics.Mean(name=name)
            for name in ("distillation_loss", "student_loss", "total_loss")
        }

    def call(self, x, training=None):
        return self.student(x, training=training)

    def compile(self, optimizer="adam", **kwargs):
        if "loss" in kwargs:
            raise ValueError("LogitsStudent sets its own loss (TeacherLogitsLoss); pass no loss=.")
        super().compile(optimizer=optimizer, loss=TeacherLogitsLoss(self.temperature), **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        self._trackers["distillation_loss"].update_state(loss)
        self._trackers["student_loss"].update_state(ops.zeros_like(loss))
        self._trackers["total_loss"].update_state(loss)
        return loss

    @property
    def metrics(self):
        return super().metrics + list(self._trackers.values())
