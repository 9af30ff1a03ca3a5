"""Knowledge distillation: layer maps, losses, student initialisation and
the DistilBERT / TinyBERT distillers."""

from bertzoo.distill.distillers import (
    DistilBertDistiller,
    LogitsStudent,
    TeacherLogitsLoss,
    TinyBertDistiller,
    prediction_distiller,
    teacher_logits,
)
from bertzoo.distill.init import (
    embedding_projection,
    init_embeddings_from_teacher,
    init_student_from_teacher,
)
from bertzoo.distill.layer_map import (
    DistillationError,
    check_layer_map,
    init_layer_map,
    resolve_layer_map,
    suggested_layer_map,
    uniform_layer_map,
)
from bertzoo.distill.losses import (
    attention_score_mse,
    hidden_cosine_loss,
    hidden_mse,
    soft_cross_entropy,
    soft_target_kl,
    weighted_mean,
)

__all__ = [
    "DistilBertDistiller",
    "DistillationError",
    "LogitsStudent",
    "TeacherLogitsLoss",
    "TinyBertDistiller",
    "attention_score_mse",
    "check_layer_map",
    "embedding_projection",
    "hidden_cosine_loss",
    "hidden_mse",
    "init_embeddings_from_teacher",
    "init_layer_map",
    "init_student_from_teacher",
    "prediction_distiller",
    "teacher_logits",
    "resolve_layer_map",
    "soft_cross_entropy",
    "soft_target_kl",
    "suggested_layer_map",
    "uniform_layer_map",
    "weighted_mean",
]
