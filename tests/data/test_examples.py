import numpy as np
import pytest

from bertzoo import data
from tests.data.helpers import numbered_documents

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

CLS, SEP, PAD = 2, 3, 0


def segments(examples, k):
    """(A ids, B ids or None) of example k, checking the packing layout."""
    n = int(examples.padding_mask[k].sum())
    ids, seg = examples.token_ids[k], examples.segment_ids[k]
    assert ids[0] == CLS and ids[n - 1] == SEP and (ids[n:] == PAD).all()
    assert (examples.padding_mask[k, :n] == 1).all() and (examples.padding_mask[k, n:] == 0).all()
    seps = np.flatnonzero(ids[:n] == SEP)
    if examples.objective == "none":
        assert seps.tolist() == [n - 1] and (seg == 0).all()
        return ids[1 : n - 1], None
    assert len(seps) == 2
    first = seps[0]
    # Segment 0 up to and including the first [SEP], 1 through the second.
    assert (
        (seg[: first + 1] == 0).all() and (seg[first + 1 : n] == 1).all() and (seg[n:] == 0).all()
    )
    return ids[1:first], ids[first + 1 : n - 1]


def is_run(ids):
    return len(ids) > 0 and (np.diff(ids) == 1).all()


@pytest.mark.parametrize("objective", ["nsp", "sop", "none"])
def test_layout_and_lengths(numbered_tokenizer, objective):
    docs, _ = numbered_documents(30, 12)
    ex = data.create_examples(docs, numbered_tokenizer, seq_len=24, objective=objective, seed=1)
    assert ex.token_ids.shape == (len(ex), 24) and ex.token_ids.dtype == np.int32
    assert (ex.padding_mask.sum(1) <= 24).all()
    for k in range(len(ex)):
        a, b = segments(ex, k)
        assert len(a) >= 1 and (b is None or len(b) >= 1)
        # Segments are contiguous text: truncation only cuts their ends.
        assert is_run(a) and (b is None or is_run(b))


def test_nsp_labels(numbered_tokenizer):
    docs, doc_of = numbered_documents(60, 10)
    ex = data.create_examples(docs, numbered_tokenizer, seq_len=32, objective="nsp", seed=3)
    labels = ex.labels
    for k in range(len(ex)):
        a, b = segments(ex, k)
        da, db = {doc_of[int(i)] for i in a}, {doc_of[int(i)] for i in b}
        assert len(da) == 1 and len(db) == 1
        if labels[k] == 0:  # the real continuation
            assert da == db and a.max() < b.min()
        else:  # B from another document (60 documents: the 10 tries always find one)
            assert da != db
    assert 0.5 <= labels.mean() <= 0.75  # p=0.5, plus one-sentence chunks always random


def test_sop_labels_are_swaps_of_consecutive_text(numbered_tokenizer):
    docs, doc_of = numbered_documents(60, 10)
    ex = data.create_examples(docs, numbered_tokenizer, seq_len=32, objective="sop", seed=4)
    swapped = from_random = 0
    for k in range(len(ex)):
        a, b = segments(ex, k)
        da, db = {doc_of[int(i)] for i in a}, {doc_of[int(i)] for i in b}
        if ex.labels[k] == 0:
            assert da == db and a.max() < b.min()
        elif da == db:
            swapped += 1
            assert b.max() < a.min()  # B precedes A in the text: A and B swapped
            # Nothing of the text lies between them except truncated tokens.
            assert a.min() - b.max() - 1 <= 32
        else:
            from_random += 1  # only one-sentence chunks take a random B
    assert swapped > 5 * from_random
    assert 0.4 <= ex.labels.mean() <= 0.65


def test_one_sentence_documents_make_random_b(numbered_tokenizer):
    docs, doc_of = numbered_documents(20, 1, lengths=(4, 6))
    for objective in ("nsp", "sop"):
        ex = data.create_examples(docs, numbered_tokenizer, seq_len=16, objective=objective, seed=0)
        assert len(ex) == 20 and (ex.labels == 1).all()  # the reference rule


def test_short_sequence_fraction(numbered_tokenizer):
    # One-token sentences: a chunk reaches exactly its target length, so the
    # first example of a document is shorter than max_num_tokens exactly
    # when a short target (randint(2, 30) != 30) was drawn.
    docs, _ = numbered_documents(2000, 40, lengths=(1, 1))
    ex = data.create_examples(
        docs, numbered_tokenizer, seq_len=32, objective="none", seed=5, shuffle=False
    )
    first = np.flatnonzero(np.diff(ex.document_ids, prepend=-1) != 0)
    assert len(first) == 2000
    lengths = ex.padding_mask[first].sum(1) - 2
    expected = 0.1 * 28 / 29
    # Binomial std with n=2000 is 0.0066; tolerance about 4 std.
    assert abs((lengths < 30).mean() - expected) < 0.025
    assert lengths.min() >= 2


def test_determinism_and_dupe_factor(numbered_tokenizer):
    docs, _ = numbered_documents(20, 10)
    a = data.create_examples(docs, numbered_tokenizer, seq_len=24, seed=7)
    b = data.create_examples(docs, numbered_tokenizer, seq_len=24, seed=7)
    c = data.create_examples(docs, numbered_tokenizer, seq_len=24, seed=8)
    assert (a.token_ids == b.token_ids).all() and (a.labels == b.labels).all()
    assert a.token_ids.shape != c.token_ids.shape or (a.token_ids != c.token_ids).any()
    d = data.create_examples(docs, numbered_tokenizer, seq_len=24, seed=7, dupe_factor=3)
    assert 2.5 * len(a) < len(d) < 3.5 * len(a)
    # Passes are chunked with fresh randomness: not three copies.
    rows = {tuple(r) for r in d.token_ids}
    assert len(rows) > 1.5 * len(a)


def test_two_phase_sequence_lengths(numbered_tokenizer):
    docs, _ = numbered_documents(20, 30)
    short = data.create_examples(docs, numbered_tokenizer, seq_len=32, seed=0)
    long = data.create_examples(docs, numbered_tokenizer, seq_len=128, seed=0)
    assert short.token_ids.shape[1] == 32 and long.token_ids.shape[1] == 128
    assert long.padding_mask.sum(1).mean() > 2 * short.padding_mask.sum(1).mean()


def test_bad_arguments(numbered_tokenizer):
    docs, _ = numbered_documents(2, 2)
    with pytest.raises(ValueError, match="objective"):
        data.create_examples(docs, numbered_tokenizer, objective="mlm")
    with pytest.raises(ValueError, match="too small"):
        data.create_examples(docs, numbered_tokenizer, seq_len=4)
    with pytest.raises(data.CorpusError, match="empty"):
        data.create_examples([[], []], numbered_tokenizer)


def test_truncated_counts_the_examples_cut_at_the_length_limit(numbered_tokenizer):
    # One sentence per document, objective "none": one example per document,
    # cut exactly when its sentence is longer than seq_len - 2.
    lengths = [10, 40, 22, 23, 5, 60, 21]
    docs, next_id = [], 5
    for n in lengths:
        docs.append([np.arange(next_id, next_id + n, dtype=np.int32)])
        next_id += n
    ex = data.create_examples(
        docs, numbered_tokenizer, seq_len=24, objective="none", short_seq_prob=0.0, seed=3
    )
    assert len(ex) == len(lengths)
    assert ex.truncated == sum(n > 22 for n in lengths) == 3
    kept = ex.padding_mask.sum(1) - 2
    assert sorted(kept) == sorted(min(n, 22) for n in lengths)
    # Short sentences only: nothing is cut, in pairs either.
    docs, _ = numbered_documents(20, 6, lengths=(2, 4))
    for objective in ("nsp", "sop", "none"):
        ex = data.create_examples(docs, numbered_tokenizer, seq_len=64, objective=objective)
        assert ex.truncated == 0, objective
