"""The one rule for files read from a directory (bertzoo.io.bounded): a
plain file within its cap, counts within theirs, checked before anything
is allocated; and the readers that go through it. (The memory bombs, in a
subprocess under a memory bound: tests/reliability/test_hostile_files.py.)"""

import json
import os
import shutil
import threading

import pytest

import bertzoo
from bertzoo.errors import IntegrityError
from bertzoo.io import bounded, manifest
from bertzoo.io.jsonfile import load_json, read_json_object
from bertzoo.tokenizers import byte_bpe, wordpiece
from bertzoo.tokenizers.base import TokenizerError

pytestmark = pytest.mark.backend_independent  # files and numbers only


def _returns_within(call, seconds=10):
    """call()'s exception (or None), failing the test if it blocks."""
    outcome = {}

    def run():
        try:
            call()
            outcome["error"] = None
        except Exception as e:  # noqa: BLE001 (the test inspects it)
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the read blocked"
    return outcome["error"]


def test_plain_files_within_the_cap_are_read(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b'{"x": [1, 2]}')
    assert bounded.read_bounded(path, 13, "config file") == b'{"x": [1, 2]}'
    assert load_json(path) == {"x": [1, 2]}
    assert read_json_object(path, ValueError) == {"x": [1, 2]}
    with pytest.raises(bounded.UnboundedFileError, match=r"is 13 bytes, more than the 12 bytes"):
        bounded.read_bounded(path, 12, "config file")
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(bounded.UnboundedFileError, match="is not UTF-8 text"):
        load_json(path)
    with pytest.raises(FileNotFoundError):
        load_json(tmp_path / "missing.json")


def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)  # no writer: reading it would block forever
    error = _returns_within(lambda: bounded.read_bounded(fifo, 100, "config file"))
    assert isinstance(error, bounded.UnboundedFileError) and "is a FIFO" in str(error)
    # Classes resolved here, in the main thread: the threads only read files
    # (an import inside one leaves TensorFlow's autograph with a bad cache).
    tokenizer_class = bertzoo.BertTokenizer
    error = _returns_within(lambda: tokenizer_class(fifo))
    assert isinstance(error, TokenizerError) and "is a FIFO" in str(error), error
    error = _returns_within(lambda: bounded.read_bounded(tmp_path, 100, "config file"))
    assert isinstance(error, bounded.UnboundedFileError) and "directory" in str(error)


def test_a_fifo_listed_in_a_manifest_is_refused_without_blocking(tmp_path):
    preset = tmp_path / "preset"
    bertzoo.BertBackbone(
        vocabulary_size=30, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=8,
    ).save_to_preset(preset)  # fmt: skip
    bertzoo.BertBackbone.from_preset(preset)  # its modules loaded here, in the main thread
    weights = preset / "model.weights.h5"
    weights.unlink()
    os.mkfifo(weights)
    error = _returns_within(lambda: bertzoo.BertBackbone.from_preset(preset))
    assert isinstance(error, IntegrityError), error
    assert "model.weights.h5 is not a plain file" in str(error) and "\n" not in str(error)


def test_a_manifest_over_its_cap_is_refused_by_its_size(tmp_path, monkeypatch):
    (tmp_path / manifest.MANIFEST_FILE).write_text(json.dumps({"files": {}}) + " " * 100)
    monkeypatch.setattr(manifest, "CONFIG_BYTES", 64)
    with pytest.raises(IntegrityError, match="more than the 64 bytes a manifest may take"):
        manifest.read_manifest(tmp_path)


def _byte_bpe_dir(path, merges, vocabulary=("ab", "abc")):
    """A byte-level BPE directory: the special tokens, the 256 byte
    characters, `vocabulary`, and `merges`."""
    characters = list(byte_bpe.bytes_to_unicode().values())
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *characters, *vocabulary, "<mask>"]
    path.mkdir()
    (path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (path / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges))
    return path


def test_a_merge_listed_twice_is_one_line_naming_both_places(tmp_path):
    good = _byte_bpe_dir(tmp_path / "good", ["a b", "ab c"])
    assert byte_bpe.ByteLevelBPETokenizer(good).merges == [("a", "b"), ("ab", "c")]
    twice = _byte_bpe_dir(tmp_path / "twice", ["a b", "ab c", "a b"])
    with pytest.raises(TokenizerError) as e:
        byte_bpe.ByteLevelBPETokenizer(twice)
    message = str(e.value)
    assert "merges.txt line 4: the merge 'a b' is listed before, at line 2" in message
    assert "\n" not in message
    # The same in a tokenizer.json's model.merges.
    fast = tmp_path / "fast"
    shutil.copytree(good, fast)
    document = {
        "model": {
            "type": "BPE",
            "vocab": json.loads((good / "vocab.json").read_text()),
            "merges": ["a b", "ab c", "a b"],
        },
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
    }
    (fast / "tokenizer.json").write_text(json.dumps(document))
    with pytest.raises(TokenizerError, match=r"model\.merges\[2\]: the merge 'a b' is listed before, at model\.merges\[0\]"):  # fmt: skip
        byte_bpe.ByteLevelBPETokenizer(fast / "tokenizer.json")


def test_vocabularies_and_merges_past_the_token_cap_are_refused_before_use(tmp_path, monkeypatch):
    # The cap is 2,097,152 tokens (a preset's vocabulary_size bound); lowered
    # here so the files stay small. At the real cap: test_hostile_files.py.
    assert bounded.MAX_TOKENS == bertzoo.presets.SIZE_BOUNDS["vocabulary_size"] == 2_097_152
    monkeypatch.setattr(byte_bpe, "MAX_TOKENS", 8)
    monkeypatch.setattr(wordpiece, "MAX_TOKENS", 8)
    many = _byte_bpe_dir(tmp_path / "many", ["a b"])
    with pytest.raises(TokenizerError, match="holds 263 tokens; a vocabulary holds at most 8"):
        byte_bpe.ByteLevelBPETokenizer(many)
    monkeypatch.setattr(byte_bpe, "MAX_TOKENS", 300)
    merges = _byte_bpe_dir(tmp_path / "merges", ["a b"] * 301)
    with pytest.raises(TokenizerError, match="lists 301 merges; .* at most 300 tokens"):
        byte_bpe.ByteLevelBPETokenizer(merges)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"w{i}\n" for i in range(9)))
    with pytest.raises(TokenizerError, match="lists 9 tokens; a vocabulary holds at most 8"):
        bertzoo.BertTokenizer(vocab)
