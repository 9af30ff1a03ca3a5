"""Extractive question answering: model logits over windows -> answers.

`extract_answers` (numpy) follows the reference run_squad.py's candidate
rule and n-best list; `best_span_tf` and `serve_answers` are its in-graph
counterparts for serving, and pick the same top answer. The windows and
their byte offsets come from `bertzoo.tasks.qa.features`.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from bertzoo.tokenizers.base import to_string_tensor


def _as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _context_bytes(context):
    if isinstance(context, bytes):
        return context
    if hasattr(context, "numpy"):
        return context.numpy()
    return str(context).encode("utf-8")


_WINDOW_KEYS = ("example_index", "context_mask", "offset_start", "offset_end", "max_context")


@dataclasses.dataclass(frozen=True)
class _Scored:
    """Windows with their logits (float64 numpy, (N, seq)) and the features
    extraction reads (numpy, `_WINDOW_KEYS`).

    A candidate is `(score, start_logit, end_logit, window, start, end)`;
    the version-2 null answer has window, start and end -1."""

    start: np.ndarray
    end: np.ndarray
    features: dict

    def by_example(self, num_examples):
        """The windows of every example, in order."""
        windows_of = [[] for _ in range(num_examples)]
        for w, e in enumerate(self.features["example_index"].tolist()):
            windows_of[e].append(w)
        return windows_of

    def candidates(self, w, k, max_answer_length):
        """Window w's spans: start among its k highest start logits and its
        max-context tokens, end among its k highest end logits, both context
        tokens, end >= start, at most max_answer_length tokens."""
        s_log, e_log = self.start[w], self.end[w]
        starts = np.argsort(-s_log, kind="stable")[:k]
        ends = np.argsort(-e_log, kind="stable")[:k]
        ctx = self.features["context_mask"][w] == 1
        ok_start = ctx & (self.features["max_context"][w] == 1)
        s_grid, e_grid = np.meshgrid(starts, ends, indexing="ij")
        valid = (
            ok_start[s_grid]
            & ctx[e_grid]
            & (e_grid >= s_grid)
            & (e_grid - s_grid + 1 <= max_answer_length)
        )
        return [
            (s_log[s] + e_log[t], s_log[s], e_log[t], w, s, t)
            for s, t in zip(s_grid[valid].tolist(), e_grid[valid].tolist())
        ]

    def null(self, windows):
        """The null candidate: the lowest [CLS] score over `windows` (the
        first window on ties); None without windows."""
        best = None
        for w in windows:
            score = self.start[w][0] + self.end[w][0]
            if best is None or score < best[0]:
                best = (score, self.start[w][0], self.end[w][0], -1, -1, -1)
        return best

    def offsets(self, candidate):
        """[start, end) byte offsets of a span candidate's text."""
        _, _, _, w, s, t = candidate
        return int(self.features["offset_start"][w, s]), int(self.features["offset_end"][w, t])


def _nbest(candidates, context, scored, n_best_size):
    """Up to n_best_size distinct answers of sorted candidates, as dicts."""
    entries, seen = [], set()
    for candidate in candidates:
        score, s_logit, e_logit, w, _, _ = candidate
        if w < 0:
            text, b0, b1 = "", -1, -1
        else:
            b0, b1 = scored.offsets(candidate)
            text = context[b0:b1].decode("utf-8", errors="replace")
        if text in seen:
            continue
        seen.add(text)
        entries.append(
            {
                "text": text,
                "score": float(score),
                "start_logit": float(s_logit),
                "end_logit": float(e_logit),
                "start_offset": b0,
                "end_offset": b1,
            }
        )
        if len(entries) >= n_best_size:
            break
    return entries


def _best_answer(candidates, context, scored, null, null_score_diff_threshold):
    """The best span's text; "" with no span, or when the null candidate
    (version 2) beats it by more than the threshold."""
    best = next((c for c in candidates if c[3] >= 0), None)
    if best is None:
        return ""
    if null is not None and null[0] - best[0] > null_score_diff_threshold:
        return ""
    b0, b1 = scored.offsets(best)
    return context[b0:b1].decode("utf-8", errors="replace")


def extract_answers(
    start_logits,
    end_logits,
    features,
    contexts,
    n_best_size=20,
    max_answer_length=30,
    version_2=False,
    null_score_diff_threshold=0.0,
):
    """Model logits over windows -> one answer string per example (numpy).

    As the reference run_squad.py: per example, over all its windows, the
    candidate spans are (start, end) with start among the `n_best_size`
    highest start logits of the window and end among the highest end logits,
    both context tokens, end >= start, at most `max_answer_length` tokens,
    and the window being the start token's max-context window; score =
    start_logit + end_logit. The answer text is the context's bytes
    `[offset_start[start], offset_end[end])`, decoded as UTF-8.

    With `version_2` (SQuAD 2.0) the null score is the lowest
    `start_logits[w, 0] + end_logits[w, 0]` ([CLS]) over the example's
    windows, and the answer is "" when null score - best span score >
    `null_score_diff_threshold`. With no valid span the answer is "".

    Args:
        start_logits, end_logits: (N, seq) arrays (numpy, TF or JAX).
        features: the dict of `encode_qa` / `qa_training_features` (uses
            example_index, context_mask, offset_start, offset_end,
            max_context).
        contexts: the examples' contexts (str or UTF-8 bytes), in order.

    Returns `(answers, nbest)`: `answers[i]` the answer of example i;
    `nbest[i]` up to `n_best_size` distinct answers, best first, as dicts
    {text, score, start_logit, end_logit, start_offset, end_offset} (byte
    offsets; the null answer of version 2, "", has offsets -1).
    """
    start_logits = _as_numpy(start_logits).astype(np.float64)
    scored = _Scored(
        start=start_logits,
        end=_as_numpy(end_logits).astype(np.float64),
        features={k: _as_numpy(features[k]) for k in _WINDOW_KEYS},
    )
    contexts = [_context_bytes(c) for c in contexts]
    seq = start_logits.shape[1] if start_logits.ndim == 2 else 0
    k = min(int(n_best_size), seq)
    answers, nbest = [], []
    for context, windows in zip(contexts, scored.by_example(len(contexts))):
        candidates = [c for w in windows for c in scored.candidates(w, k, max_answer_length)]
        null = scored.null(windows) if version_2 else None
        if null is not None:
            candidates.append(null)
        candidates.sort(key=lambda c: -c[0])  # stable: window, then rank order
        nbest.append(_nbest(candidates, context, scored, n_best_size))
        answers.append(_best_answer(candidates, context, scored, null, null_score_diff_threshold))
    return answers, nbest


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
