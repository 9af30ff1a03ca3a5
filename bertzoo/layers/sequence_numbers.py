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


def tokens_before_sequence(padding_mask, counted=None):
    """`(B, S)` int32: for each token, how many tokens of the row belong to
    sequences numbered below its own (1 <= number < its number): where its
    sequence starts, in the documented layout. 0 for sequence 1 and for
    padding, so 0 everywhere under a 0/1 mask. `counted` `(B, S)` (bool or
    0/1): count only those tokens (RoBERTa's positions count the tokens
    whose id is not the padding id).

    `B x S x S` comparisons, summed without keeping them under XLA: less
    than the attention scores of one global layer."""
    numbers = ops.cast(padding_mask, "int32")
    keys, queries = numbers[:, None, :], numbers[:, :, None]
    earlier = ops.logical_and(ops.greater_equal(keys, 1), ops.less(keys, queries))  # (B, S, S)
    if counted is not None:
        earlier = ops.logical_and(earlier, ops.cast(counted, "bool")[:, None, :])
    return ops.sum(ops.cast(earlier, "int32"), axis=-1)


def token_positions(padding_mask):
    """`(B, S)` int32: each token's position in its own sequence,
    `0 .. S-1` under a 0/1 mask (padding included), restarting at 0 where
    each packed sequence starts."""
    seq_len = ops.shape(padding_mask)[1]
    positions = ops.arange(seq_len, dtype="int32")[None, :] - tokens_before_sequence(padding_mask)
    # Another layout than the documented one (unchecked in graphs) must not
    # give a position below 0 (a learned table's row -1).
    return ops.maximum(positions, 0)
