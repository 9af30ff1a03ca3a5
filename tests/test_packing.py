"""Packed rows (issue 34): the padding mask numbers the sequences of a row;
each sequence's outputs equal those it has alone; a 0/1 mask computes
exactly what it did before packing existed; the packer and the embedder's
packed path."""

import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo import packing
from bertzoo.errors import InputError
from bertzoo.input_checks import check_padding_mask
from bertzoo.layers import BertEmbeddings, BertSelfAttention, TokenPooling, attention
from bertzoo.layers import local_attention as local_lib
from bertzoo.layers.sequence_numbers import token_positions, tokens_before_sequence

# Packed against alone (padded batch): measured 0 (bit-equal) on these tiny
# configs under both backends (MiniLM and a small ModernBERT: <= 4.2e-7,
# benchmarks/packing.py); bar 1e-5.
PACKED_TOLERANCE = 1e-5

BERT = dict(
    vocabulary_size=53,
    num_layers=2,
    num_heads=2,
    hidden_dim=10,
    intermediate_dim=22,
    max_sequence_length=48,
    dropout=0.0,
)
ROBERTA = {**BERT, "num_segments": 1, "position_padding_id": 1, "max_sequence_length": 52}
# Layer 0 global, layer 1 local (window 6: sequences below are longer).
MODERNBERT = dict(
    BERT,
    num_layers=3,
    hidden_dim=12,
    intermediate_dim=14,
    num_segments=0,
    use_pooler=False,
    norm_first=True,
    use_bias=False,
    gated_feedforward=True,
    activation="gelu",
    rope_theta=160.0,
    local_rope_theta=10.0,
    local_attention_window=6,
    global_attention_every=2,
)
LENGTHS = [9, 4, 13, 2, 7]  # five sequences, packed into two rows of 18 below
ROWS = [[2, 1], [0, 4, 3]]
WIDTH = 20  # one width for every batch: JAX compiles each eager op once


def _np(x):
    return np.asarray(ops.convert_to_numpy(x), "float32")


def _sequences(config, seed=0):
    """Right-padded one-sequence-per-row inputs of LENGTHS tokens."""
    rng = np.random.default_rng(seed)
    n, width = len(LENGTHS), WIDTH
    mask = (np.arange(width)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    pad = config.get("position_padding_id") or 0
    ids = np.where(mask == 1, rng.integers(2, config["vocabulary_size"], (n, width)), pad)
    x = {"token_ids": ids.astype("int32"), "padding_mask": mask}
    if config.get("num_segments", 2) > 0:
        half = np.arange(width)[None, :] >= np.array(LENGTHS)[:, None] // 2
        segments = half if config.get("num_segments", 2) > 1 else 0 * half
        x["segment_ids"] = (segments * mask).astype("int32")
    return x


def _set_local_path(model, path):
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, BertSelfAttention):
            layer.local_attention_path = path


@pytest.mark.parametrize(
    "name, config, path",
    [
        ("bert", BERT, "auto"),
        ("roberta", ROBERTA, "auto"),
        ("modernbert", MODERNBERT, "banded"),
        ("modernbert", MODERNBERT, "blocked"),
    ],
)
def test_packed_rows_equal_each_sequence_alone(name, config, path):
    """BERT (absolute positions, segment ids), RoBERTa (positions offset
    past the padding id) and ModernBERT (rotary positions; a global and a
    local layer, sequences longer than the window, local layers banded and
    in blocks): each sequence of a packed row, at every token, equals the
    sequence run on its own (one sequence per row, padded). The packed
    rows share their batch with three one-sequence rows."""
    backbone = bertzoo.BertBackbone(**config)
    _set_local_path(backbone, path)
    alone = _sequences(config)
    reference = _np(backbone(alone)["sequence_output"])
    fill = {"token_ids": config.get("position_padding_id") or 0}
    packed = packing.pack_rows(alone, ROWS, LENGTHS, WIDTH, fill)
    assert packed["padding_mask"].tolist()[1] == [1] * 9 + [2] * 7 + [3] * 2 + [0, 0]
    mixed = {k: np.concatenate([v, alone[k][2:]]) for k, v in packed.items()}
    out = _np(backbone(mixed)["sequence_output"])
    np.testing.assert_allclose(out[2:], reference[2:], atol=PACKED_TOLERANCE)
    for r, members in enumerate(ROWS):
        start = 0
        for index in members:
            n = LENGTHS[index]
            np.testing.assert_allclose(
                out[r, start : start + n], reference[index, :n], atol=PACKED_TOLERANCE
            )
            start += n


def _old_masks_and_positions(monkeypatch):
    """The computation before sequence numbers: a key-side mask, positions
    0 .. S-1 (sliced from the table; RoBERTa's counted over the row)."""

    def key_side(query_numbers, key_numbers):
        return ops.cast(key_numbers, "bool")[:, None, None, :]

    original = BertEmbeddings._positions
    monkeypatch.setattr(attention, "attention_mask", key_side)
    monkeypatch.setattr(local_lib, "attention_mask", key_side)
    monkeypatch.setattr(attention, "token_positions", lambda mask: None)
    monkeypatch.setattr(
        BertEmbeddings, "_positions", lambda self, ids, mask=None: original(self, ids)
    )


@pytest.mark.parametrize(
    "name, config, path",
    [("bert", BERT, "auto"), ("roberta", ROBERTA, "auto"), ("modernbert", MODERNBERT, "banded")],
)
def test_a_zero_one_mask_computes_exactly_what_it_did(name, config, path, monkeypatch):
    """With 0/1 masks (right and left padding, a hole, a row of padding
    only) every output, padding positions included, is bit-identical to
    the key-side mask and row positions of before (ModernBERT: its local
    layer banded, then in blocks). Compiled forward passes were compared
    against the code before this change once, on both backends: identical
    too (BENCHMARKS.md, "Packing")."""
    backbone = bertzoo.BertBackbone(**config)
    x = _sequences(config, seed=1)
    x["padding_mask"][2, :3] = 0  # left padding
    x["padding_mask"][0, 4:6] = 0  # a hole
    x["padding_mask"][3] = 0  # padding only
    paths = (path, "blocked") if name == "modernbert" else (path,)
    new = []
    for local in paths:
        _set_local_path(backbone, local)
        new.append(_np(backbone(x)["sequence_output"]))
    _old_masks_and_positions(monkeypatch)
    for local, expected in zip(paths, new):
        _set_local_path(backbone, local)
        old = _np(backbone(x)["sequence_output"])
        assert np.array_equal(old, expected), (local, np.abs(old - expected).max())


def test_positions_restart_with_each_sequence():
    """Positions count from each sequence's first token; padding and 0/1
    rows keep 0 .. S-1. (Rotary scores see only distances, so for
    ModernBERT the restart keeps the rounding of the sequence alone; the
    learned tables of BERT and RoBERTa need it: the parity test above
    fails without it.)"""
    mask = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 0, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1, 1]])
    positions = ops.convert_to_numpy(token_positions(mask)).tolist()
    assert positions == [[0, 1, 2, 0, 1, 0, 6, 7]] + [list(range(8))] * 2
    counted = np.array([[1, 1, 0, 1, 1, 1, 1, 1]] * 3)
    before = ops.convert_to_numpy(tokens_before_sequence(mask, counted=counted)).tolist()
    assert before == [[0, 0, 0, 2, 2, 4, 0, 0]] + [[0] * 8] * 2


@pytest.mark.backend_independent
def test_padding_mask_layouts():
    """0/1 rows pass whatever their pattern; numbered rows must be
    1..1 2..2 ... k..k 0..0; a backbone refuses other layouts eagerly."""
    check_padding_mask(np.array([[1, 0, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]]))
    check_padding_mask(np.array([[1, 1, 2, 3], [1, 2, 2, 0], [1, 0, 0, 0]]))
    check_padding_mask(ops.convert_to_tensor(np.array([[1, 2, 2, 0]], "int32")))
    for bad in ([[2, 2, 0, 0]], [[1, 3, 3, 0]], [[1, 2, 1, 0]], [[1, 0, 2, 0]], [[0, 1, 2, 2]]):
        with pytest.raises(InputError, match=r"row 0 \(.*\) is not a valid layout: padding_mask"):
            check_padding_mask(np.array(bad))
    with pytest.raises(InputError, match=r"holds -1 at position \[1, 2\]"):
        check_padding_mask(np.array([[1, 1, 0], [1, 1, -1]]))
    backbone = bertzoo.BertBackbone(**BERT)
    x = _sequences(BERT)
    x["padding_mask"][1, :2] = [2, 2]
    with pytest.raises(InputError, match=r"row 1 \(2 2 1 1 0"):
        backbone(x)
    with pytest.raises(InputError, match=r"row 1 \(2 2 1 1 0"):
        backbone.predict(x, verbose=0)


@pytest.mark.parametrize("mode", ["mean", "max", "cls"])
def test_pooling_per_sequence_of_packed_rows(mode):
    """Sequence k of row b pools into [b, k - 1], as the row pooling of the
    sequence alone; empty slots are zeros, normalised ones unit vectors.
    Per row, a numbered mask counts every real token (mask > 0) once."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 7, 5)).astype("float32")
    mask = np.array([[1, 1, 1, 2, 2, 0, 0], [1, 2, 2, 2, 3, 3, 3]], "int32")
    for normalize in (False, True):
        pool = TokenPooling(mode, normalize)
        out = _np(pool(x, mask, num_sequences=4))
        assert out.shape == (2, 4, 5)
        for b in range(2):
            for k in range(1, 5):
                tokens = mask[b] == k
                if not tokens.any():
                    assert np.all(out[b, k - 1] == 0)
                    continue
                alone = pool(x[b : b + 1, tokens], np.ones((1, tokens.sum()), "int32"))
                np.testing.assert_allclose(out[b, k - 1], _np(alone)[0], atol=1e-6)
    ones = _np(TokenPooling(mode)(x, (mask > 0).astype("int32")))
    np.testing.assert_array_equal(_np(TokenPooling(mode)(x, mask)), ones)


@pytest.mark.backend_independent
def test_best_fit_decreasing_packs_every_sequence_once():
    """Longest first, each into the fullest row it fits: every index once,
    no row over its width; at most max_sequences per row."""
    lengths = [5, 3, 8, 2, 2, 7, 1]
    rows = packing.pack_lengths(lengths, 10)
    assert [r.tolist() for r in rows] == [[2, 3], [5, 1], [0, 4, 6]]
    rng = np.random.default_rng(0)
    many = rng.integers(1, 40, size=500)
    for limit in (None, 3):
        rows = packing.pack_lengths(many, 48, max_sequences=limit)
        assert sorted(np.concatenate(rows).tolist()) == list(range(500))
        assert max(many[r].sum() for r in rows) <= 48
        assert limit is None or max(len(r) for r in rows) <= limit
    assert sum(many) / (48 * len(packing.pack_lengths(many, 48))) > 0.98
    with pytest.raises(InputError, match="sequence 1 has 0 tokens; packing takes sequences of 1"):
        packing.pack_lengths([3, 0], 10)
    with pytest.raises(InputError, match="sequence 0 has 11 tokens.*row_length=10"):
        packing.pack_lengths([11], 10)


@pytest.mark.backend_independent
def test_packing_plan_and_its_errors():
    """Batches of a power of two rows, widths the bucket of the fullest
    row; longer sequences in rows of their own, last; bad inputs refused."""
    lengths = np.array([30, 5, 6, 100, 7, 8, 70, 9, 10, 3] * 4)
    plan = packing.packing_plan(lengths, batch_size=8, row_length=32, sequence_length=128)
    seen = np.concatenate([np.concatenate(rows) for rows, _ in plan])
    assert sorted(seen.tolist()) == list(range(len(lengths)))
    counts = [len(rows) for rows, _ in plan]
    assert all(c & (c - 1) == 0 for c in counts[:-1]), counts
    for rows, width in plan:
        fullest = max(lengths[r].sum() for r in rows)
        assert width == packing.batching.bucket_length(fullest, 32 if fullest <= 32 else 128)
    alone = [r for rows, _ in plan for r in rows if lengths[r].sum() > 32]
    assert [lengths[r].tolist() for r in alone] == [[70]] * 4 + [[100]] * 4
    x = {"token_ids": np.ones((2, 4), "int32"), "padding_mask": np.array([[1, 1, 0, 0]] * 2)}
    for mask in ([[0, 1, 1, 0]], [[1, 2, 0, 0]], [[0, 0, 0, 0]]):
        with pytest.raises(InputError, match="padded on the right.*row 1 is not"):
            packing.right_padded_lengths({**x, "padding_mask": np.array([[1, 0, 0, 0]] + mask)})
    for bad in ("yes", 1, 2.5, -3):
        with pytest.raises(InputError, match="packing must be False, True or a row length"):
            packing.check_packing(bad)
    assert (packing.check_packing(False), packing.check_packing(64)) == (None, 64)
