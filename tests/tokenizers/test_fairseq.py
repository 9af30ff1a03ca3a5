"""XLMRobertaTokenizer (SentencePiece unigram with fairseq's ids) against
Hugging Face's XLM-R tokenizer.

The fixtures (tests/fixtures/xlmr/, written by
tests/fixtures/make_xlmr_tokenizer_fixtures.py with transformers 5 /
tokenizers 0.23) hold a small XLM-R-style SentencePiece model, a digest of
Hugging Face's ids for each of the 100,000 fuzz texts `fuzz_texts(100_000,
0)` (the full ids of the first 2,000), hand-written cases, sentence pairs
packed near the length limit and the token offsets of 3,000 texts.
"""

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.preprocessing import BertPreprocessor
from bertzoo.tokenizers.base import TokenizerError, from_preset
from bertzoo.tokenizers.fairseq import XLMRobertaTokenizer, charsmap_entries
from tests.conftest import exported_ids, size

pytestmark = pytest.mark.backend_independent

HERE = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURES = HERE / "xlmr"
MODEL = FIXTURES / "sentencepiece.bpe.model"
CASES = json.loads((FIXTURES / "cases.json").read_text(encoding="utf-8"))
FUZZ = np.load(FIXTURES / "fuzz_ids.npz")
# Fuzz texts checked by digest: all 100,000 under `--full`; in CI the first
# 20,000 (the generator draws each text independently: a random sample).
# They still fail on the bugs this check is for (planted, 2026-12-07): a
# whole cluster mapped by its longest charsmap key, not its shortest (7 of
# 20,000 texts differ; 51 of 100,000), clusters of 5 bytes not looked up
# whole (142; 747).
FUZZ_TEXTS = size(ci=20_000, full=len(FUZZ["digests"]))


@pytest.fixture(scope="module")
def tokenizer():
    return XLMRobertaTokenizer(MODEL)


@pytest.fixture(scope="module")
def fuzz_texts():
    sys.path.insert(0, str(HERE))
    try:
        import fuzz_text
    finally:
        sys.path.remove(str(HERE))
    return fuzz_text


def digest(ids):
    raw = np.asarray(ids, dtype="<i4").tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=4).digest(), "little")


def head_ids():
    return np.split(FUZZ["head_ids"], np.cumsum(FUZZ["head_lengths"])[:-1])


def test_fixture_model_is_the_one_recorded():
    assert hashlib.sha256(MODEL.read_bytes()).hexdigest() == CASES["model_sha256"]


def test_fairseq_ids_and_specials(tokenizer):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(MODEL))
    assert tokenizer.vocabulary_size == CASES["vocabulary_size"] == len(sp) + 2
    assert tokenizer.vocabulary[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (tokenizer.cls_token_id, tokenizer.pad_token_id, tokenizer.sep_token_id) == (0, 1, 2)
    assert tokenizer.unk_token_id == 3 and tokenizer.mask_token_id == len(sp) + 1
    # Every SentencePiece piece at its id + 1.
    assert all(tokenizer.id_to_token(i + 1) == sp.id_to_piece(i) for i in range(3, len(sp)))
    assert tokenizer.pair_separators == 2
    ids = tokenizer("Hello world").numpy().tolist()
    assert tokenizer.detokenize(ids) == [sp.id_to_piece(i - 1) for i in ids]
    # <s> A </s> and <s> A </s></s> B </s>, as Hugging Face packs them.
    pre = BertPreprocessor(tokenizer, sequence_length=16, pair_segment_id=0)
    single, pair = CASES["specials"]["single"], CASES["specials"]["pair"]
    out = pre(["ab"])["token_ids"].numpy()[0].tolist()
    assert out[: len(single)] == single and set(out[len(single) :]) == {1}
    out = pre((["ab"], ["cd"]))["token_ids"].numpy()[0].tolist()
    assert out[: len(pair)] == pair


def test_hand_written_cases(tokenizer):
    """Special-token strings in the text, whitespace of every kind, the
    normaliser's grapheme-cluster rule, NUL, emoji, Indic conjuncts."""
    texts = [text for text, _ in CASES["cases"]]
    got = tokenizer(texts).to_list()
    for (text, expected), ids in zip(CASES["cases"], got, strict=True):
        assert ids == expected, text


def test_first_2000_fuzz_texts_exactly(tokenizer, fuzz_texts):
    texts = fuzz_texts.fuzz_texts(2000, 0)
    got = tokenizer(texts).to_list()
    bad = [i for i, (g, e) in enumerate(zip(got, head_ids(), strict=True)) if g != e.tolist()]
    assert not bad, [(i, texts[i]) for i in bad[:5]]


@pytest.mark.slow
def test_all_100000_fuzz_texts(tokenizer, fuzz_texts):
    """Identical ids on all 100,000 fuzz texts under `--full`, on the first
    FUZZ_TEXTS in CI (their digests)."""
    texts = fuzz_texts.fuzz_texts(FUZZ_TEXTS, 0)
    got = []
    for i in range(0, len(texts), 20_000):
        got += tokenizer(texts[i : i + 20_000]).to_list()
    digests = FUZZ["digests"]
    bad = [i for i, ids in enumerate(got) if digest(ids) != digests[i]]
    assert not bad, (f"{len(bad)}/{len(texts)} differ", [(i, texts[i]) for i in bad[:5]])


def test_in_tf_data_and_tf_function(tokenizer):
    texts = [text for text, _ in CASES["cases"]]
    expected = [ids for _, ids in CASES["cases"]]
    data = tf.data.Dataset.from_tensor_slices(texts).batch(7).map(tokenizer.tokenize_ids)
    got = [row for batch in data for row in batch.to_list()]
    assert got == expected
    fn = tf.function(tokenizer.tokenize_ids, input_signature=[tf.TensorSpec([None], tf.string)])
    assert fn(tf.constant(texts)).to_list() == expected


def test_pairs_near_the_length_limit(tokenizer):
    """`<s> A </s></s> B </s>` cut longest-first as Hugging Face's Rust
    tokenizer cuts it, at every length."""
    # transformers takes an empty second text for none (`if text_pair`):
    # `<s> A </s>`, where bertzoo packs the pair `<s> A </s></s></s>`; those
    # rows are checked as single texts.
    groups = {}
    for a, b, max_length, expected in CASES["pairs"]:
        groups.setdefault((max_length, bool(b)), []).append((a, b, expected))
    empty = sum(len(rows) for (_, has_b), rows in groups.items() if not has_b)
    for (max_length, has_b), rows in groups.items():
        pre = BertPreprocessor(tokenizer, sequence_length=max_length, pair_segment_id=0)
        a, b, expected = zip(*rows, strict=True)
        out = pre((list(a), list(b))) if has_b else pre(list(a))
        lengths = out["padding_mask"].numpy().sum(axis=1)
        for ids, n, want, text in zip(out["token_ids"].numpy(), lengths, expected, a, strict=True):
            assert ids[:n].tolist() == want, (text, max_length)
    assert 0 < empty < len(CASES["pairs"]) // 2


def test_offsets_cover_the_reference_spans(tokenizer, fuzz_texts):
    """`tokenize_with_offsets`: the ids of `tokenize`, and each token's byte
    span (its whitespace-delimited word) holds the span Hugging Face gives
    that token, on the texts whose offsets Hugging Face gets right (those its
    normaliser leaves as they are: it misaligns the rest)."""
    lengths = FUZZ["offsets_lengths"]
    texts = fuzz_texts.fuzz_texts(len(lengths), 0)
    spans = np.split(FUZZ["offsets"], np.cumsum(lengths)[:-1])
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    # The ids of `tokenize` (identical to the reference's on every fuzz text).
    assert ids.to_list() == tokenizer(texts).to_list()
    starts, ends = starts.to_list(), ends.to_list()
    outside = []
    exact = FUZZ["offsets_exact"]
    assert exact.sum() >= 150
    for i, (text, span) in enumerate(zip(texts, spans, strict=True)):
        if not exact[i]:
            continue
        at = np.cumsum([0] + [len(c.encode()) for c in text])  # char -> byte
        for j, (s, e) in enumerate(span.tolist()):
            if s < e and not starts[i][j] <= at[s] < at[e] <= ends[i][j]:
                outside.append((i, j))
    assert not outside, outside[:5]


def test_charsmap_entries_match_sentencepiece():
    """The normaliser's table, read from the Darts trie, gives what
    SentencePiece's own normaliser gives for single characters."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(MODEL.read_bytes())
    keys, values = charsmap_entries(model.normalizer_spec.precompiled_charsmap)
    table = dict(zip(keys, values, strict=True))
    assert len(table) > 100_000 and table["Ａ".encode()] == b"A"
    sp = spm.SentencePieceProcessor(model_file=str(MODEL))
    for c in ["Ａ", "①", "ﬁ", "㎏", "Ⅻ", "ｶ"]:
        normalized = "".join(sp.encode_as_pieces(c)).lstrip("▁")
        assert table[c.encode()].decode() == normalized, c


def _hf_directory(tmp_path, **config):
    directory = tmp_path / "xlmr"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps({"model_type": "xlm-roberta", "vocab_size": CASES["vocabulary_size"]})
    )
    shutil.copy(MODEL, directory / "sentencepiece.bpe.model")
    tok = {"tokenizer_class": "XLMRobertaTokenizer", "add_prefix_space": True, **config}
    (directory / "tokenizer_config.json").write_text(json.dumps(tok))
    return directory


def test_hf_directory_loads_this_tokenizer(tmp_path):
    directory = _hf_directory(
        tmp_path, mask_token={"content": "<mask>", "lstrip": True, "single_word": False}
    )
    tok = from_preset(directory)
    assert isinstance(tok, XLMRobertaTokenizer)
    text, expected = CASES["cases"][9]
    assert tok(text).numpy().tolist() == expected


@pytest.mark.parametrize(
    "config, named",
    [
        ({"do_lower_case": True}, "do_lower_case=true"),
        ({"add_prefix_space": False}, "add_prefix_space=false"),
        ({"sp_model_kwargs": {"enable_sampling": True}}, "sp_model_kwargs="),
        ({"mask_token": "[MASK]"}, 'mask_token="[MASK]"'),
        ({"added_tokens_decoder": {"802": {"content": "<new>"}}}, 'added token "<new>"'),
    ],
)
def test_hf_options_not_reproduced_are_one_line_errors(tmp_path, config, named):
    directory = _hf_directory(tmp_path, **config)
    with pytest.raises(TokenizerError) as info:
        from_preset(directory)
    message = str(info.value)
    assert "\n" not in message and named in message and "supported" in message


@pytest.mark.backend_independent
def test_hf_tokenizer_json_of_another_pipeline_is_an_error(tmp_path):
    """What transformers 5 takes from tokenizer.json (the charsmap, the
    Unigram vocabulary, added tokens) must be what bertzoo reproduces."""
    directory = _hf_directory(tmp_path)
    older = {
        "normalizer": {"type": "Sequence", "normalizers": []},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
        "model": {"type": "Unigram", "byte_fallback": False},
    }
    (directory / "tokenizer.json").write_text(json.dumps(older))
    with pytest.raises(TokenizerError, match='normalizer "Sequence" without a Precompiled') as info:
        from_preset(directory)
    message = str(info.value)
    assert (
        "\n" not in message
        and "a vocabulary of 0 pieces (sentencepiece.bpe.model gives 802)" in message
    )
    with gzip.open(FIXTURES / "transformers4_tokenizer.json.gz", "rt", encoding="utf-8") as f:
        good = json.loads(f.read())
    for change, named in (
        (lambda d: d["model"]["vocab"][10].__setitem__(1, 0.5), "vocabulary entry 10"),
        (lambda d: d["model"]["vocab"].pop(), "a vocabulary of 801 pieces"),
        (
            lambda d: d["normalizer"].__setitem__("precompiled_charsmap", "AAAA"),
            "charsmap other than sentencepiece.bpe.model's",
        ),
    ):
        edited = json.loads(json.dumps(good))
        change(edited)
        (directory / "tokenizer.json").write_text(json.dumps(edited), encoding="utf-8")
        with pytest.raises(TokenizerError, match=named):
            from_preset(directory)


@pytest.mark.backend_independent
def test_a_tokenizer_json_written_by_transformers_4_tokenizes_as_transformers_5(tmp_path, caplog):
    """The released xlm-roberta checkpoints' tokenizer.json (transformers 4:
    a lone Metaspace pre-tokenizer, no WhitespaceSplit). transformers 5's
    XLMRobertaTokenizer ignores its pipeline and builds its own, so the ids
    are the ones without tokenizer.json; the file's own pipeline gives
    others on whitespace runs (tests/fixtures/make_xlmr_transformers4_json.py)."""
    reference = json.loads((FIXTURES / "transformers4_reference.json").read_text("utf-8"))
    directory = _hf_directory(tmp_path)
    with gzip.open(FIXTURES / "transformers4_tokenizer.json.gz", "rb") as f:
        (directory / "tokenizer.json").write_bytes(f.read())
    with caplog.at_level("INFO", logger="bertzoo.tokenizers.hf_config"):
        tok = from_preset(directory)
    assert "transformers 5 ignores it" in caplog.text
    got = tok.tokenize_ids(tf.constant(reference["texts"])).to_list()
    assert got == reference["ids"]
    differing = [a != b for a, b in zip(reference["ids"], reference["transformers4_ids"])]
    assert sum(differing) >= 10  # the file's own pipeline: a "▁" per extra space


def test_models_it_cannot_map_are_errors(tmp_path):
    albert = HERE / "sentencepiece" / "spiece.model"  # <pad> 0, <unk> 1
    with pytest.raises(TokenizerError, match="starts with \\['<pad>', '<unk>'"):
        XLMRobertaTokenizer(albert)
    with pytest.raises(TokenizerError, match="fixed by fairseq's ids; got mask_token='\\[MASK\\]'"):
        XLMRobertaTokenizer(MODEL, mask_token="[MASK]")


def test_save_to_preset_round_trip(tokenizer, tmp_path):
    path = tokenizer.save_to_preset(tmp_path / "preset")
    assert path.name == "sentencepiece.bpe.model" and path.read_bytes() == MODEL.read_bytes()
    assert tokenizer.preset_section() == {"kind": "fairseq_sentencepiece"}


def test_survives_clear_session_and_exports(tokenizer, tmp_path):
    """keras.backend.clear_session() does not break the tokenizer or a
    function traced before it; in an exported SavedModel the ops, the
    charsmap table and the model bytes travel with the graph."""
    import keras

    texts = [text for text, _ in CASES["cases"]]
    expected = [ids for _, ids in CASES["cases"]]
    encode = tf.function(tokenizer.tokenize_ids, input_signature=[tf.TensorSpec([None], tf.string)])
    assert encode(tf.constant(texts)).to_list() == expected
    keras.backend.clear_session()
    assert tokenizer(texts).to_list() == expected
    assert encode(tf.constant(texts)).to_list() == expected
    assert exported_ids(tokenizer, texts, tmp_path / "exported") == expected


def test_save_hf_writes_a_directory_that_loads_it_back(tokenizer, tmp_path):
    import bertzoo
    from bertzoo.convert import save_hf

    backbone = bertzoo.BertBackbone(
        vocabulary_size=tokenizer.vocabulary_size,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        num_segments=1,
        position_padding_id=1,
        max_sequence_length=34,
    )
    save_hf(backbone, tmp_path / "hf", tokenizer=tokenizer, model_type="xlm-roberta")
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "XLMRobertaTokenizer"
    assert (config["cls_token"], config["mask_token"]) == ("<s>", "<mask>")
    loaded = from_preset(tmp_path / "hf")
    assert isinstance(loaded, XLMRobertaTokenizer)
    texts = [text for text, _ in CASES["cases"]]
    assert loaded(texts).to_list() == [ids for _, ids in CASES["cases"]]


def test_serving_rebuilds_it_from_its_model(tokenizer):
    """A serving model's config carries XLM-R's SentencePiece model (not
    its token list, which cannot rebuild it), and gives the same ids."""
    from bertzoo.serving import _tokenizer_config, _tokenizer_from_config

    config = _tokenizer_config(tokenizer)
    assert "proto_base64" in config and "vocabulary" not in config
    rebuilt = _tokenizer_from_config(config)
    texts = ["Hello world", "이 원피스 예뻐요 <mask>", "  spaces\tand ＦＵＬＬ width"]
    assert rebuilt.tokenize_ids(texts).to_list() == tokenizer.tokenize_ids(texts).to_list()
