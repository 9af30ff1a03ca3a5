import logging

import numpy as np
import pytest
import tensorflow as tf

from bertzoo import data
from bertzoo.tokenizers.sentencepiece import SentencePieceTokenizer
from tests.conftest import FIXTURES

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

CLS, SEP, PAD, MASK = 2, 3, 0, 4
X, Y, Z = 3005, 3006, 3007  # 'x', '##y', '##z'


def make_batch(num, seq_len, seed=0, pieces=False):
    """Packed pairs [CLS] A [SEP] B [SEP] + padding of random lengths. With
    `pieces`, about half the words are multi-piece (x ##y ##z, x ##y)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((num, seq_len), np.int32)
    mask = np.zeros((num, seq_len), np.int32)
    for r in range(num):
        n = int(rng.integers(8, seq_len + 1))
        body = []
        while len(body) < n - 3:
            if pieces and rng.random() < 0.5:
                body += [X, Y, Z][: int(rng.integers(2, 4))]
            else:
                body.append(int(rng.integers(5, 3005)))
        body = body[: n - 3]
        cut = int(rng.integers(1, n - 3))
        row = [CLS] + body[:cut] + [SEP] + body[cut:] + [SEP]
        ids[r, :n] = row
        mask[r, :n] = 1
    return ids, mask


def run(masker, ids, mask, seed=(1, 2)):
    out = masker(ids, mask, tf.constant(seed, tf.int64))
    return [t.numpy() for t in out]


def expected_count(lengths, P):
    # Python's round (half to even) on float64, as the reference.
    return np.array([min(P, max(1, int(round(n * 0.15)))) for n in lengths])


def test_token_masking_statistics(numbered_tokenizer):
    S, P = 64, 12
    ids, mask = make_batch(3000, S)
    masker = data.MaskedLMMasker(numbered_tokenizer, S, P)
    masked, positions, labels, weights = run(masker, ids, mask)
    assert (
        positions.shape == (3000, P) and positions.dtype == np.int32 and weights.dtype == np.float32
    )
    lengths = mask.sum(1)
    count = weights.sum(1).astype(int)
    np.testing.assert_array_equal(count, expected_count(lengths, P))  # exactly num_to_predict
    # ~15% of the tokens overall (exactly round(len*0.15) per row, capped).
    assert abs(count.sum() / lengths.sum() - 0.15) < 0.01
    rows = np.repeat(np.arange(3000), P).reshape(3000, P)
    real = weights > 0
    pos, r = positions[real], rows[real]
    original = ids[r, pos]
    np.testing.assert_array_equal(labels[real], original)
    assert not np.isin(original, [CLS, SEP, PAD]).any()  # never specials
    assert (mask[r, pos] == 1).all()
    assert (positions[~real] == 0).all() and (labels[~real] == 0).all()
    # Positions are distinct and ascending.
    assert all((np.diff(p[w > 0]) > 0).all() for p, w in zip(positions, weights))
    new = masked[r, pos]
    frac_mask = (new == MASK).mean()
    frac_same = (new == original).mean()
    frac_random = 1 - frac_mask - frac_same
    # ~30k predictions: binomial std 0.0023 (0.8) and 0.0017 (0.1); tolerance
    # 0.015 is over 6 std.
    assert abs(frac_mask - 0.8) < 0.015
    assert abs(frac_same - 0.1) < 0.015  # (a random id equal to the original: p=1/3003)
    assert abs(frac_random - 0.1) < 0.015
    randoms = new[(new != MASK) & (new != original)]
    assert randoms.min() >= 5  # random replacements are never special tokens
    # Unselected tokens are untouched.
    untouched = np.ones_like(ids, bool)
    untouched[r, pos] = False
    np.testing.assert_array_equal(masked[untouched], ids[untouched])


def test_num_to_predict_rounding(numbered_tokenizer):
    masker = data.MaskedLMMasker(numbered_tokenizer, 128, 20)
    lengths = np.array([3, 4, 10, 30, 50, 70, 128, 100])
    got = masker.num_to_predict(tf.constant(lengths)).numpy()
    # 3*0.15=0.45->1 (at least one), 10->1.5->2, 30->4.5->4, 50->7.5->8, 70->10.5->10, 128->19.2->19.
    assert got.tolist() == [1, 1, 2, 4, 8, 10, 19, 15] == expected_count(lengths, 20).tolist()


def test_warns_when_max_predictions_too_small(numbered_tokenizer, caplog):
    with caplog.at_level(logging.WARNING, logger="bertzoo.data"):
        data.MaskedLMMasker(numbered_tokenizer, 128, 19)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="bertzoo.data"):
        data.MaskedLMMasker(numbered_tokenizer, 512, 20)
    assert "max_predictions_per_seq=20" in caplog.text and "77" in caplog.text
    with pytest.raises(ValueError, match="kind"):
        data.MaskedLMMasker(numbered_tokenizer, 128, 20, kind="span")


def word_spans(row, n):
    """[start, end) of each word (x ##y ##z grouped) among candidates."""
    spans, start = [], None
    for i in range(1, n):
        tok = row[i]
        if tok in (CLS, SEP):
            if start is not None:
                spans.append((start, i))
            start = None
        elif tok in (Y, Z) and start is not None:
            continue
        else:
            if start is not None:
                spans.append((start, i))
            start = i
    return spans


@pytest.mark.parametrize("kind", ["whole_word", "ngram"])
def test_whole_words_masked_together(numbered_tokenizer, kind):
    S, P = 48, 10
    ids, mask = make_batch(800, S, seed=1, pieces=True)
    masker = data.MaskedLMMasker(numbered_tokenizer, S, P, kind=kind)
    _, positions, _, weights = run(masker, ids, mask)
    budget = expected_count(mask.sum(1), P)
    count = weights.sum(1).astype(int)
    assert (count <= budget).all() and count.mean() > 0.9 * budget.mean()
    run_lengths = []
    for k in range(len(ids)):
        sel = set(positions[k][weights[k] > 0].tolist())
        spans = word_spans(ids[k], int(mask[k].sum()))
        chosen = [all(i in sel for i in range(a, b)) for a, b in spans]
        for (a, b), c in zip(spans, chosen):
            # A word is selected entirely or not at all.
            assert c or not any(i in sel for i in range(a, b))
        assert sum(b - a for (a, b), c in zip(spans, chosen) if c) == len(sel)
        # Lengths (in words) of runs of consecutive selected words.
        length = 0
        for c in chosen + [False]:
            if c:
                length += 1
            elif length:
                run_lengths.append(length)
                length = 0
    if kind == "ngram":
        assert max(run_lengths) >= 3


def reference_selection(row, n, budget, rng, max_ngram):
    """The reference greedy loop in plain Python (BERT for max_ngram=1,
    ALBERT's n-gram variant otherwise) over whole words (x ##y ##z)."""
    cand = []
    for a, b in word_spans(row, n):
        cand.append(list(range(a, b)))
    ngrams = np.arange(1, max_ngram + 1)
    pvals = 1.0 / ngrams
    pvals /= pvals.sum()
    starts = list(range(len(cand)))
    rng.shuffle(starts)
    covered = set()
    for w in starts:
        if len(covered) >= budget:
            break
        k = rng.choice(ngrams, p=pvals)
        index_set = sum(cand[w : w + k], [])
        while len(covered) + len(index_set) > budget and k > 1:
            k -= 1
            index_set = sum(cand[w : w + k], [])
        if len(covered) + len(index_set) > budget or covered & set(index_set):
            continue
        covered |= set(index_set)
    return covered


def run_stats(rows, mask, selections):
    """Fraction of selected tokens whose right neighbour is selected, and
    mean count."""
    adjacent = total = 0
    for sel in selections:
        total += len(sel)
        adjacent += sum(1 for i in sel if i + 1 in sel)
    return adjacent / total, total / len(selections)


@pytest.mark.parametrize("kind,max_ngram", [("whole_word", 1), ("ngram", 3)])
def test_matches_reference_algorithm_statistics(numbered_tokenizer, kind, max_ngram):
    S, P = 48, 10
    ids, mask = make_batch(1500, S, seed=3, pieces=True)
    masker = data.MaskedLMMasker(numbered_tokenizer, S, P, kind=kind)
    _, positions, _, weights = run(masker, ids, mask)
    ours = [set(p[w > 0].tolist()) for p, w in zip(positions, weights)]
    rng = np.random.default_rng(0)
    budget = expected_count(mask.sum(1), P)
    ref = [
        reference_selection(ids[k], int(mask[k].sum()), budget[k], rng, max_ngram)
        for k in range(len(ids))
    ]
    adj_ours, count_ours = run_stats(ids, mask, ours)
    adj_ref, count_ref = run_stats(ids, mask, ref)
    # ~13k selected tokens each: std of the adjacency fraction ~0.005;
    # tolerance 0.03. Mean counts within 2%.
    assert abs(adj_ours - adj_ref) < 0.03, (adj_ours, adj_ref)
    assert abs(count_ours - count_ref) < 0.02 * count_ref
    if max_ngram == 3:
        # And n-grams really change the statistics vs. whole words.
        ww = data.MaskedLMMasker(numbered_tokenizer, S, P, kind="whole_word")
        _, pw, _, ww_w = run(ww, ids, mask)
        adj_ww, _ = run_stats(ids, mask, [set(p[w > 0].tolist()) for p, w in zip(pw, ww_w)])
        assert adj_ours > adj_ww + 0.05


def test_determinism(numbered_tokenizer):
    ids, mask = make_batch(64, 32)
    masker = data.MaskedLMMasker(numbered_tokenizer, 32, 5, kind="ngram")
    a, b, c = (
        run(masker, ids, mask, (1, 1)),
        run(masker, ids, mask, (1, 1)),
        run(masker, ids, mask, (1, 2)),
    )
    assert all((x == y).all() for x, y in zip(a, b))
    assert (a[1] != c[1]).any()


def test_sentencepiece_word_starts():
    tokenizer = SentencePieceTokenizer(str(FIXTURES / "sentencepiece" / "spiece.model"))
    starts = data.word_start_table(tokenizer)
    vocab = tokenizer.vocabulary
    for piece, start in zip(vocab, starts):
        if piece.startswith("▁") or piece in ("<pad>", "<unk>") or piece == ",":
            assert start, piece
    continuation = [p for p, s in zip(vocab, starts) if not s]
    assert continuation and not any(p.startswith("▁") for p in continuation)
    masker = data.MaskedLMMasker(tokenizer, 32, 5, kind="whole_word")
    ids = tokenizer.tokenize_ids(
        tf.constant(["unbelievably tokenized sentences of words"])
    ).to_tensor()
    row = np.concatenate([[tokenizer.cls_token_id], ids.numpy()[0], [tokenizer.sep_token_id]])
    padded = np.full((1, 32), tokenizer.pad_token_id, np.int32)
    padded[0, : len(row)] = row
    _, pos, _, w = run(masker, padded, (padded != tokenizer.pad_token_id).astype(np.int32))
    sel = pos[0][w[0] > 0]
    for i in sel:  # a selected continuation piece has its word start selected
        j = i
        while not starts[padded[0, j]]:
            j -= 1
        assert j in sel
