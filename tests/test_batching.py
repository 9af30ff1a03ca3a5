"""Length-aware batching (bertzoo.batching): bucket lengths, epoch plans,
resumable streams, and predictions that agree with fixed padding on messy
real-world text.

Tolerances: trimming padding changes only the length of the sums in the
attention and matmul kernels, so float32 outputs on the real tokens agree
with fixed padding to 2e-5 absolute (observed: about 1e-7)."""

import keras
import numpy as np
import pytest

from bertzoo import batching
from tests.conftest import tiny_backbone

# Short, messy and very long texts: mixed scripts, mojibake, emoji, stray
# and unassigned code points, URLs, control characters, empty.
MESSY = [
    "ok",
    "",
    "Ethical subroutines \u0381 engaged 🤖🤖",
    "Ã©tÃ© trÃ¨s chaud â€” wasn't it?",
    "한국어 문장과 English words 섞어서 씁니다.",
    "東京で会いましょう！🍣",
    "check https://example.com/a?b=c&d=e#frag now!!!",
    "zero\u200bwidth\u00adsoft hyphen and \ufeffBOM",
    "tab\tand\nnewline \x07 bell",
    "😂" * 40,
    "a " * 300,
    "the quick brown fox jumps over the lazy dog " * 6,
    "RT @user: lol that's sooo true #blessed 🙏🏽",
    "Привет, как дела? Всё хорошо.",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
]


@pytest.mark.backend_independent  # numpy and tf.data: no model
def test_bucket_lengths_are_few_and_capped():
    assert batching.bucket_lengths(128) == [8, 12, 16, 24, 32, 48, 64, 96, 128]
    assert batching.bucket_lengths(256)[-3:] == [128, 192, 256]
    assert len(batching.bucket_lengths(512)) == 13
    assert batching.bucket_lengths(100) == [8, 12, 16, 24, 32, 48, 64, 96, 100]
    assert batching.bucket_lengths(5) == [5]
    lengths = np.arange(1, 129)
    padded = batching.bucket_length(lengths, 128)
    assert (padded >= lengths).all() and padded.max() == 128
    # Less than 1.5x the longest sequence (8 for the shortest ones).
    assert (padded < np.maximum(8.5, lengths * 1.5)).all()
    assert batching.bucket_length(300, 128) == 128


def _lengths(n=1000, seed=0, maximum=128):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(3.3, 0.6, n).astype(int), 3, maximum)


@pytest.mark.backend_independent
@pytest.mark.parametrize("mode", batching.BATCHING_MODES)
def test_training_plan_is_full_batches_of_distinct_rows(mode):
    lengths = _lengths(1003)
    plan = batching.training_plan(lengths, 32, seed=5, sequence_length=128, mode=mode)
    assert len(plan) == 1003 // 32
    rows = np.concatenate([r for r, _ in plan])
    assert len(rows) == 31 * 32 and len(set(rows.tolist())) == len(rows)
    for r, length in plan:
        assert len(r) == 32
        if mode == "fixed":
            assert length == 128
        else:
            assert length == batching.bucket_length(int(lengths[r].max()), 128)
    again = batching.training_plan(lengths, 32, seed=5, sequence_length=128, mode=mode)
    assert all((a == b).all() and la == lb for (a, la), (b, lb) in zip(plan, again))
    other = batching.training_plan(lengths, 32, seed=6, sequence_length=128, mode=mode)
    assert any((a != b).any() for (a, _), (b, _) in zip(plan, other))


@pytest.mark.backend_independent
def test_modes_share_rows_and_buckets_cut_padding():
    lengths = _lengths(2000)
    plans = {
        m: batching.training_plan(lengths, 32, seed=1, sequence_length=128, mode=m)
        for m in batching.BATCHING_MODES
    }
    # "padded" is "fixed" with each batch cut to its bucket: the same batches.
    assert all(
        (a == b).all() for (a, _), (b, _) in zip(plans["padded"], plans["fixed"], strict=True)
    )
    # "buckets" uses the same examples, regrouped.
    assert sorted(np.concatenate([r for r, _ in plans["buckets"]]).tolist()) == sorted(
        np.concatenate([r for r, _ in plans["fixed"]]).tolist()
    )
    tokens = {m: sum(len(r) * n for r, n in p) for m, p in plans.items()}
    real = sum(int(lengths[r].sum()) for r, _ in plans["fixed"])
    assert tokens["buckets"] < tokens["padded"] < tokens["fixed"]
    assert tokens["buckets"] < 1.5 * real  # fixed padding: about 4x here
    # Only the batches at a bucket boundary mix buckets.
    buckets = batching.bucket_length(lengths, 128)
    mixed = sum(len(set(buckets[r].tolist())) > 1 for r, _ in plans["buckets"])
    assert mixed <= len(batching.bucket_lengths(128)) - 1


def _stream(ds):
    return [keras.tree.map_structure(np.asarray, b) for b in ds.as_numpy_iterator()]


@pytest.mark.backend_independent
def test_training_dataset_trims_and_resumes_exactly():
    n, seq = 70, 32
    lengths = _lengths(n, maximum=seq)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype("int32")
    features = {
        "token_ids": (np.arange(n * seq).reshape(n, seq) % 97 + 1) * mask,
        "padding_mask": mask,
    }
    labels = np.where(mask == 1, np.arange(n)[:, None], -100)  # per token, trimmed too
    ds = batching.training_dataset(features, labels, 8, seed=3, sequence_length=seq, epochs=3)
    full = _stream(ds)
    assert len(full) == 3 * (n // 8) == int(ds.cardinality())  # known up front
    for x, y in full:
        width = x["token_ids"].shape[1]
        assert width in batching.bucket_lengths(seq) and y.shape == (8, width)
        assert (x["padding_mask"].sum(1) <= width).all()
        rows = y[:, 0]  # which example each row is
        np.testing.assert_array_equal(x["token_ids"], features["token_ids"][rows, :width])
    for start in (1, 8, 9, 20):
        resumed = batching.training_dataset(
            features, labels, 8, seed=3, sequence_length=seq, epochs=3, start_batch=start
        )
        tail = _stream(resumed)
        assert len(tail) == len(full) - start == int(resumed.cardinality())
        for (xa, ya), (xb, yb) in zip(tail, full[start:]):
            np.testing.assert_array_equal(ya, yb)
            np.testing.assert_array_equal(xa["token_ids"], xb["token_ids"])
    with pytest.raises(ValueError, match="no full batch"):
        batching.training_dataset(features, labels, 100, seed=0, sequence_length=seq)


@pytest.mark.backend_independent
def test_trim_to_bucket_in_graph_matches_numpy():
    import tensorflow as tf

    mask = np.zeros((4, 128), "int32")
    for i, n in enumerate([3, 40, 17, 9]):
        mask[i, :n] = 1
    features = {"token_ids": mask * 5, "padding_mask": mask, "other": np.ones((4, 2))}
    out = tf.function(lambda f: batching.trim_to_bucket(f, 128))(features)
    assert out["token_ids"].shape == (4, 48) and out["other"].shape == (4, 2)
    np.testing.assert_array_equal(out["padding_mask"], mask[:, :48])


def _packed(minilm_dir, texts, sequence_length=128):
    from bertzoo.preprocessing import BertPreprocessor

    pre = BertPreprocessor.from_preset(minilm_dir, sequence_length=sequence_length)
    return {k: keras.ops.convert_to_numpy(v) for k, v in pre(texts).items()}


@pytest.mark.slow
def test_task_predictions_match_fixed_padding_on_messy_text(minilm_dir):
    import bertzoo

    features = _packed(minilm_dir, MESSY * 3)
    lengths = batching.sequence_lengths(features)
    assert lengths.min() <= 3 and lengths.max() == 128  # very short and cut long ones
    real = features["padding_mask"].astype(bool)
    for model in (
        bertzoo.BertClassifier.from_preset(minilm_dir, num_classes=3),
        bertzoo.BertTokenClassifier.from_preset(minilm_dir, num_labels=5),
        bertzoo.BertSpanQA.from_preset(minilm_dir),
    ):
        fast = model.predict(features, batch_size=8)
        fixed = keras.Model.predict(model, features, batch_size=8, verbose=0)
        for a, b in zip(keras.tree.flatten(fast), keras.tree.flatten(fixed)):
            assert a.shape == b.shape
            if model.per_token_outputs:  # the real positions (padding is not scored)
                np.testing.assert_allclose(a[real], b[real], atol=2e-5)
            else:
                np.testing.assert_allclose(a, b, atol=2e-5)


@pytest.mark.slow
def test_embedder_matches_fixed_padding_and_traces_once(minilm_dir):
    import bertzoo

    embedder = bertzoo.TextEmbedder.from_preset(minilm_dir)
    fast = embedder.embed(MESSY, batch_size=4)  # sorted batches
    features = _packed(minilm_dir, MESSY, embedder.preprocessor.sequence_length)
    fixed = keras.Model.predict(embedder, features, batch_size=4, verbose=0)
    np.testing.assert_allclose(fast, fixed, atol=2e-5)
    # One text at a time gives the same vectors, in any order.
    for i in (0, 2, 10):
        np.testing.assert_allclose(embedder.embed(MESSY[i]), fast[i], atol=2e-5)
    np.testing.assert_allclose(embedder.embed(MESSY[::-1]), fast[::-1], atol=2e-5)
    # A (batch, 1) column is a batch; a wider array is an error, not flattened.
    column = np.array(MESSY[:3], dtype=object).reshape(3, 1)
    np.testing.assert_allclose(embedder.embed(column), fast[:3], atol=2e-5)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        embedder.embed(np.array(MESSY[:4], dtype=object).reshape(2, 2))
    if keras.backend.backend() == "tensorflow":
        # Every length and batch size ran through one trace of each function.
        for function in embedder._text_functions.values():
            assert function.experimental_get_tracing_count() == 1


@pytest.mark.slow
def test_padded_training_equals_fixed_padding_step_for_step():
    """The same seed gives the same batches in "padded" and "fixed" mode;
    without dropout the two train the same weights up to float rounding
    (the loss after 6 AdamW steps agrees to 1e-4 relative)."""
    import bertzoo

    rng = np.random.default_rng(0)
    n, seq = 48, 32
    lengths = rng.integers(3, seq + 1, n)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype("int32")
    features = {
        "token_ids": rng.integers(1, 61, (n, seq)).astype("int32") * mask,
        "segment_ids": np.zeros((n, seq), "int32"),
        "padding_mask": mask,
    }
    labels = (lengths > seq // 2).astype("int32")
    losses, weights = {}, {}
    for mode in ("fixed", "padded"):
        keras.utils.set_random_seed(1)
        model = bertzoo.BertClassifier(tiny_backbone(dropout=0.0), num_classes=2, dropout=0.0)
        model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile=False)
        ds = batching.training_dataset(features, labels, 8, seed=4, sequence_length=seq, mode=mode)
        history = model.fit(ds, epochs=1, verbose=0)
        losses[mode] = history.history["loss"][-1]
        weights[mode] = [keras.ops.convert_to_numpy(w) for w in model.weights]
    assert losses["padded"] == pytest.approx(losses["fixed"], rel=1e-4)
    for a, b in zip(weights["padded"], weights["fixed"]):
        np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="serving needs TensorFlow")
def test_serving_model_trims_in_graph_and_matches_fixed_padding(minilm_dir):
    """The serving graph cuts each batch to its bucket; its probabilities
    equal the task model's on fixed-padded inputs, through `answer` (the
    cached graph) and through the Keras call alike."""
    import tensorflow as tf

    import bertzoo
    from bertzoo.serving import ServingModel
    from bertzoo.tokenizers.base import from_preset as tokenizer_from_preset

    classifier = bertzoo.BertClassifier.from_preset(minilm_dir, num_classes=3)
    serving = ServingModel(classifier, tokenizer_from_preset(minilm_dir), sequence_length=128)
    features = _packed(minilm_dir, MESSY)
    logits = keras.Model.predict(classifier, features, batch_size=len(MESSY), verbose=0)
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(logits, axis=-1))
    answers = serving.answer(text=MESSY)
    np.testing.assert_allclose(answers["probabilities"], expected, atol=2e-5)
    assert answers["label"].tolist() == [str(i).encode() for i in expected.argmax(-1)]
    called = serving({"text": tf.constant(MESSY)})
    np.testing.assert_allclose(called["probabilities"], expected, atol=2e-5)
    one = serving.answer(text=MESSY[2])
    np.testing.assert_allclose(one["probabilities"][0], expected[2], atol=2e-5)
    assert serving._serve_function().experimental_get_tracing_count() == 1
    # A text past the 64-characters-per-token cut (8,192 at 128 tokens) is
    # cut before tokenizing; the graph says so in `text_cut`, as Keras logs
    # it (before, the SavedModel cut it silently). Characters, not bytes.
    long = ["the film was good. " * 432, "좋" * 8192, "좋" * 8193, "short"]
    assert serving.answer(text=long)["text_cut"].tolist() == [True, False, True, False]
    assert not answers["text_cut"].any()
    with pytest.raises(TypeError, match="takes the inputs text; got unknown question"):
        serving.answer(text="a", question="b")
