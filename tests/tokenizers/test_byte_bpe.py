"""RoBERTa's byte-level BPE tokenizer against Hugging Face's
`RobertaTokenizerFast` (tokenizers 0.23, transformers 5) over the same small
vocabulary: tests/fixtures/byte_bpe/, written by
tests/fixtures/make_byte_bpe_fixtures.py.

- cases.json: hand-written texts (special tokens typed in the text,
  "<mask>" absorbing the whitespace before it, whitespace runs,
  contractions, multi-byte characters, NUL) with ids and offsets;
- reference.npz: a digest of the ids of each of the 100,000 fuzz texts
  `fuzz_texts(100_000, seed=0)` (every one is checked under `--full`, the
  first FUZZ_TEXTS in CI), the ids and character offsets of the first
  3,000, and 2,000 sentence pairs packed near their length limit.
"""

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertzoo.preprocessing import BertPreprocessor
from bertzoo.tokenizers.base import Tokenizer, TokenizerError
from bertzoo.tokenizers.byte_bpe import ByteLevelBPETokenizer, bytes_to_unicode
from bertzoo.tokenizers.kinds import tokenizer_class
from tests.conftest import exported_ids, size

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DIR = FIXTURES / "byte_bpe"
CASES = json.loads((DIR / "cases.json").read_text(encoding="utf-8"))
REF = dict(np.load(DIR / "reference.npz"))
# Fuzz texts checked by digest: all 100,000 under `--full`; in CI the first
# 20,000 (the generator draws each text independently: a random sample).
# They still fail on the bugs this check is for (planted, 2026-12-07): the
# pre-tokenizer's whitespace without U+2028/U+2029 (54 of 20,000 texts
# differ; 221 of 100,000), without its lookahead emulation (9,845; 48,887).
FUZZ_TEXTS = size(ci=20_000, full=len(REF["digests"]))

sys.path.insert(0, str(FIXTURES))
import fuzz_text  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return ByteLevelBPETokenizer(DIR / "vocab.json")


@pytest.fixture(scope="module")
def fuzz():
    return fuzz_text.fuzz_texts(FUZZ_TEXTS, 0)


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
    return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "little")


@pytest.mark.backend_independent  # tokenizers are TensorFlow ops under any backend
def test_roberta_ids_and_kind():
    assert tokenizer_class("byte_level_bpe") is ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer(DIR)  # the directory works too
    assert [tok.cls_token_id, tok.pad_token_id, tok.sep_token_id, tok.unk_token_id] == [0, 1, 2, 3]
    assert tok.mask_token_id == tok.vocabulary_size - 1 == 1999
    assert tok.pair_separators == 2
    # A bertzoo preset's tokenizer section rebuilds it.
    section = tok.preset_section()
    assert section["kind"] == "byte_level_bpe" and section["add_prefix_space"] is False
    again = tokenizer_class(section.pop("kind"))(DIR / "vocab.json", **section)
    assert again.get_config() == tok.get_config()


@pytest.mark.backend_independent
def test_hand_written_cases(tokenizer):
    texts = [c["text"] for c in CASES["cases"]]
    ids = tokenizer.tokenize_ids(tf.constant(texts)).to_list()
    got_ids, starts, ends = (r.to_list() for r in tokenizer.tokenize_with_offsets(texts))
    for case, a, b, s, e in zip(CASES["cases"], ids, got_ids, starts, ends):
        assert a == b == case["ids"], (case["text"], [tokenizer.vocabulary[i] for i in a])
        assert char_offsets(case["text"], s, e) == case["offsets"], case["text"]
    assert tokenizer.detokenize(ids[0]) == CASES["cases"][0]["tokens"]


@pytest.mark.backend_independent
@pytest.mark.slow
def test_fuzz_ids_match_reference_on_all_texts(tokenizer, fuzz):
    """The fuzz texts by digest (all 100,000 under `--full`, the first
    FUZZ_TEXTS in CI); the first 3,000 by ids, which name the tokens where
    one differs."""
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
def test_fuzz_offsets_match_reference(tokenizer, fuzz):
    n = len(REF["lengths"])
    ids, starts, ends = tokenizer.tokenize_with_offsets(fuzz[:n])
    expected_ids = rows(REF["ids"], REF["lengths"])
    expected = rows(np.stack([REF["starts"], REF["ends"]], 1), REF["lengths"])
    differing = [
        i
        for i, (a, s, e) in enumerate(zip(ids.to_list(), starts.to_list(), ends.to_list()))
        if a != expected_ids[i] or char_offsets(fuzz[i], s, e) != expected[i]
    ]
    assert not differing, f"{len(differing)}/{n} differ, e.g. {[fuzz[i] for i in differing[:3]]}"


@pytest.mark.backend_independent  # BertPreprocessor.pack: TensorFlow ops
def test_packing_single_and_pairs_as_the_reference(tokenizer):
    """`<s> A </s>` and `<s> A </s></s> B </s>`, with the reference's
    longest-first truncation, on 2,000 pairs near the length limit."""
    single = BertPreprocessor(tokenizer, sequence_length=8).pack(tf.constant(["a b"]))
    assert single["token_ids"].numpy()[0].tolist() == CASES["single"] + [1] * 4
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
def test_tf_data_tf_function_and_exported_saved_model(tokenizer, tmp_path):
    texts = [c["text"] for c in CASES["cases"]]
    expected = [c["ids"] for c in CASES["cases"]]
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(4).map(tokenizer.tokenize_ids)
    assert [r for batch in dataset for r in batch.to_list()] == expected
    assert exported_ids(tokenizer, texts, tmp_path / "exported") == expected


# Not backend_independent: the JAX pass's one check of the byte-level BPE
# tokenizer's output under the backend (numpy arrays).
def test_tokenize_under_the_keras_backend(tokenizer):
    """`tokenize` (the checked entry point) returns the backend's arrays:
    TensorFlow tensors under TensorFlow, numpy under JAX; the ids agree."""
    text = CASES["cases"][0]
    out = tokenizer(text["text"])
    assert np.asarray(out).tolist() == text["ids"]
    batch = tokenizer([c["text"] for c in CASES["cases"][:3]])
    batch = batch.to_list() if isinstance(batch, tf.RaggedTensor) else batch
    assert [np.asarray(r).tolist() for r in batch] == [c["ids"] for c in CASES["cases"][:3]]


@pytest.mark.backend_independent
def test_from_hugging_face_directory(tmp_path):
    directory = tmp_path / "roberta"
    directory.mkdir()
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(DIR / name, directory / name)
    (directory / "config.json").write_text(
        json.dumps({"model_type": "roberta", "vocab_size": 2000}), encoding="utf-8"
    )
    mask = {"content": "<mask>", "lstrip": True, "rstrip": False, "__type": "AddedToken"}
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "RobertaTokenizer", "mask_token": mask}), encoding="utf-8"
    )
    tok = Tokenizer.from_preset(directory)
    assert isinstance(tok, ByteLevelBPETokenizer) and not tok.add_prefix_space
    assert tok.tokenize_ids(tf.constant(["Hello world"])).to_list() == [CASES["cases"][0]["ids"]]
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["add_prefix_space"] = True
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    spaced = Tokenizer.from_preset(directory)
    assert spaced.add_prefix_space
    # add_prefix_space: "Hello" starts like " Hello" in the middle of a text.
    with_space = tok.tokenize_ids(tf.constant([" Hello world"])).to_list()
    assert spaced.tokenize_ids(tf.constant(["Hello world"])).to_list() == with_space


def _write(tmp_path, vocab=None, merges=None):
    directory = tmp_path / "bad"
    directory.mkdir(exist_ok=True)
    data = json.loads((DIR / "vocab.json").read_text(encoding="utf-8"))
    (directory / "vocab.json").write_text(json.dumps(vocab(data) if vocab else data), "utf-8")
    lines = (DIR / "merges.txt").read_text(encoding="utf-8")
    if merges is not False:
        (directory / "merges.txt").write_text(merges(lines) if merges else lines, "utf-8")
    return directory / "vocab.json"


def _one_line_error(path, match):
    with pytest.raises(TokenizerError, match=match) as info:
        ByteLevelBPETokenizer(path)
    assert "\n" not in str(info.value)


@pytest.mark.backend_independent
def test_bad_files_are_one_line_errors(tmp_path):
    def drop(token):
        def edit(data):
            del data[token]
            return {t: i for i, t in enumerate(sorted(data, key=data.get))}

        return edit

    merge = (DIR / "merges.txt").read_text(encoding="utf-8").split("\n")[1]
    merged = "".join(merge.split(" "))
    _one_line_error(
        _write(tmp_path, vocab=drop(merged)),
        f"line 2: the merge '{merge}' needs '{merged}', which is not in the vocabulary "
        "\\(merges.txt does not match vocab.json\\)",
    )
    _one_line_error(
        _write(tmp_path, merges=lambda text: text + "a b c\n"), "is not a merge \\(two tokens"
    )
    _one_line_error(_write(tmp_path, vocab=drop("<mask>")), "lacks the special token\\(s\\) <mask>")
    _one_line_error(
        _write(tmp_path, vocab=drop(bytes_to_unicode()[0])),
        "lacks 1 of the 256 byte characters of a byte-level BPE",
    )
    _one_line_error(_write(tmp_path, vocab=lambda data: {**data, "extra": 0}), "id 0 is repeated")
    (tmp_path / "bad" / "merges.txt").unlink()
    _one_line_error(_write(tmp_path, merges=False), "Merges file .*merges.txt does not exist")
    (tmp_path / "bad" / "vocab.json").write_text("[1, 2", "utf-8")
    _one_line_error(tmp_path / "bad" / "vocab.json", "is not a JSON vocabulary")
    _one_line_error(tmp_path / "nothing.json", "does not exist")
    with pytest.raises(TokenizerError, match="does not lowercase"):
        ByteLevelBPETokenizer(DIR / "vocab.json", lowercase=True)


# Runs under JAX too: it builds a backbone and writes it with save_hf.
def test_saved_with_a_roberta_checkpoint_and_loaded_back(tmp_path):
    """save_hf writes vocab.json, merges.txt and RoBERTa's tokenizer_config;
    the directory's preprocessor packs `<s> A </s></s> B </s>` with them."""
    import bertzoo
    from bertzoo.convert import save_hf

    tokenizer = ByteLevelBPETokenizer(DIR / "vocab.json")
    backbone = bertzoo.BertBackbone(
        vocabulary_size=2000,
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        num_segments=1,
        max_sequence_length=34,
        position_padding_id=1,
    )
    out = save_hf(backbone, tmp_path / "roberta", tokenizer=tokenizer, model_type="roberta")
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "RobertaTokenizer" and not config["add_prefix_space"]
    assert json.loads((out / "vocab.json").read_text("utf-8")) == json.loads(
        (DIR / "vocab.json").read_text("utf-8")
    )
    preprocessor = BertPreprocessor.from_preset(out)
    assert isinstance(preprocessor.tokenizer, ByteLevelBPETokenizer)
    assert preprocessor.sequence_length == 32
    packed = preprocessor.pack((tf.constant(["a"]), tf.constant(["b"])))
    assert packed["token_ids"].numpy()[0].tolist() == CASES["pair"] + [1] * 26
    again = ByteLevelBPETokenizer(out / "vocab.json")
    assert again.merges == tokenizer.merges and again.vocabulary == tokenizer.vocabulary


@pytest.mark.backend_independent
def test_empty_batches_texts_and_scalar_offsets(tokenizer):
    assert tokenizer.tokenize_ids(tf.constant([], tf.string)).to_list() == []
    assert tokenizer.tokenize_ids(tf.constant(["", ""])).to_list() == [[], []]
    assert [r.to_list() for r in tokenizer.tokenize_with_offsets([])] == [[], [], []]
    ids, starts, ends = tokenizer.tokenize_with_offsets(" <mask>")
    assert (ids.numpy().tolist(), starts.numpy().tolist(), ends.numpy().tolist()) == (
        [1999],
        [1],
        [7],
    )
    assert tokenizer.token_strings(tf.constant(["Hello world"])).to_list() == [
        [t.encode("utf-8") for t in CASES["cases"][0]["tokens"]]
    ]
