"""Inputs that used to change the answer silently (or end in a raw traceback)
are clear errors now -- or, inside compiled graphs where no exception can be
raised, a loud NaN result (issue 14). Valid inputs give bit-identical
results."""

import json
import pathlib
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import bertzoo
from bertzoo import presets as preset_lib
from bertzoo.errors import BertzooError, InputError, InputTypeError, PresetError
from bertzoo.input_checks import check_sequence_length
from bertzoo.tokenizers.base import TextEncodingError, TokenizerError
from tests.conftest import BATCH, SEQ, TINY, make_inputs, tiny_backbone

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "ab"]
SPIECE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "sentencepiece" / "spiece.model"


def _np(x):
    return ops.convert_to_numpy(x)


def _with(inputs, key, row, col, value):
    out = {k: v.copy() for k, v in inputs.items()}
    out[key][row, col] = value
    return out


def _compiled(backbone):
    """The backbone as a compiled function of its inputs: tf.function with
    XLA under TensorFlow, jax.jit over stateless_call under JAX."""
    if keras.backend.backend() == "tensorflow":
        return tf.function(lambda x: backbone(x), jit_compile=True)
    import jax

    trainable = [v.value for v in backbone.trainable_variables]
    non_trainable = [v.value for v in backbone.non_trainable_variables]
    jitted = jax.jit(lambda t, n, x: backbone.stateless_call(t, n, x)[0])
    return lambda x: jitted(trainable, non_trainable, x)


# === 1. Token and segment ids out of range ===

BAD_IDS = [
    ("token_ids", -1, "[0, 61)", "vocabulary_size=61"),
    ("token_ids", TINY["vocabulary_size"], "[0, 61)", "vocabulary_size=61"),
    ("segment_ids", -1, "[0, 2)", "num_segments=2"),
    ("segment_ids", 2, "[0, 2)", "num_segments=2"),
]


@pytest.mark.parametrize("key, value, valid, size", BAD_IDS)
def test_out_of_range_ids_are_an_error_eagerly(key, value, valid, size):
    backbone = tiny_backbone()
    bad = _with(make_inputs(), key, 1, 2, value)
    pattern = (
        re.escape(f"{key} holds {value} at position [1, 2]")
        + ".*"
        + re.escape(f"in {valid} ({size})")
    )
    with pytest.raises(InputError, match=pattern) as e:
        backbone(bad)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)  # one line
    # Also for a backend tensor, the embeddings layer on its own and predict().
    with pytest.raises(InputError, match=pattern):
        backbone({k: ops.convert_to_tensor(v) for k, v in bad.items()})
    ids = ops.convert_to_tensor(bad["token_ids"])
    with pytest.raises(InputError, match=pattern):
        backbone.embeddings_layer(ids, ops.convert_to_tensor(bad["segment_ids"]))
    with pytest.raises(InputError, match=pattern):
        backbone.predict(bad, verbose=0)
    # The model is intact after the error (JAX's predict would have emptied
    # its variables had the error come from inside the predict loop).
    np.testing.assert_array_equal(
        _np(backbone(make_inputs())["sequence_output"]),
        _np(backbone(make_inputs())["sequence_output"]),
    )


@pytest.mark.parametrize("key, value, valid, size", BAD_IDS)
def test_out_of_range_ids_in_compiled_graphs_give_nan(key, value, valid, size):
    """Where values are unknown while Python runs (jit, tf.function,
    predict on a dataset), the sequence holding the bad id comes out NaN
    instead of a finite wrong answer; other sequences are unaffected."""
    backbone = tiny_backbone()
    good = make_inputs()
    bad = _with(good, key, 1, 2, value)
    expected = backbone(good)
    out = _compiled(backbone)({k: ops.convert_to_tensor(v) for k, v in bad.items()})
    for name in ("sequence_output", "pooled_output"):
        result = _np(out[name])
        assert np.isnan(result[1]).all()
        np.testing.assert_allclose(result[[0, 2]], _np(expected[name])[[0, 2]], atol=1e-5)
    dataset = tf.data.Dataset.from_tensor_slices(bad).batch(BATCH)
    predicted = backbone.predict(dataset, verbose=0)["sequence_output"]
    assert np.isnan(predicted[1]).all() and np.isfinite(predicted[[0, 2]]).all()


def test_valid_ids_give_bit_identical_results():
    """The range guard is an exact select: the backbone's output equals,
    bit for bit, the same computation done directly with its layer
    objects (table look-ups, LayerNorm, blocks, pooler)."""
    backbone = tiny_backbone()
    x = make_inputs()
    emb = backbone.embeddings_layer
    h = ops.take(emb.token_embedding.embeddings, x["token_ids"], axis=0)
    h = h + ops.convert_to_tensor(emb.position_embeddings)[None, :SEQ, :]
    h = h + ops.take(emb.segment_embedding.embeddings, x["segment_ids"], axis=0)
    h = emb.layer_norm(h)
    np.testing.assert_array_equal(_np(emb(x["token_ids"], x["segment_ids"])), _np(h))
    mask = ops.convert_to_tensor(x["padding_mask"])
    for block in backbone.transformer_layers:
        h = block(h, mask)
    out = backbone(x)
    np.testing.assert_array_equal(_np(out["sequence_output"]), _np(h))
    np.testing.assert_array_equal(_np(out["pooled_output"]), _np(backbone.pooler_dense(h[:, 0, :])))
    # Extreme valid ids (0 and vocabulary_size - 1, segment 1) pass and are finite.
    edge = _with(_with(x, "token_ids", 0, 0, 0), "token_ids", 0, 1, TINY["vocabulary_size"] - 1)
    assert np.isfinite(_np(backbone(edge)["sequence_output"])).all()
    compiled = _np(
        _compiled(backbone)({k: ops.convert_to_tensor(v) for k, v in x.items()})["sequence_output"]
    )
    np.testing.assert_allclose(compiled, _np(out["sequence_output"]), atol=1e-5)


# === 2. Input keys and dtypes ===


def test_extra_or_missing_keys_are_an_error():
    backbone = tiny_backbone()
    x = make_inputs()
    expected = "expected exactly the keys token_ids, segment_ids, padding_mask"
    for label in (np.zeros((BATCH,), "int32"), np.zeros((BATCH, SEQ), "int32")):
        with pytest.raises(InputError, match=rf"unexpected key\(s\) 'label'; {expected}"):
            backbone({**x, "label": label})
        with pytest.raises(InputError, match="'label'"):
            backbone.predict({**x, "label": label}, verbose=0)
    with pytest.raises(InputError, match=rf"missing key\(s\) 'segment_ids'; {expected}"):
        backbone({k: v for k, v in x.items() if k != "segment_ids"})
    with pytest.raises(InputTypeError, match="takes a dict with the keys"):
        backbone([x["token_ids"], x["segment_ids"], x["padding_mask"]])
    # Symbolically (a model built on the backbone) and in the feature model.
    symbolic = {k: keras.Input((None,), dtype="int32", name=k) for k in (*x, "label")}
    with pytest.raises(InputError, match="'label'"):
        backbone(symbolic)
    with pytest.raises(InputError, match="'label'"):
        backbone.feature_model()({**x, "label": x["token_ids"]})
    # The task models built on the backbone check their inputs the same way,
    # ids in range included.
    classifier = bertzoo.BertClassifier(backbone, num_classes=3)
    with pytest.raises(InputError, match=rf"unexpected key\(s\) 'label'; {expected}"):
        classifier({**x, "label": x["token_ids"]})
    with pytest.raises(InputError, match="'label'"):
        classifier.predict({**x, "label": x["token_ids"]}, verbose=0)
    with pytest.raises(InputError, match=r"token_ids holds -1"):
        classifier.predict({**x, "token_ids": x["token_ids"] - 1}, verbose=0)
    # Without segment embeddings, segment_ids is an unexpected key.
    distil = tiny_backbone(num_segments=0, use_pooler=False)
    with pytest.raises(InputError, match="'segment_ids'.*num_segments=0"):
        distil(x)
    ok = distil({k: v for k, v in x.items() if k != "segment_ids"})
    assert np.isfinite(_np(ok["sequence_output"])).all()


def test_non_integer_ids_are_an_error():
    backbone = tiny_backbone()
    x = make_inputs()
    floats = {**x, "token_ids": x["token_ids"] + 0.7}  # 3.7 used to become 3
    with pytest.raises(InputError, match="token_ids must hold integer ids, got dtype float"):
        backbone(floats)
    with pytest.raises(InputError, match="token_ids must hold integer ids"):
        backbone.predict(floats, verbose=0)
    with pytest.raises(InputError, match="segment_ids must hold integer ids"):
        backbone({**x, "segment_ids": x["segment_ids"].astype("float32")})
    with pytest.raises(InputError, match="padding_mask must hold integer"):
        backbone({**x, "padding_mask": x["padding_mask"].astype("float32")})
    symbolic = {k: keras.Input((None,), dtype="int32", name=k) for k in x}
    symbolic["token_ids"] = keras.Input((None,), dtype="float32", name="float_ids")
    with pytest.raises(InputError, match="token_ids must hold integer ids"):
        backbone(symbolic)
    with pytest.raises(InputError, match="token_ids must hold integer ids"):
        backbone.embeddings_layer(ops.convert_to_tensor(floats["token_ids"]), x["segment_ids"])
    # Other integer dtypes and a bool padding mask are exact: same result.
    reference = _np(backbone(x)["sequence_output"])
    for variant in (
        {**x, "token_ids": x["token_ids"].astype("int64")},
        {**x, "padding_mask": x["padding_mask"].astype(bool)},
    ):
        np.testing.assert_array_equal(_np(backbone(variant)["sequence_output"]), reference)


def test_models_wrapping_the_backbone_still_work(tmp_path):
    backbone = tiny_backbone()
    x = make_inputs()
    classifier = bertzoo.BertClassifier(backbone, num_classes=2)
    assert np.isfinite(_np(classifier(x))).all()
    features = backbone.feature_model()(x)
    np.testing.assert_array_equal(
        _np(features["sequence_output"]), _np(backbone(x)["sequence_output"])
    )
    path = tmp_path / "backbone.keras"
    backbone.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_array_equal(
        _np(restored(x)["sequence_output"]), _np(backbone(x)["sequence_output"])
    )
    with pytest.raises(InputError, match="'label'"):
        restored({**x, "label": x["token_ids"]})


# === 3. Text that is not valid Unicode ===


@pytest.fixture(scope="module", params=["wordpiece", "sentencepiece"])
def tokenizer(request):
    if request.param == "wordpiece":
        return bertzoo.BertTokenizer(VOCAB)
    from bertzoo.tokenizers.sentencepiece import SentencePieceTokenizer

    return SentencePieceTokenizer(SPIECE)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "bad, pattern",
    [
        ([b"a b", b"a\xffb"], r"Text 1 is not valid UTF-8: byte 1 \(0xff\)"),
        (tf.constant([b"ok", b"ok", b"\xc3("]), r"Text 2 is not valid UTF-8: byte 0 \(0xc3\)"),
        (
            b"ab\xed\xa0\x80",
            r"The text is not valid UTF-8: byte 2 \(0xed\)",
        ),  # an encoded surrogate
        (["a", "a\ud800b"], r"Text 1 is not valid Unicode: .*surrogate '\\ud800' at character 1"),
        ("a\ud800b", r"The text is not valid Unicode: .*at character 1"),
    ],
)
def test_invalid_text_is_an_error(tokenizer, bad, pattern):
    with pytest.raises(TextEncodingError, match=pattern) as e:
        tokenizer(bad)
    assert isinstance(e.value, TokenizerError | InputError | ValueError)
    assert 'errors="replace"' in str(e.value) or "errors='replace'" in str(e.value)


@pytest.mark.backend_independent
def test_utf8_check_agrees_with_python():
    """The graph-side check (one RE2 match) says "valid" exactly where
    Python's bytes.decode("utf-8") does: every code point, and random and
    tricky byte strings (overlong forms, encoded surrogates, > U+10FFFF,
    truncated sequences, stray continuation bytes)."""
    from bertzoo.tokenizers.base import _VALID_UTF8

    def python_valid(data):
        try:
            data.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    chunks = ["".join(map(chr, points[i : i + 4096])).encode() for i in range(0, len(points), 4096)]
    assert bool(tf.reduce_all(tf.strings.regex_full_match(chunks, _VALID_UTF8)))
    rng = np.random.default_rng(0)
    tricky = np.array(
        [
            0x00,
            0x41,
            0x7F,
            0x80,
            0x8F,
            0x90,
            0xA0,
            0xBF,
            0xC0,
            0xC1,
            0xC2,
            0xDF,
            0xE0,
            0xED,
            0xEF,
            0xF0,
            0xF4,
            0xF5,
            0xFF,
        ],
        "uint8",
    )
    samples = [b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]
    samples += [bytes(rng.integers(0, 256, rng.integers(0, 8), dtype="uint8")) for _ in range(5000)]
    samples += [bytes(rng.choice(tricky, rng.integers(1, 6))) for _ in range(20000)]
    verdict = tf.strings.regex_full_match(samples, _VALID_UTF8).numpy()
    assert [bool(v) for v in verdict] == [python_valid(b) for b in samples]


@pytest.mark.backend_independent
def test_invalid_utf8_in_graphs_fails_at_run_time(tokenizer):
    texts = tf.constant([b"a b", b"ab", b"a\xffb"])
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(3).map(tokenizer)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Invalid UTF-8 in the texts.*\[2\]"):
        list(dataset)
    graph = tf.function(lambda t: tokenizer(t).to_tensor())
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid UTF-8"):
        graph(texts)
    assert graph(texts[:2]).shape[0] == 2


@pytest.mark.backend_independent
def test_valid_text_gives_the_same_ids(tokenizer):
    texts = ["a b", "ab", "", "café 東京 \ufffd\x00 ﬁ", "\U0010ffff"]
    checked = tokenizer(texts)
    unchecked = tokenizer.tokenize_ids(tf.constant(texts))
    assert [list(np.asarray(r)) for r in checked] == unchecked.to_list()
    # The data readers' own lenient path is unchanged.
    assert tokenizer.tokenize_ids(tf.constant([b"a\xffb"])).shape[0] == 1


@pytest.mark.backend_independent
def test_preprocessor_refuses_invalid_text_and_non_texts():
    pre = bertzoo.BertPreprocessor(bertzoo.BertTokenizer(VOCAB), sequence_length=8)
    with pytest.raises(TextEncodingError, match="Text 1 is not valid UTF-8"):
        pre([b"a", b"a\xffb"])
    with pytest.raises(TextEncodingError, match="Text 0 of the second segment is not valid UTF-8"):
        pre(([b"a"], [b"\x80"]))
    dataset = tf.data.Dataset.from_tensor_slices([b"a", b"\xff"]).batch(2).map(pre)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid UTF-8"):
        list(dataset)
    with pytest.raises(InputTypeError, match="got None"):
        pre(None)
    with pytest.raises(InputTypeError, match=r"element of type int \(text 1\): 3"):
        pre(["a", 3, None])
    assert np.asarray(pre([])["token_ids"]).shape == (0, 8)
    out = pre(["a b", "ab"])
    assert np.asarray(out["token_ids"]).tolist() == [
        [2, 5, 6, 3, 0, 0, 0, 0],
        [2, 9, 3, 0, 0, 0, 0, 0],
    ]


# === 4. Preset names ===


@pytest.fixture
def saved_bert_tiny(tmp_path, monkeypatch):
    """A user's preset directory named like a built-in, in the current directory."""
    directory = tmp_path / "bert_tiny"
    directory.mkdir()
    document = json.loads(preset_lib.builtin_presets()["bert_tiny"].read_text(encoding="utf-8"))
    document["backbone"]["num_layers"] = 1  # tell the two apart
    (directory / "config.json").write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return directory


@pytest.mark.backend_independent
def test_builtin_name_shadowed_by_a_directory_is_ambiguous(saved_bert_tiny, fast_init):
    with pytest.raises(
        PresetError,
        match=r"'bert_tiny' is ambiguous.*'builtin:bert_tiny'.*'\./bert_tiny'.*pathlib\.Path",
    ):
        bertzoo.BertBackbone.from_preset("bert_tiny", load_weights=False)
    with pytest.raises(PresetError, match="ambiguous"):
        bertzoo.BertPreprocessor.from_preset("bert_tiny", vocabulary=VOCAB)
    builtin = bertzoo.BertBackbone.from_preset("builtin:bert_tiny", load_weights=False)
    assert builtin.num_layers == 2
    for spelling in ("./bert_tiny", pathlib.Path("bert_tiny"), str(saved_bert_tiny)):
        assert bertzoo.BertBackbone.from_preset(spelling, load_weights=False).num_layers == 1
    with pytest.raises(
        PresetError, match="Unknown built-in preset 'bert_tny'. Did you mean 'builtin:bert_tiny'"
    ):
        bertzoo.BertBackbone.from_preset("builtin:bert_tny")
    # A directory without a config.json is no preset: no ambiguity.
    shutil.rmtree(saved_bert_tiny)
    saved_bert_tiny.mkdir()
    assert bertzoo.BertBackbone.from_preset("bert_tiny", load_weights=False).num_layers == 2


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", ["", "   ", None])
def test_empty_preset_name_is_an_error(name, saved_bert_tiny):
    # The current directory holds a config.json: "" used to load it.
    shutil.copy(saved_bert_tiny / "config.json", saved_bert_tiny.parent / "config.json")
    with pytest.raises(PresetError, match=r"bert_base.*bert_tiny") as e:
        bertzoo.BertBackbone.from_preset(name, load_weights=False)
    assert ("empty" in str(e.value)) == (name is not None)
    assert bertzoo.BertBackbone.from_preset(".", load_weights=False).num_layers == 1


# === 5. sequence_length ===


@pytest.mark.backend_independent
@pytest.mark.parametrize("value", [5.7, 8.0, True, "8", None, 2, 0, -3])
def test_sequence_length_must_be_an_int_with_room(value):
    tokenizer = bertzoo.BertTokenizer(VOCAB)
    pattern = (
        "must be an integer"
        if not isinstance(value, int) or isinstance(value, bool)
        else "at least 3"
    )
    with pytest.raises(InputError, match=pattern):
        bertzoo.BertPreprocessor(tokenizer, sequence_length=value)
    if value is not None:  # None means "the model's maximum" in from_preset
        with pytest.raises(InputError, match=pattern):
            bertzoo.BertPreprocessor.from_preset(
                "bert_tiny", sequence_length=value, vocabulary=VOCAB
            )


@pytest.mark.backend_independent
def test_sequence_length_accepts_integers(fast_init):
    assert check_sequence_length(np.int64(8)) == 8
    pre = bertzoo.BertPreprocessor(bertzoo.BertTokenizer(VOCAB), sequence_length=np.int32(3))
    assert pre.sequence_length == 3 and type(pre.sequence_length) is int
    with pytest.raises(InputError, match="must be an integer.*5.7"):
        bertzoo.TextEmbedder.from_preset(
            "bert_tiny", sequence_length=5.7, vocabulary=VOCAB, load_weights=False
        )
    with pytest.raises(InputError, match="at least 3"):  # 0 used to mean "the default"
        bertzoo.TextEmbedder.from_preset(
            "bert_tiny", sequence_length=0, vocabulary=VOCAB, load_weights=False
        )


@pytest.mark.backend_independent
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="ServingModel needs TensorFlow")
def test_serving_sequence_length_must_be_an_int():
    from bertzoo.serving import ServingModel

    classifier = bertzoo.BertClassifier(tiny_backbone(vocabulary_size=len(VOCAB)), num_classes=2)
    with pytest.raises(InputError, match="must be an integer.*5.7"):
        ServingModel(classifier, bertzoo.BertTokenizer(VOCAB), sequence_length=5.7)


# === 6. TextEmbedder inputs ===


@pytest.fixture(scope="module")
def embedder():
    pre = bertzoo.BertPreprocessor(bertzoo.BertTokenizer(VOCAB), sequence_length=8)
    return bertzoo.TextEmbedder(tiny_backbone(vocabulary_size=len(VOCAB)), pre)


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "texts, pattern",
    [
        (None, "got None"),
        (["a", 3, None], r"element 1 of texts is int \(3\), not a string"),
        ([None], "element 0 of texts is NoneType"),
        (5, "got int"),
        (np.array([1.5, 2.0]), "element 0 of texts is float"),
        ((["a"], [b"b", 7]), "element 1 of texts_b is int"),
        (("a", ["b"]), "mixing single strings and batches"),
        ((["a"], ["b"], ["c"]), "got a tuple of 3"),
        (tf.constant([1, 2]), "got a int32 tensor"),
    ],
)
def test_embed_refuses_non_texts(embedder, texts, pattern):
    with pytest.raises(InputTypeError, match=pattern) as e:
        embedder.embed(texts)
    assert isinstance(e.value, BertzooError) and isinstance(e.value, TypeError)
    with pytest.raises(InputTypeError, match=pattern):
        embedder.predict(texts, verbose=0)


def test_embed_texts(embedder):
    one = embedder.embed("a b")  # one string: one vector, as predict gives
    assert one.shape == (TINY["hidden_dim"],)
    batch = embedder.embed(["a b", "ab"])
    np.testing.assert_array_equal(one, embedder.predict("a b", verbose=0))
    np.testing.assert_allclose(one, batch[0], atol=1e-6)
    assert embedder.embed([]).shape == (0, TINY["hidden_dim"])
    with pytest.raises(TextEncodingError, match=r"Text 1 is not valid UTF-8: byte 1"):
        embedder.embed([b"a", b"a\xffb"])
    with pytest.raises(TextEncodingError, match="Text 0 of texts_b"):
        embedder.embed(([b"a"], [b"\xff"]))
    with pytest.raises(TextEncodingError, match="surrogate"):
        embedder.embed(["a\udcffb"])
    bare = bertzoo.TextEmbedder(embedder.backbone)
    with pytest.raises(InputTypeError, match="no preprocessor"):
        bare.embed(None)


def test_embedder_token_id_inputs_are_checked(embedder):
    x = {k: np.asarray(v) for k, v in embedder.preprocessor(["a b", "ab"]).items()}
    direct = _np(embedder(x))
    label = {**x, "label": x["token_ids"]}
    with pytest.raises(InputError, match=r"unexpected key\(s\) 'label'"):
        embedder(label)
    with pytest.raises(InputError, match=r"unexpected key\(s\) 'label'"):
        embedder.predict(label, verbose=0)
    with pytest.raises(InputError, match="token_ids must hold integer ids"):
        embedder.predict({**x, "token_ids": x["token_ids"] + 0.5}, verbose=0)
    with pytest.raises(InputError, match=r"token_ids holds 10 at position \[0, 1\]"):
        embedder.predict(_with(x, "token_ids", 0, 1, len(VOCAB)), verbose=0)
    np.testing.assert_allclose(embedder.predict(x, verbose=0), direct, atol=1e-6)
