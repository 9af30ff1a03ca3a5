"""Extractive question answering (SQuAD 1.1 / 2.0): features with byte
offsets and training labels; answer extraction (`extract_answers`,
`serve_answers`) in `bertzoo.tasks.qa.answers`.

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
window). Each window is `[CLS] question [SEP] window [SEP]`, padded; a
tokenizer with two separators between a pair's texts (`pair_separators`)
makes it `<s> question </s></s> window </s>`, as Hugging Face's RoBERTa and
XLM-R tokenizers build QA inputs (windows then hold one context token less).
The context is segment 1, or 0 for one-segment backbones (`pair_segment_id`:
RoBERTa, XLM-R and KLUE-RoBERTa have one segment row).

Offsets are byte offsets into the UTF-8 context, at the granularity of
`Tokenizer.tokenize_with_offsets`: every sub-token carries the span of the
basic token (WordPiece: word, punctuation character, CJK ideograph;
SentencePiece: whitespace-delimited word) it comes from, so an answer is
always a whole number of basic tokens.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from bertzoo.preprocessing import text_chunks

# Answer extraction lives in `bertzoo.tasks.qa.answers`; its names stay
# importable from here too.
from bertzoo.tasks.qa.answers import best_span_tf, extract_answers, serve_answers
from bertzoo.tokenizers.base import cut_texts, row_ids, text_cap, to_string_tensor

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


def _check_lengths(sequence_length, doc_stride, max_query_length, separators=1):
    sequence_length, doc_stride, max_query_length = (
        int(sequence_length),
        int(doc_stride),
        int(max_query_length),
    )
    if max_query_length < 0:
        raise ValueError(f"max_query_length must be >= 0, got {max_query_length}.")
    if sequence_length < max_query_length + 3 + separators:
        between = "[SEP]" if separators == 1 else f"{separators} separators"
        raise ValueError(
            f"sequence_length={sequence_length} leaves no room for context: it needs "
            f"[CLS] + {max_query_length} question tokens + {between} + at least one "
            f"context token + [SEP], i.e. sequence_length >= max_query_length + "
            f"{3 + separators}."
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


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """How an example is cut into windows: question tokens, context tokens,
    context tokens per window, step between window starts and window count;
    (B,) int64 per example, or (N, 1) per window (`of_windows`)."""

    qlen: tf.Tensor
    clen: tf.Tensor
    max_len: tf.Tensor
    step: tf.Tensor
    count: tf.Tensor

    def of_windows(self, example):
        """The sizes of every window's example, as (N, 1) columns."""
        values = (getattr(self, f.name) for f in dataclasses.fields(self))
        return _Sizes(*(tf.gather(x, example)[:, None] for x in values))


@dataclasses.dataclass(frozen=True)
class _Windows:
    """Every window of a batch: `example` (N,) the example it comes from,
    `number` (N, 1) its number among that example's windows, and `sizes`
    that example's `_Sizes`, per window."""

    example: tf.Tensor
    number: tf.Tensor
    sizes: _Sizes

    @property
    def start(self):
        """The window's first context token, among its example's."""
        return self.number * self.sizes.step

    @property
    def length(self):
        """The window's context tokens."""
        return tf.minimum(self.sizes.max_len, self.sizes.clen - self.start)


def _split_windows(qlen, clen, sequence_length, doc_stride, separators=1):
    """The windows of examples with `qlen` question and `clen` context tokens
    ((B,) int64 each), as the reference run_squad.py cuts them, with
    `separators` separators between question and context."""
    max_len = sequence_length - qlen - 2 - separators  # context tokens per window, >= 1
    step = tf.minimum(max_len, doc_stride)
    extra = tf.math.floordiv(clen - max_len + step - 1, step)  # ceil division
    n = tf.where(clen > max_len, 1 + extra, tf.ones_like(clen))  # windows per example
    splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(n)], 0)
    example = row_ids(splits)  # (N,) the example of every window
    number = tf.range(splits[-1]) - tf.gather(splits, example)
    sizes = _Sizes(qlen, clen, max_len, step, n)
    return _Windows(example, number[:, None], sizes.of_windows(example))


@dataclasses.dataclass(frozen=True)
class _Layout:
    """The dense (N, sequence_length) layout of the windows, [CLS] q [SEP]
    context [SEP] pad (`separators` [SEP]s after the question), from the
    column index and each window's question length, first context token and
    context length ((N, 1) each)."""

    col: tf.Tensor
    qlen: tf.Tensor
    start: tf.Tensor
    length: tf.Tensor
    separators: int = 1

    @property
    def ctx_begin(self):
        return self.qlen + 1 + self.separators

    @property
    def is_question(self):
        return (self.col >= 1) & (self.col <= self.qlen)

    @property
    def is_context(self):
        return (self.col >= self.ctx_begin) & (self.col < self.ctx_begin + self.length)

    @property
    def is_sep(self):
        between = (self.col > self.qlen) & (self.col < self.ctx_begin)
        return between | (self.col == self.ctx_begin + self.length)

    @property
    def is_real(self):
        return self.col <= self.ctx_begin + self.length

    @property
    def position(self):
        """Every column's index among its example's context tokens."""
        return self.start + self.col - self.ctx_begin


def _layout(windows, sequence_length, separators=1):
    col = tf.range(sequence_length, dtype=tf.int64)[None, :]
    return _Layout(col, windows.sizes.qlen, windows.start, windows.length, separators)


def _is_max_context(windows, layout):
    """(N, sequence_length) whether the window is the token's max-context
    window, on context tokens."""
    position = layout.position
    zeros = tf.zeros_like(position)
    s = windows.sizes
    columns = (x + zeros for x in (windows.number, s.step, s.max_len, s.clen, s.count))
    return layout.is_context & _max_context(position, *columns)


def _question_tokens(q_ids, windows, layout, max_query_length):
    """(N, sequence_length) the question token of every question column."""
    width = max(max_query_length, 1)
    questions_dense = tf.gather(q_ids.to_tensor(0, shape=[None, width]), windows.example)
    q_column = tf.clip_by_value(layout.col - 1, 0, width - 1) + tf.zeros_like(windows.number)
    return tf.cast(tf.gather(questions_dense, q_column, batch_dims=1), tf.int64)


def _context_gather(row_splits, windows, layout):
    """A function: flat per-context-token values (tokens, offsets) -> their
    (N, sequence_length) layout (0 outside the context)."""
    flat_index = tf.gather(row_splits, windows.example)[:, None] + tf.maximum(layout.position, 0)
    flat_index = tf.where(layout.is_context, flat_index, 0)

    def context_values(flat_values):
        # One extra element so that the masked gathers work on empty batches.
        flat_values = tf.concat([tf.cast(flat_values, tf.int64), tf.zeros([1], tf.int64)], 0)
        return tf.gather(flat_values, flat_index)

    return context_values


def _token_ids(tokenizer, layout, q_tokens, ctx_tokens):
    token_ids = tf.where(
        layout.is_question, q_tokens, tf.constant(tokenizer.pad_token_id, tf.int64)
    )
    token_ids = tf.where(layout.is_context, ctx_tokens, token_ids)
    token_ids = tf.where(layout.is_sep, tf.constant(tokenizer.sep_token_id, tf.int64), token_ids)
    token_ids = tf.where(layout.col == 0, tf.constant(tokenizer.cls_token_id, tf.int64), token_ids)
    return tf.cast(token_ids, tf.int32)


def _masked(mask, values, fill):
    return tf.cast(tf.where(mask, values, tf.constant(fill, tf.int64)), tf.int32)


def _string_batches(questions, contexts):
    """Both batches as 1-D tf.string tensors, checked to be of one size."""
    questions = tf.reshape(to_string_tensor(questions), [-1])
    contexts = tf.reshape(to_string_tensor(contexts), [-1])
    check = tf.debugging.assert_equal(
        tf.size(questions),
        tf.size(contexts),
        message="encode_qa needs as many questions as contexts",
    )
    with tf.control_dependencies([check]):
        questions = tf.identity(questions)
    return questions, contexts


@tf.autograph.experimental.do_not_convert
def encode_qa(
    tokenizer,
    questions,
    contexts,
    sequence_length=384,
    doc_stride=128,
    max_query_length=64,
    pair_segment_id=1,
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
        pair_segment_id: the context's segment id: 1, or 0 for backbones
            with one segment row (`bertzoo.preprocessing.segment_inputs`).

    The tokenizer's `pair_separators` [SEP]s go between question and
    context (2: RoBERTa's `<s> question </s></s> context </s>`).

    Returns a dict of dense int32 TensorFlow tensors over all N windows of
    the batch (N >= B; every example has at least one window):
        token_ids, segment_ids, padding_mask: (N, sequence_length) model
            inputs; segment 0 is [CLS] question [SEP], segment
            `pair_segment_id` the context tokens and the final [SEP].
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
    separators = tokenizer.pair_separators
    sequence_length, doc_stride, max_query_length = _check_lengths(
        sequence_length, doc_stride, max_query_length, separators
    )
    if pair_segment_id not in (0, 1) or isinstance(pair_segment_id, bool):
        raise ValueError(f"pair_segment_id must be 0 or 1, got {pair_segment_id!r}.")
    questions, contexts = _string_batches(questions, contexts)
    # Only max_query_length question tokens are kept: a longer question
    # costs no more than text_cap of that. Contexts are not cut (windows
    # slide over all of them); their cost is linear in their length.
    questions = cut_texts(questions, text_cap(max(max_query_length, 1)))
    q_ids = tokenizer.tokenize_ids(questions).with_row_splits_dtype(tf.int64)
    q_ids = q_ids[:, :max_query_length]
    c_ids, c_start, c_end = tokenizer.tokenize_with_offsets(contexts)
    c_ids = c_ids.with_row_splits_dtype(tf.int64)

    windows = _split_windows(
        q_ids.row_lengths(), c_ids.row_lengths(), sequence_length, doc_stride, separators
    )
    layout = _layout(windows, sequence_length, separators)
    context_values = _context_gather(c_ids.row_splits, windows, layout)
    q_tokens = _question_tokens(q_ids, windows, layout, max_query_length)
    is_context = layout.is_context
    return {
        "token_ids": _token_ids(tokenizer, layout, q_tokens, context_values(c_ids.flat_values)),
        "segment_ids": pair_segment_id
        * tf.cast(layout.is_real & (layout.col >= layout.ctx_begin), tf.int32),
        "padding_mask": tf.cast(layout.is_real, tf.int32),
        "example_index": tf.cast(windows.example, tf.int32),
        "context_mask": tf.cast(is_context, tf.int32),
        "context_position": _masked(is_context, layout.position, -1),
        "offset_start": _masked(is_context, context_values(c_start.flat_values), -1),
        "offset_end": _masked(is_context, context_values(c_end.flat_values), -1),
        "max_context": tf.cast(_is_max_context(windows, layout), tf.int32),
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
    pair_segment_id=1,
):
    """SQuAD-style examples -> numpy features with span labels.

    Args:
        tokenizer: a bertzoo tokenizer.
        examples: objects with `id`, `question`, `context` (str), `answers`
            (list of `(text, char_start)`, char_start counted in characters
            of `context`; dicts `{"text", "answer_start"}` work too) and
            `is_impossible`. Only the first answer is used.
        sequence_length, doc_stride, max_query_length: see `encode_qa`.
        chunk_size: examples encoded per `encode_qa` call (bounds memory,
            with at most `CHUNK_CHARS` characters of context per call).
        pair_segment_id: the context's segment id (see `encode_qa`).

    Returns a dict of numpy arrays over all windows: the `encode_qa` keys
    (example_index counts over all of `examples`), `start_positions` and
    `end_positions` (int32, (N,)) and `example_id` (object, (N,)). A window's
    labels are the first and last context tokens whose byte spans overlap
    the answer's, when both lie in the window; when the answer is not fully
    inside the window, or the question is impossible, both are 0 ([CLS]),
    as in the reference.
    """
    sequence_length, doc_stride, max_query_length = _check_lengths(
        sequence_length, doc_stride, max_query_length, tokenizer.pair_separators
    )
    examples = list(examples)
    chunk_size = max(1, int(chunk_size))
    parts = []
    rows = [(e.context,) for e in examples]
    for base, stop in text_chunks(rows, max(len(r[0]) for r in rows) if rows else 0, chunk_size):
        chunk = examples[base:stop]
        feats = encode_qa(
            tokenizer,
            [e.question for e in chunk],
            [e.context for e in chunk],
            sequence_length,
            doc_stride,
            max_query_length,
            pair_segment_id,
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


__all__ = [
    "FEATURE_KEYS",
    "answer_byte_span",
    "best_span_tf",
    "encode_qa",
    "extract_answers",
    "qa_training_features",
    "serve_answers",
]
