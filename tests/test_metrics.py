"""bertzoo.metrics: hand-worked values, independent cross-checks, errors."""

import json
import math

import numpy as np
import pytest

from bertzoo import metrics
from bertzoo.metrics import (
    accuracy,
    classification_metrics,
    f1_score,
    macro_f1,
    matthews_corrcoef,
    pearson,
    regression_metrics,
    spearman,
)

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


@pytest.fixture(autouse=True)
def _seed():
    """Overrides conftest's autouse fixture of the same name: these tests hold
    no Keras state, and its per-test clear_session() costs ~0.4 s each."""
    yield


# Binary example used by several tests.
#   position: 0 1 2 3 4 5 6 7
#   label:    1 1 1 0 0 0 1 0
#   pred:     1 0 1 1 0 0 1 0
# tp = {0, 2, 6} = 3, fn = {1} = 1, fp = {3} = 1, tn = {4, 5, 7} = 3.
BIN_LABELS = [1, 1, 1, 0, 0, 0, 1, 0]
BIN_PREDS = [1, 0, 1, 1, 0, 0, 1, 0]

# Three-class example.
#   label: 0 0 1 1 2 2
#   pred:  0 1 1 1 2 0
# class 0: tp 1 (pos 0), fp 1 (pos 5), fn 1 (pos 1) -> F1 = 2/(2+1+1) = 1/2
# class 1: tp 2 (pos 2,3), fp 1 (pos 1), fn 0        -> F1 = 4/(4+1)   = 4/5
# class 2: tp 1 (pos 4), fp 0, fn 1 (pos 5)          -> F1 = 2/(2+0+1) = 2/3
# macro F1 = (1/2 + 4/5 + 2/3) / 3 = (15 + 24 + 20) / 90 = 59/90
MC_LABELS = [0, 0, 1, 1, 2, 2]
MC_PREDS = [0, 1, 1, 1, 2, 0]


def _is_plain_number(value):
    return type(value) in (float, int)


# ---------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------


def test_accuracy_by_hand():
    # 6 of 8 positions agree (all but 1 and 3).
    assert accuracy(BIN_LABELS, BIN_PREDS) == pytest.approx(6 / 8)
    # 4 of 6 agree (positions 0, 2, 3, 4).
    assert accuracy(np.array(MC_LABELS), np.array(MC_PREDS)) == pytest.approx(4 / 6)
    assert accuracy(["a", "b"], ["a", "b"]) == 1.0
    assert type(accuracy(np.array([1]), np.array([0]))) is float


def test_binary_f1_by_hand():
    # P = tp/(tp+fp) = 3/4, R = tp/(tp+fn) = 3/4, F1 = 3/4.
    assert f1_score(BIN_LABELS, BIN_PREDS) == pytest.approx(0.75)
    # Class 0 as positive: tp = 3 (the tn above), fp = 1, fn = 1 -> 6/8.
    assert f1_score(BIN_LABELS, BIN_PREDS, positive=0) == pytest.approx(0.75)
    # labels 1 1 0 0, preds 1 0 1 1: tp 1, fn 1, fp 2 -> P 1/3, R 1/2,
    # F1 = 2 * (1/3)(1/2) / (1/3 + 1/2) = (1/3) / (5/6) = 2/5.
    assert f1_score([1, 1, 0, 0], [1, 0, 1, 1]) == pytest.approx(0.4)
    # String labels, numpy scalar positive.
    assert f1_score(["y", "n"], ["y", "y"], positive="y") == pytest.approx(2 / 3)
    assert f1_score(np.array([1, 0]), np.array([1, 0]), positive=np.int64(1)) == 1.0


def test_binary_f1_no_positives_is_zero():
    # tp + fp + fn == 0: documented to return 0.0.
    assert f1_score([0, 0, 0], [0, 0, 0]) == 0.0
    # No predicted positives but some true ones: recall 0 -> F1 0.
    assert f1_score([1, 0], [0, 0]) == 0.0


def test_macro_f1_by_hand():
    assert macro_f1(MC_LABELS, MC_PREDS) == pytest.approx(59 / 90)
    # With num_classes=4 the absent class 3 contributes 0: (59/30) / 4.
    assert macro_f1(MC_LABELS, MC_PREDS, num_classes=4) == pytest.approx(59 / 120)
    assert macro_f1(MC_LABELS, MC_PREDS, num_classes=3) == pytest.approx(59 / 90)
    # Classes present only in the predictions count too: labels {0}, preds
    # {0, 1}: class 0 tp 1 fn 1 -> 2/3, class 1 fp 1 -> 0; mean 1/3.
    assert macro_f1([0, 0], [0, 1]) == pytest.approx(1 / 3)


def test_mcc_binary_by_hand():
    # phi = (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))
    #     = (3*3 - 1*1) / sqrt(4 * 4 * 4 * 4) = 8 / 16 = 0.5
    assert matthews_corrcoef(BIN_LABELS, BIN_PREDS) == pytest.approx(0.5)
    # Perfect and perfectly inverted predictions.
    assert matthews_corrcoef([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)


def test_mcc_multiclass_by_hand():
    # s = 6 samples, c = 4 correct; true counts t = (2, 2, 2); predicted
    # counts p = (2, 3, 1).  sum p_k t_k = 4 + 6 + 2 = 12.
    # numerator = c s - sum p t = 24 - 12 = 12
    # s^2 - sum p^2 = 36 - (4 + 9 + 1) = 22; s^2 - sum t^2 = 36 - 12 = 24
    # MCC = 12 / sqrt(22 * 24) = 12 / sqrt(528) ~= 0.52223
    assert matthews_corrcoef(MC_LABELS, MC_PREDS) == pytest.approx(12 / math.sqrt(528))
    assert matthews_corrcoef(MC_LABELS, MC_PREDS) == pytest.approx(0.522233, abs=1e-6)


def test_mcc_zero_denominator():
    # All predictions in one class: s^2 - sum p^2 = 0.
    assert matthews_corrcoef([0, 1, 2], [1, 1, 1]) == 0.0
    # All labels in one class.
    assert matthews_corrcoef([1, 1, 1], [0, 1, 1]) == 0.0


def _confusion(labels, preds, k):
    matrix = np.zeros((k, k), dtype=np.int64)
    for a, b in zip(labels, preds):
        matrix[a, b] += 1
    return matrix


def _mcc_by_covariance(labels, preds, k):
    """Independent form: MCC = cov(X, Y) / sqrt(cov(X, X) cov(Y, Y)) on the
    one-hot indicator matrices, covariance summed over the class columns."""
    x = np.eye(k)[labels]
    y = np.eye(k)[preds]
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    cxy, cxx, cyy = (x * y).sum(), (x * x).sum(), (y * y).sum()
    if cxx == 0 or cyy == 0:
        return 0.0
    return cxy / math.sqrt(cxx * cyy)


def _macro_f1_from_confusion(matrix):
    scores = []
    for k in range(matrix.shape[0]):
        tp = matrix[k, k]
        fp = matrix[:, k].sum() - tp
        fn = matrix[k, :].sum() - tp
        scores.append(0.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


@pytest.mark.parametrize("k", [2, 3, 5])
def test_classification_cross_checks_on_random_data(k):
    rng = np.random.default_rng(k)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        labels = rng.integers(0, k, size=n)
        # Correlated predictions: keep about half the labels.
        preds = np.where(rng.random(n) < 0.5, labels, rng.integers(0, k, size=n))
        assert accuracy(labels, preds) == pytest.approx(np.mean(labels == preds))
        assert matthews_corrcoef(labels, preds) == pytest.approx(
            _mcc_by_covariance(labels, preds, k), abs=1e-12
        )
        assert macro_f1(labels, preds, num_classes=k) == pytest.approx(
            _macro_f1_from_confusion(_confusion(labels, preds, k))
        )
        if k == 2:
            (tn, fp), (fn, tp) = _confusion(labels, preds, 2).tolist()
            denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
            phi = 0.0 if denominator == 0 else (tp * tn - fp * fn) / math.sqrt(denominator)
            assert matthews_corrcoef(labels, preds) == pytest.approx(phi, abs=1e-12)
            f1 = 0.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
            assert f1_score(labels, preds) == pytest.approx(f1)


def test_classification_metrics():
    binary = classification_metrics(BIN_LABELS, BIN_PREDS, num_classes=2)
    assert binary == pytest.approx({"accuracy": 0.75, "f1": 0.75, "mcc": 0.5})
    assert set(binary) == {"accuracy", "f1", "mcc"}
    multi = classification_metrics(np.array(MC_LABELS), np.array(MC_PREDS), 3)
    assert set(multi) == {"accuracy", "macro_f1", "mcc"}
    assert multi == pytest.approx(
        {"accuracy": 4 / 6, "macro_f1": 59 / 90, "mcc": 12 / math.sqrt(528)}
    )
    for result in (binary, multi):
        assert all(_is_plain_number(v) for v in result.values())
        json.dumps(result, allow_nan=False)


def test_classification_errors():
    with pytest.raises(ValueError, match="differ in length: 3 != 2"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])
    with pytest.raises(ValueError, match="differ in length"):
        f1_score([0, 1], [0])
    with pytest.raises(ValueError, match="differ in length"):
        macro_f1([0, 1], [0])
    with pytest.raises(ValueError, match="differ in length"):
        matthews_corrcoef([0], [0, 1])
    with pytest.raises(ValueError, match="empty"):
        matthews_corrcoef(np.array([]), np.array([]))
    with pytest.raises(ValueError, match="1-D"):
        accuracy([0, 1], np.zeros((2, 3)))  # logits instead of class ids
    with pytest.raises(ValueError, match="single string"):
        accuracy("01", "01")
    with pytest.raises(ValueError, match="single label"):
        f1_score([0, 1], [0, 1], positive=[1])
    with pytest.raises(ValueError, match="num_classes"):
        macro_f1([0, 1], [0, 1], num_classes=0)
    with pytest.raises(ValueError, match=r"labels\[1\] = 5 .*range\(3\)"):
        macro_f1([0, 5], [0, 1], num_classes=3)
    with pytest.raises(ValueError, match="num_classes"):
        classification_metrics([0, 0], [0, 0], num_classes=1)
    with pytest.raises(ValueError, match=r"predictions\[0\] = 2"):
        classification_metrics([0, 1], [2, 1], num_classes=2)


# ---------------------------------------------------------------------------
# Correlations / regression
# ---------------------------------------------------------------------------


def test_pearson_by_hand():
    # x = 1 2 3, y = 2 4 7: dx = -1 0 1, dy = -7/3 -1/3 8/3
    # sum dx dy = 7/3 + 8/3 = 5, sum dx^2 = 2, sum dy^2 = 114/9
    # r = 5 / sqrt(2 * 114 / 9) = 15 / sqrt(228) ~= 0.99339
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(15 / math.sqrt(228))
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Scale invariance survives extreme magnitudes (no under/overflow).
    assert pearson([1e-200, 2e-200, 4e-200], [1, 2, 4]) == pytest.approx(1.0)
    assert pearson([1e200, 2e200, 4e200], [1, 2, 4]) == pytest.approx(1.0)


def test_spearman_with_ties_by_hand():
    # x = 1 2 2 3 -> ranks 1, 2.5, 2.5, 4 (the tied 2s share ranks 2 and 3)
    # y = 1 3 2 4 -> ranks 1, 3, 2, 4
    # Both rank vectors have mean 2.5:
    #   dx = -1.5, 0, 0, 1.5        dy = -1.5, 0.5, -0.5, 1.5
    #   sum dx dy = 2.25 + 2.25 = 4.5
    #   sum dx^2 = 4.5, sum dy^2 = 2.25 + 0.25 + 0.25 + 2.25 = 5
    #   rho = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) ~= 0.948683
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    # Monotonic but non-linear: rho = 1 while Pearson < 1.
    assert spearman([1, 2, 3, 4], [1, 8, 27, 1000]) == pytest.approx(1.0)
    assert pearson([1, 2, 3, 4], [1, 8, 27, 1000]) < 0.9
    # Ranks: three-way tie 5 5 5 at positions 1..3 -> all rank 3.
    ranks = metrics._average_ranks(np.array([9.0, 5.0, 5.0, 5.0, 1.0]))
    np.testing.assert_array_equal(ranks, [5.0, 3.0, 3.0, 3.0, 1.0])


def _naive_average_ranks(values):
    """rank_i = #(v < v_i) + (#(v == v_i) + 1) / 2, O(n^2)."""
    values = list(values)
    return np.array(
        [sum(w < v for w in values) + (sum(w == v for w in values) + 1) / 2 for v in values]
    )


def test_correlations_cross_check_numpy():
    rng = np.random.default_rng(0)
    for _ in range(25):
        n = int(rng.integers(3, 30))
        x = rng.normal(size=n)
        y = 0.5 * x + rng.normal(size=n)
        assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
        # Small integer values give many ties.
        xi = rng.integers(0, 4, size=n).astype(float)
        yi = rng.integers(0, 4, size=n).astype(float)
        if np.all(xi == xi[0]) or np.all(yi == yi[0]):
            continue
        expected = np.corrcoef(_naive_average_ranks(xi), _naive_average_ranks(yi))[0, 1]
        assert spearman(xi, yi) == pytest.approx(expected, abs=1e-12)
        assert pearson(xi.tolist(), yi.tolist()) == pytest.approx(
            np.corrcoef(xi, yi)[0, 1], abs=1e-12
        )


def test_correlation_errors():
    with pytest.raises(ValueError, match="x is constant.*undefined"):
        pearson([2, 2, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="y is constant.*undefined"):
        spearman([1, 2, 3], [0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="differ in length: 3 != 2"):
        pearson([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="differ in length"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="empty"):
        pearson([], [])
    with pytest.raises(ValueError, match="at least 2"):
        spearman([1.0], [2.0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        pearson([1, float("nan"), 3], [1, 2, 3])
    with pytest.raises(ValueError, match="numbers"):
        pearson(["a", "b"], [1, 2])


def test_regression_metrics():
    # x = 1 2 3, y = 2 4 7: errors 1, 2, 4 -> mse = (1 + 4 + 16) / 3 = 7.
    result = regression_metrics([1, 2, 3], [2, 4, 7])
    assert result == pytest.approx({"pearson": 15 / math.sqrt(228), "spearman": 1.0, "mse": 7.0})
    assert all(_is_plain_number(v) for v in result.values())
    json.dumps(result, allow_nan=False)


def test_regression_metrics_constant_gives_nan():
    result = regression_metrics(np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0]))
    assert math.isnan(result["pearson"]) and math.isnan(result["spearman"])
    assert result["mse"] == pytest.approx((1 + 0 + 1) / 3)
    assert type(result["pearson"]) is float
    # Other errors still raise.
    with pytest.raises(ValueError, match="differ in length"):
        regression_metrics([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="empty"):
        regression_metrics([], [])
