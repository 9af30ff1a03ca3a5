"""Tagging metrics: BIO tags parsed (`parse_bio_tag`), chunked into entities
(`bio_entities`) and scored at entity level (`entity_f1`), as the CoNLL
``conlleval`` script counts chunks. Pure Python (no TensorFlow); invalid
input raises ``ValueError`` saying what is wrong."""

from collections.abc import Sequence

import numpy as np


def parse_bio_tag(tag, where=""):
    """``(prefix, type)`` of a BIO tag: ``("O", None)``, ``("B", T)``, ``("I", T)``;
    anything else (a non-empty type is required) is a ValueError."""
    if not isinstance(tag, str):
        raise ValueError(f"Invalid BIO tag {tag!r}{where}: tags must be strings.")
    if tag == "O":
        return "O", None
    prefix, dash, entity_type = tag.partition("-")
    if prefix not in ("B", "I") or not dash or not entity_type:
        raise ValueError(f"Invalid BIO tag {tag!r}{where}: expected 'O', 'B-TYPE' or 'I-TYPE'.")
    return prefix, entity_type


def bio_entities(tags):
    """The entities (chunks) of one sentence of BIO tags.

    Chunks are delimited as ``conlleval`` does: a chunk starts at ``B-X``,
    or at ``I-X`` when the previous tag is ``O``, of another type, or there
    is no previous tag (IOB1 tolerance); it continues over the following
    ``I-X`` tags of the same type.

    Args:
        tags: a sequence of tag strings, e.g. ``["B-PER", "I-PER", "O"]``.

    Returns:
        A list of ``(type, start, end_exclusive)`` tuples in sentence order.

    Raises:
        ValueError: for a tag that is not ``O``, ``B-TYPE`` or ``I-TYPE``.
    """
    if isinstance(tags, str):
        raise ValueError("tags must be a sequence of tag strings, not a single string.")
    entities = []
    current_type = None  # type of the open chunk, None when none is open
    current_start = 0
    for position, tag in enumerate(tags):
        prefix, entity_type = parse_bio_tag(tag, f" at position {position}")
        continues = prefix == "I" and entity_type == current_type
        if continues:
            continue
        if current_type is not None:
            entities.append((current_type, current_start, position))
        if prefix == "O":
            current_type = None
        else:
            current_type, current_start = entity_type, position
    if current_type is not None:
        entities.append((current_type, current_start, len(tags)))
    return entities


def entity_f1(true_tags, predicted_tags):
    """Entity (chunk) level precision, recall and F1 over BIO-tagged sentences.

    Chunks are found by :func:`bio_entities`; a predicted entity is correct
    only when a true entity has the same start, end and type. Precision is
    ``correct / predicted`` (0.0 when nothing is predicted), recall
    ``correct / true`` (0.0 when there are no true entities), F1 their
    harmonic mean (0.0 when both are 0), as ``conlleval`` reports them
    (but as fractions in [0, 1], not percentages).

    Args:
        true_tags: list of sentences, each a list of BIO tag strings.
        predicted_tags: list of sentences, pairwise as long as ``true_tags``.

    Returns:
        ``{"precision", "recall", "f1", "true_entities",
        "predicted_entities", "correct_entities"}`` (the counts are ints).
    """
    for value, name in ((true_tags, "true_tags"), (predicted_tags, "predicted_tags")):
        if isinstance(value, str) or not isinstance(value, (Sequence, np.ndarray)):
            raise ValueError(f"{name} must be a list of sentences (lists of tags).")
    if len(true_tags) != len(predicted_tags):
        raise ValueError(
            "true_tags and predicted_tags differ in number of sentences: "
            f"{len(true_tags)} != {len(predicted_tags)}."
        )
    if len(true_tags) == 0:
        raise ValueError("true_tags and predicted_tags are empty.")
    n_true = n_predicted = n_correct = 0
    for index, (true_sentence, predicted_sentence) in enumerate(zip(true_tags, predicted_tags)):
        pairs = ((true_sentence, "true_tags"), (predicted_sentence, "predicted_tags"))
        for sentence, name in pairs:
            if isinstance(sentence, str) or not isinstance(sentence, (Sequence, np.ndarray)):
                raise ValueError(
                    f"{name}[{index}] must be a list of tag strings, got {sentence!r}."
                )
        if len(true_sentence) != len(predicted_sentence):
            raise ValueError(
                f"Sentence {index}: true_tags has {len(true_sentence)} tags but "
                f"predicted_tags has {len(predicted_sentence)}."
            )
        try:
            true_entities = set(bio_entities(list(true_sentence)))
        except ValueError as error:
            raise ValueError(f"true_tags sentence {index}: {error}") from None
        try:
            predicted_entities = set(bio_entities(list(predicted_sentence)))
        except ValueError as error:
            raise ValueError(f"predicted_tags sentence {index}: {error}") from None
        n_true += len(true_entities)
        n_predicted += len(predicted_entities)
        n_correct += len(true_entities & predicted_entities)
    precision = n_correct / n_predicted if n_predicted else 0.0
    recall = n_correct / n_true if n_true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": float(precision),
        "recall": float(recall),
        "f1": float(f1),
        "true_entities": int(n_true),
        "predicted_entities": int(n_predicted),
        "correct_entities": int(n_correct),
    }
