"""TinyBERT-style augmentation (`bertzoo.distill.augment`)."""

import numpy as np
import pytest

from bertzoo.distill.augment import WORD, augment_texts, neighbour_table
from bertzoo.tokenizers import BertTokenizer

# Text augmentation: tokenizer and numpy only.
pytestmark = pytest.mark.backend_independent

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "good",
    "great",
    "fine",
    "bad",
    "awful",
    "the",
    "film",
    "##s",
]


def test_neighbours_are_the_nearest_whole_words_by_cosine():
    tokenizer = BertTokenizer(VOCAB)
    rng = np.random.default_rng(0)
    table = rng.normal(size=(len(VOCAB), 8))
    table[VOCAB.index("great")] = table[VOCAB.index("good")] + 0.01  # nearly the same direction
    neighbours = neighbour_table(tokenizer, table, {"good", "missing", "!"}, k=3)
    assert list(neighbours) == ["good"]  # words outside the vocabulary, and marks, have none
    assert neighbours["good"][0] == "great" and len(neighbours["good"]) == 3
    assert not set(neighbours["good"]) & {"good", "##s", "[CLS]"}


def test_augmentation_is_seeded_new_and_never_a_held_out_text():
    neighbours = {"good": ["great", "fine"], "film": ["day"]}
    texts = ["The film was good!"]
    held_out = ["the day was great !"]
    variants, dropped = augment_texts(texts, neighbours, copies=50, exclude=held_out, seed=1)
    assert (variants, dropped) == augment_texts(
        texts, neighbours, copies=50, exclude=held_out, seed=1
    )
    assert dropped > 0 and variants and len(set(variants)) == len(variants)
    assert "the day was great !" not in variants and "the film was good !" not in variants
    assert all(v.split()[2] == "was" for v in variants)
    assert WORD.findall("it's good.") == ["it", "'", "s", "good", "."]
