"""Packing: several sequences per row, so that no work goes to padding.

Length-sorted buckets (`bertzoo.batching`) pad each batch to its longest
sequence's bucket; what is left is padding inside each batch. Packing puts
sequences end to end into rows of `row_length` tokens and numbers them in
the padding mask (`1 1 1 2 2 3 3 3 0`, see
`bertzoo.layers.sequence_numbers`): the backbone attends within each
sequence and restarts its positions, so every sequence's outputs are the
ones it has alone, and the rows are nearly full.

- `pack_lengths`: lengths -> rows, best-fit decreasing (the rule of
  Krell et al. 2021's shortest-pack-first histogram packing, SPFHP: each
  sequence, longest first, goes into the fullest row it still fits in).
  Optionally at most `max_sequences` per row.
- `packing_plan`: the rows cut into batches of a power-of-two row count
  (XLA compiles per shape) holding about `batch_size` sequences' worth of
  tokens, each batch trimmed to the bucket of its fullest row; sequences
  longer than `row_length` are never cut: they run in rows of their own.
- `pack_rows`: the packed `token_ids`, `segment_ids` and numbered
  `padding_mask` of some rows, from right-padded one-sequence-per-row
  features.
- `predict_packed`: all of it around a forward function that returns one
  vector per (row, sequence) (`pooled_forward`: a backbone and a
  `TokenPooling`), results in the input order
  (`TextEmbedder.predict(..., packing=True)`).

What it costs: a packed row is one attention span, so attention work per
token grows with `row_length` (each sequence's queries meet the whole
row's keys and most are masked out), while padding's cost is gone. Where
sorted buckets leave little padding, or attention dominates (long rows),
packing can be slower: BENCHMARKS.md ("Packing") has the measurements.
"""

import bisect

import keras
import numpy as np

from bertzoo import batching
from bertzoo.errors import InputError


def check_packing(packing):
    """`packing` as given to `TextEmbedder.predict`: False/None (sorted
    buckets), True (packed rows, width chosen), or a row length (an int
    >= 2). Returns None, True or the int."""
    if packing is None or packing is False:
        return None
    if packing is True:
        return True
    if isinstance(packing, int | np.integer) and not isinstance(packing, bool) and packing >= 2:
        return int(packing)
    raise InputError(
        f"packing must be False, True or a row length (an integer >= 2), got {packing!r}."
    )


def pack_lengths(lengths, row_length, max_sequences=None):
    """Best-fit decreasing: a list of rows, each an int64 array of indices
    into `lengths` (in the order their sequences sit in the row), every
    row's total at most `row_length`, every index once. Sequences are
    taken longest first (stable among equal lengths) and each goes into the
    row with the least room that still fits it, else a new row; with
    `max_sequences`, a row takes at most that many. Deterministic."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.ndim != 1:
        raise InputError(f"lengths must be a 1-D array, got shape {lengths.shape}.")
    if len(lengths) and (lengths.min() < 1 or lengths.max() > row_length):
        bad = int(np.flatnonzero((lengths < 1) | (lengths > row_length))[0])
        raise InputError(
            f"sequence {bad} has {lengths[bad]} tokens; packing takes sequences of 1 to "
            f"row_length={row_length} tokens (it never cuts one: the preprocessor's "
            "sequence_length does, as on the padded path)."
        )
    if max_sequences is not None and max_sequences < 1:
        raise InputError(f"max_sequences must be at least 1, got {max_sequences}.")
    rows, room = [], []  # room: sorted (free tokens, row index) of rows still open
    for index in np.argsort(-lengths, kind="stable"):
        length = int(lengths[index])
        at = bisect.bisect_left(room, (length, -1))
        if at < len(room):
            free, row = room.pop(at)
        else:
            free, row = int(row_length), len(rows)
            rows.append([])
        rows[row].append(int(index))
        free -= length
        if free > 0 and (max_sequences is None or len(rows[row]) < max_sequences):
            bisect.insort(room, (free, row))
    return [np.asarray(row, np.int64) for row in rows]


def packing_plan(lengths, batch_size, row_length, max_sequences=None, sequence_length=None):
    """The batches of a packed pass: a list of `(rows, width)`, `rows` a
    list of index arrays. Sequences of up to `row_length` tokens are packed
    (`pack_lengths`); a longer one (up to `sequence_length`, default the
    longest) gets a row of its own, and these come last, shortest first,
    as on the padded path. A batch holds a power of two of rows (the last
    may hold fewer): the one nearest to `batch_size` times the mean length
    over the row width, at least 1, so a batch holds about the tokens a
    padded batch of `batch_size` sequences holds without its padding. `width`: the bucket (`batching.bucket_length`) of the batch's
    fullest row, capped at `row_length` where that row fits it."""
    lengths = np.asarray(lengths, np.int64)
    sequence_length = int(sequence_length or max(row_length, lengths.max()))
    fits = np.flatnonzero(lengths <= row_length)
    rows = [fits[row] for row in pack_lengths(lengths[fits], row_length, max_sequences)]
    longer = np.flatnonzero(lengths > row_length)
    rows += [longer[i : i + 1] for i in np.argsort(lengths[longer], kind="stable")]
    fill = np.asarray([lengths[row].sum() for row in rows])

    def width(fullest):
        cap = row_length if fullest <= row_length else sequence_length
        return batching.bucket_length(int(fullest), cap)

    tokens, plan, start = int(batch_size) * float(lengths.mean()), [], 0
    while start < len(rows):
        per_batch = 1 << max(round(np.log2(max(tokens / width(fill[start]), 1.0))), 0)
        plan.append((rows[start : start + per_batch], width(fill[start : start + per_batch].max())))
        start += per_batch
    return plan


def right_padded_lengths(features):
    """Real tokens per row of one-sequence-per-row features, checked:
    `padding_mask` must be `1..1 0..0` in every row (at least one token),
    as the preprocessor writes it."""
    mask = np.asarray(features["padding_mask"])
    if mask.ndim != 2:
        raise InputError(f"padding_mask must be 2-D (rows, positions), got shape {mask.shape}.")
    real = mask != 0
    lengths = real.sum(axis=1)
    prefix = np.arange(mask.shape[1])[None, :] < lengths[:, None]
    bad = np.flatnonzero(np.any(real != prefix, axis=1) | np.any(mask > 1, axis=1) | (lengths < 1))
    if len(bad):
        raise InputError(
            f"packing takes one sequence per row, padded on the right (padding_mask "
            f"1..1 0..0 with at least one 1); row {int(bad[0])} is not."
        )
    return lengths.astype(np.int64)


def _padding_value(values, mask):
    """What the inputs hold at padding positions (their most frequent
    value there, e.g. RoBERTa's padding id 1), else 0."""
    found = np.asarray(values)[np.asarray(mask) == 0]
    if found.size == 0:
        return 0
    kinds, counts = np.unique(found, return_counts=True)
    return int(kinds[np.argmax(counts)])


def pack_rows(features, rows, lengths, width, fill=None):
    """Packed `(len(rows), width)` int32 inputs: each row's sequences
    end to end (their real tokens, in `rows`' order), `padding_mask`
    numbering them 1, 2, ..., padding after them holding `fill[key]`
    (default 0). `features`: right-padded one-sequence-per-row arrays."""
    fill = fill or {}
    sizes = np.asarray([len(row) for row in rows])
    members = np.concatenate(rows)  # (M,) input rows, row by row
    n = np.asarray(lengths)[members]  # (M,) their lengths
    ends = np.cumsum(n)
    first = np.cumsum(sizes) - sizes  # index in `members` of each row's first
    start = ends - n - np.repeat((ends - n)[first], sizes)  # (M,) offset in its row
    number = np.arange(len(members)) - np.repeat(first, sizes) + 1  # (M,) 1, 2, ...
    token = np.repeat(np.arange(len(members)), n)  # (T,) member of each token
    within = np.arange(int(ends[-1])) - np.repeat(ends - n, n)  # (T,) place in its sequence
    row_of = np.repeat(np.arange(len(rows)), sizes)[token]
    column = start[token] + within
    packed = {}
    for key, values in features.items():
        blank = 0 if key == "padding_mask" else fill.get(key, 0)
        packed[key] = np.full((len(rows), width), blank, np.int32)
        packed[key][row_of, column] = np.asarray(values)[members[token], within]
    packed["padding_mask"][row_of, column] = number[token]
    return packed


def default_row_length(lengths, sequence_length):
    """The row width `predict_packed` picks: the bucket of the 90th
    percentile length. Wider rows cost every packed token more attention
    (it meets the whole row's keys); the longest tenth runs in rows of
    its own, sorted, as on the padded path. Measured (BENCHMARKS.md,
    "Packing"): on short real texts this width beat the bucket of the
    longest on both backends, which JAX ran slower than sorted buckets."""
    return batching.bucket_length(int(np.ceil(np.percentile(lengths, 90))), sequence_length)


def predict_packed(forward, features, batch_size, row_length=None, max_sequences=None):
    """Runs `forward(inputs, num_sequences)` (packed inputs -> an array
    `(rows, num_sequences, ...)`, slot k - 1 of a row holding its sequence
    k) over `features` (a dict of right-padded `(n, L)` arrays, one
    sequence per row) packed into rows of `row_length` tokens (default:
    `default_row_length`), and returns its
    per-sequence outputs in the input order, `(n, ...)`. Sequences longer
    than `row_length` run in rows of their own (`packing_plan`).
    `num_sequences` is the batch's most sequences in a row, rounded up to
    a power of two (a few compiled shapes)."""
    features = {k: np.asarray(v) for k, v in features.items()}
    lengths = right_padded_lengths(features)
    width = features["padding_mask"].shape[1]
    if row_length is None:
        row_length = default_row_length(lengths, width)
    fill = {k: _padding_value(v, features["padding_mask"]) for k, v in features.items()}
    out = None
    plan = packing_plan(lengths, batch_size, row_length, max_sequences, width)
    for rows, batch_width in plan:
        most = max(len(row) for row in rows)
        num_sequences = 1 << (most - 1).bit_length()
        inputs = pack_rows(features, rows, lengths, batch_width, fill)
        result = np.asarray(forward(inputs, num_sequences))
        if out is None:
            out = np.zeros((len(lengths),) + result.shape[2:], result.dtype)
        for r, members in enumerate(rows):
            out[members] = result[r, : len(members)]
    return out


def pooled_forward(backbone, pooling):
    """`forward(inputs, num_sequences)` for `predict_packed`: `backbone`
    over packed rows, `pooling` (a `TokenPooling`) per sequence, `(rows,
    num_sequences, dim)` numpy; one functional model over the same layers
    per `num_sequences`, each compiled once (`batching.compiled_forward`)."""
    models = {}

    def forward(inputs, num_sequences):
        if num_sequences not in models:
            x = {k: keras.Input((None,), dtype="int32", name=k) for k in backbone.input}
            sequence = backbone(x)["sequence_output"]
            pooled = pooling(sequence, x["padding_mask"], num_sequences=num_sequences)
            models[num_sequences] = keras.Model(x, pooled, name=f"{backbone.name}_packed")
        return batching.compiled_forward(models[num_sequences])(inputs)

    return forward
