"""Evaluation metrics for the fine-tuning recipes.

Pure Python + numpy (no TensorFlow / Keras import), so the metrics can be
computed on predictions gathered anywhere. Every returned number is a plain
Python ``float`` or ``int`` and therefore JSON-serialisable.

Contents:

* classification: :func:`accuracy`, :func:`f1_score`, :func:`macro_f1`,
  :func:`matthews_corrcoef`, :func:`classification_metrics`;
* regression: :func:`pearson`, :func:`spearman`, :func:`regression_metrics`.

The task kinds' own metrics live with them: entity F1 in
`bertzoo.tasks.tagging.metrics`, SQuAD EM/F1 in `bertzoo.tasks.qa.metrics`.

Invalid input (length mismatch, empty input, a bad argument) raises
``ValueError`` with a message saying what is wrong.
"""

import collections
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "accuracy",
    "classification_metrics",
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
