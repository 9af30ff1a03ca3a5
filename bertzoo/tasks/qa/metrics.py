"""SQuAD exact match and F1, as the official SQuAD v1.1 / v2.0 evaluation
scripts compute them: `normalize_answer`, `squad_exact_match`, `squad_f1`,
`squad_scores`. Pure Python (no TensorFlow)."""

import collections
import re
import string
from collections.abc import Mapping, Sequence

import numpy as np

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text):
    """Normalise an answer as the official SQuAD v1.1 / v2.0 scripts do.

    In this order: lowercase; delete every character of
    ``string.punctuation``; replace the whole words "a", "an", "the" (regex
    ``\\b(a|an|the)\\b``) by a space; collapse whitespace (split, then join
    with single spaces).
    """
    if not isinstance(text, str):
        raise ValueError(f"Answer text must be a string, got {type(text).__name__}.")
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _check_gold_answers(gold_answers):
    if isinstance(gold_answers, str) or not isinstance(gold_answers, (Sequence, np.ndarray)):
        raise ValueError(
            "gold_answers must be a list of answer strings (an empty list for an "
            f"unanswerable question), got {type(gold_answers).__name__}."
        )
    for answer in gold_answers:
        if not isinstance(answer, str):
            raise ValueError(f"gold answers must be strings, got {answer!r}.")
    # As the v2.0 script: gold answers that normalise to nothing are dropped;
    # when none is left the question is scored as unanswerable (gold "").
    golds = [normalize_answer(answer) for answer in gold_answers]
    golds = [gold for gold in golds if gold]
    return golds or [""]


def _exact(prediction, gold):
    return float(prediction == gold)


def _token_f1(prediction, gold):
    prediction_tokens = prediction.split()
    gold_tokens = gold.split()
    if not prediction_tokens or not gold_tokens:
        return float(prediction_tokens == gold_tokens)
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(prediction_tokens)
    recall = overlap / len(gold_tokens)
    return float(2 * precision * recall / (precision + recall))


def squad_exact_match(prediction, gold_answers):
    """1.0 when the normalised prediction equals a normalised gold answer.

    Follows the SQuAD v2.0 script: gold answers that normalise to the empty
    string are ignored unless all do; an empty ``gold_answers`` (an
    unanswerable question) or all-empty golds score 1.0 exactly when the
    normalised prediction is empty, else 0.0.

    Args:
        prediction: the predicted answer text.
        gold_answers: list of gold answer texts.

    Returns:
        1.0 or 0.0 (the maximum over gold answers).
    """
    prediction = normalize_answer(prediction)
    return max(_exact(prediction, gold) for gold in _check_gold_answers(gold_answers))


def squad_f1(prediction, gold_answers):
    """Token-level F1 of the prediction, maximised over the gold answers.

    Both sides are normalised with :func:`normalize_answer` and split on
    whitespace; the overlap counts common tokens with multiplicity
    (``Counter`` intersection). When either token list is empty the score is
    1.0 if both are empty, else 0.0; unanswerable questions are handled as
    in :func:`squad_exact_match`.

    Returns:
        A float in [0, 1].
    """
    prediction = normalize_answer(prediction)
    return max(_token_f1(prediction, gold) for gold in _check_gold_answers(gold_answers))


def squad_scores(predictions, references):
    """Exact match and F1, in percent, over a SQuAD-style data set.

    Args:
        predictions: dict question id -> predicted answer text. Ids not in
            ``references`` are ignored.
        references: dict question id -> list of gold answer texts; an empty
            list marks an unanswerable (SQuAD 2.0) question.

    Returns:
        ``{"exact_match", "f1"}`` averaged over the ids of ``references``, in
        [0, 100]. When any question is unanswerable, also
        ``"has_answer_total"`` and ``"no_answer_total"`` (ints) and the
        averages over each subset, ``"has_answer_exact_match"``,
        ``"has_answer_f1"``, ``"no_answer_exact_match"``, ``"no_answer_f1"``
        (a subset's averages are left out when that subset is empty, as the
        official script does).

    Raises:
        ValueError: when ``references`` is empty or a reference id has no
            prediction (the message lists up to 5 missing ids).
    """
    if not isinstance(predictions, Mapping):
        raise ValueError("predictions must be a dict mapping question id to answer text.")
    if not isinstance(references, Mapping):
        raise ValueError("references must be a dict mapping question id to a list of gold answers.")
    if not references:
        raise ValueError("references is empty.")
    missing = [qid for qid in references if qid not in predictions]
    if missing:
        shown = ", ".join(repr(qid) for qid in missing[:5])
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise ValueError(f"{len(missing)} reference id(s) have no prediction: {shown}{more}.")
    exact = {}
    f1 = {}
    has_answer = {}
    for qid, gold_answers in references.items():
        try:
            exact[qid] = squad_exact_match(predictions[qid], gold_answers)
            f1[qid] = squad_f1(predictions[qid], gold_answers)
        except ValueError as error:
            raise ValueError(f"Question {qid!r}: {error}") from None
        has_answer[qid] = len(gold_answers) > 0

    def percent(scores, ids):
        return float(100.0 * sum(scores[qid] for qid in ids) / len(ids))

    all_ids = list(references)
    result = {"exact_match": percent(exact, all_ids), "f1": percent(f1, all_ids)}
    has_ids = [qid for qid in all_ids if has_answer[qid]]
    no_ids = [qid for qid in all_ids if not has_answer[qid]]
    if no_ids:
        result["has_answer_total"] = len(has_ids)
        result["no_answer_total"] = len(no_ids)
        if has_ids:
            result["has_answer_exact_match"] = percent(exact, has_ids)
            result["has_answer_f1"] = percent(f1, has_ids)
        result["no_answer_exact_match"] = percent(exact, no_ids)
        result["no_answer_f1"] = percent(f1, no_ids)
    return result
