"""Packed rows: several sequences in one row, numbered by the padding mask
(keras.ops only).

`padding_mask` holds 0 for padding and, for a real token, the number of
the sequence it belongs to. A plain 0/1 mask is one sequence per row, and
every model computes exactly what it computed before packing existed (to
the bit). A packed row such as `1 1 1 2 2 3 3 3 3 0 0` holds three
sequences and two padding positions: a token attends only to the tokens of
its own sequence (`attention_mask`), and its position restarts at 0 where
its sequence starts (`token_positions`), for learned position tables and
rotary positions alike. So each sequence's outputs are those it has alone,
and no work goes to padding when the rows are full
(`bertzoo.packing` fills them).

The layout of a packed row (a row holding a number above 1): sequence 1
from the row's first position, then 2, 3, ..., each one contiguous run,
padding only after the last sequence. Where the values are known (eager
calls, `predict` on arrays) `bertzoo.input_checks.check_padding_mask`
refuses other layouts; inside compiled graphs they are not checked, and
their results are undefined (attention still follows the numbers,
positions do not). A 0/1 row may have any pattern, as before.
"""

from keras import ops


def attention_mask(query_numbers, key_numbers):
    """`(B, 1, T, S)` bool: query t may see key s when the key is a real
    token (number != 0) of the query's own sequence. A padding query
    (number 0) sees every real key, as it did before packing: its output is
    never used, and so a 0/1 mask gives exactly the key-side mask of old.

    `query_numbers` `(B, T)`, `key_numbers` `(B, S)`: padding masks, or
    blocks of one (local attention)."""
    q = ops.cast(query_numbers, "int32")[:, None, :, None]  # (B, 1, T, 1)
    k = ops.cast(key_numbers, "int32")[:, None, None, :]  # (B, 1, 1, S)
    same = ops.logical_or(ops.equal(q, k), ops.equal(q, 0))
    return ops.logical_and(ops.not_equal(k, 0), same)


def sequence_starts(padding_mask):
    """`(B, S)` int32: for each token of sequence 2, 3, ... of a packed
    row, the index where its sequence starts; 0 for sequence 1 and for
    padding, so 0 everywhere under a 0/1 mask.

    A sequence starts where the number rises to 2 or more. The starts of a
    row, in order, are its first entries once sorted (keys `t` for a start,
    `S + t` otherwise), and a token's own start is the one counted by a
    cumulative sum up to it: `O(S log S)` per row, no `S x S` tensor, so it
    costs little beside the window of a local layer at 8,192 tokens.
    Another layout than the documented one still gives a start at or
    before each token."""
    numbers = ops.cast(padding_mask, "int32")
    index = ops.arange(ops.shape(numbers)[1], dtype="int32")[None, :]  # (1, S)
    previous = ops.pad(numbers[:, :-1], [[0, 0], [1, 0]])  # (B, S): the number before
    starts = ops.logical_and(ops.greater_equal(numbers, 2), ops.not_equal(numbers, previous))
    count = ops.cumsum(ops.cast(starts, "int32"), axis=1)  # starts up to and including t
    in_order = ops.sort(ops.where(starts, index, index + ops.shape(numbers)[1]), axis=1)
    start = ops.take_along_axis(in_order, ops.maximum(count - 1, 0), axis=1)
    return ops.where(
        ops.logical_and(ops.greater_equal(count, 1), ops.greater_equal(numbers, 2)), start, 0
    )


def tokens_before_sequence(padding_mask, counted=None):
    """`(B, S)` int32: for each token, how many tokens of the row belong to
    sequences numbered below its own, in the documented layout: where its
    sequence starts (`sequence_starts`). 0 for sequence 1 and for padding,
    so 0 everywhere under a 0/1 mask. `counted` `(B, S)` (bool or 0/1):
    count only those tokens (RoBERTa's positions count the tokens whose id
    is not the padding id)."""
    start = sequence_starts(padding_mask)
    if counted is None:
        return start
    counted = ops.cast(ops.cast(counted, "bool"), "int32")
    before = ops.cumsum(counted, axis=1) - counted  # counted tokens before t
    return ops.where(ops.equal(start, 0), 0, ops.take_along_axis(before, start, axis=1))


def token_positions(padding_mask):
    """`(B, S)` int32: each token's position in its own sequence,
    `0 .. S-1` under a 0/1 mask (padding included), restarting at 0 where
    each packed sequence starts."""
    seq_len = ops.shape(padding_mask)[1]
    positions = ops.arange(seq_len, dtype="int32")[None, :] - tokens_before_sequence(padding_mask)
    # Another layout than the documented one (unchecked in graphs) must not
    # give a position below 0 (a learned table's row -1).
    return ops.maximum(positions, 0)
