"""Extractive QA: token offsets, windowed features, span labels and answer
extraction (numpy and in-graph). Backend-independent: everything here is
TensorFlow ops or numpy."""

import collections
import random
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.tasks.qa.features import (
    FEATURE_KEYS,
    answer_byte_span,
    best_span_tf,
    encode_qa,
    extract_answers,
    qa_training_features,
    serve_answers,
)
from bertzoo.tokenizers import BertTokenizer, basic
from bertzoo.tokenizers.sentencepiece import SentencePieceTokenizer

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPIECE = Path(__file__).resolve().parents[2] / "fixtures" / "sentencepiece" / "spiece.model"
Example = collections.namedtuple("Example", "id question context answers is_impossible")

TEXTS = [
    "Hello, World! It's 3:45pm -- ok?",
    "Café naïve résumé Ångström Øresund façade coöperate",
    "이 원피스 정말 예뻐요. 한국어 문장을 토크나이즈합니다!",
    "北京是中国的首都。東京は日本の首都です。",
    "a\u200bb c\x00d e\x07f \ufeffg",  # control characters: deleted inside words
    "  multiple   spaces\t\ttabs\nnew\r\nlines\u00a0nbsp\u3000ideographic  ",
    "",
    "   ",
    "ΟΔΟΣ.Χ a.Σ ΣΑΣ ΣΟΦΟΣ σοφός",  # final sigma depends on letters across "."
    "İstanbul ıi ﬁne ① ＡＢＣ",
    "x\u1fefy e\u0301\u0301 !\u0301",  # VARIA turns into "`" under NFD
    "Zürich's café, 1,000 and 9, 10 -- ``quoted'' text.",
    "a\U0002ceafb",  # unassigned code point inside a CJK range ("hf" drops it)
]
MODES = {
    "uncased": dict(lowercase=True),
    "cased": dict(lowercase=False),
    "lower_keep_accents": dict(lowercase=True, strip_accents=False),
}


def char_vocabulary(texts, extra=()):
    """Specials, every character of the texts' basic tokens (in all modes)
    as a word start and a continuation, and a few whole words: unknown
    words split into several sub-tokens, which share their word's span."""
    chars = set()
    for lowercase, strip in [(True, None), (False, None), (True, False)]:
        for reference in basic.REFERENCES:
            tokenizer = basic.BasicTokenizer(lowercase, strip, reference)
            for text in texts:
                for word in tokenizer.tokenize(text):
                    chars.update(word)
    chars = sorted(chars)
    return list(dict.fromkeys(SPECIALS + list(extra) + chars + ["##" + c for c in chars]))


@pytest.fixture(scope="module")
def vocabulary():
    return char_vocabulary(TEXTS, extra=["hello", "world", "cafe", "##e", "the", "##s"])


def rows(ragged):
    return [list(map(int, r)) for r in ragged.to_list()]


def check_offsets(tokenizer, texts):
    """tokenize_with_offsets gives `tokenize_ids`' ids exactly, and every
    span, tokenized on its own, gives exactly its group of sub-tokens."""
    batch = tf.constant([t.encode("utf-8") if isinstance(t, str) else t for t in texts])
    ids, starts, ends = tokenizer.tokenize_with_offsets(batch)
    assert ids.dtype == tf.int32 and starts.dtype == tf.int64 and ends.dtype == tf.int64
    assert rows(ids) == rows(tokenizer.tokenize_ids(batch))
    raw = batch.numpy()
    prepared = tokenizer._offset_prepare(batch).numpy()
    spans, pieces, context_free = [], [], []
    for text, ready, row, s_row, e_row in zip(
        raw, prepared, rows(ids), rows(starts), rows(ends), strict=True
    ):
        assert text.startswith(ready[: len(text)]) or len(ready) == len(text)
        assert len(row) == len(s_row) == len(e_row)
        groups = []  # consecutive tokens with one span
        for token, s, e in zip(row, s_row, e_row):
            assert 0 <= s < e <= len(text)
            if groups and groups[-1][0] == (s, e):
                groups[-1][1].append(token)
            else:
                assert not groups or groups[-1][0][1] <= s  # ordered, disjoint
                groups.append(((s, e), [token]))
        for (s, e), group in groups:
            spans.append(text[s:e])
            pieces.append(group)
            # Lowercasing maps a capital sigma by its context, so those
            # spans are checked with the sigma as the whole text maps it.
            context_free.append(ready[s:e] == text[s:e])
            if not context_free[-1]:
                assert "\u03a3".encode() in text[s:e]
                spans[-1] = ready[s:e]
    if spans:
        again = rows(tokenizer.tokenize_ids(tf.constant(spans)))
        assert again == pieces
    return ids, starts, ends


@pytest.mark.parametrize("reference", ["google", "hf-python", "hf-fast"])
@pytest.mark.parametrize("mode", list(MODES))
def test_wordpiece_offsets_reproduce_ids(vocabulary, mode, reference):
    tokenizer = BertTokenizer(vocabulary, reference=reference, **MODES[mode])
    ids, starts, ends = check_offsets(tokenizer, TEXTS + [b"a\xffb c"])  # + invalid UTF-8

    # Basic-token granularity: punctuation and CJK ideographs are their own spans.
    def spans(i):
        return list(dict.fromkeys(zip(rows(starts)[i], rows(ends)[i])))

    assert spans(0)[:4] == [(0, 5), (5, 6), (7, 12), (12, 13)]  # Hello , World !
    assert spans(TEXTS.index("北京是中国的首都。東京は日本の首都です。"))[:3] == [
        (0, 3),
        (3, 6),
        (6, 9),
    ]


def test_wordpiece_offsets_random_strings(vocabulary):
    alphabet = list("aAbΣσΑΟİI.,;'`!- \t\n\u00a0\u200b\x00\x07\u0301\u1fef\u00a8中京\U0002ceaf가ßﬁ")
    rng = random.Random(0)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(400)]
    vocab = char_vocabulary(texts)
    for kw in MODES.values():
        check_offsets(BertTokenizer(vocab, **kw), texts)


def test_greek_final_sigma_across_punctuation(vocabulary):
    tokenizer = BertTokenizer(vocabulary)
    ids, _, _ = tokenizer.tokenize_with_offsets(tf.constant(["ΣΑΣ.Χ", "a.Σ"]))
    assert [tokenizer.detokenize(r) for r in rows(ids)] == [
        ["σ", "##α", "##σ", ".", "χ"],  # not final: a letter follows the "."
        ["a", ".", "ς"],  # final: a letter precedes the "."
    ]


@pytest.mark.parametrize(
    "settings",
    [dict(lowercase=True), dict(lowercase=False), dict(lowercase=True, strip_accents=False)],
)
def test_sentencepiece_offsets_reproduce_ids(settings):
    tokenizer = SentencePieceTokenizer(SPIECE, **settings)
    texts = TEXTS + ["1,000 and 9, 10", "a\x00b c", "x ¨y  ''z''"]
    ids, starts, ends = check_offsets(tokenizer, texts)
    # Whitespace-delimited words: "Hello," is one span.
    assert list(zip(rows(starts)[0], rows(ends)[0]))[0] == (0, 6)


def test_offsets_in_a_graph(vocabulary):
    tokenizer = BertTokenizer(vocabulary)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def graph(x):
        ids, s, e = tokenizer.tokenize_with_offsets(x)
        return ids.to_tensor(-1), s.to_tensor(-1), e.to_tensor(-1)

    eager = [t.to_tensor(-1).numpy() for t in tokenizer.tokenize_with_offsets(tf.constant(TEXTS))]
    for a, b in zip(graph(tf.constant(TEXTS)), eager, strict=True):
        np.testing.assert_array_equal(a.numpy(), b)
    ids, s, e = tokenizer.tokenize_with_offsets("Hello, World!")  # one string
    assert ids.shape.rank == 1 and s.numpy().tolist()[:2] == [0, 5]


# ---- features -----------------------------------------------------------


def reference_windows(num_tokens, max_len, stride):
    """run_squad.py's doc spans and `_check_is_max_context`, plainly."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_len)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, stride)
    spans = spans or [(0, 0)]
    flags = []
    for index, (start, length) in enumerate(spans):
        row = []
        for p in range(start, start + length):
            best, best_index = None, None
            for i, (s, n) in enumerate(spans):
                if s <= p <= s + n - 1:
                    score = min(p - s, s + n - 1 - p) + 0.01 * n
                    if best is None or score > best:
                        best, best_index = score, i
            row.append(int(best_index == index))
        flags.append(row)
    return spans, flags


def numpy_features(features):
    return {k: v.numpy() for k, v in features.items()}


@pytest.mark.parametrize("sequence_length,doc_stride", [(12, 1), (12, 3), (16, 4), (20, 128)])
def test_windows_positions_and_max_context(numbered_tokenizer, sequence_length, doc_stride):
    lengths = [0, 1, 5, 6, 7, 13, 40]
    questions = [
        "w2000 w2001",
        "",
        "w2000",
        "w2000 w2001 w2002 w2003 w2004 w2005",
        "w2000",
        "",
        "w2000 w2001",
    ]
    contexts = [" ".join(f"w{i}" for i in range(n)) for n in lengths]
    f = numpy_features(
        encode_qa(numbered_tokenizer, questions, contexts, sequence_length, doc_stride, 4)
    )
    assert set(f) == set(FEATURE_KEYS)
    num_windows = len(f["example_index"])
    for key in FEATURE_KEYS:
        assert f[key].dtype == np.int32
        assert f[key].shape == (
            (num_windows,) if key == "example_index" else (num_windows, sequence_length)
        )
    for e, (question, n) in enumerate(zip(questions, lengths)):
        q_ids = [5 + int(w[1:]) for w in question.split()][:4]
        max_len = sequence_length - len(q_ids) - 3
        spans, flags = reference_windows(n, max_len, doc_stride)
        windows = np.flatnonzero(f["example_index"] == e)
        assert len(windows) == len(spans)
        assert np.all(np.diff(windows) == 1)  # consecutive
        seen = []
        for w, (start, length), flag in zip(windows, spans, flags):
            ctx = list(range(start, start + length))
            seen += ctx
            head = [2] + q_ids + [3]
            layout = head + [5 + i for i in ctx] + [3]
            assert f["token_ids"][w].tolist() == layout + [0] * (sequence_length - len(layout))
            assert f["segment_ids"][w].tolist() == [0] * len(head) + [1] * (length + 1) + [0] * (
                sequence_length - len(layout)
            )
            assert f["padding_mask"][w].sum() == len(layout)
            mask = f["context_mask"][w] == 1
            assert np.flatnonzero(mask).tolist() == list(range(len(head), len(head) + length))
            assert f["context_position"][w][mask].tolist() == ctx
            assert f["max_context"][w][mask].tolist() == flag
            assert np.all(f["max_context"][w][~mask] == 0)
            for key in ("context_position", "offset_start", "offset_end"):
                assert np.all(f[key][w][~mask] == -1)
            text = contexts[e].encode()
            words = [
                text[s:t].decode()
                for s, t in zip(f["offset_start"][w][mask], f["offset_end"][w][mask])
            ]
            assert words == [f"w{i}" for i in ctx]
        assert sorted(set(seen)) == list(range(n))  # every context token appears


def test_long_context_stride_arithmetic(numbered_tokenizer):
    # 1000 tokens, 384 - 5 - 3 = 376 per window, stride 128: starts 0, 128,
    # ..., 640 (the last one ends at the end: 640 + 360 = 1000).
    context = " ".join(f"w{i}" for i in range(1000))
    question = " ".join(["w2999"] * 5)
    f = numpy_features(encode_qa(numbered_tokenizer, [question], [context]))
    assert len(f["example_index"]) == 6
    starts = [int(f["context_position"][w][7]) for w in range(6)]  # [CLS] q*5 [SEP] ...
    assert starts == [0, 128, 256, 384, 512, 640]
    assert (f["context_mask"].sum(axis=1)).tolist() == [376] * 5 + [360]
    assert f["context_position"][5].max() == 999
    # Each token has exactly one max-context window.
    owners = collections.Counter(
        int(p) for w in range(6) for p in f["context_position"][w][f["max_context"][w] == 1]
    )
    assert sorted(owners) == list(range(1000)) and set(owners.values()) == {1}


def test_encode_qa_graph_equals_eager_and_checks(numbered_tokenizer):
    spec = [tf.TensorSpec([None], tf.string)] * 2
    graph = tf.function(
        lambda q, c: encode_qa(numbered_tokenizer, q, c, 16, 3, 4), input_signature=spec
    )
    questions, contexts = ["w1 w2", "w3"], ["w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15", ""]
    eager = numpy_features(encode_qa(numbered_tokenizer, questions, contexts, 16, 3, 4))
    traced = numpy_features(graph(tf.constant(questions), tf.constant(contexts)))
    for key in eager:
        np.testing.assert_array_equal(eager[key], traced[key])
    with pytest.raises(ValueError, match="no room"):
        encode_qa(numbered_tokenizer, ["a"], ["b"], sequence_length=10, max_query_length=7)
    with pytest.raises(ValueError, match="doc_stride"):
        encode_qa(numbered_tokenizer, ["a"], ["b"], doc_stride=0)
    with pytest.raises(tf.errors.InvalidArgumentError):
        encode_qa(numbered_tokenizer, ["a", "b"], ["c"])


# ---- training labels ------------------------------------------------------

ENGLISH = (
    "The Eiffel Tower, built in 1889 by Gustave Eiffel's company, stands in Paris. "
    "Zürich is the largest city in Switzerland; its café culture is famous. "
    "The tower was the tallest man-made structure for 41 years."
)
KOREAN = "서울은 대한민국의 수도입니다. 한강이 도시를 가로질러 흐릅니다."
ACCENTS = "Crème brûlée and naïve façades: Ångström visited São Paulo."


@pytest.fixture(scope="module")
def qa_tokenizers():
    texts = [ENGLISH, KOREAN, ACCENTS, "Who built it?", "Where?"]
    vocab = char_vocabulary(texts, extra=["the", "tower", "eiffel", "##s", "zurich", "cafe"])
    return {
        "uncased": BertTokenizer(vocab),
        "cased_keep": BertTokenizer(vocab, lowercase=False),
        "sentencepiece": SentencePieceTokenizer(SPIECE),
    }


def example(i, context, answer, question="Where?", impossible=False):
    if impossible:
        return Example(str(i), question, context, [], True)
    start = context.index(answer)
    return Example(str(i), question, context, [(answer, start)], False)


def labelled_spans(f, examples):
    """(window, labelled byte span or None) for every window."""
    out = []
    for w in range(len(f["example_index"])):
        s, t = f["start_positions"][w], f["end_positions"][w]
        out.append(
            (w, None if s == 0 else (int(f["offset_start"][w, s]), int(f["offset_end"][w, t])))
        )
        if s:
            assert f["context_mask"][w, s] == 1 and f["context_mask"][w, t] == 1 and t >= s
        else:
            assert t == 0
    return out


@pytest.mark.parametrize("name", ["uncased", "cased_keep", "sentencepiece"])
def test_labels_recover_answers(qa_tokenizers, name):
    tokenizer = qa_tokenizers[name]
    answers = [  # (context, answer, whether it is whole basic tokens)
        (ENGLISH, "Gustave Eiffel", True),
        (ENGLISH, "1889", True),
        (ENGLISH, "café culture", True),
        (ENGLISH, "41 years", True),
        (ENGLISH, "Tower", False),  # "Tower," is two basic tokens, but SentencePiece's one word
        (KOREAN, "대한민국의", True),
        (KOREAN, "한강", False),  # inside the word "한강이"
        (KOREAN, "수도", False),  # inside "수도입니다"
        (ACCENTS, "naïve façades", True),
        (ACCENTS, "São Paulo", True),
    ]
    examples = [example(i, c, a) for i, (c, a, _) in enumerate(answers)]
    f = qa_training_features(
        tokenizer, examples, sequence_length=48, doc_stride=16, max_query_length=8, chunk_size=3
    )
    assert f["example_id"].tolist() == [examples[e].id for e in f["example_index"]]
    labelled = collections.Counter()
    for w, span in labelled_spans(f, examples):
        ex = examples[f["example_index"][w]]
        text, char_start = ex.answers[0]
        a0, a1 = answer_byte_span(ex.context, text, char_start)
        context = ex.context.encode("utf-8")
        if span is None:
            continue
        labelled[f["example_index"][w]] += 1
        s, t = f["start_positions"][w], f["end_positions"][w]
        # The labelled bytes hold the answer and reach at most into the
        # basic tokens (words) where it starts and ends.
        assert text.encode() in context[span[0] : span[1]]
        assert f["offset_start"][w, s] <= a0 < f["offset_end"][w, s]
        assert f["offset_start"][w, t] < a1 <= f["offset_end"][w, t]
    assert set(labelled) == set(range(len(examples)))  # every answer is labelled somewhere
    if name != "sentencepiece":  # answers made of whole basic tokens come back exactly
        for w, span in labelled_spans(f, examples):
            e = f["example_index"][w]
            if span is not None and answers[e][2]:
                got = examples[e].context.encode()[span[0] : span[1]].decode()
                assert got == examples[e].answers[0][0]


def test_byte_offsets_for_korean_and_accents():
    context = "Ångström, 서울 café"
    assert answer_byte_span(context, "서울", context.index("서울")) == (12, 18)
    assert context.encode()[12:18].decode() == "서울"
    assert answer_byte_span(context, "café", context.index("café")) == (19, 24)


def test_impossible_and_out_of_window_are_cls(qa_tokenizers):
    tokenizer = qa_tokenizers["uncased"]
    examples = [
        example(0, ENGLISH, None, impossible=True),
        example(1, ENGLISH, "41 years"),  # at the very end
        example(2, ENGLISH, "The Eiffel Tower"),  # at the very start
    ]
    f = qa_training_features(
        tokenizer, examples, sequence_length=32, doc_stride=8, max_query_length=4
    )
    first = f["example_index"] == 0
    assert first.sum() > 3
    assert np.all(f["start_positions"][first] == 0) and np.all(f["end_positions"][first] == 0)
    for e, where in [(1, "end"), (2, "start")]:
        windows = np.flatnonzero(f["example_index"] == e)
        hit = f["start_positions"][windows] > 0
        # Only windows that reach that end of the context hold the answer.
        assert hit.any() and not hit.all()
        ends = f["context_position"][windows].max(axis=1)
        starts = np.where(
            f["context_mask"][windows] == 1, f["context_position"][windows], 10**6
        ).min(axis=1)
        if where == "end":
            assert np.all(ends[hit] == ends.max())
        else:
            assert np.all(starts[hit] == 0)
    # An answer cut by the window edge is not inside: labels 0.
    start = int(np.flatnonzero(f["example_index"] == 1)[0])
    assert f["start_positions"][start] == 0


def test_empty_examples(qa_tokenizers):
    f = qa_training_features(qa_tokenizers["uncased"], [], sequence_length=16, max_query_length=4)
    assert f["token_ids"].shape == (0, 16) and f["start_positions"].shape == (0,)


# ---- answer extraction ----------------------------------------------------


@pytest.fixture
def ten_words(numbered_tokenizer):
    """One example: question "w2000", context w0 .. w9 (one token each, at
    positions 3..12 of a 16-token window)."""
    context = " ".join(f"w{i}" for i in range(10))
    f = numpy_features(encode_qa(numbered_tokenizer, ["w2000"], [context], 16, 8, 4))
    assert len(f["example_index"]) == 1 and f["context_position"][0, 3] == 0
    return f, context


def logits(peaks, seq=16):
    out = np.full(seq, -10.0, np.float32)
    for position, value in peaks.items():
        out[position] = value
    return out[None, :]


def test_extract_answers_hand_built(ten_words):
    f, context = ten_words
    pos = lambda word: 3 + word  # noqa: E731  (token position of w<word>)
    # The best pair: w2 .. w4.
    answers, nbest = extract_answers(logits({pos(2): 5}), logits({pos(4): 5}), f, [context])
    assert answers == ["w2 w3 w4"]
    assert nbest[0][0]["text"] == "w2 w3 w4" and nbest[0][0]["score"] == 10.0
    assert (nbest[0][0]["start_offset"], nbest[0][0]["end_offset"]) == (6, 14)
    assert len({e["text"] for e in nbest[0]}) == len(nbest[0]) <= 20
    # Too long (w1 .. w8 is 8 tokens): the next best pair wins.
    start, end = logits({pos(1): 5, pos(6): 4}), logits({pos(8): 5, pos(7): 2})
    assert extract_answers(start, end, f, [context], max_answer_length=8)[0] == [
        "w1 w2 w3 w4 w5 w6 w7 w8"
    ]
    assert extract_answers(start, end, f, [context], max_answer_length=7)[0] == ["w6 w7 w8"]
    assert extract_answers(start, end, f, [context], max_answer_length=2)[0] == ["w6 w7"]
    # End before start is rejected.
    start, end = logits({pos(7): 9, pos(3): 1}), logits({pos(2): 9, pos(5): 2})
    assert extract_answers(start, end, f, [context])[0] == ["w3 w4 w5"]
    # Question tokens, [CLS], [SEP] and padding are never answers.
    start, end = (
        logits({1: 20, 0: 20, 2: 20, 14: 20, pos(0): 1}),
        logits({1: 20, 15: 20, pos(1): 1}),
    )
    assert extract_answers(start, end, f, [context])[0] == ["w0 w1"]
    # Nothing valid at all (n_best_size 1 keeps only the question token).
    assert extract_answers(start, end, f, [context], n_best_size=1) == ([""], [[]])


def test_extract_answers_version_2_threshold(ten_words):
    f, context = ten_words
    start, end = logits({0: 3, 5: 2}), logits({0: 3, 6: 2})  # null 6, best span 4
    kwargs = dict(features=f, contexts=[context], version_2=True)
    assert extract_answers(start, end, **kwargs)[0] == [""]  # 6 - 4 > 0
    assert extract_answers(start, end, null_score_diff_threshold=1.9, **kwargs)[0] == [""]
    assert extract_answers(start, end, null_score_diff_threshold=2.0, **kwargs)[0] == ["w2 w3"]
    assert extract_answers(start, end, f, [context])[0] == ["w2 w3"]  # version 1 ignores null
    nbest = extract_answers(start, end, **kwargs)[1][0]
    assert nbest[0]["text"] == "" and nbest[0]["score"] == 6.0 and nbest[0]["start_offset"] == -1
    assert nbest[1]["text"] == "w2 w3"


def random_features(tokenizer, seed):
    rng = np.random.default_rng(seed)
    lengths = [0, 3, 9, 17, 30, 45]
    contexts = [" ".join(f"w{i}" for i in rng.integers(0, 2000, n)) for n in lengths]
    questions = ["w2001 w2002", "w2003", "", "w2004 w2005 w2006", "w2007", "w2008"]
    features = encode_qa(tokenizer, questions, contexts, 24, 5, 4)
    shape = features["token_ids"].shape
    start = rng.normal(size=shape).astype(np.float32)
    end = rng.normal(size=shape).astype(np.float32)
    return features, contexts, start, end


@pytest.mark.parametrize("version_2", [False, True])
def test_graph_answers_agree_with_numpy(numbered_tokenizer, version_2):
    checked = 0
    for seed in range(4):
        features, contexts, start, end = random_features(numbered_tokenizer, seed)
        f = numpy_features(features)
        for n_best, max_len in [(20, 30), (3, 4), (None, 2), (8, 1)]:
            for threshold in [-1.0, 0.0, 1.5] if version_2 else [0.0]:
                kwargs = dict(
                    max_answer_length=max_len,
                    version_2=version_2,
                    null_score_diff_threshold=threshold,
                )
                got = serve_answers(
                    features, start, end, tf.constant(contexts), n_best_size=n_best, **kwargs
                )
                answers, nbest = extract_answers(
                    start, end, f, contexts, n_best_size=n_best or 24, **kwargs
                )
                assert [a.decode() for a in got["answers"].numpy().tolist()] == answers
                for i, answer in enumerate(answers):
                    s, e = got["start_offsets"][i].numpy(), got["end_offsets"][i].numpy()
                    if answer:
                        assert contexts[i].encode()[s:e].decode() == answer
                        best = next(x for x in nbest[i] if x["text"])
                        assert (s, e) == (best["start_offset"], best["end_offset"])
                        assert np.isclose(got["scores"][i].numpy(), best["score"], atol=1e-5)
                        checked += 1
                    else:
                        assert s == e == -1
    assert checked > 20


def test_best_span_tf_band(numbered_tokenizer):
    start = np.array([[0, 1, 9, 2, 0, 0], [0, 0, 0, 0, 0, 0]], np.float32)
    end = np.array([[0, 8, 0, 3, 7, 0], [0, 0, 0, 0, 0, 0]], np.float32)
    mask = np.array([[0, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]], np.int32)
    score, s, e = (t.numpy().tolist() for t in best_span_tf(start, end, mask, max_answer_length=3))
    assert (score[0], s[0], e[0]) == (16.0, 2, 4)  # (2, 4): 9 + 7; (1, 1) 9 < 16; (2, 1) invalid
    assert (score[1], s[1], e[1]) == (-np.inf, -1, -1)  # no context tokens
    score, s, e = (t.numpy().tolist() for t in best_span_tf(start, end, mask, max_answer_length=2))
    assert (score[0], s[0], e[0]) == (12.0, 2, 3)
    maxctx = np.array([[0, 1, 0, 1, 1, 0]] * 2, np.int32)
    score, s, e = (
        t.numpy().tolist() for t in best_span_tf(start, end, mask, 3, max_context=maxctx)
    )
    assert (score[0], s[0], e[0]) == (9.0, 1, 1)


def test_serving_graph_from_strings(numbered_tokenizer):
    """Strings in, answers out, in one traced function (a stand-in model that
    scores the tokens w7 as start and w9 as end)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    def serve(questions, contexts):
        features = encode_qa(numbered_tokenizer, questions, contexts, 16, 4, 4)
        ids = features["token_ids"]
        start = tf.cast(tf.equal(ids, 5 + 7), tf.float32) * 5.0
        end = tf.cast(tf.equal(ids, 5 + 9), tf.float32) * 5.0
        # A window without w7/w9 scores 0 everywhere: null wins at threshold -0.5.
        return serve_answers(
            features, start, end, contexts, version_2=True, null_score_diff_threshold=-0.5
        )

    contexts = ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15", "w1 w2 w3", "w7 w8 w9"]
    got = serve(tf.constant(["w2000", "w2000", "w2000 w2001"]), tf.constant(contexts))
    assert got["answers"].numpy().tolist() == [b"w7 w8 w9", b"", b"w7 w8 w9"]
    assert got["start_offsets"].numpy().tolist() == [18, -1, 0]
    assert got["end_offsets"].numpy().tolist() == [26, -1, 8]


def test_unicode_answers_end_to_end(qa_tokenizers):
    tokenizer = qa_tokenizers["cased_keep"]
    for answer, expected in [("도시를", "도시를"), ("한강", "한강이")]:  # basic-token granularity
        ex = example(0, KOREAN, answer)
        f = qa_training_features(tokenizer, [ex], sequence_length=64, max_query_length=4)
        seq = f["token_ids"].shape[1]
        start = np.eye(seq, dtype=np.float32)[f["start_positions"]] * 10
        end = np.eye(seq, dtype=np.float32)[f["end_positions"]] * 10
        assert extract_answers(start, end, f, [KOREAN])[0] == [expected]
        got = serve_answers(f, start, end, tf.constant([KOREAN]))
        assert got["answers"].numpy()[0].decode() == expected
