"""Extractive QA in numpy and plain Python: a question and a context's
tokens -> windows, and windows' logits -> answers, as the reference
run_squad.py cuts and picks them.

This module imports nothing but numpy (and nothing of bertzoo): bertzoo's
evaluation extracts answers with it (`extract_answers`, re-exported by
`bertzoo.tasks.qa.answers`), and an ONNX or LiteRT export of a QA model
ships it beside its `run.py` (as `qa_spans.py`), which answers questions
with it. bertzoo's own windows are TensorFlow ops (`encode_qa`, so they run
inside the SavedModel); `encode_windows` here builds the same features,
and tests hold the two to each other.
"""

import dataclasses

import numpy as np

WINDOW_KEYS = ("example_index", "context_mask", "offset_start", "offset_end", "max_context")


# === Windows ===


def window_spans(question_length, context_length, sequence_length, doc_stride, separators=1):
    """`(start, length)` of each window over a context of `context_length`
    tokens: `sequence_length - question_length - 2 - separators` context
    tokens per window, each starting `min(doc_stride, that)` after the
    previous one, the last one ending at the context's end (an empty
    context still gets one window)."""
    size = sequence_length - question_length - 2 - separators
    step = min(size, doc_stride)
    count = 1 if context_length <= size else 1 + -(-(context_length - size) // step)
    return [(j * step, min(size, context_length - j * step)) for j in range(count)]


def is_max_context(spans, window, position):
    """Whether `window` is the max-context window of context token
    `position` (the reference's `_check_is_max_context`: the window with
    the highest min(left, right) + 0.01 x length, the first on ties; here
    100 x that, in integers)."""
    best, best_score = None, None
    for index, (start, length) in enumerate(spans):
        if not start <= position < start + length:
            continue
        score = 100 * min(position - start, start + length - 1 - position) + length
        if best_score is None or score > best_score:
            best, best_score = index, score
    return best == window


# encode_qa's features: per window (N,), and per column (N, sequence_length)
# with 0 or -1 outside what they describe.
_ZERO_KEYS = ("token_ids", "segment_ids", "padding_mask", "context_mask", "max_context")
_MINUS_ONE_KEYS = ("context_position", "offset_start", "offset_end")


def _window_row(question, tokens, starts, ends, spans, window, sequence_length, ids, layout):
    """One window's columns: [CLS] question [SEP] context [SEP] padding."""
    separators, pair_segment_id = layout
    row = {k: np.zeros(sequence_length, np.int64) for k in _ZERO_KEYS}
    row.update({k: np.full(sequence_length, -1, np.int64) for k in _MINUS_ONE_KEYS})
    start, length = spans[window]
    begin = len(question) + 1 + separators  # the first context column
    end = begin + length
    positions = np.arange(start, start + length)
    row["token_ids"][:] = ids["pad"]
    row["token_ids"][:begin] = [ids["cls"], *question] + [ids["sep"]] * separators
    row["token_ids"][begin:end] = np.asarray(tokens, np.int64)[positions]
    row["token_ids"][end] = ids["sep"]
    row["padding_mask"][: end + 1] = 1
    row["segment_ids"][begin : end + 1] = pair_segment_id
    row["context_mask"][begin:end] = 1
    row["max_context"][begin:end] = [is_max_context(spans, window, p) for p in positions]
    row["context_position"][begin:end] = positions
    row["offset_start"][begin:end] = np.asarray(starts, np.int64)[positions]
    row["offset_end"][begin:end] = np.asarray(ends, np.int64)[positions]
    return row


def encode_windows(examples, sequence_length, doc_stride, max_query_length, ids, **layout):
    """The windows of tokenized examples, laid out as
    `bertzoo.tasks.qa.features.encode_qa` lays them out: a dict of int32
    (N, sequence_length) arrays (token_ids, segment_ids, padding_mask,
    context_mask, context_position, offset_start, offset_end, max_context)
    and example_index (N,).

    `examples`: `(question_ids, context_ids, context_starts, context_ends)`
    per example (the question's tokens, cut to `max_query_length` here; the
    context's tokens with their [start, end) byte spans); `ids`: the
    "cls", "sep" and "pad" token ids; `layout`: `separators` between
    question and context (default 1) and the context's `pair_segment_id`
    (default 1)."""
    layout = (layout.get("separators", 1), layout.get("pair_segment_id", 1))
    rows, example_index = [], []
    for example, (question, tokens, starts, ends) in enumerate(examples):
        question = list(question)[:max_query_length]
        spans = window_spans(len(question), len(tokens), sequence_length, doc_stride, layout[0])
        for window in range(len(spans)):
            rows.append(
                _window_row(
                    question, tokens, starts, ends, spans, window, sequence_length, ids, layout
                )
            )
            example_index.append(example)
    out = {
        k: np.stack([r[k] for r in rows]).astype(np.int32)
        if rows
        else np.zeros((0, sequence_length), np.int32)
        for k in _ZERO_KEYS + _MINUS_ONE_KEYS
    }
    out["example_index"] = np.asarray(example_index, np.int32)
    return out


# === Answers ===


@dataclasses.dataclass(frozen=True)
class _Scored:
    """Windows with their logits (float64 numpy, (N, seq)) and the features
    extraction reads (numpy, `WINDOW_KEYS`).

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
    """The best span: {text, start_offset, end_offset (bytes), score (the
    best span's, -inf without one)}; text "" and offsets -1 with no span,
    or when the null candidate (version 2) beats it by more than the
    threshold."""
    best = next((c for c in candidates if c[3] >= 0), None)
    answer = {"text": "", "start_offset": -1, "end_offset": -1, "score": float("-inf")}
    if best is None:
        return answer
    answer["score"] = float(best[0])
    if null is not None and null[0] - best[0] > null_score_diff_threshold:
        return answer
    b0, b1 = scored.offsets(best)
    text = context[b0:b1].decode("utf-8", errors="replace")
    return {**answer, "text": text, "start_offset": b0, "end_offset": b1}


def _context_bytes(context):
    if isinstance(context, bytes):
        return context
    if hasattr(context, "numpy"):
        return context.numpy()
    return str(context).encode("utf-8")


def answer_spans(
    start_logits,
    end_logits,
    features,
    contexts,
    n_best_size=20,
    max_answer_length=30,
    version_2=False,
    null_score_diff_threshold=0.0,
):
    """`(best, nbest)` per example: the best answer (see `_best_answer`)
    and up to `n_best_size` distinct answers, best first (see
    `extract_answers`, which documents the rule)."""
    start_logits = np.asarray(start_logits, np.float64)
    scored = _Scored(
        start=start_logits,
        end=np.asarray(end_logits, np.float64),
        features={k: np.asarray(features[k]) for k in WINDOW_KEYS},
    )
    contexts = [_context_bytes(c) for c in contexts]
    seq = start_logits.shape[1] if start_logits.ndim == 2 else 0
    k = min(int(n_best_size), seq)
    out = []
    for context, windows in zip(contexts, scored.by_example(len(contexts))):
        candidates = [c for w in windows for c in scored.candidates(w, k, max_answer_length)]
        null = scored.null(windows) if version_2 else None
        if null is not None:
            candidates.append(null)
        candidates.sort(key=lambda c: -c[0])  # stable: window, then rank order
        best = _best_answer(candidates, context, scored, null, null_score_diff_threshold)
        out.append((best, _nbest(candidates, context, scored, n_best_size)))
    return out


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
        features: the dict of `encode_qa` / `qa_training_features` /
            `encode_windows` (uses example_index, context_mask,
            offset_start, offset_end, max_context).
        contexts: the examples' contexts (str or UTF-8 bytes), in order.

    Returns `(answers, nbest)`: `answers[i]` the answer of example i;
    `nbest[i]` up to `n_best_size` distinct answers, best first, as dicts
    {text, score, start_logit, end_logit, start_offset, end_offset} (byte
    offsets; the null answer of version 2, "", has offsets -1).
    """
    found = answer_spans(
        start_logits,
        end_logits,
        features,
        contexts,
        n_best_size,
        max_answer_length,
        version_2,
        null_score_diff_threshold,
    )
    return [best["text"] for best, _ in found], [nbest for _, nbest in found]


# === Strings in, answers out ===


def answer_questions(tokenizer, logits, questions, contexts, sequence_length, **settings):
    """Questions and their contexts (str) -> {"answer": [str], "start",
    "end": character offsets of the answer in its context (-1: none),
    "score": the best span's score}, as bertzoo's serving model answers
    (`bertzoo.tasks.qa.QuestionAnswering.serve`, in byte offsets).

    `tokenizer`: `tokenize(text)` -> ids, `tokenize_with_offsets(text)` ->
    (ids, byte starts, byte ends), `ids` {"cls", "sep", "pad"}; `logits`:
    the model, `encode_windows`' features -> {"start_logits",
    "end_logits"} (N, S). `settings`: doc_stride, max_query_length,
    max_answer_length, null_score_diff_threshold, version_2, separators,
    pair_segment_id."""
    cap = 64 * max(settings["max_query_length"], 1)  # bertzoo's cut (text_cap)
    examples = [
        (tokenizer.tokenize(q[:cap]), *tokenizer.tokenize_with_offsets(c))
        for q, c in zip(questions, contexts)
    ]
    features = encode_windows(
        examples,
        sequence_length,
        settings["doc_stride"],
        settings["max_query_length"],
        tokenizer.ids,
        separators=settings["separators"],
        pair_segment_id=settings["pair_segment_id"],
    )
    out = logits(features)
    raw = [c.encode("utf-8") for c in contexts]
    found = answer_spans(
        out["start_logits"],
        out["end_logits"],
        features,
        raw,
        max_answer_length=settings["max_answer_length"],
        version_2=settings["version_2"],
        null_score_diff_threshold=settings["null_score_diff_threshold"],
    )
    answers = {"answer": [], "start": [], "end": [], "score": []}
    for context, (best, _) in zip(raw, found):
        b0 = best["start_offset"]
        start = len(context[:b0].decode("utf-8")) if b0 >= 0 else -1
        answers["answer"].append(best["text"])
        answers["start"].append(start)
        answers["end"].append(start + len(best["text"]) if b0 >= 0 else -1)
        answers["score"].append(best["score"])
    return {k: v if k == "answer" else np.asarray(v) for k, v in answers.items()}
