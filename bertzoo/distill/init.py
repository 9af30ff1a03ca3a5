"""Student initialisation from a teacher: DistilBERT-style (embeddings and
every other layer, same width) and, for students of any width, the
embeddings alone projected onto the teacher's principal directions."""

import logging

import numpy as np

from bertzoo.distill.layer_map import DistillationError, check_layer_map, init_layer_map
from bertzoo.layers.common import group_of_layer
from bertzoo.models.quantize import check_float

logger = logging.getLogger(__name__)

_SAME = (
    "vocabulary_size",
    "hidden_dim",
    "embedding_dim",
    "intermediate_dim",
    "num_heads",
    "activation",
    # The switches that change what a layer's weights are or mean
    # (ModernBERT's): pre-norm, biases, a gated feed-forward, rotary positions.
    "norm_first",
    "use_bias",
    "gated_feedforward",
    "rope_theta",
)


def backbone_of(model, role):
    """The `BertBackbone` of `model` (a backbone, or a model with a
    `.backbone`); anything else is a `DistillationError` naming `role`."""
    backbone = getattr(model, "backbone", model)
    if not hasattr(backbone, "transformer_layers"):
        raise DistillationError(
            f"The {role} is a {type(model).__name__}; expected a bertzoo BertBackbone or a "
            "model with a .backbone (BertPretrainer, BertClassifier, ...)."
        )
    check_float(backbone, f"distillation (as the {role})")
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
    embeddings (see `init_embeddings_from_teacher`, which copies the
    embeddings). Returns the layer map used (0-based teacher layers).

    Example:
    >>> teacher = BertBackbone.from_preset("bert_base")
    >>> student = BertBackbone.from_preset("distilbert_base")
    >>> init_student_from_teacher(student, teacher)
    (0, 2, 4, 7, 9, 11)
    """
    s, t = backbone_of(student, "student"), backbone_of(teacher, "teacher")
    differ = [
        f"{k} (teacher {getattr(t, k)!r}, student {getattr(s, k)!r})"
        for k in _SAME
        if getattr(t, k) != getattr(s, k)
    ]
    if differ:
        raise DistillationError(
            "init_student_from_teacher copies teacher weights, so the student must have the "
            f"teacher's widths; these differ: {'; '.join(differ)}. Use a student of the same "
            "width, or init_embeddings_from_teacher (embeddings only, any narrower width) and "
            "the TinyBERT losses, which project between widths."
        )
    if s.num_groups != s.num_layers:
        raise DistillationError(
            "The student shares layers (num_groups < num_layers); copying distinct teacher "
            "layers into shared ones is not defined."
        )
    if layer_map is None:
        layer_map = init_layer_map(t.num_layers, s.num_layers)
    layer_map = check_layer_map(layer_map, t.num_layers, s.num_layers)

    init_embeddings_from_teacher(s, t)
    for j, i in enumerate(layer_map):
        _copy(
            s.transformer_layers[j],
            t.transformer_layers[group_of_layer(i, t.num_layers, t.num_groups)],
            f"teacher layer {i} into student layer {j}",
        )
    if s.pooler_dense is not None and t.pooler_dense is not None:
        _copy(s.pooler_dense, t.pooler_dense, "the pooler")
    if s.final_layer_norm is not None and t.final_layer_norm is not None:
        _copy(s.final_layer_norm, t.final_layer_norm, "the final LayerNorm")  # pre-norm models
    s_head, t_head = getattr(student, "mlm_head", None), getattr(teacher, "mlm_head", None)
    if s_head is not None and t_head is not None:
        _copy(s_head.dense, t_head.dense, "the MLM head")
        _copy(s_head.layer_norm, t_head.layer_norm, "the MLM head LayerNorm")
        if s_head.bias is not None and t_head.bias is not None:
            s_head.bias.assign(np.array(t_head.bias))  # a copy: never share buffers
    logger.info("Student initialised from teacher layers %s.", list(layer_map))
    return layer_map


def _position_tables(s, t):
    """Whether student and teacher both have learned position tables (not
    rotary positions, ModernBERT's, which have no weights to copy)."""
    return s.embeddings_layer.learned_positions and t.embeddings_layer.learned_positions


def _check_embeddings(s, t):
    problems = []
    if s.vocabulary_size != t.vocabulary_size:
        problems.append(
            f"vocabulary_size: teacher {t.vocabulary_size}, student {s.vocabulary_size} "
            "(one tokenizer is needed)"
        )
    if s.embedding_dim > t.embedding_dim:
        problems.append(
            f"embedding_dim: the student's {s.embedding_dim} is wider than the teacher's "
            f"{t.embedding_dim} (a projection only narrows)"
        )
    tables = _position_tables(s, t)
    if tables and s.max_sequence_length > t.max_sequence_length:
        problems.append(
            f"max_sequence_length: the student has {s.max_sequence_length} positions, the "
            f"teacher only {t.max_sequence_length}"
        )
    if s.num_segments > 0 and s.num_segments != t.num_segments:
        problems.append(f"num_segments: teacher {t.num_segments}, student {s.num_segments}")
    if tables and s.position_padding_id != t.position_padding_id:
        problems.append(
            f"position_padding_id: teacher {t.position_padding_id}, student "
            f"{s.position_padding_id} (their position rows would mean different positions)"
        )
    if problems:
        raise DistillationError(
            "Cannot initialise the student's embeddings from the teacher's: "
            + "; ".join(problems)
            + "."
        )


def embedding_projection(teacher, width):
    """The (teacher embedding_dim, `width`) matrix whose orthonormal columns
    are the top `width` principal directions of the teacher's token-embedding
    table (the identity when `width` is the teacher's own)."""
    t = backbone_of(teacher, "teacher")
    table = np.asarray(t.embeddings_layer.token_embedding.embeddings, "float64")
    if width == table.shape[1]:
        return np.eye(width)
    _, _, vt = np.linalg.svd(table - table.mean(axis=0), full_matrices=False)
    return vt[:width].T


def init_embeddings_from_teacher(student, teacher):
    """Initialises the student's embeddings from the teacher's, for a student
    of any width up to the teacher's: the token, position and segment tables
    are multiplied by `embedding_projection(teacher, student.embedding_dim)`,
    so every token keeps the teacher's geometry along the directions where the
    teacher's embeddings vary most (an exact copy when the widths match; then
    the embedding LayerNorm and ALBERT-style projection are copied too).

    This is what a narrower TinyBERT student trained from scratch lacks: it
    only learns embeddings for the tokens its distillation data contains, and
    every other token (a word met first at test time) keeps its random
    initialisation. A student without segment embeddings gets the teacher's
    segment-0 row folded into its positions. Positions are copied when both
    have a learned table; with rotary positions (ModernBERT) there is none,
    and a student with a table under a rotary teacher keeps its random one.
    The embedding LayerNorm is copied when the widths and biases match.
    Raises `DistillationError` when
    the vocabularies differ, the student is wider, or it has more positions
    or other segment ids. Returns the projection used.

    Example:
    >>> teacher = BertBackbone.from_preset(teacher_dir)       # 384 wide
    >>> student = BertBackbone(**config_120_wide)
    >>> init_embeddings_from_teacher(student, teacher).shape
    (384, 120)
    """
    s, t = backbone_of(student, "student"), backbone_of(teacher, "teacher")
    _check_embeddings(s, t)
    basis = embedding_projection(t, s.embedding_dim)
    same = s.embedding_dim == t.embedding_dim
    se, te = s.embeddings_layer, t.embeddings_layer

    def project(table):  # a plain copy at the same width: no (vocabulary x width^2) product
        table = np.asarray(table, "float64")
        return (table if same else table @ basis).astype("float32")

    tables = _position_tables(s, t)
    positions = None
    if tables:
        positions = np.asarray(te.position_embeddings, "float64")[: s.max_sequence_length]
    tokens = np.asarray(te.token_embedding.embeddings, "float64")
    if s.num_segments > 0:
        se.segment_embedding.embeddings.assign(project(te.segment_embedding.embeddings))
    elif te.segment_embedding is not None:
        # Single-segment inputs: the teacher's segment-0 row goes into the
        # student's positions, or, without a position table, into its tokens.
        row = np.asarray(te.segment_embedding.embeddings, "float64")[0]
        if positions is not None:
            positions = positions + row
        elif not se.learned_positions:
            tokens = tokens + row
    se.token_embedding.embeddings.assign(project(tokens))
    if positions is not None:
        se.position_embeddings.assign(project(positions))
    if same and se.use_bias == te.use_bias:
        _copy(se.layer_norm, te.layer_norm, "the embedding LayerNorm")
        if se.projection is not None and te.projection is not None:
            _copy(se.projection, te.projection, "the embedding projection")
    return basis
