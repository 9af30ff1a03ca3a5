"""DistilBERT-style student initialisation from a teacher of the same width."""

import logging

import numpy as np

from bertzoo.distill.layer_map import DistillationError, check_layer_map, init_layer_map
from bertzoo.models.backbone import group_of_layer

logger = logging.getLogger(__name__)

_SAME = ("vocabulary_size", "hidden_dim", "embedding_dim", "intermediate_dim", "num_heads", "activation")


def _backbone(model, role):
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "transformer_layers"):
        raise DistillationError(
            f"The {role} is a {type(model).__name__}; expected a bertzoo BertBackbone or a "
            "model with a .backbone (BertPretrainer, BertClassifier, ...)."
        )
    return backbone


def _copy(dst, src, what):
    src_values = src.get_weights()
    if [w.shape for w in dst.get_weights()] != [w.shape for w in src_values]:
        raise DistillationError(f"Cannot copy {what}: the weight shapes differ.")
    dst.set_weights(src_values)


def init_student_from_teacher(student, teacher, layer_map=None):
    """Copies a teacher's weights into a student of the same width (DistilBERT
    initialisation): the embeddings, the transformer layers given by
    `layer_map` (default `init_layer_map`: every other layer, both ends kept,
    for any depths), the pooler when both have one, and the MLM head when both
    are `BertPretrainer`s.

    `student` and `teacher` are `BertBackbone`s or models with a `.backbone`.
    The widths (hidden, embedding, feed-forward), head counts, activations and
    vocabularies must match; the error names what differs. A student without
    segment embeddings (DistilBERT) gets the teacher's segment-0 row folded
    into its position table, so single-segment inputs give the same
    embeddings. Returns the layer map used (0-based teacher layers).

    Example:
    >>> teacher = BertBackbone.from_preset("bert_base")
    >>> student = BertBackbone.from_preset("distilbert_base")
    >>> init_student_from_teacher(student, teacher)
    (0, 2, 4, 7, 9, 11)
    """
    s, t = _backbone(student, "student"), _backbone(teacher, "teacher")
    differ = [
        f"{k} (teacher {getattr(t, k)!r}, student {getattr(s, k)!r})"
        for k in _SAME
        if getattr(t, k) != getattr(s, k)
    ]
    if differ:
        raise DistillationError(
            "init_student_from_teacher copies teacher weights, so the student must have the "
            f"teacher's widths; these differ: {'; '.join(differ)}. Use a student of the same "
            "width, or train it from its own initialisation with the TinyBERT losses, which "
            "project between widths."
        )
    if s.num_groups != s.num_layers:
        raise DistillationError(
            "The student shares layers (num_groups < num_layers); copying distinct teacher "
            "layers into shared ones is not defined."
        )
    if s.max_sequence_length > t.max_sequence_length:
        raise DistillationError(
            f"The student has {s.max_sequence_length} positions, the teacher only "
            f"{t.max_sequence_length}."
        )
    if s.num_segments > 0 and s.num_segments != t.num_segments:
        raise DistillationError(
            f"The student has {s.num_segments} segment ids, the teacher {t.num_segments}."
        )
    if layer_map is None:
        layer_map = init_layer_map(t.num_layers, s.num_layers)
    layer_map = check_layer_map(layer_map, t.num_layers, s.num_layers)

    se, te = s.embeddings_layer, t.embeddings_layer
    _copy(se.token_embedding, te.token_embedding, "the token embeddings")
    _copy(se.layer_norm, te.layer_norm, "the embedding LayerNorm")
    if se.projection is not None:
        _copy(se.projection, te.projection, "the embedding projection")
    positions = np.array(te.position_embeddings)[: s.max_sequence_length]
    if s.num_segments > 0:
        _copy(se.segment_embedding, te.segment_embedding, "the segment embeddings")
    elif te.segment_embedding is not None:
        positions = positions + np.asarray(te.segment_embedding.embeddings)[0]
    se.position_embeddings.assign(positions)
    for j, i in enumerate(layer_map):
        _copy(
            s.transformer_layers[j],
            t.transformer_layers[group_of_layer(i, t.num_layers, t.num_groups)],
            f"teacher layer {i} into student layer {j}",
        )
    if s.pooler_dense is not None and t.pooler_dense is not None:
        _copy(s.pooler_dense, t.pooler_dense, "the pooler")
    s_head, t_head = getattr(student, "mlm_head", None), getattr(teacher, "mlm_head", None)
    if s_head is not None and t_head is not None:
        _copy(s_head.dense, t_head.dense, "the MLM head")
        _copy(s_head.layer_norm, t_head.layer_norm, "the MLM head LayerNorm")
        s_head.bias.assign(np.array(t_head.bias))  # a copy: never share buffers
    logger.info("Student initialised from teacher layers %s.", list(layer_map))
    return layer_map
