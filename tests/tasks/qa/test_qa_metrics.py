"""SQuAD exact match and F1 (bertzoo.tasks.qa.metrics), as the official
v1.1 / v2.0 scripts compute them."""

import json

import pytest

from bertzoo.tasks.qa.metrics import normalize_answer, squad_exact_match, squad_f1, squad_scores

# Metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


def _is_plain_number(value):
    return type(value) in (float, int)


def test_normalize_answer():
    assert normalize_answer("The Denver Broncos!") == "denver broncos"
    assert normalize_answer("  hello\t\nworld  ") == "hello world"
    # Articles only as whole words; "An" is lowercased first.
    assert normalize_answer("An apple, a theatre and THE end") == "apple theatre and end"
    # Order matters: punctuation goes before articles, so "a.n" -> "an" ->
    # removed. (Removing articles first would leave "n apple".)
    assert normalize_answer("a.n apple") == "apple"
    # Punctuation inside words is deleted, not turned into a space.
    assert normalize_answer("U.S. state-of-the-art") == "us stateoftheart"
    # string.punctuation is ASCII only: curly quotes stay (official behaviour).
    assert normalize_answer("\u201cHi\u201d") == "\u201chi\u201d"
    assert normalize_answer("the.") == ""


def test_squad_exact_match_and_f1_by_hand():
    assert squad_exact_match("The Denver Broncos!", ["denver broncos"]) == 1.0
    assert squad_f1("The Denver Broncos!", ["denver broncos"]) == 1.0
    # "the quick brown fox" -> [quick, brown, fox]; "quick fox jumps" ->
    # [quick, fox, jumps]; overlap 2, P = 2/3, R = 2/3, F1 = 2/3.
    assert squad_exact_match("the quick brown fox", ["quick fox jumps"]) == 0.0
    assert squad_f1("the quick brown fox", ["quick fox jumps"]) == pytest.approx(2 / 3)
    # Counter overlap counts multiplicity: [fox, fox, fox] vs [fox]:
    # overlap 1, P = 1/3, R = 1, F1 = 2 (1/3) / (4/3) = 1/2.
    assert squad_f1("fox fox fox", ["fox"]) == pytest.approx(0.5)
    # No overlap.
    assert squad_f1("carolina panthers", ["denver broncos"]) == 0.0
    # Max over gold answers: vs "quick fox jumps" F1 2/3; vs "brown" P 1/3,
    # R 1 -> 1/2; the max is 2/3.
    assert squad_f1("quick brown fox", ["quick fox jumps", "brown"]) == pytest.approx(2 / 3)
    assert squad_exact_match("Broncos", ["Denver", "the broncos", "x"]) == 1.0
    assert type(squad_exact_match("a", ["a"])) is float


def test_squad_unanswerable():
    # Unanswerable (empty gold list): 1 iff the normalised prediction is empty.
    assert squad_exact_match("", []) == 1.0
    assert squad_f1("", []) == 1.0
    assert squad_exact_match("The.", []) == 1.0  # normalises to ""
    assert squad_exact_match("Denver", []) == 0.0
    assert squad_f1("Denver", []) == 0.0
    # The v2.0 script's form of the same question: gold [""].
    assert squad_f1("", [""]) == 1.0
    assert squad_f1("Denver", [""]) == 0.0
    # Answerable question, empty prediction: 0.
    assert squad_exact_match("", ["Denver"]) == 0.0
    assert squad_f1("", ["Denver"]) == 0.0
    # As in the v2.0 script, a gold that normalises to "" is dropped when a
    # non-empty gold exists ...
    assert squad_f1("", ["the", "Denver"]) == 0.0
    # ... and all-empty golds make the question unanswerable.
    assert squad_exact_match("", ["the", "a"]) == 1.0


def test_squad_scores():
    references = {
        "q1": ["Denver Broncos"],
        "q2": ["quick fox jumps"],
        "q3": [],
        "q4": [],
    }
    predictions = {
        "q1": "the Denver Broncos",  # EM 1, F1 1
        "q2": "the quick brown fox",  # EM 0, F1 2/3
        "q3": "",  # unanswerable, abstained: EM 1, F1 1
        "q4": "Carolina",  # unanswerable, answered: EM 0, F1 0
        "extra": "ignored",  # not in references
    }
    # EM = 2/4 = 50 %; F1 = (1 + 2/3 + 1 + 0) / 4 = 2/3 = 66.67 %.
    # has-answer (q1, q2): EM 50 %, F1 (1 + 2/3) / 2 = 5/6 = 83.33 %.
    # no-answer (q3, q4): EM 50 %, F1 50 %.
    result = squad_scores(predictions, references)
    assert result == pytest.approx(
        {
            "exact_match": 50.0,
            "f1": 200 / 3,
            "has_answer_exact_match": 50.0,
            "has_answer_f1": 250 / 3,
            "no_answer_exact_match": 50.0,
            "no_answer_f1": 50.0,
            "has_answer_total": 2,
            "no_answer_total": 2,
        }
    )
    assert type(result["has_answer_total"]) is int
    assert all(_is_plain_number(v) for v in result.values())
    json.dumps(result, allow_nan=False)


def test_squad_scores_answerable_only_and_all_unanswerable():
    result = squad_scores({"a": "Denver", "b": "x"}, {"a": ["denver"], "b": ["y", "z"]})
    assert result == pytest.approx({"exact_match": 50.0, "f1": 50.0})
    assert set(result) == {"exact_match", "f1"}
    # All unanswerable: the empty has-answer subset has no averages.
    result = squad_scores({"a": "", "b": "x"}, {"a": [], "b": []})
    assert result == pytest.approx(
        {
            "exact_match": 50.0,
            "f1": 50.0,
            "no_answer_exact_match": 50.0,
            "no_answer_f1": 50.0,
            "has_answer_total": 0,
            "no_answer_total": 2,
        }
    )


def test_squad_errors():
    references = {f"q{i}": ["x"] for i in range(8)}
    with pytest.raises(
        ValueError,
        match=r"7 reference id\(s\) have no prediction: "
        r"'q1', 'q2', 'q3', 'q4', 'q5' \(and 2 more\)",
    ):
        squad_scores({"q0": "x"}, references)
    with pytest.raises(ValueError, match="references is empty"):
        squad_scores({}, {})
    with pytest.raises(ValueError, match="list of answer strings"):
        squad_f1("x", "x")  # a bare string is not a list of golds
    with pytest.raises(ValueError, match="Question 'q': .*list of answer strings"):
        squad_scores({"q": "x"}, {"q": "x"})
    with pytest.raises(ValueError, match="must be a string"):
        squad_exact_match(None, ["x"])
    with pytest.raises(ValueError, match="gold answers must be strings"):
        squad_exact_match("x", [1])
    with pytest.raises(ValueError, match="predictions must be a dict"):
        squad_scores(["x"], {"q": ["x"]})
