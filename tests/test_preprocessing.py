"""BertPreprocessor: packing, longest-first truncation, graph use, export."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from bertzoo.preprocessing import truncate_longest_first
from tests.conftest import FIXTURES

# Data, tokenizer and metric code: the same under every Keras backend.
pytestmark = pytest.mark.backend_independent


def _np(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _reference_truncation(len_a, len_b, budget):
    """The reference loop (google-research/bert `_truncate_seq_pair`)."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _rust_truncation(len_a, len_b, budget):
    """The Rust `tokenizers` LongestFirst pair rule, step by step."""
    n1, n2 = len_a, len_b
    if n1 + n2 <= budget:
        return n1, n2
    swap = n1 > n2
    if swap:
        n1, n2 = n2, n1
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    return (n2, n1) if swap else (n1, n2)


@pytest.mark.parametrize(
    "rule, loop", [("google", _reference_truncation), ("hf-fast", _rust_truncation)]
)
def test_truncation_closed_form_equals_reference_loop(rule, loop):
    grid = np.array([(a, b, n) for a in range(14) for b in range(14) for n in range(1, 14)])
    ka, kb = truncate_longest_first(
        tf.constant(grid[:, 0]), tf.constant(grid[:, 1]), tf.constant(grid[:, 2]), rule
    )
    expected = np.array([loop(a, b, n) for a, b, n in grid])
    np.testing.assert_array_equal(np.stack([ka.numpy(), kb.numpy()], 1), expected)


def test_minilm_inputs_identical_to_reference(minilm_dir):
    """Packed ids, segments and masks equal HF's for the parity fixture."""
    ref = np.load(FIXTURES / "minilm_reference.npz")
    info = json.loads(str(ref["info"]))
    for group, x in (
        ("single", info["singles"]),
        ("pair", ([a for a, _ in info["pairs"]], [b for _, b in info["pairs"]])),
    ):
        length = ref[f"{group}_token_ids"].shape[1]
        pre = bertzoo.BertPreprocessor.from_preset(minilm_dir, sequence_length=length)
        out = pre(x)
        for key in ("token_ids", "segment_ids", "padding_mask"):
            np.testing.assert_array_equal(_np(out[key]), ref[f"{group}_{key}"], err_msg=key)


def test_pair_truncation_matches_reference(minilm_dir):
    """Longest-first truncation as each reference does it: the MiniLM preset
    (tokenizer.json: the Rust tokenizer) as HF's fast tokenizer, the
    "hf-python" reference as HF's Python one (google-research/bert's
    `_truncate_seq_pair`). They cut the same number of tokens; for an odd
    budget with both segments cut they keep the extra token in different
    segments."""
    reference = json.loads((FIXTURES / "tokenizer_reference.json").read_text(encoding="utf-8"))
    truncated = differ = 0
    fast = bertzoo.BertTokenizer.from_preset(minilm_dir)
    assert fast.reference == "hf-fast"
    legacy = bertzoo.BertTokenizer.from_preset(minilm_dir, reference="hf-python")
    for case in reference["pairs"]:
        for tokenizer, key in ((fast, "fast"), (legacy, "legacy")):
            pre = bertzoo.BertPreprocessor(tokenizer, sequence_length=case["max_length"])
            out = pre(([case["a"]], [case["b"]]))
            expected = case[key]
            n = len(expected["token_ids"])
            assert _np(out["token_ids"])[0, :n].tolist() == expected["token_ids"]
            assert _np(out["segment_ids"])[0, :n].tolist() == expected["segment_ids"]
            assert _np(out["padding_mask"])[0].tolist() == [1] * n + [0] * (case["max_length"] - n)
        assert len(case["fast"]["token_ids"]) == n  # same number of tokens cut
        truncated += n == case["max_length"]
        differ += case["legacy"] != case["fast"]
    assert truncated >= 10 and differ >= 1


@pytest.fixture(scope="module")
def small_preprocessor():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d"]
    return bertzoo.BertPreprocessor(bertzoo.BertTokenizer(vocab), sequence_length=8)


def test_single_string_labels_and_tf_data(small_preprocessor):
    pre = small_preprocessor
    out = pre("a b c")
    assert _np(out["token_ids"]).tolist() == [2, 5, 6, 7, 3, 0, 0, 0]
    # Keras convention: labels and sample weights pass through.
    x, y = pre(["a", "b d"], np.array([1, 0]))
    assert _np(x["token_ids"]).shape == (2, 8) and list(y) == [1, 0]
    ds = tf.data.Dataset.from_tensor_slices((["a b", "c"], ["d", "a b c d a b c d"], [0, 1]))
    ds = ds.batch(2).map(lambda a, b, y: pre((a, b), y))
    x, y = next(iter(ds))
    assert x["token_ids"].dtype == tf.int32
    assert x["token_ids"].numpy().tolist() == [[2, 5, 6, 3, 8, 3, 0, 0], [2, 7, 3, 5, 6, 7, 8, 3]]
    assert x["segment_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1, 1]]
    assert y.numpy().tolist() == [0, 1]


def test_errors(small_preprocessor, minilm_dir):
    with pytest.raises(ValueError, match="one or two segments"):
        small_preprocessor((["a"], ["b"], ["c"]))
    with pytest.raises(ValueError, match="at least 3"):
        bertzoo.BertPreprocessor(small_preprocessor.tokenizer, sequence_length=2)
    with pytest.raises(bertzoo.TokenizerError, match="longer than the model's 512 positions"):
        bertzoo.BertPreprocessor.from_preset(minilm_dir, sequence_length=600)
    with pytest.raises(TypeError, match="must be a bertzoo Tokenizer"):
        bertzoo.BertPreprocessor("vocab.txt")


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="string inputs in a Keras graph need the TensorFlow backend",
)
def test_inside_a_keras_model_and_exported(tmp_path, minilm_dir):
    """Strings -> preprocessor -> backbone in one Keras model, exported as a
    SavedModel and reloaded: same outputs."""
    pre = bertzoo.BertPreprocessor.from_preset(minilm_dir, sequence_length=16)
    backbone = bertzoo.BertBackbone.from_preset(minilm_dir)
    text = keras.Input(shape=(), dtype="string")
    model = keras.Model(text, backbone(pre(text))["pooled_output"])
    texts = tf.constant(["hello world", "Café 이 원피스 예뻐요", "北京"])
    expected = model.predict(texts, verbose=0)
    model.export(str(tmp_path / "export"), verbose=False)
    reloaded = tf.saved_model.load(str(tmp_path / "export"))
    np.testing.assert_allclose(reloaded.serve(texts).numpy(), expected, atol=1e-6)


def test_edge_inputs(small_preprocessor):
    """Empty strings and batches, a batch of one, long texts, scalar pairs,
    numpy object arrays and bytes; shapes that would be silently flattened
    or mismatched pairs are clear errors."""
    pre = small_preprocessor
    assert _np(pre("")["token_ids"]).tolist() == [2, 3, 0, 0, 0, 0, 0, 0]
    assert _np(pre([])["token_ids"]).shape == (0, 8)
    assert _np(pre(([], []))["segment_ids"]).shape == (0, 8)
    assert _np(pre(["a b"])["token_ids"]).tolist() == [[2, 5, 6, 3, 0, 0, 0, 0]]
    assert _np(pre(["a " * 5000])["token_ids"]).tolist() == [[2] + [5] * 6 + [3]]
    pair = pre(("a b", b"c d"))
    assert _np(pair["token_ids"]).tolist() == [2, 5, 6, 3, 7, 8, 3, 0]
    assert _np(pair["segment_ids"]).tolist() == [0, 0, 0, 0, 1, 1, 1, 0]
    objects = pre(np.array(["a", b"b c"], dtype=object))
    assert _np(objects["token_ids"])[:, :4].tolist() == [[2, 5, 3, 0], [2, 6, 7, 3]]
    column = pre(tf.constant([["a"], ["b c"]]))  # (batch, 1), as keras.Input(shape=(1,))
    assert _np(column["token_ids"])[:, :4].tolist() == [[2, 5, 3, 0], [2, 6, 7, 3]]
    with pytest.raises(ValueError, match="not a list of pairs"):
        pre([("a", "b")])  # shape (1, 2): not two texts
    with pytest.raises(ValueError, match="same number of texts, got 2 and 1"):
        pre((["a", "b"], ["c"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="same number of texts"):
        spec = tf.TensorSpec([None], tf.string)
        tf.function(lambda a, b: pre.pack((a, b)), input_signature=[spec, spec])(
            tf.constant(["a", "b"]), tf.constant(["c"])
        )
    with pytest.raises(ValueError, match="1-D batch of strings, got shape"):
        pre.tokenizer([["a", "b"], ["c", "d"]])


def test_two_separators_between_a_pair(tmp_path):
    """A tokenizer with `pair_separators = 2` (RoBERTa's `<s> A </s></s> B
    </s>`) packs both separators, cuts the pair to the budget left, and
    counts them in packed_lengths."""
    import bertzoo
    from bertzoo.preprocessing import BertPreprocessor, packed_lengths

    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n"
    )

    class TwoSeparators(bertzoo.BertTokenizer):
        pair_separators = 2

    tok = TwoSeparators(vocabulary=str(vocab))
    pre = BertPreprocessor(tok, sequence_length=8, pair_segment_id=0)
    out = pre((["a b", "a a a a a"], ["c", "b b b b b"]))
    assert out["token_ids"].numpy().tolist() == [
        [2, 5, 6, 3, 3, 7, 3, 0],
        [2, 5, 5, 3, 3, 6, 6, 3],  # 8 - 4 special tokens: 2 + 2
    ]
    assert out["segment_ids"].numpy().max() == 0
    assert packed_lengths(tok, [("a b", "c")]).tolist() == [7]
    assert packed_lengths(tok, [("a b",)]).tolist() == [4]
    with pytest.raises(ValueError, match="cannot hold a pair's 4 special tokens"):
        BertPreprocessor(tok, sequence_length=3)((["a"], ["b"]))
