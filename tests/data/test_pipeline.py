import os

import numpy as np
import pytest
import tensorflow as tf

from bertzoo import data
from tests.data.helpers import numbered_documents

S, P, B = 32, 5, 8


@pytest.fixture(scope="module")
def examples(numbered_tokenizer):
    docs, _ = numbered_documents(30, 10)
    return data.create_examples(docs, numbered_tokenizer, seq_len=S, objective="sop", seed=0)


@pytest.fixture(scope="module")
def masker(numbered_tokenizer):
    return data.MaskedLMMasker(numbered_tokenizer, S, P, kind="whole_word")


def spec_of(ds):
    return tf.nest.map_structure(lambda s: (tuple(s.shape), s.dtype), ds.element_spec)


def test_static_round_trip_and_format(examples, masker, tmp_path):
    paths = data.write_pretraining_tfrecords(examples, tmp_path, num_shards=3, masker=masker, seed=4)
    assert [p.name for p in paths] == [f"pretraining-{i:05d}-of-00003.tfrecord" for i in range(3)]
    assert sorted(os.listdir(tmp_path)) == sorted([p.name for p in paths] + [data.METADATA_FILE])  # no temp files
    meta = data.read_metadata(tmp_path)
    assert meta["seq_len"] == S and meta["max_predictions_per_seq"] == P and meta["objective"] == "sop"
    assert meta["vocabulary_size"] == examples.vocabulary_size and meta["num_examples"] == len(examples)

    ds = data.read_pretraining_dataset(tmp_path, B, S, shuffle=False, drop_remainder=False)
    static = spec_of(data.read_pretraining_dataset(str(tmp_path / "*.tfrecord"), B, S))
    dynamic = spec_of(data.make_pretraining_dataset(examples, B, masker))
    expected = (
        {k: ((B, S), tf.int32) for k in ("token_ids", "segment_ids", "padding_mask")}
        | {"mask_positions": ((B, P), tf.int32)},
        {"mlm": ((B, P), tf.int32), "sentence": ((B,), tf.int32)},
        {"mlm": ((B, P), tf.float32), "sentence": ((B,), tf.float32)},
    )
    assert static == dynamic == expected  # static shapes, drop_remainder by default

    xs, ys, ws = zip(*ds.as_numpy_iterator())
    cat = lambda parts, k: np.concatenate([p[k] for p in parts])
    assert len(cat(xs, "token_ids")) == len(examples)
    np.testing.assert_array_equal(cat(xs, "segment_ids"), examples.segment_ids)
    np.testing.assert_array_equal(cat(xs, "padding_mask"), examples.padding_mask)
    np.testing.assert_array_equal(cat(ys, "sentence"), examples.labels)
    # Same masks as the masker gives (batch i of 1024 is seeded (seed, i)).
    masked, pos, ids, w = (t.numpy() for t in masker(examples.token_ids, examples.padding_mask, tf.constant([4, 0], tf.int64)))
    np.testing.assert_array_equal(cat(xs, "token_ids"), masked)
    np.testing.assert_array_equal(cat(xs, "mask_positions"), pos)
    np.testing.assert_array_equal(cat(ys, "mlm"), ids)
    np.testing.assert_array_equal(cat(ws, "mlm"), w)


def test_wrong_seq_len_and_max_predictions(examples, masker, tmp_path):
    data.write_pretraining_tfrecords(examples, tmp_path, masker=masker)
    with pytest.raises(data.PretrainingDataError, match="seq_len=32.*seq_len=64"):
        data.read_pretraining_dataset(tmp_path, B, 64)
    with pytest.raises(data.PretrainingDataError, match="max_predictions_per_seq=5.*20"):
        data.read_pretraining_dataset(tmp_path, B, S, max_predictions_per_seq=20)
    with pytest.raises(data.PretrainingDataError, match="vocabulary"):
        data.read_pretraining_dataset(tmp_path, B, S, vocabulary_size=99)
    (tmp_path / data.METADATA_FILE).unlink()
    with pytest.raises(data.PretrainingDataError, match="no pretraining_metadata.json"):
        data.read_pretraining_dataset(tmp_path / "*.tfrecord", B, S)
    with pytest.raises(FileNotFoundError):
        data.read_pretraining_dataset(tmp_path / "*.nothing", B, S)


def masks_of(ds):
    return np.concatenate([x["mask_positions"] for x, _, _ in ds.as_numpy_iterator()])


def test_dynamic_masking_changes_every_epoch_and_is_seeded(examples, masker):
    ds = data.make_pretraining_dataset(examples, B, masker, seed=3, shuffle=False)
    epoch1, epoch2 = masks_of(ds), masks_of(ds)
    assert (epoch1 != epoch2).any()
    again = data.make_pretraining_dataset(examples, B, masker, seed=3, shuffle=False)
    np.testing.assert_array_equal(masks_of(again), epoch1)
    np.testing.assert_array_equal(masks_of(again), epoch2)
    # Shuffled, seeded: reproducible too.
    a = data.make_pretraining_dataset(examples, B, masker, seed=5)
    b = data.make_pretraining_dataset(examples, B, masker, seed=5)
    x1, x2 = next(iter(a))[0], next(iter(b))[0]
    np.testing.assert_array_equal(x1["token_ids"], x2["token_ids"])


def test_dynamic_from_unmasked_files(examples, masker, tmp_path):
    data.write_pretraining_tfrecords(examples, tmp_path, num_shards=2)  # no masker: unmasked
    assert data.read_metadata(tmp_path)["masked"] is False
    with pytest.raises(data.PretrainingDataError, match="unmasked"):
        data.read_pretraining_dataset(tmp_path, B, S)
    ds = data.read_pretraining_dataset(tmp_path, B, S, masker=masker, seed=1)
    assert spec_of(ds) == spec_of(data.make_pretraining_dataset(examples, B, masker))
    assert (masks_of(ds) != masks_of(ds)).any()  # re-masked per epoch
    n = sum(1 for _ in ds)
    assert n == len(examples) // B


def test_mlm_only_format(numbered_tokenizer, tmp_path):
    docs, _ = numbered_documents(10, 10)
    ex = data.create_examples(docs, numbered_tokenizer, seq_len=S, objective="none", seed=0)
    masker = data.MaskedLMMasker(numbered_tokenizer, S, P)
    x, y, w = next(iter(data.make_pretraining_dataset(ex, B, masker)))
    assert set(y) == {"mlm"} and set(w) == {"mlm"}
    assert int(tf.reduce_max(x["segment_ids"])) == 0


def test_phase_two_from_the_same_corpus(numbered_tokenizer, tmp_path):
    docs, _ = numbered_documents(20, 20)
    for seq_len, max_pred in ((32, 5), (128, 20)):
        ex = data.create_examples(docs, numbered_tokenizer, seq_len=seq_len, seed=1)
        m = data.MaskedLMMasker(numbered_tokenizer, seq_len, max_pred, kind="ngram")
        data.write_pretraining_tfrecords(ex, tmp_path / str(seq_len), num_shards=2, masker=m)
        x, _, _ = next(iter(data.read_pretraining_dataset(tmp_path / str(seq_len), 4, seq_len)))
        assert x["token_ids"].shape == (4, seq_len) and x["mask_positions"].shape == (4, max_pred)
    with pytest.raises(data.PretrainingDataError, match="seq_len"):
        data.make_pretraining_dataset(ex, 4, data.MaskedLMMasker(numbered_tokenizer, 32, 5))


def test_korean_end_to_end(tmp_path):
    from bertzoo.tokenizers import BertTokenizer, train_wordpiece

    corpus = "tests/fixtures/korean_corpus.txt"
    train_wordpiece([corpus], 1200, lowercase=False, strip_accents=False, output=tmp_path / "vocab.txt")
    tok = BertTokenizer(tmp_path / "vocab.txt", lowercase=False, strip_accents=False)
    docs = data.tokenize_documents(data.read_corpus(corpus), tok)
    ex = data.create_examples(docs, tok, seq_len=64, objective="nsp", dupe_factor=2, seed=0)
    masker = data.MaskedLMMasker(tok, 64, 10, kind="whole_word")
    data.write_pretraining_tfrecords(ex, tmp_path / "out", num_shards=2, masker=masker)
    x, y, w = next(iter(data.read_pretraining_dataset(tmp_path / "out", 16, 64, vocabulary_size=tok.vocabulary_size)))
    pieces = [tok.id_to_token(i) for i in np.asarray(y["mlm"])[np.asarray(w["mlm"]) > 0]]
    assert pieces and not {"[CLS]", "[SEP]", "[PAD]"} & set(pieces)
