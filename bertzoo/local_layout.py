"""How a local (sliding-window) attention layer lays out its scores at a
given length, without Keras: the banded form up to `BLOCKED_MIN_LENGTH`
tokens, blocks beyond it. The layer (`bertzoo.layers.local_attention`)
computes this way and the planner (`bertzoo.planner`) counts this way."""

# Blocks pay for reshapes and `1.5 window` keys per query; the banded form
# for `S` keys per query. Measured on 2 CPU cores (window 128, 12 heads of
# 64, batch 1, compiled, interleaved; TensorFlow and JAX;
# benchmarks/long_context.py): blocked / banded time 1.7x to 2.0x at 128
# tokens, 1.1x to 1.2x at 256, 0.9x at 384, 0.6x to 0.7x at 512. At and
# below this length the banded form runs.
BLOCKED_MIN_LENGTH = 256


def local_attention_blocks(window):
    """The block length for a window: `window // 2`, the smallest block for
    which each query's keys lie in its own and the two neighbouring blocks."""
    return max(window // 2, 1)


def local_score_shape(seq_len, window):
    """`(queries, keys)`: the per-head score tensor of one sequence in a
    local layer at a known length. Banded: `(S, S)`. In blocks of `b`: the
    queries padded to whole blocks, each seeing its block's three-block
    span, `(ceil(S / b) b, 3 b)`."""
    if seq_len <= BLOCKED_MIN_LENGTH:
        return seq_len, seq_len
    b = local_attention_blocks(window)
    return -(-seq_len // b) * b, 3 * b
