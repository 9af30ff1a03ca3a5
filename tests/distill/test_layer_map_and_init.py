"""Layer maps and DistilBERT-style initialisation."""

import numpy as np
import pytest

from bertzoo.distill import (
    DistillationError,
    check_layer_map,
    embedding_projection,
    init_embeddings_from_teacher,
    init_layer_map,
    init_student_from_teacher,
    resolve_layer_map,
    uniform_layer_map,
)
from bertzoo.models.pretrainer import BertPretrainer
from tests.conftest import make_inputs, tiny_backbone


@pytest.mark.backend_independent
def test_uniform_layer_map_follows_tinybert():
    assert uniform_layer_map(12, 4) == (2, 5, 8, 11)
    assert uniform_layer_map(6, 3) == (1, 3, 5)
    assert uniform_layer_map(4, 4) == (0, 1, 2, 3)
    with pytest.raises(DistillationError, match=r"multiple of the student's 4.*2,3,5,6"):
        uniform_layer_map(6, 4)
    with pytest.raises(DistillationError, match="more layers"):
        uniform_layer_map(2, 4)


@pytest.mark.backend_independent
def test_suggested_layer_map_ends_near_equal_blocks():
    from bertzoo.distill.layer_map import suggested_layer_map

    # The default student's map (docs/distillation.md): MiniLM's 6 layers
    # onto 4, student layers 1-4 <- teacher layers 2, 3, 5, 6 (1-based).
    assert suggested_layer_map(6, 4) == (1, 2, 4, 5)
    for teacher, student in ((12, 4), (6, 3), (4, 4), (12, 6)):
        assert suggested_layer_map(teacher, student) == uniform_layer_map(teacher, student)
    assert suggested_layer_map(12, 5) == (2, 4, 7, 9, 11)


@pytest.mark.backend_independent
def test_explicit_layer_maps_are_checked():
    assert resolve_layer_map([1, 2, 4, 5], 6, 4) == (1, 2, 4, 5)
    with pytest.raises(DistillationError, match="has 3 entries"):
        check_layer_map([1, 2, 3], 6, 4)
    with pytest.raises(DistillationError, match=r"valid are 0\.\.5"):
        check_layer_map([1, 2, 3, 6], 6, 4)
    with pytest.raises(DistillationError, match="strictly increasing"):
        check_layer_map([1, 1, 3, 5], 6, 4)


@pytest.mark.backend_independent
def test_init_layer_map_generalises_distilbert():
    assert init_layer_map(12, 6) == (0, 2, 4, 7, 9, 11)  # the reference choice
    assert init_layer_map(6, 3) == (0, 3, 5)
    assert init_layer_map(4, 1) == (0,)
    assert init_layer_map(4, 4) == (0, 1, 2, 3)


def _features(backbone, inputs):
    return backbone.feature_model()(inputs, training=False)


def test_student_copies_the_mapped_teacher_layers():
    teacher = tiny_backbone()  # 4 layers
    student = tiny_backbone(num_layers=2)
    assert init_student_from_teacher(student, teacher) == (0, 3)
    for j, i in enumerate((0, 3)):
        for a, b in zip(
            student.transformer_layers[j].get_weights(), teacher.transformer_layers[i].get_weights()
        ):
            np.testing.assert_array_equal(a, b)
    # A student of the same depth is the teacher, output for output.
    twin = tiny_backbone()
    init_student_from_teacher(twin, teacher)
    x = make_inputs()
    np.testing.assert_allclose(
        np.asarray(twin(x)["sequence_output"]), np.asarray(teacher(x)["sequence_output"]), atol=1e-6
    )


def test_student_without_segments_keeps_single_segment_embeddings():
    teacher = tiny_backbone()
    student = tiny_backbone(num_layers=2, num_segments=0, use_pooler=False)  # DistilBERT layout
    init_student_from_teacher(student, teacher)
    x = make_inputs(num_segments=2)
    x["segment_ids"] = np.zeros_like(x["segment_ids"])
    t0 = np.asarray(_features(teacher, x)["hidden_states"][0])
    s0 = np.asarray(
        _features(student, {k: v for k, v in x.items() if k != "segment_ids"})["hidden_states"][0]
    )
    np.testing.assert_allclose(s0, t0, atol=1e-6)


def test_mlm_head_is_copied_between_pretrainers():
    teacher = BertPretrainer(tiny_backbone(), objective="nsp")
    student = BertPretrainer(tiny_backbone(num_layers=2), objective="none")
    init_student_from_teacher(student, teacher)
    np.testing.assert_array_equal(
        np.asarray(student.mlm_head.bias), np.asarray(teacher.mlm_head.bias)
    )
    np.testing.assert_array_equal(
        np.asarray(student.mlm_head.dense.kernel), np.asarray(teacher.mlm_head.dense.kernel)
    )


def test_width_mismatch_is_a_clear_error():
    with pytest.raises(DistillationError, match=r"hidden_dim \(teacher 10, student 12\)"):
        init_student_from_teacher(tiny_backbone(num_layers=2, hidden_dim=12), tiny_backbone())
    with pytest.raises(DistillationError, match="vocabulary_size"):
        init_student_from_teacher(tiny_backbone(num_layers=2, vocabulary_size=70), tiny_backbone())
    with pytest.raises(DistillationError, match="shares layers"):
        init_student_from_teacher(tiny_backbone(num_layers=2, num_groups=1), tiny_backbone())
    with pytest.raises(DistillationError, match="BertBackbone"):
        init_student_from_teacher(tiny_backbone(), object())


def _table(layer):
    return np.asarray(layer.embeddings, "float64")


def test_embeddings_are_projected_onto_the_teachers_principal_directions():
    teacher = tiny_backbone()  # width 10
    rng = np.random.default_rng(0)
    # A token table of rank 4 around a common offset: a projection onto the
    # top 6 principal directions keeps every centred row exactly.
    low_rank = 0.3 + rng.normal(size=(61, 4)) @ rng.normal(size=(4, 10))
    teacher.embeddings_layer.token_embedding.embeddings.assign(low_rank.astype("float32"))
    student = tiny_backbone(num_layers=2, hidden_dim=6, intermediate_dim=12)
    basis = init_embeddings_from_teacher(student, teacher)
    assert basis.shape == (10, 6)
    np.testing.assert_allclose(basis.T @ basis, np.eye(6), atol=1e-10)
    s, t = _table(student.token_embedding), low_rank.astype("float32").astype("float64")
    centred = lambda a: a - a.mean(axis=0)  # noqa: E731
    np.testing.assert_allclose(centred(s) @ centred(s).T, centred(t) @ centred(t).T, atol=1e-4)
    # Positions and segments go through the same projection.
    se, te = student.embeddings_layer, teacher.embeddings_layer
    np.testing.assert_allclose(
        np.asarray(se.position_embeddings), np.asarray(te.position_embeddings) @ basis, atol=1e-6
    )
    np.testing.assert_allclose(
        _table(se.segment_embedding), _table(te.segment_embedding) @ basis, atol=1e-6
    )


def test_projection_takes_the_top_principal_directions():
    teacher = tiny_backbone()  # a random full-rank table
    table = _table(teacher.token_embedding)
    # Reference: eigenvectors of the covariance, largest eigenvalues first.
    values, vectors = np.linalg.eigh(np.cov(table, rowvar=False))
    top = vectors[:, np.argsort(-values)[:3]]
    basis = embedding_projection(teacher, 3)
    np.testing.assert_allclose(
        np.abs(np.sum(basis * top, axis=0)), 1.0, atol=1e-6
    )  # same up to sign
    np.testing.assert_array_equal(embedding_projection(teacher, 10), np.eye(10))


def test_same_width_embeddings_are_copied_exactly():
    teacher = tiny_backbone()
    teacher.embeddings_layer.layer_norm.gamma.assign(np.full(10, 1.5, "float32"))
    student = tiny_backbone(num_layers=1)
    np.testing.assert_array_equal(init_embeddings_from_teacher(student, teacher), np.eye(10))
    for a, b in zip(student.embeddings_layer.get_weights(), teacher.embeddings_layer.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_embedding_init_errors_say_what_differs():
    teacher = tiny_backbone()
    with pytest.raises(DistillationError, match="wider than the teacher's 10"):
        init_embeddings_from_teacher(tiny_backbone(num_layers=1, hidden_dim=12), teacher)
    with pytest.raises(DistillationError, match="vocabulary_size: teacher 61, student 70"):
        init_embeddings_from_teacher(
            tiny_backbone(num_layers=1, hidden_dim=6, vocabulary_size=70), teacher
        )
    with pytest.raises(DistillationError, match="64 positions, the teacher only 32"):
        init_embeddings_from_teacher(
            tiny_backbone(num_layers=1, hidden_dim=6, max_sequence_length=64), teacher
        )
    # RoBERTa's positions start after the padding id: a student counting
    # from 0 would read every copied position row one or two places off.
    roberta_like = tiny_backbone(num_segments=1, position_padding_id=1)
    with pytest.raises(DistillationError, match="position_padding_id: teacher 1, student None"):
        init_embeddings_from_teacher(tiny_backbone(num_layers=1, num_segments=1), roberta_like)
    init_embeddings_from_teacher(
        tiny_backbone(num_layers=1, hidden_dim=6, num_segments=1, position_padding_id=1),
        roberta_like,
    )


@pytest.mark.backend_independent
def test_the_default_student_keeps_a_roberta_teacher_s_segments_and_positions():
    from bertzoo.training.students import default_student_config

    teacher = tiny_backbone(num_segments=1, position_padding_id=1)
    config = default_student_config(teacher)
    assert (config["num_segments"], config["position_padding_id"]) == (1, 1)
    assert default_student_config(tiny_backbone())["position_padding_id"] is None
