"""SentencePieceTokenizer against the reference ALBERT tokenizer.

The fixture (tests/fixtures/sentencepiece/, written by
tests/fixtures/make_sentencepiece_reference.py) holds a small ALBERT-style
model and the reference tokenizer's ids for 43 texts in three settings; the
ids must be identical, eagerly, in tf.function and in tf.data. The fuzz
fixture (fuzz_ids.json, written by tests/fixtures/make_sentencepiece_fuzz.py)
adds the reference's ids for 2,002 messy fuzz strings in the same settings.
"""

import hashlib
import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.sentencepiece import AlbertPreprocessor, SentencePieceTokenizer

# Data, tokenizer and metric code: the same under every Keras backend, so
# every test is marked backend_independent but test_output_dtype_and_shapes.

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sentencepiece"
MODEL = FIXTURES / "spiece.model"
REFERENCE = json.loads((FIXTURES / "reference_ids.json").read_text(encoding="utf-8"))
CONFIGS = sorted(REFERENCE["configs"])
FUZZ = json.loads((FIXTURES / "fuzz_ids.json").read_text(encoding="utf-8"))


def settings(config):
    options = REFERENCE["configs"][config]["options"]
    return dict(lowercase=options["do_lower_case"], strip_accents=not options["keep_accents"])


def rows(config):
    return REFERENCE["configs"][config]["rows"]


def as_lists(ids):
    """Backend-independent: TF ragged/dense tensors or numpy (JAX) -> lists."""
    if isinstance(ids, tf.RaggedTensor):
        return ids.to_list()
    if isinstance(ids, tf.Tensor):
        return ids.numpy().tolist()
    if isinstance(ids, list):
        return [np.asarray(row).tolist() for row in ids]
    return np.asarray(ids).tolist()


@pytest.fixture(scope="module")
def tokenizers():
    return {config: SentencePieceTokenizer(MODEL, **settings(config)) for config in CONFIGS}


@pytest.mark.backend_independent
def test_fixture_exercises_the_digit_comma_rule():
    for config in CONFIGS:
        taken = {branch for row in rows(config) for branch in row["digit_comma_rule"]}
        assert taken == {"keep", "drop", "strip"}, config
    assert len(rows(CONFIGS[0])) == 43


@pytest.mark.backend_independent
@pytest.mark.parametrize("config", CONFIGS)
def test_ids_match_reference_eager(tokenizers, config):
    tokenizer = tokenizers[config]
    texts = [row["text"] for row in rows(config)]
    got = as_lists(tokenizer(texts))
    for row, ids in zip(rows(config), got, strict=True):
        assert ids == row["ids"], row["text"]
    pieces = tokenizer.pieces(tf.constant(texts)).to_list()
    for row, p in zip(rows(config), pieces, strict=True):
        assert [x.decode("utf-8") for x in p] == row["pieces"], row["text"]


@pytest.mark.backend_independent
@pytest.mark.parametrize("config", CONFIGS)
def test_scalar_input(tokenizers, config):
    tokenizer = tokenizers[config]
    for row in rows(config)[:12]:
        ids = tokenizer(row["text"])
        assert as_lists(ids) == row["ids"], row["text"]


# Not backend_independent: the JAX pass's one check of the SentencePiece
# tokenizer's output under the backend (numpy arrays).
def test_output_dtype_and_shapes(tokenizers):
    tokenizer = tokenizers["uncased"]
    batch = tokenizer(["1,000 and 9, 10", ""])
    scalar = tokenizer("1,000 and 9, 10")
    if isinstance(batch, tf.RaggedTensor):  # TensorFlow backend
        assert batch.dtype == tf.int32 and batch.shape.rank == 2
        assert scalar.dtype == tf.int32 and scalar.shape.rank == 1
    else:  # JAX/torch: numpy
        assert [row.dtype for row in batch] == [np.int32, np.int32]
        assert scalar.dtype == np.int32 and scalar.ndim == 1
    assert as_lists(batch)[1] == []


@pytest.mark.backend_independent
@pytest.mark.parametrize("config", ["uncased", "cased"])
def test_ids_match_reference_in_graphs(tokenizers, config):
    tokenizer = tokenizers[config]
    texts = [row["text"] for row in rows(config)]
    expected = [row["ids"] for row in rows(config)]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode(strings):
        return tokenizer(strings)

    assert encode(tf.constant(texts)).to_list() == expected

    # Element-wise (scalar strings) and batched (1-D) inside tf.data.
    single = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer)
    assert [t.numpy().tolist() for t in single] == expected
    batched = tf.data.Dataset.from_tensor_slices(texts).batch(5).map(tokenizer)
    assert [ids for batch in batched for ids in batch.to_list()] == expected


def python_preprocess(text):
    """The reference's `preprocess_text` (uncased, accents stripped)."""
    text = " ".join(text.strip().split()).replace("``", '"').replace("''", '"')
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text if not unicodedata.combining(c)).lower()


@pytest.mark.backend_independent
def test_preprocessing_matches_python_on_every_code_point():
    """Steps 1-4 (whitespace, quotes, NFKD + combining, lower) against the
    reference's Python on all of Unicode, each character between two "a"s,
    including the code points this Python's unicodedata does not know (which
    ICU's NFKD would decompose: they must stay as they are)."""
    code_points = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    chunks = [code_points[i : i + 64] for i in range(0, len(code_points), 64)]
    texts = ["a" + "a".join(chr(c) for c in chunk) + "a" for chunk in chunks]
    got = AlbertPreprocessor(True, True)(tf.constant([t.encode("utf-8") for t in texts]))
    differing = []
    for chunk, text, out in zip(chunks, texts, got.numpy(), strict=True):
        if out.decode("utf-8") != python_preprocess(text):
            one = AlbertPreprocessor(True, True)(
                tf.constant([("a" + chr(c) + "a").encode("utf-8") for c in chunk])
            ).numpy()
            alone = [
                hex(c)
                for c, o in zip(chunk, one)
                if o.decode("utf-8") != python_preprocess("a" + chr(c) + "a")
            ]
            differing += alone or [f"the 64 code points from U+{chunk[0]:04X} together"]
    assert differing == []


@pytest.mark.backend_independent
def test_preprocessing_leaves_nul_and_unknown_code_points_as_python_does():
    """NUL (where TensorFlow's lowercasing op ends a string) and code points
    that this Python does not know but ICU does: U+1CCE3 (Unicode 16,
    NFKD -> "N"), U+1E4EC U+1E4EE (Unicode 15 marks that ICU reorders)."""
    texts = [
        "ΑΣ\x00ΑΣ\x00\x00Β",
        "\x00",
        "a\x00",
        "Café\U0001cce3X \U0001cce3",
        "a\U0001e4ec\U0001e4eeb Ä\U0001e4ec\u0316\U0001e4ee",
        "\x00\U0001cce3ΣΑ\x00",
        "",
    ]
    for lowercase, strip_accents in [(True, True), (True, False), (False, True)]:
        got = AlbertPreprocessor(lowercase, strip_accents)(tf.constant(texts)).numpy()
        for text, out in zip(texts, got, strict=True):
            expected = " ".join(text.strip().split())
            if strip_accents:
                expected = unicodedata.normalize("NFKD", expected)
                expected = "".join(c for c in expected if not unicodedata.combining(c))
            if lowercase:
                expected = expected.lower()
            assert out.decode("utf-8") == expected, (text, lowercase, strip_accents)


@pytest.mark.backend_independent
def test_preprocessing_examples():
    pre = AlbertPreprocessor(lowercase=True, strip_accents=True)
    got = pre(tf.constant(["  Crème\t\tBRÛLÉE  ", "``x'' ''y``", "ΟΔΟΣ İ", "a\u2028\u00a0b", ""]))
    assert [s.decode() for s in got.numpy()] == ["creme brulee", '"x" "y"', "οδος i", "a b", ""]
    keep = AlbertPreprocessor(lowercase=False, strip_accents=False)
    assert keep(tf.constant(["  Crème  "])).numpy()[0].decode() == "Crème"


@pytest.mark.backend_independent
def test_vocabulary_and_special_tokens(tokenizers):
    tokenizer = tokenizers["uncased"]
    assert tokenizer.vocabulary_size == REFERENCE["vocabulary_size"] == 800
    assert tokenizer.vocabulary[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id) == (0, 1)
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id) == (2, 3, 4)
    assert tokenizer.token_to_id("\u2581") == 13
    assert tokenizer.detokenize(tokenizer("hello")) == ["\u2581", "he", "ll", "o"]
    assert tokenizer.get_config()["strip_accents"] is True


@pytest.mark.backend_independent
def test_proto_bytes_and_save_to_preset(tmp_path, tokenizers):
    proto = MODEL.read_bytes()
    from_bytes = SentencePieceTokenizer(proto)
    assert from_bytes.vocabulary == tokenizers["uncased"].vocabulary
    path = from_bytes.save_to_preset(tmp_path / "preset")
    assert path == tmp_path / "preset" / "spiece.model"
    assert path.read_bytes() == proto
    # No temporary file left; the manifest records the vocabulary's checksum.
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "bertzoo-manifest.json",
        "spiece.model",
    ]
    again = SentencePieceTokenizer(path)
    texts = [row["text"] for row in rows("uncased")]
    assert as_lists(again(texts)) == [row["ids"] for row in rows("uncased")]


@pytest.mark.backend_independent
def test_errors(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        SentencePieceTokenizer(tmp_path / "missing.model")
    with pytest.raises(TokenizerError, match="is a directory"):
        SentencePieceTokenizer(tmp_path)
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"this is not a model")
    with pytest.raises(TokenizerError, match="not a valid SentencePiece model"):
        SentencePieceTokenizer(bad)
    with pytest.raises(TokenizerError, match="lacks the special token"):
        SentencePieceTokenizer(MODEL, cls_token="<s>")
    with pytest.raises(TypeError, match="take strings"):
        SentencePieceTokenizer(MODEL)([1, 2])


@pytest.mark.backend_independent
def test_survives_clear_session():
    """tensorflow-text's SentencePiece model resource belongs to an op kernel;
    keras.backend.clear_session() clears the kernel cache, which must not
    break a tokenizer made (or a function traced) before it."""
    import keras

    tokenizer = SentencePieceTokenizer(MODEL)
    encode = tf.function(lambda s: tokenizer(s), input_signature=[tf.TensorSpec([None], tf.string)])
    expected = next(r["ids"] for r in rows("uncased") if r["text"] == "1,000 and 9, 10")
    assert encode(tf.constant(["1,000 and 9, 10"])).to_list() == [expected]
    keras.backend.clear_session()
    assert as_lists(tokenizer("1,000 and 9, 10")) == expected
    assert encode(tf.constant(["1,000 and 9, 10"])).to_list() == [expected]


@pytest.mark.backend_independent
def test_from_preset_builds_it():
    from bertzoo.tokenizers.base import from_preset

    tokenizer = from_preset("albert_base", vocabulary=MODEL, check_model=False)
    assert isinstance(tokenizer, SentencePieceTokenizer)
    assert (tokenizer.lowercase, tokenizer.strip_accents) == (True, True)
    with pytest.raises(
        TokenizerError, match="800 tokens but the model's embedding table has 30000"
    ):
        from_preset("albert_base", vocabulary=MODEL)


@pytest.mark.backend_independent
def test_exported_saved_model(tmp_path, tokenizers):
    """The ops (the model bytes included) live in the exported graph: the
    reloaded function needs neither this object nor the model file."""
    tokenizer = tokenizers["uncased"]
    module = tf.Module()
    module.encode = tf.function(
        lambda s: tokenizer(s).to_tensor(), input_signature=[tf.TensorSpec([None], tf.string)]
    )
    tf.saved_model.save(module, str(tmp_path / "exported"))
    reloaded = tf.saved_model.load(str(tmp_path / "exported"))
    texts = [row["text"] for row in rows("uncased")]
    dense = reloaded.encode(tf.constant(texts)).numpy()
    for row, ids in zip(rows("uncased"), dense, strict=True):
        n = len(row["ids"])
        assert ids[:n].tolist() == row["ids"] and not ids[n:].any(), row["text"]


def fuzz_rows(config):
    """[(fuzz index, text, reference ids)] of the fuzz fixture in one
    setting. Where this Python's Unicode version is not the fixture's, the
    texts holding code points that the fixture's Python did not know are
    left out: the reference's own ids for them depend on the version."""
    column = 2 + list(FUZZ["configs"]).index(config)
    skip = set()
    if FUZZ["unidata_version"] != unicodedata.unidata_version:
        skip = set(FUZZ["rows_with_unassigned"])
    return [(row[0], row[1], row[column]) for row in FUZZ["rows"] if row[0] not in skip]


@pytest.mark.backend_independent
def test_fuzz_fixture_is_for_this_model_and_covers_the_fixes():
    assert FUZZ["spiece_model_sha256"] == hashlib.sha256(MODEL.read_bytes()).hexdigest()
    assert {c: FUZZ["configs"][c] for c in CONFIGS} == {
        c: REFERENCE["configs"][c]["options"] for c in CONFIGS
    }
    indices = [row[0] for row in FUZZ["rows"]]
    assert indices[:2000] == list(range(2000)) and set(FUZZ["found"]) <= set(indices)
    assert FUZZ["parity"]["texts"] == 100_000
    assert FUZZ["parity"]["identical"] == {c: 100_000 for c in FUZZ["configs"]}
    texts = [row[1] for row in FUZZ["rows"]]
    assert sum("\x00" in t for t in texts) > 100
    assert len(FUZZ["rows_with_unassigned"]) > 100


@pytest.mark.backend_independent
@pytest.mark.parametrize("config", CONFIGS)
def test_fuzz_ids_match_reference_eager(tokenizers, config):
    rows = fuzz_rows(config)
    got = as_lists(tokenizers[config]([text for _, text, _ in rows]))
    differing = [(i, text) for (i, text, ids), g in zip(rows, got, strict=True) if g != ids]
    assert not differing, f"{len(differing)}/{len(rows)} fuzz texts differ: {differing[:5]}"


@pytest.mark.backend_independent
@pytest.mark.parametrize("config", CONFIGS)
def test_fuzz_ids_match_reference_in_graph(tokenizers, config):
    found = set(FUZZ["found"])
    rows = fuzz_rows(config)
    rows = rows[:300] + [row for row in rows[300:] if row[0] in found]
    tokenizer = tokenizers[config]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode(strings):
        return tokenizer(strings)

    got = encode(tf.constant([text for _, text, _ in rows])).to_list()
    differing = [(i, text) for (i, text, ids), g in zip(rows, got, strict=True) if g != ids]
    assert not differing, f"{len(differing)}/{len(rows)} fuzz texts differ: {differing[:5]}"
