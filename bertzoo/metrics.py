"""Evaluation metrics for the fine-tuning recipes.

Pure Python + numpy (no TensorFlow / Keras import), so the metrics can be
computed on predictions gathered anywhere. Every returned number is a plain
Python ``float`` or ``int`` and therefore JSON-serialisable.

Contents:

* classification: :func:`accuracy`, :func:`f1_score`, :func:`macro_f1`,
  :func:`matthews_corrcoef`, :func:`classification_metrics`;
* regression: :func:`pearson`, :func:`spearman`, :func:`regression_metrics`;
* token classification (NER): :func:`bio_entities`, :func:`entity_f1`
  (chunk level, as the CoNLL ``conlleval`` script counts chunks).

The SQuAD metrics are the QA kind's (`bertzoo.tasks.qa.metrics`).

Invalid input (length mismatch, empty input, a bad argument) raises
``ValueError`` with a message saying what is wrong.
"""

import collections
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "accuracy",
    "bio_entities",
    "classification_metrics",
    "entity_f1",
    "f1_score",
    "macro_f1",
    "matthews_corrcoef",
    "pearson",
    "regression_metrics",
    "spearman",
]


# ---------------------------------------------------------------------------
# Input helpers
# ---------------------------------------------------------------------------


class _ConstantInputError(ValueError):
    """A correlation is undefined because one vector is constant."""


def _as_list(values, name):
    """A 1-D sequence/array of scalar labels as a list of Python scalars."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of labels, not a single string.")
    if not isinstance(values, (np.ndarray, Sequence)):
        try:
            values = list(values)
        except TypeError:
            raise ValueError(
                f"{name} must be a 1-D sequence or array, got {type(values).__name__}."
            ) from None
    try:
        array = np.asarray(values)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"{name} must be a 1-D sequence or array: {error}") from None
    if array.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D, got shape {array.shape} (for model outputs pass "
            "class ids, e.g. the argmax of the logits, not the logits themselves)."
        )
    return array.tolist()


def _paired_lists(labels, predictions, names=("labels", "predictions")):
    labels = _as_list(labels, names[0])
    predictions = _as_list(predictions, names[1])
    if len(labels) != len(predictions):
        raise ValueError(
            f"{names[0]} and {names[1]} differ in length: {len(labels)} != {len(predictions)}."
        )
    if not labels:
        raise ValueError(f"{names[0]} and {names[1]} are empty.")
    return labels, predictions


def _check_num_classes(num_classes, minimum=1):
    if (
        isinstance(num_classes, bool)
        or not isinstance(num_classes, (int, np.integer))
        or num_classes < minimum
    ):
        raise ValueError(f"num_classes must be an integer >= {minimum}, got {num_classes!r}.")
    return int(num_classes)


def _check_in_range(values, num_classes, name):
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int) or not (0 <= value < num_classes):
            raise ValueError(
                f"{name}[{index}] = {value!r} is not a class id in range({num_classes})."
            )


def _float_vector(values, name):
    values = _as_list(values, name)
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers.") from None
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values.")
    return array


def _paired_vectors(x, y, names=("x", "y"), min_length=2):
    x = _float_vector(x, names[0])
    y = _float_vector(y, names[1])
    if x.shape != y.shape:
        raise ValueError(f"{names[0]} and {names[1]} differ in length: {x.size} != {y.size}.")
    if x.size < min_length:
        if x.size == 0:
            raise ValueError(f"{names[0]} and {names[1]} are empty.")
        raise ValueError(
            f"{names[0]} and {names[1]} need at least {min_length} values, got {x.size}."
        )
    return x, y


# ---------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------


def accuracy(labels, predictions):
    """Fraction of positions where ``predictions`` equals ``labels``.

    Args:
        labels: 1-D sequence/array of true labels (any comparable values).
        predictions: 1-D sequence/array of predicted labels, same length.

    Returns:
        A float in [0, 1].
    """
    labels, predictions = _paired_lists(labels, predictions)
    correct = sum(1 for a, b in zip(labels, predictions) if a == b)
    return float(correct / len(labels))


def _binary_f1(labels, predictions, positive):
    tp = fp = fn = 0
    for label, prediction in zip(labels, predictions):
        if prediction == positive:
            if label == positive:
                tp += 1
            else:
                fp += 1
        elif label == positive:
            fn += 1
    if tp + fp + fn == 0:
        return 0.0
    # F1 = 2PR / (P + R) = 2tp / (2tp + fp + fn).
    return float(2 * tp / (2 * tp + fp + fn))


def f1_score(labels, predictions, positive=1):
    """Binary F1 of the class ``positive``.

    F1 is the harmonic mean of precision ``tp / (tp + fp)`` and recall
    ``tp / (tp + fn)``, i.e. ``2 tp / (2 tp + fp + fn)``. When the positive
    class occurs neither in ``labels`` nor in ``predictions``
    (``tp + fp + fn == 0``) F1 is undefined and this returns 0.0.

    Args:
        labels: 1-D sequence/array of true labels.
        predictions: 1-D sequence/array of predicted labels, same length.
        positive: the label of the positive class (default 1).

    Returns:
        A float in [0, 1].
    """
    labels, predictions = _paired_lists(labels, predictions)
    if isinstance(positive, (list, tuple, dict, set, np.ndarray)):
        raise ValueError(f"positive must be a single label, got {positive!r}.")
    if isinstance(positive, np.generic):
        positive = positive.item()
    return _binary_f1(labels, predictions, positive)


def macro_f1(labels, predictions, num_classes=None):
    """Unweighted mean of the per-class (one-vs-rest) F1 scores.

    Args:
        labels: 1-D sequence/array of true labels.
        predictions: 1-D sequence/array of predicted labels, same length.
        num_classes: when given, the mean runs over the classes
            ``range(num_classes)`` (a class that never occurs contributes
            F1 = 0) and every label and prediction must be an integer class
            id in that range. When ``None``, the mean runs over the classes
            present in ``labels`` or ``predictions``.

    Returns:
        A float in [0, 1].
    """
    labels, predictions = _paired_lists(labels, predictions)
    if num_classes is None:
        classes = set(labels) | set(predictions)
    else:
        num_classes = _check_num_classes(num_classes)
        _check_in_range(labels, num_classes, "labels")
        _check_in_range(predictions, num_classes, "predictions")
        classes = range(num_classes)
    scores = [_binary_f1(labels, predictions, c) for c in classes]
    return float(sum(scores) / len(scores))


def matthews_corrcoef(labels, predictions):
    """Matthews correlation coefficient, for any number of classes.

    Uses the multiclass generalisation (Gorodkin 2004) over the confusion
    matrix ``C``: with ``s`` samples, ``c`` correct predictions, ``t_k`` true
    and ``p_k`` predicted counts of class ``k``::

        MCC = (c * s - sum_k p_k t_k)
              / sqrt((s^2 - sum_k p_k^2) * (s^2 - sum_k t_k^2))

    For two classes this equals the binary phi coefficient
    ``(tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))``. When the
    denominator is 0 (all labels, or all predictions, in one class) this
    returns 0.0.

    Returns:
        A float in [-1, 1].
    """
    labels, predictions = _paired_lists(labels, predictions)
    s = len(labels)
    c = sum(1 for a, b in zip(labels, predictions) if a == b)
    true_counts = collections.Counter(labels)
    predicted_counts = collections.Counter(predictions)
    # Exact integer arithmetic: no overflow, no rounding before the division.
    cov_tp = c * s - sum(predicted_counts[k] * n for k, n in true_counts.items())
    cov_pp = s * s - sum(n * n for n in predicted_counts.values())
    cov_tt = s * s - sum(n * n for n in true_counts.values())
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    value = cov_tp / math.sqrt(cov_pp * cov_tt)
    return float(min(1.0, max(-1.0, value)))


def classification_metrics(labels, predictions, num_classes):
    """Accuracy, F1 and MCC for a classification task.

    Args:
        labels: 1-D sequence/array of integer class ids.
        predictions: 1-D sequence/array of integer class ids, same length.
        num_classes: number of classes (>= 2); all ids must lie in
            ``range(num_classes)``.

    Returns:
        ``{"accuracy", "f1", "mcc"}`` when ``num_classes == 2`` (``f1`` is
        the binary F1 of class 1), otherwise ``{"accuracy", "macro_f1",
        "mcc"}`` (macro F1 over ``range(num_classes)``).
    """
    num_classes = _check_num_classes(num_classes, minimum=2)
    labels, predictions = _paired_lists(labels, predictions)
    _check_in_range(labels, num_classes, "labels")
    _check_in_range(predictions, num_classes, "predictions")
    result = {"accuracy": accuracy(labels, predictions)}
    if num_classes == 2:
        result["f1"] = f1_score(labels, predictions, positive=1)
    else:
        result["macro_f1"] = macro_f1(labels, predictions, num_classes=num_classes)
    result["mcc"] = matthews_corrcoef(labels, predictions)
    return result


# ---------------------------------------------------------------------------
# Regression / correlation
# ---------------------------------------------------------------------------


def _pearson_of(x, y, names):
    for values, name in zip((x, y), names):
        if np.all(values == values[0]):
            raise _ConstantInputError(f"{name} is constant, so the correlation is undefined.")
    dx = x - x.mean()
    dy = y - y.mean()
    # Rescale before squaring so tiny or huge values neither under- nor
    # overflow (the correlation is scale invariant).
    dx = dx / np.max(np.abs(dx))
    dy = dy / np.max(np.abs(dy))
    value = np.dot(dx, dy) / math.sqrt(np.dot(dx, dx) * np.dot(dy, dy))
    return float(min(1.0, max(-1.0, value)))


def pearson(x, y):
    """Pearson correlation coefficient of two equally long 1-D vectors.

    Raises:
        ValueError: on a length mismatch, fewer than 2 values, non-finite
            values, or when either vector is constant (the correlation is
            then undefined).
    """
    x, y = _paired_vectors(x, y)
    return _pearson_of(x, y, ("x", "y"))


def _average_ranks(values):
    """1-based ranks; tied values all get the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    ranks = np.empty(values.size, dtype=np.float64)
    # Start of each run of equal values in sorted order, plus the end.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    bounds = np.r_[starts, values.size]
    for start, end in zip(bounds[:-1], bounds[1:]):
        # Positions start..end-1 hold ranks start+1..end; their mean:
        ranks[order[start:end]] = (start + 1 + end) / 2.0
    return ranks


def spearman(x, y):
    """Spearman rank correlation: the Pearson correlation of the ranks.

    Tied values get their average rank, so this is the tie-corrected
    coefficient (not the ``1 - 6 sum d^2 / (n (n^2 - 1))`` shortcut, which
    holds only without ties).

    Raises:
        ValueError: as :func:`pearson`, including when a vector is constant.
    """
    x, y = _paired_vectors(x, y)
    for values, name in ((x, "x"), (y, "y")):
        if np.all(values == values[0]):
            raise _ConstantInputError(f"{name} is constant, so the correlation is undefined.")
    return _pearson_of(_average_ranks(x), _average_ranks(y), ("ranks of x", "ranks of y"))


def regression_metrics(labels, predictions):
    """Pearson, Spearman and mean squared error for a regression task.

    Unlike :func:`pearson` / :func:`spearman`, a constant vector does not
    raise here: the undefined correlation is reported as ``float("nan")``.

    Returns:
        ``{"pearson", "spearman", "mse"}``.
    """
    labels, predictions = _paired_vectors(
        labels, predictions, names=("labels", "predictions"), min_length=1
    )
    result = {}
    for key, correlation in (("pearson", pearson), ("spearman", spearman)):
        if labels.size < 2:
            result[key] = float("nan")
            continue
        try:
            result[key] = correlation(labels, predictions)
        except _ConstantInputError:
            result[key] = float("nan")
    result["mse"] = float(np.mean((labels - predictions) ** 2))
    return result


# ---------------------------------------------------------------------------
# Token classification (BIO tags, conlleval chunks)
# ---------------------------------------------------------------------------


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
