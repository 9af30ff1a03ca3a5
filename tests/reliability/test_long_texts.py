"""One long text used to cost its length times the batch (issue 30, hole 6):
a 1 MB text in a batch of 200 took 1.6 GB to pack, a fine-tuning JSONL with
one 10 MB cell passed 8 GiB, and a QA context of 100,000 characters took
2.9 GB (each of its pieces copied the whole text). Every string-in path now
cuts a text to `text_cap(sequence_length)` characters before any tokenizer
op (QA cuts questions; its contexts cost their length, once), and the cut
never changes the tokens a sequence keeps.

The memory probes run in a subprocess that reports its peak RSS above what
it had before the probe; a watchdog ends it as soon as it passes far more
than the bound, so the unfixed code fails fast instead of exhausting the
machine."""

import json
import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import bertzoo
from bertzoo.data.readers import TaskDataError, read_table
from bertzoo.data.readers import tables as tables_module
from bertzoo.preprocessing import BertPreprocessor, packed_lengths
from bertzoo.tokenizers import base as tokenizer_base
from tests.conftest import subprocess_env

pytestmark = pytest.mark.backend_independent

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat"]
VOCAB += ["##s", ".", ",", "dog", "ran", "good", "bad"]
SENTENCE = "the cats sat on a mat, the dog ran. "  # 36 characters, 12 tokens


def tokenizer():
    return bertzoo.BertTokenizer(VOCAB)


def long_text(chars):
    return (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]


# === Bounded memory, in a subprocess ===

_PRELUDE = """
import os, sys, threading, time
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) // 1024
_limit = [None]
def _watch():
    while True:
        if _limit[0] is not None and _status("VmRSS:") > _limit[0]:
            print("OVER_LIMIT", _status("VmRSS:") - _base[0], flush=True)
            os._exit(3)
        time.sleep(0.02)
_base = [0]
def mark(limit_mb):
    _base[0] = _status("VmHWM:")
    _limit[0] = _base[0] + 3 * limit_mb
threading.Thread(target=_watch, daemon=True).start()
def report():
    print("PEAK_MB", _status("VmHWM:") - _base[0], flush=True)
"""


_SETUP = f"""
import bertzoo
tokenizer = bertzoo.BertTokenizer({VOCAB!r})
SENTENCE = {SENTENCE!r}
def long_text(chars):
    return (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]
"""


def peak_mb(code, limit_mb, timeout=300):
    """Runs `code` (which calls `mark(limit_mb)` once set up, and
    `report()` at the end) in a fresh interpreter; returns the peak RSS in
    MB above the mark. A run past 3 x `limit_mb` is stopped and fails."""
    script = _PRELUDE + _SETUP + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env("3"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = done.stdout
    assert "OVER_LIMIT" not in out, f"memory passed {3 * limit_mb} MB: {out.strip()}"
    assert done.returncode == 0, done.stderr[-3000:]
    peak = int(out.split("PEAK_MB")[1].split()[0])
    print(f"peak {peak} MB above the start (bound {limit_mb} MB)")
    assert peak < limit_mb, f"peak {peak} MB above the start (bound {limit_mb} MB)"
    return peak


@pytest.mark.slow
def test_a_batch_of_200_texts_with_one_of_1_mb_packs_in_bounded_memory():
    """Was 1.6 GB (about 750 MB with this tokenizer)."""
    peak_mb(
        """
        from bertzoo.preprocessing import BertPreprocessor
        preprocessor = BertPreprocessor(tokenizer, 128)
        texts = [SENTENCE] * 199 + [long_text(1 << 20)]
        preprocessor.pack(texts[:2])  # traced and warm
        mark(150)
        out = preprocessor.pack(texts)
        assert out["padding_mask"].numpy()[-1].all() and preprocessor.texts_cut == 1
        report()
        """,
        limit_mb=150,
    )


@pytest.mark.slow
def test_a_fine_tuning_jsonl_with_a_10_mb_cell_loads_in_bounded_memory(tmp_path):
    """The data stage of a fine-tuning run (read, features, the lengths that
    pick the sequence length) on a JSONL file whose one cell is a 10 MB
    scraped page: it passed 8 GiB in 20 s."""
    path = tmp_path / "train.jsonl"
    rows = [{"text": SENTENCE, "label": i % 2} for i in range(300)]
    rows[7]["text"] = long_text(10 << 20)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    peak_mb(
        f"""
        from bertzoo import tasks
        from bertzoo.tasks.sentences import SentenceSettings
        kind = tasks.get("classification")
        settings = SentenceSettings(text_columns=("text",), label_column="label")
        tokenizer.tokenize_ids(__import__("tensorflow").constant(["a"]))
        mark(400)
        data, labels = kind.load(settings, {str(path)!r}, tokenizer, 128, True)
        lengths = kind.packed_lengths(data, tokenizer)
        assert data.features["padding_mask"][7].all() and lengths[7] > 128
        assert len(labels) == 2
        report()
        """,
        limit_mb=400,
    )


@pytest.mark.slow
def test_a_qa_context_of_100_000_characters_costs_its_length_once():
    """Each piece of the context used to copy the whole context first: 2.9
    GB for 100,000 characters, growing with the square of the length."""
    peak_mb(
        """
        from bertzoo.tasks.qa.features import encode_qa
        encode_qa(tokenizer, ["the cat"], ["a mat"], 64, 32, 16)
        mark(250)
        contexts = [SENTENCE] * 199 + [long_text(100_000)]
        out = encode_qa(tokenizer, ["the cat"] * 200, contexts, 64, 32, 16)
        assert out["token_ids"].shape[0] > 200
        report()
        """,
        limit_mb=250,
    )


# === The cut keeps the tokens a sequence sees ===


@pytest.mark.parametrize("sequence_length", [8, 128])
def test_a_cut_text_packs_to_the_tokens_of_the_whole_text(sequence_length, caplog):
    tok = tokenizer()
    preprocessor = BertPreprocessor(tok, sequence_length)
    assert preprocessor.max_text_chars == tokenizer_base.MAX_CHARS_PER_TOKEN * sequence_length
    whole = long_text(5 * preprocessor.max_text_chars + 7)
    texts = ["the cat", whole, "a mat"]
    with caplog.at_level(logging.WARNING, logger="bertzoo.preprocessing"):
        packed = preprocessor(texts)
        preprocessor(texts)
    ids = np.asarray(packed["token_ids"])
    # The reference: the uncut text's tokens, its first sequence_length - 2.
    full = tok.tokenize_ids(tf.constant([whole])).to_list()[0]
    expected = [tok.cls_token_id] + full[: sequence_length - 2] + [tok.sep_token_id]
    assert ids[1].tolist() == expected
    assert ids[0].tolist()[:4] == [tok.cls_token_id, 5, 6, tok.sep_token_id]
    assert preprocessor.texts_cut == 2  # one per call, counted
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines  # said once
    assert (
        f"1 of 3 texts is longer than {tokenizer_base.text_cap(sequence_length):,} characters"
        in lines[0]
    )


def test_pairs_are_cut_per_segment_and_keep_their_tokens():
    tok = tokenizer()
    preprocessor = BertPreprocessor(tok, 16)
    a, b = long_text(5000), "the dog ran ."
    packed = preprocessor.pack((tf.constant([a]), tf.constant([b])))
    reference = BertPreprocessor(tok, 16)
    reference.max_text_chars = 10**9  # no cut
    assert (packed["token_ids"].numpy() == reference.pack(([a], [b]))["token_ids"].numpy()).all()


def test_cut_texts_cuts_characters_not_bytes_and_only_long_texts():
    texts = tf.constant(["héllo wörld", "ab", "한국어 문장입니다"])
    assert tokenizer_base.cut_texts(texts, 5).numpy().tolist() == [
        "héllo".encode(),
        b"ab",
        "한국어 문".encode(),
    ]
    assert tokenizer_base.cut_texts(texts, 100).numpy().tolist() == texts.numpy().tolist()


def test_the_embedder_cuts_in_its_graph_and_says_so_once(caplog):
    backbone = bertzoo.BertBackbone(
        vocabulary_size=len(VOCAB),
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=16,
    )
    embedder = bertzoo.TextEmbedder(backbone, BertPreprocessor(tokenizer(), 16))
    whole = long_text(50_000)
    with caplog.at_level(logging.WARNING):
        cut = embedder.embed([whole, "the cat"])
        embedder.embed([whole])
    reference = BertPreprocessor(tokenizer(), 16)
    reference.max_text_chars = 10**9  # no cut
    uncut = embedder.predict({k: v.numpy() for k, v in reference.pack([whole]).items()})
    np.testing.assert_allclose(cut[0], uncut[0], atol=1e-6)
    assert (
        sum("TextEmbedder: 1 of 2 texts is longer" in r.getMessage() for r in caplog.records) == 1
    )


def test_packed_lengths_measure_a_long_text_as_longer_than_any_sequence():
    lengths = packed_lengths(tokenizer(), [("the cat",), (long_text(2_000_000),)])
    assert lengths[0] == 4 and lengths[1] > 8192


def test_tagging_cuts_a_long_sentence_and_keeps_the_words_that_fit(caplog):
    from bertzoo.data.readers import LabelSet, TaggedSentence
    from bertzoo.tasks.tagging.features import max_words, tagging_features

    words = SENTENCE.split() * 20_000  # 160,000 words
    sentences = [TaggedSentence(["the", "cat"], ["O", "B"], 1), TaggedSentence(words, None, 3)]
    with caplog.at_level(logging.WARNING):
        features, _, starts, truncated = tagging_features(tokenizer(), sentences, None, 16)
    assert starts.shape[1] == max_words(16) == 32  # not 160,000 columns for every sentence
    short = tagging_features(tokenizer(), [TaggedSentence(words[:20], None, 3)], None, 16)
    assert (features["token_ids"][1] == short[0]["token_ids"][0]).all()
    assert truncated == len(words) - int(np.sum(starts[1] >= 0))
    assert any("1 of 2 sentences have more than 32 words" in r.getMessage() for r in caplog.records)
    labels = LabelSet(["B", "O"])
    tagged = [TaggedSentence(words, ["O"] * len(words), 3)]
    _, label_ids, _, _ = tagging_features(tokenizer(), tagged, labels, 16)
    assert (label_ids >= 0).sum() == int(np.sum(starts[1] >= 0))


# === Table fields ===


def test_a_csv_field_over_131072_characters_is_read(tmp_path):
    """It used to be a "malformed CSV row" (the csv module's default limit)."""
    path = tmp_path / "train.csv"
    text = long_text(300_000)
    path.write_text(f'text,label\n"{text}",1\nshort,0\n', encoding="utf-8")
    examples = read_table(path, ["text"], "label")
    assert examples[0].texts == (text,) and examples[1].label == "0"


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_a_field_over_the_limit_is_reported_as_such(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(tables_module, "MAX_FIELD_CHARS", 1000)
    text = long_text(1500)
    path = tmp_path / f"train.{fmt}"
    if fmt == "jsonl":
        path.write_text(
            json.dumps({"text": "a", "label": 1})
            + "\n"
            + json.dumps({"text": text, "label": 0})
            + "\n"
        )
    else:
        sep, quote = (",", '"') if fmt == "csv" else ("\t", "")
        path.write_text(f"text{sep}label\na{sep}1\n{quote}{text}{quote}{sep}0\n")
    with pytest.raises(TaskDataError) as e:
        read_table(path, ["text"], "label")
    message = str(e.value)
    line = 2 if fmt == "jsonl" else 3
    assert message.startswith(f"{path}:{line}: a field is longer than 1,000 characters"), message
    assert "malformed" not in message and "\n" not in message and len(message) < 400
    assert ("quote is left open" in message) == (fmt == "csv")


def test_fill_mask_refuses_a_10_mb_text_from_its_cut():
    """It tokenized all of it (about a GB) to say it was too long."""
    from pathlib import Path

    from bertzoo.models.fill_mask import fill_mask

    preset = Path(__file__).resolve().parents[1] / "fixtures" / "fill_mask" / "bert"
    text = "Paris " * 2_000_000 + "[MASK]"
    with pytest.raises(ValueError, match=r"is at least \d+ tokens .* the model reads at most 40"):
        fill_mask(preset, text)
    # Text spread out (a token per 100 characters) is tokenized whole, as before.
    spread = " " * 4000 + "Paris [MASK]"
    assert fill_mask(preset, spread, top_k=1)[0][0]["token_id"] >= 0
