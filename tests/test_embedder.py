"""TextEmbedder: strings in, sentence embeddings out, vs sentence-transformers."""

import json

import keras
import numpy as np
import pytest
from keras import ops

import bertzoo
from bertzoo.embedder import sentence_transformers_settings
from bertzoo.layers import TokenPooling
from tests.conftest import FIXTURES


def _embed_reference_texts(embedder, info):
    singles = embedder.embed(info["singles"], batch_size=3)
    pairs = embedder.embed(([a for a, _ in info["pairs"]], [b for _, b in info["pairs"]]))
    return singles, pairs


def _worst(got, ref):
    """(min cosine, max abs error) over both groups."""
    cosines, errors = [], []
    for mine, expected in zip(got, (ref["single_embeddings"], ref["pair_embeddings"])):
        assert mine.shape == expected.shape
        cosines.append(
            np.sum(mine * expected, -1)
            / np.linalg.norm(mine, axis=-1)
            / np.linalg.norm(expected, axis=-1)
        )
        errors.append(np.abs(mine - expected))
    return min(c.min() for c in cosines), max(e.max() for e in errors)


# Also the JAX pass's check of the WordPiece tokenizer, strings to embeddings
# (tests/tokenizers/test_wordpiece.py and test_fidelity.py run in the TensorFlow pass).
@pytest.mark.jax
@pytest.mark.slow
def test_minilm_embeddings_from_strings(minilm_dir):
    """Strings -> bertzoo tokenizer -> backbone -> mean pooling -> L2, against
    the reference embeddings (HF transformers + sentence-transformers'
    pooling, tests/fixtures/make_hf_reference.py). Bars: max abs error
    2e-6 on the unit vectors (measured 2.2e-7) and cosine >= 1 - 1e-6
    (measured 1.0 in float32); a model with tanh GELU or LayerNorm epsilon
    1e-5 fails both (below)."""
    embedder = bertzoo.TextEmbedder.from_preset(minilm_dir)
    # Read from the directory's sentence-transformers files.
    assert (embedder.pooling, embedder.normalize) == ("mean", True)
    assert embedder.preprocessor.sequence_length == 256
    ref = np.load(FIXTURES / "minilm_reference.npz")
    info = json.loads(str(ref["info"]))
    got = _embed_reference_texts(embedder, info)
    cosine, error = _worst(got, ref)
    assert error <= 2e-6 and cosine >= 1 - 1e-6, (error, cosine)
    for mine in got:
        np.testing.assert_allclose(np.linalg.norm(mine, axis=-1), 1.0, atol=1e-5)
    assert embedder.predict(info["singles"][0], verbose=0).shape == (384,)

    # The same weights in subtly wrong models miss the bars (measured: tanh
    # GELU max error 4.1e-4, cosine 0.999996; epsilon 1e-5 max error 3.5e-4,
    # cosine 0.999997): the bars can tell. That is about the bars, not the
    # backend: the TensorFlow pass shows it (under JAX each twin costs
    # another round of XLA compiles).
    if keras.backend.backend() != "tensorflow":
        return
    config = embedder.backbone.get_config()
    for change in ({"activation": "gelu_approximate"}, {"layer_norm_epsilon": 1e-5}):
        twin = bertzoo.BertBackbone.from_config({**config, **change})
        twin.set_weights(embedder.backbone.get_weights())
        broken = bertzoo.TextEmbedder(twin, embedder.preprocessor)
        cosine, error = _worst(_embed_reference_texts(broken, info), ref)
        assert error > 2e-6 * 10 and cosine < 1 - 1e-6, (change, error, cosine)


def test_pooling_modes():
    seq = np.array([[[1.0, -2.0], [3.0, 4.0], [100.0, 100.0]]], "float32")
    mask = np.array([[1, 1, 0]], "int32")

    def pooled(mode, normalize=False):
        return np.asarray(ops.convert_to_numpy(TokenPooling(mode, normalize)(seq, mask)))

    np.testing.assert_allclose(pooled("cls"), [[1.0, -2.0]])
    np.testing.assert_allclose(pooled("mean"), [[2.0, 1.0]])
    np.testing.assert_allclose(pooled("max"), [[3.0, 4.0]])  # padding ignored
    np.testing.assert_allclose(pooled("max", True), [[0.6, 0.8]], rtol=1e-6)
    with pytest.raises(ValueError, match="Valid: cls, mean, max"):
        TokenPooling("sum")


def test_embedder_without_preprocessor_takes_ids():
    from tests.conftest import make_inputs, tiny_backbone

    embedder = bertzoo.TextEmbedder(tiny_backbone(), pooling="cls", normalize=False)
    inputs = make_inputs()
    out = embedder.predict(inputs, verbose=0)
    direct = ops.convert_to_numpy(embedder.backbone(inputs)["sequence_output"])[:, 0]
    np.testing.assert_allclose(out, direct, atol=1e-6)
    with pytest.raises(ValueError, match="has no preprocessor"):
        embedder.embed(["text"])


@pytest.mark.backend_independent  # reads JSON files
def test_sentence_transformers_settings_errors(tmp_path):
    assert sentence_transformers_settings(tmp_path) == {}
    (tmp_path / "modules.json").write_text(
        json.dumps([{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}])
    )
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_sqrt_len_tokens": True})
    )
    with pytest.raises(
        bertzoo.PresetError, match="pooling_mode_mean_sqrt_len_tokens.*not supported"
    ):
        sentence_transformers_settings(tmp_path)


def test_edge_inputs():
    from tests.conftest import tiny_backbone

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d"]
    pre = bertzoo.BertPreprocessor(bertzoo.BertTokenizer(vocab), sequence_length=8)
    embedder = bertzoo.TextEmbedder(tiny_backbone(vocabulary_size=len(vocab)), pre)
    assert embedder.embed([]).shape == (0, 10)
    assert embedder.embed((np.array([], dtype=object), [])).shape == (0, 10)
    pair = embedder.embed(("a b", "c"))  # one pair of plain strings
    direct = embedder(pre((["a b"], ["c"])))
    np.testing.assert_allclose(pair, ops.convert_to_numpy(direct)[0], atol=1e-6)
    assert embedder.embed(np.array(["", b"a b"], dtype=object)).shape == (2, 10)
    with pytest.raises(ValueError, match="two equally long batches"):
        embedder.embed((["a", "b"], ["c"]))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's traced graphs")
def test_no_call_after_loading_traces_or_compiles(tmp_path):
    """from_preset traces the forward pass once, at load; on a CPU it is one
    graph for every batch shape (no XLA, `batching.uses_xla`), and lists of
    texts are packed in plain Python (WordPiece), so texts of every bucket
    length and batch size, single texts included, run without tracing
    again, and match the model called on the fully padded ids (1e-5). An
    array of texts packs in the tokenizer's graph: the same vectors."""
    import tensorflow as tf

    from bertzoo import batching

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefgh", "##s", "!"]
    pre = bertzoo.BertPreprocessor(bertzoo.BertTokenizer(vocab), sequence_length=20)
    bertzoo.TextEmbedder(_tiny(len(vocab)), pre).save_to_preset(tmp_path / "tiny")
    embedder = bertzoo.TextEmbedder.from_preset(tmp_path / "tiny")
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("a GPU compiles with XLA")
    assert not batching.uses_xla(embedder)
    forward, pack = batching.forward_function(embedder), embedder._pack_function(1)
    assert forward.experimental_get_tracing_count() == 1
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(list("abcdefgh!"), size=n)) for n in rng.integers(0, 30, 50)]
    for batch in (texts[:1], texts[1:2], texts[:7], texts):
        got = embedder.embed(batch, batch_size=8)
        direct = ops.convert_to_numpy(embedder(pre(batch)))
        np.testing.assert_allclose(got, direct, atol=1e-5)
    assert len({min(len(t.split()) + 2, 20) for t in texts}) > 10  # many lengths
    assert (forward.experimental_get_tracing_count(), pack.experimental_get_tracing_count()) == (
        1,
        0,
    )
    np.testing.assert_allclose(embedder.embed(np.array(texts, dtype=object)), got, atol=1e-6)
    assert (forward.experimental_get_tracing_count(), pack.experimental_get_tracing_count()) == (
        1,
        1,
    )


def _tiny(vocabulary_size, **overrides):
    config = dict(
        num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=12, max_sequence_length=24
    )
    return bertzoo.BertBackbone(vocabulary_size=vocabulary_size, **{**config, **overrides})


@pytest.mark.slow
def test_albert_and_distilbert_hf_directories_end_to_end(tmp_path):
    """save_hf with a tokenizer, then the tokenizer, preprocessor and embedder
    from that HF directory: ALBERT with its spiece.model, DistilBERT (no
    segment ids) with a vocab.txt, and an ALBERT that ships a BertTokenizer."""
    from bertzoo.convert import save_hf
    from bertzoo.tokenizers import SentencePieceTokenizer, from_preset

    spiece = SentencePieceTokenizer(FIXTURES / "sentencepiece" / "spiece.model", lowercase=False)
    albert = _tiny(spiece.vocabulary_size, embedding_dim=4, num_groups=1)
    save_hf(albert, tmp_path / "albert", tokenizer=spiece)
    assert json.loads((tmp_path / "albert" / "config.json").read_text())["model_type"] == "albert"
    tokenizer = SentencePieceTokenizer.from_preset(tmp_path / "albert")
    assert tokenizer.lowercase is False
    texts = ["Hello world", "Café 9,000", ""]
    pre = bertzoo.BertPreprocessor.from_preset(tmp_path / "albert", sequence_length=12)
    out = pre(texts)
    assert sorted(out) == ["padding_mask", "segment_ids", "token_ids"]
    np.testing.assert_array_equal(
        np.asarray(out["token_ids"])[2, :2], [spiece.cls_token_id, spiece.sep_token_id]
    )
    embedder = bertzoo.TextEmbedder.from_preset(tmp_path / "albert", pooling="cls", normalize=False)
    direct = ops.convert_to_numpy(
        embedder.backbone(embedder.preprocessor(texts))["sequence_output"]
    )[:, 0]
    np.testing.assert_allclose(embedder.embed(texts), direct, atol=1e-5)

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefgh", "##s", "!"]
    distil = _tiny(len(vocab), num_segments=0, use_pooler=False)
    save_hf(distil, tmp_path / "distil", tokenizer=bertzoo.BertTokenizer(vocab))
    assert (
        json.loads((tmp_path / "distil" / "config.json").read_text())["model_type"] == "distilbert"
    )
    pre = bertzoo.BertPreprocessor.from_preset(tmp_path / "distil", sequence_length=8)
    out = pre((["a bs"], ["c!"]))
    assert sorted(out) == ["padding_mask", "token_ids"]
    assert np.asarray(out["token_ids"]).tolist() == [[2, 5, 6, 13, 3, 7, 14, 3]]
    embedder = bertzoo.TextEmbedder.from_preset(tmp_path / "distil")
    assert embedder.embed((["a b", "c"], ["d", "e f"])).shape == (2, 8)

    # An ALBERT checkpoint whose tokenizer_config names a WordPiece tokenizer,
    # written by transformers' tooling and by save_hf.
    korean = tmp_path / "albert_wordpiece"
    save_hf(_tiny(len(vocab), embedding_dim=4, num_groups=1), korean)
    bertzoo.BertTokenizer(vocab).save_to_preset(korean)
    (korean / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizerFast", "do_lower_case": False})
    )
    exported = tmp_path / "albert_wordpiece_export"
    save_hf(
        _tiny(len(vocab), embedding_dim=4, num_groups=1),
        exported,
        tokenizer=bertzoo.BertTokenizer(vocab, lowercase=False),
    )
    config = json.loads((exported / "tokenizer_config.json").read_text())
    assert (config["tokenizer_class"], config["do_lower_case"]) == ("BertTokenizer", False)
    assert isinstance(from_preset(exported), bertzoo.BertTokenizer)
    tokenizer = from_preset(korean)
    assert isinstance(tokenizer, bertzoo.BertTokenizer)
    assert (tokenizer.lowercase, tokenizer.strip_accents) == (False, False)
    assert bertzoo.TextEmbedder.from_preset(korean).embed(["a b"]).shape == (1, 8)


@pytest.mark.backend_independent  # tokenizer files and preset metadata
def test_custom_special_tokens_survive_an_hf_round_trip(tmp_path):
    """A vocabulary with non-default special tokens: save_hf records them in
    tokenizer_config.json and every from_preset reads them back."""
    from bertzoo.convert import save_hf

    vocab = ["<pad>", "<unk>", "<s>", "</s>", "<mask>", "hello", "world"]
    tokenizer = bertzoo.BertTokenizer(
        vocab,
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    )
    save_hf(_tiny(len(vocab)), tmp_path, tokenizer=tokenizer)
    loaded = bertzoo.BertTokenizer.from_preset(tmp_path)
    assert (loaded.cls_token, loaded.sep_token, loaded.mask_token) == ("<s>", "</s>", "<mask>")
    pre = bertzoo.BertPreprocessor.from_preset(tmp_path, sequence_length=6)
    assert np.asarray(pre("hello world")["token_ids"]).tolist() == [2, 5, 6, 3, 0, 0]
    backbone = bertzoo.BertBackbone.from_preset(tmp_path)
    assert backbone.preset_info["tokenizer"]["mask_token"] == "<mask>"
    assert (
        "cls_token"
        not in bertzoo.BertBackbone.from_preset("bert_base", load_weights=False).preset_info[
            "tokenizer"
        ]
    )


@pytest.mark.backend_independent  # packing (TensorFlow ops under any backend), no weights
@pytest.mark.parametrize("variant", ["as_shipped", "cased", "cased_st_lower_case"])
def test_packs_the_ids_sentence_transformers_feeds_the_model(minilm_dir, tmp_path, variant):
    """The token ids sentence-transformers itself makes (its max_seq_length
    of 256 and its do_lower_case, which makes the tokenizer lowercase),
    recorded on fuzz texts and texts over the limit by
    tests/fixtures/make_sentence_transformers_tokens.py for the directory
    as shipped and two edited copies."""
    import gzip
    import sys

    sys.path.insert(0, str(FIXTURES))
    from minilm_variants import make_variant

    with gzip.open(FIXTURES / "tokenizer_fidelity" / "sentence_transformers.json.gz", "rt") as f:
        data = json.load(f)
    embedder = bertzoo.TextEmbedder.from_preset(
        make_variant(minilm_dir, tmp_path / variant, variant), load_weights=False
    )
    pre = embedder.preprocessor
    assert pre.sequence_length == data["max_seq_length"] == 256
    assert pre.tokenizer.reference == "hf-fast"
    packed = pre.pack(data["texts"])
    ids, mask = np.asarray(packed["token_ids"]), np.asarray(packed["padding_mask"])
    got = [row[m == 1].tolist() for row, m in zip(ids, mask)]
    expected = data["ids"][variant]
    assert got == expected, [t for t, a, b in zip(data["texts"], got, expected) if a != b][:3]
    assert max(map(len, expected)) == 256  # texts over the limit are cut there
