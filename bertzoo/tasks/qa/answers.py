"""Extractive question answering: model logits over windows -> answers.

`extract_answers` (numpy, `bertzoo.tasks.qa.spans`) follows the reference
run_squad.py's candidate rule and n-best list; `best_span_tf` and
`serve_answers` are its in-graph counterparts for serving, and pick the
same top answer. The windows and their byte offsets come from
`bertzoo.tasks.qa.features`.
"""

import numpy as np
import tensorflow as tf

from bertzoo.tasks.qa.spans import extract_answers
from bertzoo.tokenizers.base import to_string_tensor

__all__ = ["best_span_tf", "extract_answers", "serve_answers"]


@tf.autograph.experimental.do_not_convert
def best_span_tf(
    start_logits,
    end_logits,
    context_mask,
    max_answer_length=30,
    max_context=None,
    n_best_size=None,
):
    """The best answer span of every window, in TensorFlow ops.

    Scores every (start, end) with 0 <= end - start < max_answer_length as
    start_logit + end_logit -- the band of the (seq x seq) score matrix,
    stored as (seq, max_answer_length): row i holds ends i .. i + L - 1 --
    keeping spans whose start and end are context tokens, whose start has
    `max_context` (if given) and, if `n_best_size` is given, whose start and
    end are among the window's `n_best_size` highest logits (the
    reference's candidate rule, which `extract_answers` follows).

    Args:
        start_logits, end_logits: (N, seq) float.
        context_mask: (N, seq), nonzero on context tokens.
        max_answer_length: longest span in tokens (a Python int).
        max_context: optional (N, seq), nonzero where the window is the
            token's max-context window.
        n_best_size: optional Python int.

    Returns `(score, start, end)`, each (N,): the best score (float32, -inf
    when the window has no valid span) and its token positions (int32, -1
    when none). Ties go to the smaller start, then the shorter span.
    """
    start_logits = tf.cast(tf.convert_to_tensor(start_logits), tf.float32)
    end_logits = tf.cast(tf.convert_to_tensor(end_logits), tf.float32)
    seq = start_logits.shape[-1]
    if seq is None:
        raise ValueError("best_span_tf needs a static sequence length.")
    length = max(1, min(int(max_answer_length), seq))
    ok_start = tf.not_equal(tf.convert_to_tensor(context_mask), 0)
    ok_end = ok_start
    if max_context is not None:
        ok_start &= tf.not_equal(tf.convert_to_tensor(max_context), 0)
    if n_best_size is not None:
        k = max(0, min(int(n_best_size), seq))

        def top(logits):
            index = tf.math.top_k(logits, k=k).indices  # ties: lower index first
            return tf.reduce_any(tf.cast(tf.one_hot(index, seq), tf.bool), axis=1)

        ok_start &= top(start_logits)
        ok_end &= top(end_logits)
    minus_inf = tf.constant(-np.inf, tf.float32)
    starts = tf.where(ok_start, start_logits, minus_inf)
    ends = tf.where(ok_end, end_logits, minus_inf)
    pad = tf.fill([tf.shape(ends)[0], length - 1], minus_inf)
    band = tf.signal.frame(tf.concat([ends, pad], axis=1), length, 1, axis=1)  # (N, seq, L)
    scores = tf.reshape(starts[:, :, None] + band, [-1, seq * length])
    best = tf.reduce_max(scores, axis=1)
    index = tf.argmax(scores, axis=1, output_type=tf.int32)
    found = best > minus_inf
    start = tf.where(found, index // length, -1)
    end = tf.where(found, index // length + index % length, -1)
    return best, start, end


@tf.autograph.experimental.do_not_convert
def serve_answers(
    features,
    start_logits,
    end_logits,
    contexts,
    max_answer_length=30,
    version_2=False,
    null_score_diff_threshold=0.0,
    n_best_size=20,
):
    """The answer of every example, in TensorFlow ops (for serving graphs).

    Reduces `best_span_tf` over each example's windows (the first window
    on ties) and applies the version-2 null rule, exactly as
    `extract_answers` picks its answer (same candidate rule with the same
    `n_best_size`, max-context rule included; `n_best_size=None` considers
    every span).

    Args:
        features: the dict of `encode_qa` (example_index, context_mask,
            max_context, offset_start, offset_end).
        start_logits, end_logits: (N, seq) model outputs.
        contexts: the 1-D tf.string batch `encode_qa` was given.

    Returns a dict, one entry per example: `answers` (tf.string, "" for no
    answer), `start_offsets`, `end_offsets` (int32 byte offsets into the
    context, -1 for no answer), `scores` (float32, best span score, -inf
    when there is no valid span) and `null_scores` (lowest [CLS] score).
    """
    contexts = tf.reshape(to_string_tensor(contexts), [-1])
    num_examples = tf.shape(contexts)[0]
    score, start, end = best_span_tf(
        start_logits,
        end_logits,
        features["context_mask"],
        max_answer_length,
        features["max_context"],
        n_best_size,
    )
    segment = tf.cast(features["example_index"], tf.int32)
    best = tf.math.unsorted_segment_max(score, segment, num_examples)
    num_windows = tf.shape(score)[0]
    window_ids = tf.range(num_windows)
    is_best = tf.equal(score, tf.gather(best, segment)) & (score > -np.inf)
    window = tf.math.unsorted_segment_min(
        tf.where(is_best, window_ids, num_windows), segment, num_examples
    )
    found = window < num_windows
    window = tf.minimum(window, tf.maximum(num_windows - 1, 0))
    start_pos = tf.maximum(tf.gather(start, window), 0)
    end_pos = tf.maximum(tf.gather(end, window), 0)
    offset_start = tf.gather_nd(features["offset_start"], tf.stack([window, start_pos], 1))
    offset_end = tf.gather_nd(features["offset_end"], tf.stack([window, end_pos], 1))
    offset_start, offset_end = tf.cast(offset_start, tf.int32), tf.cast(offset_end, tf.int32)
    start_logits = tf.cast(tf.convert_to_tensor(start_logits), tf.float32)
    end_logits = tf.cast(tf.convert_to_tensor(end_logits), tf.float32)
    null = tf.math.unsorted_segment_min(
        start_logits[:, 0] + end_logits[:, 0], segment, num_examples
    )
    if version_2:
        found &= ~(null - best > null_score_diff_threshold)
    offset_start = tf.where(found, offset_start, -1)
    offset_end = tf.where(found, offset_end, -1)
    text = tf.strings.substr(
        contexts, tf.maximum(offset_start, 0), tf.maximum(offset_end - offset_start, 0)
    )
    return {
        "answers": tf.where(found, text, ""),
        "start_offsets": offset_start,
        "end_offsets": offset_end,
        "scores": best,
        "null_scores": null,
    }
