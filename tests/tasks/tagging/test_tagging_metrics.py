"""Entity-level precision, recall and F1 of BIO tags
(bertzoo.tasks.tagging.metrics), as conlleval counts chunks."""

import collections
import json

import numpy as np
import pytest

from bertzoo.tasks.tagging.metrics import bio_entities, entity_f1

# Metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


def test_bio_entities_chunk_rules():
    assert bio_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    # I- after O starts a chunk (IOB1 tolerance).
    assert bio_entities(["O", "I-MISC", "I-MISC", "O"]) == [("MISC", 1, 3)]
    # I- at the start of the sentence starts a chunk.
    assert bio_entities(["I-ORG", "I-ORG"]) == [("ORG", 0, 2)]
    # I- of another type closes the open chunk and starts a new one.
    assert bio_entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    # B- always starts a new chunk, even of the same type.
    assert bio_entities(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]
    # A chunk running to the end of the sentence; types may contain '-'.
    assert bio_entities(["O", "B-X-Y", "I-X-Y"]) == [("X-Y", 1, 3)]
    assert bio_entities([]) == []
    assert bio_entities(["O", "O"]) == []


def test_entity_f1_conlleval_example():
    true = [
        ["B-PER", "I-PER", "O", "B-LOC"],
        ["O", "B-ORG", "I-ORG", "I-ORG"],
        ["O", "B-MISC", "I-MISC", "O"],
        ["O", "O"],
    ]
    pred = [
        # PER correct; LOC predicted as ORG (wrong type -> not correct).
        ["B-PER", "I-PER", "O", "B-ORG"],
        # ORG 1..4 predicted as 1..3 (boundary error -> not correct).
        ["O", "B-ORG", "I-ORG", "O"],
        # I- after O starts the same chunk MISC 1..3 -> correct.
        ["O", "I-MISC", "I-MISC", "O"],
        # Spurious PER 0..1.
        ["B-PER", "O"],
    ]
    # true entities: PER, LOC | ORG | MISC | -          = 4
    # predicted:     PER, ORG | ORG | MISC | PER        = 5
    # correct:       PER      |  -  | MISC | -          = 2
    # P = 2/5, R = 2/4, F1 = 2 * 0.4 * 0.5 / 0.9 = 4/9
    result = entity_f1(true, pred)
    assert result == pytest.approx(
        {
            "precision": 0.4,
            "recall": 0.5,
            "f1": 4 / 9,
            "true_entities": 4,
            "predicted_entities": 5,
            "correct_entities": 2,
        }
    )
    assert type(result["true_entities"]) is int
    assert type(result["f1"]) is float
    json.dumps(result, allow_nan=False)


def test_entity_f1_degenerate_counts():
    # Nothing predicted: precision and F1 defined as 0.
    result = entity_f1([["B-PER"]], [["O"]])
    assert result["precision"] == 0.0 and result["recall"] == 0.0 and result["f1"] == 0.0
    # No entities anywhere.
    assert entity_f1([["O", "O"]], [["O", "O"]])["f1"] == 0.0
    # Perfect.
    assert entity_f1([["B-A", "I-A"]], [["I-A", "I-A"]])["f1"] == 1.0


def _conlleval_chunks(tags):
    """Chunks via conlleval's startOfChunk / endOfChunk rules (IOB subset),
    an independent formulation of the same definition."""

    def split(tag):
        return ("O", "") if tag == "O" else tuple(tag.split("-", 1))

    chunks = []
    prev_tag, prev_type, start = "O", "", None
    for position, tag in enumerate(list(tags) + ["O"]):
        cur_tag, cur_type = split(tag)
        end = (prev_tag in ("B", "I") and cur_tag in ("B", "O")) or (
            prev_tag != "O" and prev_type != cur_type
        )
        begin = (
            cur_tag == "B"
            or (prev_tag == "O" and cur_tag == "I")
            or (cur_tag != "O" and prev_type != cur_type)
        )
        if end and start is not None:
            chunks.append((prev_type, start, position))
            start = None
        if begin:
            start = position
        prev_tag, prev_type = cur_tag, cur_type
    return chunks


def test_entity_f1_cross_check_conlleval_rules():
    rng = np.random.default_rng(7)
    vocabulary = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    true, pred = [], []
    for _ in range(200):
        n = int(rng.integers(0, 9))
        t = [vocabulary[i] for i in rng.integers(0, 5, size=n)]
        p = [vocabulary[i] for i in rng.integers(0, 5, size=n)]
        assert bio_entities(t) == _conlleval_chunks(t)
        true.append(t)
        pred.append(p)
    counts = collections.Counter()
    for t, p in zip(true, pred):
        ct, cp = set(_conlleval_chunks(t)), set(_conlleval_chunks(p))
        counts["true"] += len(ct)
        counts["pred"] += len(cp)
        counts["correct"] += len(ct & cp)
    result = entity_f1(true, pred)
    assert result["true_entities"] == counts["true"]
    assert result["predicted_entities"] == counts["pred"]
    assert result["correct_entities"] == counts["correct"]
    assert result["precision"] == pytest.approx(counts["correct"] / counts["pred"])
    assert result["recall"] == pytest.approx(counts["correct"] / counts["true"])


@pytest.mark.parametrize("bad", ["B-", "E-PER", "S-LOC", "X", "b-PER", "BPER", "", "I"])
def test_bad_tag_is_named(bad):
    with pytest.raises(ValueError, match=f"Invalid BIO tag '{bad}' at position 1"):
        bio_entities(["O", bad])
    with pytest.raises(ValueError, match=f"predicted_tags sentence 1: Invalid BIO tag '{bad}'"):
        entity_f1([["O"], ["O", "O"]], [["O"], ["O", bad]])


def test_entity_f1_errors():
    with pytest.raises(ValueError, match="Invalid BIO tag None"):
        bio_entities(["O", None])
    with pytest.raises(ValueError, match="true_tags sentence 0"):
        entity_f1([["B-PER", "Q"]], [["O", "O"]])
    with pytest.raises(
        ValueError, match="Sentence 1: true_tags has 3 tags but predicted_tags has 2"
    ):
        entity_f1([["O"], ["O", "O", "O"]], [["O"], ["O", "O"]])
    with pytest.raises(ValueError, match="number of sentences: 2 != 1"):
        entity_f1([["O"], ["O"]], [["O"]])
    with pytest.raises(ValueError, match="empty"):
        entity_f1([], [])
    with pytest.raises(ValueError, match="list of sentences"):
        entity_f1("B-PER", "B-PER")
    with pytest.raises(ValueError, match=r"true_tags\[0\] must be a list"):
        entity_f1(["B-PER"], [["B-PER"]])  # a flat tag list, not sentences
