"""Extractive question answering (SQuAD 1.1 / 2.0): features with byte
offsets, training labels and answer extraction.

One mechanism serves training, evaluation and serving: `encode_qa` is
TensorFlow ops only, so the same code prepares features eagerly (in
`qa_training_features`) and runs inside an exported graph that takes raw
(question, context) strings; `serve_answers` is the in-graph counterpart of
`extract_answers` and picks the same top answer.

    features = qa_training_features(tokenizer, train_examples)   # numpy
    model.fit({k: features[k] for k in ("token_ids", "segment_ids",
               "padding_mask")}, (features["start_positions"],
               features["end_positions"]), ...)

    eval_features = qa_training_features(tokenizer, dev_examples)
    start_logits, end_logits = model.predict(...)
    answers, nbest = extract_answers(start_logits, end_logits,
                                     eval_features, [e.context for e in dev_examples])

    # serving: strings in, answers out
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    def serve(questions, contexts):
        features = encode_qa(tokenizer, questions, contexts)
        start, end = qa_model(features)           # (windows, seq) each
        return serve_answers(features, start, end, contexts)

Windows follow the reference run_squad.py: question tokens are cut to
`max_query_length`; the context tokens are split into windows of at most
`sequence_length - len(question) - 3` tokens, each starting
`min(doc_stride, that maximum)` tokens after the previous one, the last
one ending at the end of the context (an empty context still gets one
window). Each window is `[CLS] question [SEP] window [SEP]`, padded.

Offsets are byte offsets into the UTF-8 context, at the granularity of
`Tokenizer.tokenize_with_offsets`: every sub-token carries the span of the
basic token (WordPiece: word, punctuation character, CJK ideograph;
SentencePiece: whitespace-delimited word) it comes from, so an answer is
always a whole number of basic tokens.
"""

import numpy as np
import tensorflow as tf

from bertzoo.tokenizers.base import row_ids, to_string_tensor

FEATURE_KEYS = (
    "token_ids",
    "segment_ids",
    "padding_mask",
    "example_index",
    "context_mask",
    "context_position",
    "offset_start",
    "offset_end",
    "max_context",
)


def _check_lengths(sequence_length, doc_stride, max_query_length):
    sequence_length, doc_stride, max_query_length = (
        int(sequence_length),
        int(doc_stride),
        int(max_query_length),
    )
    if max_query_length < 0:
        raise ValueError(f"max_query_length must be >= 0, got {max_query_length}.")
    if sequence_length < max_query_length + 4:
        raise ValueError(
            f"sequence_length={sequence_length} leaves no room for context: it needs "
            f"[CLS] + {max_query_length} question tokens + [SEP] + at least one "
            "context token + [SEP], i.e. sequence_length >= max_query_length + 4."
        )
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be >= 1, got {doc_stride}.")
    return sequence_length, doc_stride, max_query_length


def _window_score(p, j, step, max_len, clen, n):
    """100 x the reference's max-context score of context token `p` in
    window `j` (min(left, right) context + 0.01 * window length), as an
    exact integer; -1 where window j does not exist or not contain p."""
    start = j * step
    length = tf.minimum(max_len, clen - start)
    inside = (j >= 0) & (j < n) & (start <= p) & (p < start + length)
    score = 100 * tf.minimum(p - start, start + length - 1 - p) + length
    return tf.where(inside, score, tf.constant(-1, tf.int64))


def _max_context(p, j, step, max_len, clen, n):
    """Whether window j is the max-context window of context token p (all
    int64 tensors of one shape), as the reference `_check_is_max_context`:
    the window with the highest score, the first one on ties.

    Closed form instead of a scan over all windows: every window but the
    last has length `max_len`, and among those the score is a tent in the
    window start peaking at p - (max_len - 1) / 2, so the best is one of
    the two windows whose starts surround the peak (clamped to the full
    windows); the last window is compared explicitly."""
    last_full = n - 2  # < 0 when the only window is the last one
    below = tf.math.floordiv(2 * p - (max_len - 1), 2 * step)
    candidates = [
        tf.maximum(tf.minimum(below, last_full), 0),
        tf.maximum(tf.minimum(below + 1, last_full), 0),
        n - 1,
    ]
    scores = [_window_score(p, c, step, max_len, clen, n) for c in candidates]
    best = tf.reduce_max(tf.stack(scores), axis=0)
    big = tf.constant(np.iinfo(np.int64).max, tf.int64)
    first = tf.reduce_min(
        tf.stack([tf.where(s == best, c, big) for s, c in zip(scores, candidates)]), axis=0
    )
    return tf.equal(first, j)


@tf.autograph.experimental.do_not_convert
def encode_qa(
    tokenizer, questions, contexts, sequence_length=384, doc_stride=128, max_query_length=64
):
    """(question, context) strings -> windowed BERT inputs with offsets.

    TensorFlow ops only: eager, `tf.data`, `tf.function` and exported graphs.

    Args:
        tokenizer: a bertzoo tokenizer (WordPiece or SentencePiece).
        questions, contexts: 1-D batches of strings (lists, numpy arrays or
            tf.string tensors) of equal length B.
        sequence_length: packed length of every window.
        doc_stride: tokens between consecutive window starts (at most the
            window size, as the reference).
        max_query_length: question tokens kept (the rest is cut).

    Returns a dict of dense int32 TensorFlow tensors over all N windows of
    the batch (N >= B; every example has at least one window):
        token_ids, segment_ids, padding_mask: (N, sequence_length) model
            inputs; segment 0 is [CLS] question [SEP], segment 1 the
            context tokens and the final [SEP].
        example_index: (N,) the input example each window comes from
            (windows of one example are consecutive, in context order).
        context_mask: (N, seq) 1 on context tokens.
        context_position: (N, seq) index of the token among its example's
            context tokens, -1 elsewhere.
        offset_start, offset_end: (N, seq) byte span [start, end) of the
            token in the UTF-8 context, -1 elsewhere.
        max_context: (N, seq) 1 where this window is the token's "max
            context" window (reference `_check_is_max_context`).
    """
    sequence_length, doc_stride, max_query_length = _check_lengths(
        sequence_length, doc_stride, max_query_length
    )
    questions = tf.reshape(to_string_tensor(questions), [-1])
    contexts = tf.reshape(to_string_tensor(contexts), [-1])
    check = tf.debugging.assert_equal(
        tf.size(questions),
        tf.size(contexts),
        message="encode_qa needs as many questions as contexts",
    )
    with tf.control_dependencies([check]):
        questions = tf.identity(questions)

    q_ids = tokenizer.tokenize_ids(questions).with_row_splits_dtype(tf.int64)
    q_ids = q_ids[:, :max_query_length]
    c_ids, c_start, c_end = tokenizer.tokenize_with_offsets(contexts)
    c_ids = c_ids.with_row_splits_dtype(tf.int64)

    qlen = q_ids.row_lengths()
    clen = c_ids.row_lengths()
    max_len = sequence_length - qlen - 3  # context tokens per window, >= 1
    step = tf.minimum(max_len, doc_stride)
    extra = tf.math.floordiv(clen - max_len + step - 1, step)  # ceil division
    n = tf.where(clen > max_len, 1 + extra, tf.ones_like(clen))  # windows per example

    splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(n)], 0)
    example = row_ids(splits)  # (N,) the example of every window
    j = tf.range(splits[-1]) - tf.gather(splits, example)  # window number in its example
    w_step, w_max, w_clen, w_n, w_qlen = (
        tf.gather(x, example)[:, None] for x in (step, max_len, clen, n, qlen)
    )
    j = j[:, None]
    w_start = j * w_step
    w_len = tf.minimum(w_max, w_clen - w_start)

    # Dense (N, sequence_length) layout: [CLS] q [SEP] context [SEP] pad.
    col = tf.range(sequence_length, dtype=tf.int64)[None, :]
    ctx_begin = w_qlen + 2
    is_question = (col >= 1) & (col <= w_qlen)
    is_context = (col >= ctx_begin) & (col < ctx_begin + w_len)
    is_sep = (col == w_qlen + 1) | (col == ctx_begin + w_len)
    is_real = col <= ctx_begin + w_len

    width = max(max_query_length, 1)
    questions_dense = tf.gather(q_ids.to_tensor(0, shape=[None, width]), example)  # (N, width)
    q_column = tf.clip_by_value(col - 1, 0, width - 1) + tf.zeros_like(j)
    q_tokens = tf.cast(tf.gather(questions_dense, q_column, batch_dims=1), tf.int64)

    position = w_start + col - ctx_begin  # index among the example's context tokens
    flat_index = tf.gather(c_ids.row_splits, example)[:, None] + tf.maximum(position, 0)
    flat_index = tf.where(is_context, flat_index, 0)

    def context_values(flat_values):
        # One extra element so that the masked gathers work on empty batches.
        flat_values = tf.concat([tf.cast(flat_values, tf.int64), tf.zeros([1], tf.int64)], 0)
        return tf.gather(flat_values, flat_index)

    ctx_tokens = context_values(c_ids.flat_values)
    zeros = tf.zeros_like(position)
    is_max = is_context & _max_context(
        position, *(x + zeros for x in (j, w_step, w_max, w_clen, w_n))
    )

    def where(mask, values, fill):
        return tf.cast(tf.where(mask, values, tf.constant(fill, tf.int64)), tf.int32)

    token_ids = tf.where(is_question, q_tokens, tf.constant(tokenizer.pad_token_id, tf.int64))
    token_ids = tf.where(is_context, ctx_tokens, token_ids)
    token_ids = tf.where(is_sep, tf.constant(tokenizer.sep_token_id, tf.int64), token_ids)
    token_ids = tf.where(col == 0, tf.constant(tokenizer.cls_token_id, tf.int64), token_ids)
    return {
        "token_ids": tf.cast(token_ids, tf.int32),
        "segment_ids": tf.cast(is_real & (col >= ctx_begin), tf.int32),
        "padding_mask": tf.cast(is_real, tf.int32),
        "example_index": tf.cast(example, tf.int32),
        "context_mask": tf.cast(is_context, tf.int32),
        "context_position": where(is_context, position, -1),
        "offset_start": where(is_context, context_values(c_start.flat_values), -1),
        "offset_end": where(is_context, context_values(c_end.flat_values), -1),
        "max_context": tf.cast(is_max, tf.int32),
    }


def _answer_of(example):
    """(text, char_start) of an example's first answer, or None."""
    answers = list(getattr(example, "answers", None) or [])
    if not answers:
        return None
    first = answers[0]
    if isinstance(first, dict):
        return first["text"], int(first["answer_start"])
    text, start = first
    return text, int(start)


def answer_byte_span(context, text, char_start):
    """(char_start, answer text) in a str context -> [start, end) byte offsets
    into its UTF-8 encoding."""
    start = len(context[:char_start].encode("utf-8"))
    return start, start + len(text.encode("utf-8"))


def qa_training_features(
    tokenizer,
    examples,
    sequence_length=384,
    doc_stride=128,
    max_query_length=64,
    chunk_size=512,
):
    """SQuAD-style examples -> numpy features with span labels.

    Args:
        tokenizer: a bertzoo tokenizer.
        examples: objects with `id`, `question`, `context` (str), `answers`
            (list of `(text, char_start)`, char_start counted in characters
            of `context`; dicts `{"text", "answer_start"}` work too) and
            `is_impossible`. Only the first answer is used.
        sequence_length, doc_stride, max_query_length: see `encode_qa`.
        chunk_size: examples encoded per `encode_qa` call (bounds memory).

    Returns a dict of numpy arrays over all windows: the `encode_qa` keys
    (example_index counts over all of `examples`), `start_positions` and
    `end_positions` (int32, (N,)) and `example_id` (object, (N,)). A window's
    labels are the first and last context tokens whose byte spans overlap
    the answer's, when both lie in the window; when the answer is not fully
    inside the window, or the question is impossible, both are 0 ([CLS]),
    as in the reference.
    """
    sequence_length, doc_stride, max_query_length = _check_lengths(
        sequence_length, doc_stride, max_query_length
    )
    examples = list(examples)
    chunk_size = max(1, int(chunk_size))
    parts = []
    for base in range(0, len(examples), chunk_size):
        chunk = examples[base : base + chunk_size]
        feats = encode_qa(
            tokenizer,
            [e.question for e in chunk],
            [e.context for e in chunk],
            sequence_length,
            doc_stride,
            max_query_length,
        )
        feats = {k: v.numpy() for k, v in feats.items()}
        start, end = _labels(feats, chunk)
        feats["start_positions"], feats["end_positions"] = start, end
        feats["example_id"] = np.array([chunk[i].id for i in feats["example_index"]], dtype=object)
        feats["example_index"] = feats["example_index"] + base
        parts.append(feats)
    if not parts:
        out = {k: np.zeros((0, sequence_length), np.int32) for k in FEATURE_KEYS}
        for key in ("example_index", "start_positions", "end_positions"):
            out[key] = np.zeros((0,), np.int32)
        out["example_id"] = np.zeros((0,), object)
        return out
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _labels(feats, chunk):
    """Start/end token labels of every window of one encoded chunk."""
    num = len(chunk)
    span = np.full((num, 2), -1, np.int64)  # answer bytes, -1: no answer
    for i, example in enumerate(chunk):
        answer = _answer_of(example)
        if getattr(example, "is_impossible", False) or answer is None:
            continue
        span[i] = answer_byte_span(example.context, *answer)
    ex = feats["example_index"].astype(np.int64)
    ctx = feats["context_mask"] == 1
    pos = feats["context_position"].astype(np.int64)
    a0, a1 = span[ex, 0][:, None], span[ex, 1][:, None]
    overlap = ctx & (feats["offset_start"] < a1) & (feats["offset_end"] > a0) & (a0 >= 0)
    # First and last overlapping context token of each example, over all its
    # windows (together they hold every context token).
    big = np.iinfo(np.int64).max
    first = np.full(num, big, np.int64)
    last = np.full(num, -1, np.int64)
    np.minimum.at(first, ex, np.where(overlap, pos, big).min(axis=1))
    np.maximum.at(last, ex, np.where(overlap, pos, -1).max(axis=1))
    is_first = ctx & (pos == first[ex][:, None])
    is_last = ctx & (pos == last[ex][:, None])
    inside = is_first.any(axis=1) & is_last.any(axis=1)
    start = np.where(inside, is_first.argmax(axis=1), 0).astype(np.int32)
    end = np.where(inside, is_last.argmax(axis=1), 0).astype(np.int32)
    return start, end


def _as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _context_bytes(context):
    if isinstance(context, bytes):
        return context
    if hasattr(context, "numpy"):
        return context.numpy()
    return str(context).encode("utf-8")


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
    end_logits = _as_numpy(end_logits).astype(np.float64)
    keys = ("example_index", "context_mask", "offset_start", "offset_end", "max_context")
    f = {k: _as_numpy(features[k]) for k in keys}
    contexts = [_context_bytes(c) for c in contexts]
    seq = start_logits.shape[1] if start_logits.ndim == 2 else 0
    k = min(int(n_best_size), seq)
    windows_of = [[] for _ in contexts]
    for w, e in enumerate(f["example_index"].tolist()):
        windows_of[e].append(w)
    answers, nbest = [], []
    for e, context in enumerate(contexts):
        candidates = []  # (score, start_logit, end_logit, window, start, end)
        null_score, null_pair = None, None
        for w in windows_of[e]:
            s_log, e_log = start_logits[w], end_logits[w]
            if version_2:
                score = s_log[0] + e_log[0]
                if null_score is None or score < null_score:
                    null_score, null_pair = score, (s_log[0], e_log[0])
            starts = np.argsort(-s_log, kind="stable")[:k]
            ends = np.argsort(-e_log, kind="stable")[:k]
            ctx = f["context_mask"][w] == 1
            ok_start = ctx & (f["max_context"][w] == 1)
            s_grid, e_grid = np.meshgrid(starts, ends, indexing="ij")
            valid = (
                ok_start[s_grid]
                & ctx[e_grid]
                & (e_grid >= s_grid)
                & (e_grid - s_grid + 1 <= max_answer_length)
            )
            for s, t in zip(s_grid[valid].tolist(), e_grid[valid].tolist()):
                candidates.append((s_log[s] + e_log[t], s_log[s], e_log[t], w, s, t))
        if version_2 and null_score is not None:
            candidates.append((null_score, null_pair[0], null_pair[1], -1, -1, -1))
        candidates.sort(key=lambda c: -c[0])  # stable: window, then rank order
        entries, seen = [], set()
        for score, s_logit, e_logit, w, s, t in candidates:
            if w < 0:
                text, b0, b1 = "", -1, -1
            else:
                b0, b1 = int(f["offset_start"][w, s]), int(f["offset_end"][w, t])
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
        best = next((c for c in candidates if c[3] >= 0), None)
        if best is None:
            answer = ""
        elif version_2 and null_score - best[0] > null_score_diff_threshold:
            answer = ""
        else:
            _, _, _, w, s, t = best
            b0, b1 = int(f["offset_start"][w, s]), int(f["offset_end"][w, t])
            answer = context[b0:b1].decode("utf-8", errors="replace")
        answers.append(answer)
        nbest.append(entries)
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
