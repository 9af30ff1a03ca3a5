"""ModernBERT's tokenizer (a byte-level BPE in a `tokenizer.json`) against
transformers 5 (tokenizers 0.23), which loads that file as it is:
tests/fixtures/modernbert_tokenizer/, written by
tests/fixtures/make_modernbert_tokenizer_fixture.py. The fixture is the
released tokenizer.json's pipeline (NFC, ByteLevel without a prefix space,
the [CLS] $A [SEP] template, its 116 added tokens: [MASK] with lstrip, runs
of 2 to 24 spaces, [unused0] to [unused82], ...) over a BPE of 1,474 tokens.

- cases.json: hand-written texts ([MASK] absorbing the whitespace before
  it, every kind of added token, space runs, NFC) with ids and offsets;
- reference.npz: a digest of the ids of each of the 100,000 fuzz texts
  `fuzz_texts(100_000, seed=0)` (every one is checked under `--full`, the
  first FUZZ_TEXTS in CI), the ids and character offsets of the first
  1,000, and 2,000 sentence pairs packed near their length limit.

Tokenizers are TensorFlow ops whatever the Keras backend: the TensorFlow
pass runs these tests, but the one that builds a model.
"""

import copy
import hashlib
import json
import shutil
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.preprocessing import BertPreprocessor
from bertzoo.tokenizers.base import Tokenizer, TokenizerError
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer
from bertzoo.tokenizers.kinds import tokenizer_class
from tests.conftest import exported_ids, size

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DIR = FIXTURES / "modernbert_tokenizer"
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CASES = json.loads((DIR / "cases.json").read_text(encoding="utf-8"))
REF = dict(np.load(DIR / "reference.npz"))
# Fuzz texts checked by digest: all 100,000 under `--full`; in CI the first
# 20,000 (the generator draws each text independently: a random sample).
# They still fail on the bugs this check is for (planted, 2026-12-07): ICU's
# NFC of the whole stretch for the library's (145 of 20,000 texts differ;
# 687 of 100,000), the pre-tokenizer's whitespace without U+2028/U+2029
# (1 of 20,000; 12 of 100,000: test_byte_bpe's texts find it 54 times).
FUZZ_TEXTS = size(ci=20_000, full=len(REF["digests"]))

sys.path.insert(0, str(FIXTURES))
import fuzz_text  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return ByteLevelBPETokenizer(DIR / "tokenizer.json")


def rows(values, lengths):
    splits = np.concatenate([[0], np.cumsum(lengths)])
    return [values[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])]


def char_offsets(text, starts, ends):
    """Byte offsets into `text` -> the reference's character offsets."""
    raw = text.encode("utf-8")
    return [
        [len(raw[:s].decode("utf-8")), len(raw[:e].decode("utf-8"))] for s, e in zip(starts, ends)
    ]


def digest(ids):
    data = np.asarray(ids, dtype="<i4").tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=2).digest(), "little")


@pytest.mark.backend_independent
def test_reads_the_pipeline_of_the_tokenizer_json(tokenizer):
    assert tokenizer_class("byte_level_bpe") is ByteLevelBPETokenizer
    assert tokenizer.vocabulary_size == CASES["vocabulary_size"] == 1588
    roles = [getattr(tokenizer, f"{r}_token") for r in ("cls", "sep", "pad", "unk", "mask")]
    assert roles == ["[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"]
    assert tokenizer.mask_token_id == CASES["mask_token_id"]
    assert (tokenizer.normalizer, tokenizer.add_prefix_space) == ("NFC", False)
    assert (tokenizer.pair_separators, tokenizer.trim_offsets) == (1, False)
    assert len(tokenizer.added_tokens) == 116 and tokenizer.vocabulary_file == "tokenizer.json"
    # The directory works too, and a preset's tokenizer section rebuilds it.
    assert ByteLevelBPETokenizer(DIR).get_config() == tokenizer.get_config()
    section = tokenizer.preset_section()
    assert section["vocabulary_file"] == "tokenizer.json"
    again = tokenizer_class(section.pop("kind"))(DIR / section.pop("vocabulary_file"), **section)
    assert again.get_config() == tokenizer.get_config()


@pytest.mark.backend_independent
def test_hand_written_cases(tokenizer):
    """[MASK] takes the whitespace before it (in its span: the template
    trims no offsets); the other added tokens are matched after NFC and
    split the text ("a  b" is "a", "  ", "b"); where NFC changes the text,
    a span holds the reference's (which maps a composed character to the
    first character it came from)."""
    texts = [c["text"] for c in CASES["cases"]]
    ids = tokenizer.tokenize_ids(tf.constant(texts)).to_list()
    got_ids, starts, ends = (r.to_list() for r in tokenizer.tokenize_with_offsets(texts))
    for case, a, b, s, e in zip(CASES["cases"], ids, got_ids, starts, ends):
        assert a == b == case["ids"], (case["text"], [tokenizer.vocabulary[i] for i in a])
        spans, reference = char_offsets(case["text"], s, e), case["offsets"]
        if unicodedata.normalize("NFC", case["text"]) == case["text"]:
            assert spans == reference, case["text"]
        else:
            assert all(x <= c < d <= y or c == d for (x, y), (c, d) in zip(spans, reference))
    assert tokenizer.detokenize(ids[0]) == CASES["cases"][0]["tokens"]
    mask = next(c for c in CASES["cases"] if c["text"] == "Fill the [MASK] in.")
    assert mask["tokens"][3:5] == ["Ġthe", "[MASK]"] and mask["offsets"][4] == [8, 15]
    # A batch that NFC leaves as it is (QA's contexts, often): its offsets
    # too (the NFC offset map of no text used to crash the process).
    plain = [c for c in CASES["cases"] if unicodedata.normalize("NFC", c["text"]) == c["text"]]
    got_ids, starts, ends = tokenizer.tokenize_with_offsets([c["text"] for c in plain])
    assert got_ids.to_list() == [c["ids"] for c in plain]
    spans = [
        char_offsets(c["text"], s, e) for c, s, e in zip(plain, starts.to_list(), ends.to_list())
    ]
    assert spans == [c["offsets"] for c in plain]


@pytest.mark.backend_independent
@pytest.mark.slow
def test_fuzz_ids_match_reference_on_all_texts(tokenizer):
    """The fuzz texts by digest (all 100,000 under `--full`, the first
    FUZZ_TEXTS in CI; 16 bits: a wrong text passes with odds 1/65,536); the
    first 1,000 by ids, which name the tokens where one differs."""
    fuzz = fuzz_text.fuzz_texts(FUZZ_TEXTS, 0)
    batch, got = 5000, []
    for i in range(0, len(fuzz), batch):
        ragged = tokenizer.tokenize_ids(tf.constant(fuzz[i : i + batch]))
        values, splits = ragged.flat_values.numpy(), ragged.row_splits.numpy()
        got += [values[a:b] for a, b in zip(splits[:-1], splits[1:])]
    differing = [i for i, ids in enumerate(got) if digest(ids) != REF["digests"][i]]
    expected = rows(REF["ids"], REF["lengths"])
    shown = [
        (i, fuzz[i], expected[i] if i < len(expected) else "(digest only)", got[i].tolist())
        for i in differing[:3]
    ]
    assert not differing, f"{len(differing)}/{len(fuzz)} fuzz texts differ: {shown}"


@pytest.mark.backend_independent
def test_fuzz_offsets_match_reference(tokenizer):
    """The first 1,000 fuzz texts: ids and character offsets equal where
    NFC leaves the text as it is; where it changes it, every span holds
    the reference's."""
    n = len(REF["lengths"])
    texts = fuzz_text.fuzz_texts(n, 0)
    ids, starts, ends = tokenizer.tokenize_with_offsets(texts)
    expected_ids = rows(REF["ids"], REF["lengths"])
    expected = rows(np.stack([REF["starts"], REF["ends"]], 1), REF["lengths"])
    exact = REF["offsets_exact"]
    assert 800 < exact.sum() < n
    differing = []
    for i, (a, s, e) in enumerate(zip(ids.to_list(), starts.to_list(), ends.to_list())):
        spans = char_offsets(texts[i], s, e)
        if exact[i]:
            wrong = a != expected_ids[i] or spans != expected[i]
        else:
            held = [x <= c < d <= y or c == d for (x, y), (c, d) in zip(spans, expected[i])]
            wrong = a != expected_ids[i] or not all(held)
        if wrong:
            differing.append(i)
    assert not differing, f"{len(differing)}/{n} differ, e.g. {[texts[i] for i in differing[:3]]}"


@pytest.mark.backend_independent
def test_packing_single_and_pairs_as_the_reference(tokenizer):
    """`[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, with the reference's
    longest-first truncation, on 2,000 pairs near the length limit."""
    pad = tokenizer.pad_token_id
    single = BertPreprocessor(tokenizer, sequence_length=8).pack(tf.constant(["a b"]))
    assert single["token_ids"].numpy()[0].tolist() == CASES["single"] + [pad] * 4
    pairs = fuzz_text.fuzz_pairs(len(REF["pair_lengths"]), 0, budget=(8, 16))
    expected = rows(REF["pair_ids"], REF["pair_lengths"])
    differing = []
    for length in sorted(set(REF["pair_max_length"].tolist())):
        at = [i for i, m in enumerate(REF["pair_max_length"]) if m == length]
        packer = BertPreprocessor(tokenizer, sequence_length=length, segment_ids=False)
        out = packer.pack(
            (tf.constant([pairs[i][0] for i in at]), tf.constant([pairs[i][1] for i in at]))
        )
        ids, mask = out["token_ids"].numpy(), out["padding_mask"].numpy()
        for row, i in enumerate(at):
            if ids[row][mask[row] > 0].tolist() != expected[i]:
                differing.append(i)
    assert not differing, f"{len(differing)} pairs differ, e.g. {pairs[differing[0]]}"


@pytest.mark.backend_independent
def test_mask_token_in_a_packed_text(tokenizer):
    """A typed [MASK] is one token, the whitespace before it absorbed, in
    packed sequences, tf.data and a SavedModel alike."""
    texts = ["Paris is the [MASK] of France.", "two  [MASK][MASK] masks", "[MASK]"]
    packed = BertPreprocessor(tokenizer, sequence_length=16).pack(tf.constant(texts))
    ids = packed["token_ids"].numpy()
    assert [int((row == tokenizer.mask_token_id).sum()) for row in ids] == [1, 2, 1]
    assert ids[2].tolist()[:3] == [
        tokenizer.cls_token_id,
        tokenizer.mask_token_id,
        tokenizer.sep_token_id,
    ]
    expected = tokenizer.tokenize_ids(tf.constant(texts)).to_list()
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tokenizer.tokenize_ids)
    assert [r for batch in dataset for r in batch.to_list()] == expected


@pytest.mark.backend_independent
def test_pre_split_words_as_the_reference(tokenizer):
    """Token tagging's words: transformers tokenizes each word of
    ModernBERT's tokenizer.json bare ("cat" -> "c", "at"; add_prefix_space
    changes nothing), unlike RoBERTa's, which take a prefix space each:
    the words' ids and their packing for tagging equal the reference's."""
    from bertzoo.tasks.tagging.features import encode_words

    cases = CASES["split_words"]
    assert len(cases) == 3 and all(c["ids"] == c["prefix_option_ids"] for c in cases)
    for case in cases:
        pieces = tokenizer.tokenize_word_ids(tf.constant(case["words"])).to_list()
        assert [tokenizer.cls_token_id, *sum(pieces, []), tokenizer.sep_token_id] == case["ids"]
        words = tf.ragged.constant([case["words"]])
        packed = encode_words(tokenizer, words, len(case["ids"]) + 2)
        ids = packed["token_ids"].numpy()[0].tolist()
        assert ids == case["ids"] + [tokenizer.pad_token_id] * 2
        starts = np.cumsum([1] + [len(p) for p in pieces])[:-1].tolist()
        assert packed["word_starts"].numpy()[0].tolist() == starts


@pytest.mark.backend_independent
def test_rebuilt_from_its_vocabulary_and_config(tokenizer):
    """What serving and corpus preparation's workers do: the vocabulary
    and `get_config` rebuild the same tokenizer (NFC, added tokens and the
    template included)."""
    rebuilt = tokenizer_class(tokenizer.kind)(list(tokenizer.vocabulary), **tokenizer.get_config())
    texts = [c["text"] for c in CASES["cases"]]
    assert rebuilt.tokenize_ids(texts).to_list() == tokenizer.tokenize_ids(texts).to_list()
    assert rebuilt.pair_separators == tokenizer.pair_separators
    with pytest.raises(TokenizerError, match="not the one of tokenizer_json"):
        tokenizer_class(tokenizer.kind)(["a", "b"], **tokenizer.get_config())


@pytest.mark.backend_independent
@pytest.mark.slow
def test_exported_saved_model(tokenizer, tmp_path):
    """NFC and the added tokens inside an exported graph."""
    texts = [c["text"] for c in CASES["cases"]]
    assert exported_ids(tokenizer, texts, tmp_path / "exported") == [
        c["ids"] for c in CASES["cases"]
    ]


def _modernbert_dir(tmp_path, name="modernbert"):
    directory = tmp_path / name
    directory.mkdir()
    for file in FILES:
        shutil.copy(DIR / file, directory / file)
    # A ModernBERT checkpoint's config, with this vocabulary's size.
    config = json.loads((FIXTURES / "modernbert" / "model" / "config.json").read_text("utf-8"))
    config["vocab_size"] = 1588
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


@pytest.mark.backend_independent
def test_from_a_modernbert_checkpoint_directory(tmp_path):
    """A ModernBERT directory ships only tokenizer.json (and
    tokenizer_config.json, naming the roles): its tokenizer and packer."""
    directory = _modernbert_dir(tmp_path)
    tok = Tokenizer.from_preset(directory)
    assert isinstance(tok, ByteLevelBPETokenizer) and tok.mask_token == "[MASK]"
    case = CASES["cases"][1]
    assert tok.tokenize_ids(tf.constant([case["text"]])).to_list() == [case["ids"]]
    packed = BertPreprocessor.from_preset(directory, sequence_length=6).pack(
        (tf.constant(["a"]), tf.constant(["b"]))
    )
    assert packed["token_ids"].numpy()[0].tolist() == CASES["pair"] + [tok.pad_token_id]


def test_saved_with_a_modernbert_checkpoint_and_loaded_back(tmp_path):
    """save_hf writes the tokenizer.json back byte for byte (transformers 5
    loads it as it is: the same ids on 3,000 fuzz texts, checked when this
    was written) with ModernBERT's tokenizer_config.json and the
    tokenizer's special ids in config.json; the directory, and a bertzoo
    preset made from it, load the same tokenizer."""
    import bertzoo
    from bertzoo.convert import save_hf

    tokenizer = ByteLevelBPETokenizer(DIR / "tokenizer.json")
    backbone = bertzoo.BertBackbone(
        vocabulary_size=1588,
        num_layers=2,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        num_segments=0,
        use_pooler=False,
        norm_first=True,
        use_bias=False,
        gated_feedforward=True,
        rope_theta=1000.0,
        local_rope_theta=100.0,
        local_attention_window=4,
        global_attention_every=2,
        activation="gelu",
        max_sequence_length=64,
    )
    out = save_hf(backbone, tmp_path / "hf", tokenizer=tokenizer)
    assert (out / "tokenizer.json").read_bytes() == (DIR / "tokenizer.json").read_bytes()
    assert not (out / "vocab.json").exists()
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["mask_token"] == "[MASK]" and "add_prefix_space" not in config
    hf = json.loads((out / "config.json").read_text(encoding="utf-8"))
    ids = [hf[f"{r}_token_id"] for r in ("cls", "sep", "pad", "bos", "eos")]
    assert ids == [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id] + ids[:2]
    texts = [c["text"] for c in CASES["cases"]]
    expected = [c["ids"] for c in CASES["cases"]]
    assert Tokenizer.from_preset(out).tokenize_ids(tf.constant(texts)).to_list() == expected
    preset = tmp_path / "preset"
    bertzoo.BertBackbone.from_preset(out).save_to_preset(preset)
    Tokenizer.from_preset(out).save_to_preset(preset)
    document = json.loads((preset / "config.json").read_text(encoding="utf-8"))
    assert document["tokenizer"]["vocabulary_file"] == "tokenizer.json"
    assert Tokenizer.from_preset(preset).tokenize_ids(tf.constant(texts)).to_list() == expected


def _variant(tmp_path, edit):
    data = json.loads((DIR / "tokenizer.json").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _refused(tmp_path, edit, match, **kwargs):
    with pytest.raises(TokenizerError, match=match) as info:
        ByteLevelBPETokenizer(_variant(tmp_path, edit), **kwargs)
    assert "\n" not in str(info.value)


def _set(*keys, value):
    def edit(data):
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = copy.deepcopy(value)

    return edit


@pytest.mark.backend_independent
def test_what_it_does_not_reproduce_is_a_one_line_error(tmp_path):
    nfkc = {"type": "NFKC"}
    _refused(
        tmp_path, _set("normalizer", value=nfkc), 'normalizer {"type":"NFKC"} is not supported'
    )
    _refused(
        tmp_path, _set("pre_tokenizer", value={"type": "Metaspace"}), 'pre_tokenizer "Metaspace"'
    )
    _refused(tmp_path, _set("pre_tokenizer", "use_regex", value=False), "use_regex=false")
    _refused(tmp_path, _set("model", "dropout", value=0.1), "model dropout=0.1 is not supported")
    _refused(tmp_path, _set("model", "byte_fallback", value=True), "model byte_fallback=true")
    _refused(tmp_path, _set("model", "ignore_merges", value=True), "model ignore_merges=true")
    _refused(tmp_path, _set("model", "end_of_word_suffix", value="</w>"), "end_of_word_suffix")
    _refused(tmp_path, _set("added_tokens", 0, "single_word", value=True), "single_word=true")
    _refused(tmp_path, _set("added_tokens", 6, "rstrip", value=True), "rstrip=true")
    # An lstrip token beside the space runs it would compete with.
    _refused(tmp_path, _set("added_tokens", 3, "lstrip", value=True), "beside added tokens that")
    _refused(tmp_path, _set("post_processor", value=None), "post_processor null")
    _refused(
        tmp_path, _set("post_processor", value={"type": "ByteLevel"}), 'post_processor "ByteLevel"'
    )
    pair = json.loads((DIR / "tokenizer.json").read_text(encoding="utf-8"))["post_processor"][
        "pair"
    ]
    _refused(
        tmp_path,
        _set("post_processor", "pair", value=pair[:3]),
        'TemplateProcessing pair "\\[CLS\\] \\$A \\[SEP\\]"',
    )
    _refused(
        tmp_path, lambda d: None, "add_prefix_space=True, but its ByteLevel", add_prefix_space=True
    )
    with pytest.raises(TokenizerError, match="holds its merges: pass no merges="):
        ByteLevelBPETokenizer(DIR / "tokenizer.json", merges=DIR / "merges.txt")
    with pytest.raises(TokenizerError, match="post-processor packs with '\\[CLS\\]'"):
        ByteLevelBPETokenizer(DIR / "tokenizer.json", cls_token="<cls>")


@pytest.mark.backend_independent
def test_a_roberta_tokenizer_json_gives_the_vocab_json_ids(tmp_path):
    """The same reader takes RoBERTa's tokenizer.json (RobertaProcessing,
    <mask> with lstrip, no normaliser): the ids of its vocab.json and
    merges.txt."""
    byte_bpe = FIXTURES / "byte_bpe"
    vocab = json.loads((byte_bpe / "vocab.json").read_text(encoding="utf-8"))
    merges = (byte_bpe / "merges.txt").read_text(encoding="utf-8").split("\n")[1:]
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    document = {
        "added_tokens": [
            {"id": vocab[t], "content": t, "lstrip": t == "<mask>", "normalized": False}
            for t in specials
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "post_processor": {
            "type": "RobertaProcessing",
            "sep": ["</s>", 2],
            "cls": ["<s>", 0],
            "trim_offsets": True,
        },
        "model": {"type": "BPE", "vocab": vocab, "merges": [m for m in merges if m]},
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    fast = ByteLevelBPETokenizer(path)
    plain = ByteLevelBPETokenizer(byte_bpe / "vocab.json")
    assert fast.pair_separators == 2 and fast.trim_offsets and fast.mask_token == "<mask>"
    # Pre-split words take RoBERTa's prefix space, as from vocab.json.
    words = tf.constant(["Hello", "world"])
    assert fast.tokenize_word_ids(words).to_list() == plain.tokenize_word_ids(words).to_list()
    assert fast.tokenize_word_ids(words).to_list() != fast.tokenize_ids(words).to_list()
    cases = json.loads((byte_bpe / "cases.json").read_text(encoding="utf-8"))["cases"]
    texts = [c["text"] for c in cases]
    assert fast.tokenize_ids(tf.constant(texts)).to_list() == [c["ids"] for c in cases]
    for a, b in zip(fast.tokenize_with_offsets(texts), plain.tokenize_with_offsets(texts)):
        assert a.to_list() == b.to_list()
