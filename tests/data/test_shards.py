import json

import numpy as np
import pytest

from bertzoo.data import MaskedLMMasker, create_examples, read_metadata, read_pretraining_dataset
from bertzoo.data.corpus import CorpusError
from bertzoo.data.prepare import PrepareSettings, prepare_corpus
from bertzoo.data.prepared_records import RecordSettings, write_prepared_records
from bertzoo.data.shards import (
    ExampleStream,
    StreamPosition,
    StreamSettings,
    _derive_seed,
    open_prepared,
    pack_full_sentences,
    prepared_dataset,
)
from bertzoo.io import manifest as manifest_lib
from tests.conftest import reseal_manifest
from tests.data.prepared_corpus import character_tokenizer, mixed_documents, write_documents

pytestmark = pytest.mark.backend_independent

S, P, B = 48, 7, 6


@pytest.fixture(scope="module")
def tokenizer():
    return character_tokenizer()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tokenizer):
    d = tmp_path_factory.mktemp("prepared")
    path = write_documents(d / "c.txt", mixed_documents(60, seed=3))
    prepare_corpus([path], tokenizer, d / "out", PrepareSettings(shard_bytes=4000, workers=1))
    return open_prepared(d / "out")


@pytest.fixture(scope="module")
def masker(tokenizer):
    return MaskedLMMasker(tokenizer, S, P, kind="whole_word")


def stream(prepared, tokenizer, masker, **kw):
    settings = dict(batch_size=B, seq_len=S, objective="sop", seed=5) | kw
    return ExampleStream(prepared, tokenizer, masker, StreamSettings(**settings))


def take(ds, n):
    return list(ds.take(n).as_numpy_iterator())


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for part_x, part_y in zip(x, y, strict=True):
            assert part_x.keys() == part_y.keys()
            for k in part_x:
                np.testing.assert_array_equal(part_x[k], part_y[k])


def test_a_shards_examples_are_create_examples_on_its_documents(prepared, tokenizer, masker):
    s = stream(prepared, tokenizer, masker)
    first = s.shard_order(0)[0]
    documents = prepared.shard(first).document_list()
    expected = create_examples(
        documents, tokenizer, seq_len=S, objective="sop", seed=_derive_seed(5, 0, first)
    )
    got = s.examples(0, 0)
    for k in ("token_ids", "segment_ids", "padding_mask", "labels"):
        np.testing.assert_array_equal(getattr(got, k), getattr(expected, k))
    # The stream's first batches are those examples, in order, masked.
    x, y, w = take(s.dataset(), 1)[0]
    np.testing.assert_array_equal(x["segment_ids"], expected.segment_ids[:B])
    np.testing.assert_array_equal(x["padding_mask"], expected.padding_mask[:B])
    np.testing.assert_array_equal(y["sentence"], expected.labels[:B])
    unmasked = x["token_ids"].copy()
    np.put_along_axis(unmasked, x["mask_positions"], y["mlm"], axis=1)
    real = w["mlm"] > 0
    restored = np.where(
        np.isin(np.arange(S)[None, :], x["mask_positions"] * real), unmasked, x["token_ids"]
    )
    np.testing.assert_array_equal(restored[:, 1:], expected.token_ids[:B, 1:])


def test_epochs_visit_every_shard_in_a_new_order(prepared, tokenizer, masker):
    s = stream(prepared, tokenizer, masker)
    orders = [s.shard_order(e) for e in range(4)]
    assert all(sorted(o) == list(range(len(prepared))) for o in orders)
    assert len({tuple(o) for o in orders}) > 1
    assert stream(prepared, tokenizer, masker, shuffle=False).shard_order(3) == list(
        range(len(prepared))
    )


def test_resume_gives_the_batches_of_the_uninterrupted_stream(prepared, tokenizer, masker):
    s = stream(prepared, tokenizer, masker)
    per_epoch = sum(s._count(0, i) for i in range(len(prepared))) // B
    total = per_epoch + 12  # into the second epoch
    full = take(s.dataset(), total)
    for k in (0, 5, per_epoch - 1, per_epoch + 3):
        position = s.position_after(k)
        # A new stream (a restarted process) from the recorded position.
        fresh = stream(prepared, tokenizer, masker)
        resumed = take(fresh.dataset(StreamPosition.from_dict(position.as_dict())), total - k)
        assert_batches_equal(resumed, full[k:])
        assert position.batch == k
    # Positions compose: n then m batches is n + m.
    assert s.position_after(7, s.position_after(9)) == s.position_after(16)
    assert s.position_after(per_epoch + 3).epoch == 1
    # Every iterator over one dataset yields the same batches.
    ds = s.dataset(s.position_after(3))
    assert_batches_equal(take(ds, 4), take(ds, 4))


def test_masking_statistics_are_bert_s(prepared, tokenizer):
    masker = MaskedLMMasker(tokenizer, S, 10, kind="token")
    s = stream(prepared, tokenizer, masker, objective="nsp")
    masked = real = same = randomised = tokens = 0
    for x, y, w in take(s.dataset(), 200):
        sel = w["mlm"] > 0
        at = np.take_along_axis(x["token_ids"], x["mask_positions"], axis=1)
        masked += np.sum((at == tokenizer.mask_token_id) & sel)
        same += np.sum((at == y["mlm"]) & sel)
        randomised += np.sum((at != y["mlm"]) & (at != tokenizer.mask_token_id) & sel)
        real += sel.sum()
        tokens += x["padding_mask"].sum()
    assert abs(masked / real - 0.8) < 0.03
    assert abs(same / real - 0.1) < 0.025 and abs(randomised / real - 0.1) < 0.025
    assert 0.12 < real / tokens < 0.16  # 15% of tokens (incl. [CLS]/[SEP]), rounded per row


def test_full_sentence_packing_fills_sequences(prepared, tokenizer):
    # Character-level ids make long sentences (59 tokens on average): at
    # 512, whole-sentence packing leaves about 15% padding (the last
    # sentence that does not fit, and each shard's last sequence), chunks
    # of one document 56%.
    masker = MaskedLMMasker(tokenizer, 512, 77)
    packed = stream(
        prepared, tokenizer, masker, seq_len=512, objective="none", packing="full_sentences"
    )
    plain = stream(prepared, tokenizer, masker, seq_len=512, objective="none")

    def padding_share(s):
        rows = [x["padding_mask"] for x, _, _ in take(s.dataset(), 30)]
        return 1 - np.mean(rows)

    packed_share, plain_share = padding_share(packed), padding_share(plain)
    assert packed_share < 0.2 and packed_share < plain_share / 2
    # Whole sentences, in order, a [SEP] at each document end, nothing lost.
    documents = prepared.shard(0).document_list()
    examples = pack_full_sentences(documents, tokenizer, 512, seed=1)  # no sentence cut
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert (examples.token_ids[:, 0] == cls).all() and not examples.segment_ids.any()
    body = [
        row[1 : mask.sum() - 1]
        for row, mask in zip(examples.token_ids, examples.padding_mask, strict=True)
    ]
    total = sum(len(b) - np.sum(b == sep) for b in body)
    assert total == sum(len(s) for d in documents for s in d)
    seps = sum(np.sum(b == sep) for b in body)
    assert len(documents) - len(body) <= seps < len(documents)


def test_packing_needs_objective_none(prepared, tokenizer, masker):
    with pytest.raises(CorpusError, match="objective 'none'"):
        stream(prepared, tokenizer, masker, packing="full_sentences")
    with pytest.raises(CorpusError, match="packing must be"):
        stream(prepared, tokenizer, masker, objective="none", packing="docs")


def test_another_tokenizer_is_refused(prepared, masker):
    from bertzoo.tokenizers import BertTokenizer

    other = BertTokenizer(character_tokenizer().vocabulary, lowercase=False)
    with pytest.raises(CorpusError, match="another vocabulary or tokenizer settings"):
        stream(prepared, other, masker)


def test_prepared_dataset_checks_inputs_and_gives_positions(prepared, tokenizer, masker):
    settings = StreamSettings(batch_size=B, seq_len=S, objective="nsp", seed=2)
    ds, s = prepared_dataset(prepared.directory, tokenizer, masker, settings)
    batches = take(ds, 6)
    ds2, _ = prepared_dataset(
        prepared.directory, tokenizer, masker, settings, start=s.position_after(2).as_dict()
    )
    assert_batches_equal(take(ds2, 4), batches[2:])


def test_records_per_shard_read_back(prepared, tokenizer, masker, tmp_path):
    out = tmp_path / "records"
    settings = RecordSettings(seq_len=S, objective="sop", dupe_factor=2, seed=9)
    meta = write_prepared_records(prepared, out, tokenizer, masker, settings)
    assert len(meta["shards"]) == len(prepared)
    assert read_metadata(out)["num_examples"] == meta["num_examples"]
    manifest = manifest_lib.verify_directory(out, force=True)
    assert manifest["kind"] == "records"
    # Shard 0's records: create_examples with two dupe passes, then masked.
    expected = create_examples(
        prepared.shard(0).document_list(),
        tokenizer,
        seq_len=S,
        objective="sop",
        dupe_factor=2,
        seed=_derive_seed(9, 0),
    )
    one = tmp_path / "one"
    one.mkdir()
    (one / meta["shards"][0]).symlink_to(out / meta["shards"][0])
    (one / "pretraining_metadata.json").write_text(
        json.dumps({**meta, "shards": meta["shards"][:1], "num_examples": len(expected)})
    )
    ds = read_pretraining_dataset(one, 8, S, shuffle=False, drop_remainder=False)
    xs, ys, _ = zip(*ds.as_numpy_iterator(), strict=True)
    np.testing.assert_array_equal(
        np.concatenate([x["segment_ids"] for x in xs]), expected.segment_ids
    )
    np.testing.assert_array_equal(np.concatenate([y["sentence"] for y in ys]), expected.labels)
    # All shards read back as one dataset; two dupe passes, about twice the examples.
    ds = read_pretraining_dataset(out, 8, S, drop_remainder=False)
    n = sum(len(x["token_ids"]) for x, _, _ in ds.as_numpy_iterator())
    once = sum(
        len(create_examples(prepared.shard(i).document_list(), tokenizer, seq_len=S, seed=1))
        for i in range(len(prepared))
    )
    assert n == meta["num_examples"] and 1.7 * once < n < 2.3 * once
    # A rerun keeps finished files, and writes a damaged one again.
    files = sorted(out.glob("*.tfrecord"))
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    files[1].write_bytes(b"damaged")
    write_prepared_records(prepared, out, tokenizer, masker, settings)
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    assert {n: v for n, v in after.items() if n != files[1].name} == {
        n: v for n, v in before.items() if n != files[1].name
    }
    assert after[files[1].name][1] == before[files[1].name][1]  # the same bytes again
    manifest_lib.verify_directory(out, force=True)


def test_an_unfinished_preparation_is_not_read(tmp_path, tokenizer):
    (tmp_path / "x").mkdir()
    with pytest.raises(CorpusError, match="not a finished prepared corpus"):
        open_prepared(tmp_path / "x")


def test_readers_of_a_multi_worker_run_stream_disjoint_shards(prepared, tokenizer, masker):
    n = len(prepared)
    readers = [stream(prepared, tokenizer, masker, num_readers=3, reader_index=i) for i in range(3)]
    owned = [set(r.shard_order(0)) for r in readers]
    assert set().union(*owned) == set(range(n)) and sum(map(len, owned)) == n
    assert all(set(r.shard_order(5)) == o for r, o in zip(readers, owned, strict=True))
    # A reader resumes exactly too.
    r = readers[1]
    full = take(r.dataset(), 12)
    again = stream(prepared, tokenizer, masker, num_readers=3, reader_index=1)
    assert_batches_equal(take(again.dataset(r.position_after(5)), 7), full[5:])
    # Each reader masks with a seed of its own (a single stream keeps its
    # seed): the same rows would be masked differently by two readers.
    assert stream(prepared, tokenizer, masker).mask_seed == 5
    seeds = {r.mask_seed for r in readers}
    assert len(seeds) == 3 and 5 not in seeds
    rows = full[0][0]
    masks = [
        masker(rows["token_ids"], rows["padding_mask"], np.array([r.mask_seed, 0]))[1].numpy()
        for r in readers
    ]
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    with pytest.raises(CorpusError, match="reader_index must be in"):
        stream(prepared, tokenizer, masker, num_readers=2, reader_index=2)
    with pytest.raises(CorpusError, match="fewer than num_readers"):
        stream(prepared, tokenizer, masker, num_readers=n + 1)


# === Held-out documents ===


def _keys(document):
    return tuple(np.concatenate(document).tolist())


def test_held_out_documents_are_left_out_of_training(prepared, tokenizer, masker):
    from bertzoo.data.shards import (
        held_out_count,
        held_out_examples,
        resolve_held_out,
        shard_documents,
    )

    held_out = resolve_held_out(prepared, 0.2, seed=1)
    total = prepared.document["summary"]["documents"]
    count = held_out_count(prepared, held_out)
    assert 0 < count < total
    train, held = [], []
    for i in range(len(prepared)):
        documents = prepared.shard(i).document_list()
        mask = held_out.mask(i, len(documents))
        kept, out = (
            shard_documents(prepared, i, held_out),
            shard_documents(prepared, i, held_out, held=True),
        )
        # Complementary, decided by the document's place in its shard.
        assert [_keys(d) for d in kept] == [_keys(d) for d, h in zip(documents, mask) if not h]
        assert [_keys(d) for d in out] == [_keys(d) for d, h in zip(documents, mask) if h]
        train, held = train + kept, held + out
    # prepared.json's counts say as much as reading the shards.
    assert len(train) + len(held) == total and len(held) == count
    # The stream never makes an example of a held-out document's tokens:
    # every example's ids (but [CLS]/[SEP]) come from the training documents.
    s = stream(prepared, tokenizer, masker, held_out=held_out, objective="none", shuffle=False)
    train_tokens = {t for d in train for sentence in d for t in sentence.tolist()}
    held_only = {t for d in held for sentence in d for t in sentence.tolist()} - train_tokens
    seen = set()
    for shard in range(len(s.shard_order(0))):
        seen |= set(s.examples(0, shard).token_ids.ravel().tolist())
    assert not seen & held_only
    # The evaluation examples are the held-out documents', up to a budget.
    settings = StreamSettings(batch_size=B, seq_len=S, objective="none", held_out=held_out)
    examples, used = held_out_examples(prepared, tokenizer, settings, 7, max_tokens=10**9)
    assert used == count and len(examples) > 0
    small, few = held_out_examples(prepared, tokenizer, settings, 7, max_tokens=50)
    assert 1 <= few < count and len(small) < len(examples)


def test_at_least_one_document_is_held_out_and_never_all(tmp_path, tokenizer):
    from bertzoo.data.shards import held_out_count, resolve_held_out

    path = write_documents(tmp_path / "c.txt", mixed_documents(3, seed=1))
    prepare_corpus([path], tokenizer, tmp_path / "out", PrepareSettings(workers=1))
    prepared = open_prepared(tmp_path / "out")
    # 3 documents: a tiny fraction draws none, so the lowest draw is held
    # out; a large one draws all three at some seed, and still one is.
    assert held_out_count(prepared, resolve_held_out(prepared, 1e-6, seed=0)) == 1
    for seed in range(20):
        held_out = resolve_held_out(prepared, 0.49, seed=seed)
        assert 1 <= held_out_count(prepared, held_out) <= 2
    assert held_out_count(prepared, resolve_held_out(prepared, 0.0, seed=0)) == 0


@pytest.mark.parametrize(
    "edit, message",
    [
        # One number: the held-out draw allocated from it (1e9: over 6 GiB).
        (lambda d: d["shards"][0].update(documents=10**9), "need at least 4,000,0"),
        (lambda d: d["shards"][0].update(documents=-3), "are not whole numbers >= 0"),
        (lambda d: d["shards"][0].update(tokens=1.5), "are not whole numbers >= 0"),
        # Names that leave the directory, or that its manifest does not list
        # (never verified): a FIFO there blocked a run forever.
        (lambda d: d["shards"][0].update(name="../outside.bzshard"), "is not a file inside"),
        (lambda d: d["shards"][0].update(name="/etc/passwd"), "is not a file inside"),
        (lambda d: d["tokenizer"].update(file="unlisted.txt"), "the vocabulary 'unlisted.txt'"),
        (lambda d: d["summary"].update(documents=d["summary"]["documents"] + 1), "add up"),
        (lambda d: d.update(shards={}), "it has no list of shards"),
        (
            lambda d: d["tokenizer"]["config"].update(lowercase_everything=True),
            "unknown wordpiece tokenizer setting(s) 'lowercase_everything'",
        ),
        (lambda d: d["tokenizer"].update(kind="bpe"), "Unknown tokenizer kind 'bpe'"),
    ],
)
def test_a_hostile_prepared_json_is_refused_before_anything_is_sized(
    tmp_path, prepared, edit, message
):
    import shutil

    from bertzoo.data.prepare import PREPARED_FILE

    directory = tmp_path / "hostile"
    shutil.copytree(prepared.directory, directory)
    path = directory / PREPARED_FILE
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    reseal_manifest(directory)
    with pytest.raises(CorpusError) as error:
        open_prepared(directory)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)
    # The directory as it was opens.
    assert len(open_prepared(prepared.directory)) >= 1


def test_records_are_read_only_as_their_manifest_lists_them(prepared, tokenizer, masker, tmp_path):
    """`--data` (read_pretraining_dataset) on a `prepare-records` directory
    checks its metadata and every record file against the manifest: a
    swapped record file, a shard list with duplicates or names outside the
    directory, and an oversized metadata file are one line each."""
    import shutil

    from bertzoo.data import pipeline

    out = tmp_path / "records"
    settings = RecordSettings(seq_len=S, objective="sop", dupe_factor=1, seed=9)
    write_prepared_records(prepared, out, tokenizer, masker, settings)
    files = sorted(out.glob("*.tfrecord"))
    assert len(files) >= 2
    next(iter(read_pretraining_dataset(out, 2, S)))  # as written: read

    def copy(name):
        return shutil.copytree(out, tmp_path / name)

    def refused(directory, message):
        with pytest.raises(pipeline.PretrainingDataError) as error:
            read_pretraining_dataset(directory, 2, S)
        assert message in str(error.value) and "\n" not in str(error.value), str(error.value)

    # One record file swapped for another valid one (the manifest not resealed).
    swapped = copy("swapped")
    shutil.copyfile(files[0], swapped / files[1].name)
    refused(swapped, files[1].name)
    # Duplicated shards (trained on twice), or a name outside the directory,
    # with the manifest resealed.
    for name, shards in (
        ("duplicates", lambda s: s + s[:1]),
        ("outside", lambda s: ["../" + s[0]] + s[1:]),
        ("absolute", lambda s: [str(files[0])] + s[1:]),
    ):
        hostile = copy(name)
        path = hostile / pipeline.METADATA_FILE
        metadata = json.loads(path.read_text())
        path.write_text(json.dumps({**metadata, "shards": shards(metadata["shards"])}))
        reseal_manifest(hostile)
        refused(hostile, "its shards must be a list of distinct file names inside")
    # A record file the manifest does not list, named in the metadata.
    unlisted = copy("unlisted")
    shutil.copyfile(files[0], unlisted / "extra.tfrecord")
    path = unlisted / pipeline.METADATA_FILE
    metadata = json.loads(path.read_text())
    path.write_text(json.dumps({**metadata, "shards": metadata["shards"] + ["extra.tfrecord"]}))
    manifest = json.loads((unlisted / manifest_lib.MANIFEST_FILE).read_text())
    manifest["files"].pop("extra.tfrecord", None)
    manifest["files"].update(manifest_lib.describe_files(unlisted, [pipeline.METADATA_FILE]))
    (unlisted / manifest_lib.MANIFEST_FILE).write_text(json.dumps(manifest))
    refused(unlisted, "extra.tfrecord is not in its manifest")
    # Metadata past the cap is not parsed.
    big = copy("big")
    with open(big / pipeline.METADATA_FILE, "a") as f:
        f.write(" " * pipeline.MAX_METADATA_BYTES)
    refused(big, "more than the 16 MiB a records metadata file may take")


@pytest.mark.parametrize(
    "name", ["mine.tfrecord", "shard-00000-00000-00000.tfrecord", "pretraining_metadata.json"]
)
def test_records_output_refuses_and_keeps_the_users_files(
    prepared, tokenizer, masker, tmp_path, name
):
    """A directory that is not a records output of bertzoo's: a file there
    named as the records are is the user's, refused in one line and kept;
    a records output of bertzoo's is written again over itself."""
    from bertzoo.errors import OutputError

    settings = RecordSettings(seq_len=S, objective="sop", dupe_factor=1, seed=9)
    out = tmp_path / "records"
    out.mkdir()
    (out / name).write_bytes(b"the user's")
    with pytest.raises(OutputError) as error:
        write_prepared_records(prepared, out, tokenizer, masker, settings)
    assert f"did not write ({name})" in str(error.value) and "\n" not in str(error.value)
    assert sorted(p.name for p in out.iterdir()) == [name]
    assert (out / name).read_bytes() == b"the user's"
    ours = tmp_path / "ours"
    write_prepared_records(prepared, ours, tokenizer, masker, settings)
    write_prepared_records(prepared, ours, tokenizer, masker, settings)
    manifest_lib.verify_directory(ours, force=True)


def _edit_shard(path, edit):
    """Rewrites a shard's header and arrays through `edit(header, tokens,
    lengths, docs)`, keeping its layout (as a hostile directory would,
    then resealing its manifest)."""
    import struct

    from bertzoo.data import shardfile

    shard = shardfile.Shard(path)
    header = dict(shard.header)
    tokens = np.array(shard.tokens)
    lengths = np.diff(shard.sentence_offsets).astype("<u4")
    docs = np.diff(shard.document_offsets).astype("<u4")
    edit(header, tokens, lengths, docs)
    text = json.dumps(header, sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(
        shardfile.MAGIC + struct.pack("<Q", len(text)) + text
        + tokens.tobytes() + lengths.tobytes() + docs.tobytes()
    )  # fmt: skip


@pytest.mark.parametrize(
    "edit, message",
    [
        # Sentence lengths that add up to more (or fewer) tokens than the
        # shard holds: before, read as they were (one long sentence).
        (lambda h, t, s, d: s.__setitem__(0, s[0] + 7), "its sentence lengths add up to"),
        (lambda h, t, s, d: s.__setitem__(1, 0), "its sentence lengths add up to"),
        (lambda h, t, s, d: d.__setitem__(0, d[0] + 1), "documents' sentence counts add up"),
        (lambda h, t, s, d: h.update(num_tokens=-2), "counts (-2,"),
        (lambda h, t, s, d: h.update(token_dtype="|O"), "token_dtype '|O' is not one bertzoo"),
    ],
)
def test_a_shard_whose_arrays_disagree_is_refused_when_opened(tmp_path, prepared, edit, message):
    import shutil

    directory = tmp_path / "hostile"
    shutil.copytree(prepared.directory, directory)
    first = directory / open_prepared(directory).shard_paths[0].name
    _edit_shard(first, edit)
    reseal_manifest(directory)
    corpus = open_prepared(directory)
    with pytest.raises(CorpusError) as error:
        corpus.shard(0)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)
    assert corpus.shard(1).num_documents > 0  # the others read as they are


def test_a_shard_header_past_its_cap_is_not_read(tmp_path, prepared):
    import shutil
    import struct

    from bertzoo.data import shardfile

    directory = tmp_path / "hostile"
    shutil.copytree(prepared.directory, directory)
    first = open_prepared(directory).shard_paths[0]
    data = bytearray(first.read_bytes())
    data[8:16] = struct.pack("<Q", 1 << 62)
    first.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match="its header length is 4,611,686,018,427,387,904 bytes"):
        shardfile.Shard(first)
