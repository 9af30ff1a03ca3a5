"""Examples -> `tf.data` in the format the pre-trainer consumes.

Every element (batched) is `(x, y, sample_weight)`:
  x = {"token_ids", "segment_ids", "padding_mask": int32 (B, S),
       "mask_positions": int32 (B, P)}
  y = {"mlm": int32 (B, P) original ids at mask_positions,
       "sentence": int32 (B,) NSP/SOP label (absent for objective "none")}
  sample_weight = {"mlm": float32 (B, P), 1.0 real prediction / 0.0 padding,
                   "sentence": float32 (B,) all 1.0 (with "sentence" labels;
                   Keras needs sample_weight to mirror y)}

Static mode: `write_pretraining_tfrecords` masks once (per dupe pass) and
writes sharded TFRecords plus `pretraining_metadata.json`;
`read_pretraining_dataset` reads them back. Dynamic mode: unmasked examples
(in memory via `make_pretraining_dataset`, or files written with
`masker=None`) are masked inside `tf.data` with fresh, seeded randomness
every epoch. Both paths use the same `MaskedLMMasker` and `_format`.

Resumable streams (`repeat=True`): the endless stream of batches is a pure
function of the arguments, the same for every iterator over the dataset:
epoch e is shuffled with a key made from (seed, e) and batch b is masked with
the seed pair (seed, b). `start_batch=k` starts the same stream at batch k,
as if k batches had been consumed (used to resume training), skipping whole
epochs without reading them and never masking or parsing skipped batches.
This matters because Keras iterates a dataset more than once: JAX `fit`
pulls a batch from a first iterator to build an unbuilt model (or its compile
metrics), then trains on a second one. With `reshuffle_each_iteration` the
second iterator's order depended on how far the discarded one had prefetched,
and a resumed (fresh) model trained on a different stream than a model that
was built already. Neither in-memory nor TFRecord streams depend on
TensorFlow's global seed (`keras.utils.set_random_seed`).

Finite datasets (`repeat=False`) reshuffle and re-mask at every iteration
(epoch), reproducibly from `seed` and the number of iterations so far;
`start_batch` skips the first batches of each iteration.
"""

import glob
import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertzoo.errors import BertzooError, IntegrityError
from bertzoo.io import manifest as manifest_lib
from bertzoo.io.bounded import CONFIG_BYTES, read_bounded_text
from bertzoo.io.publish import atomic_path, atomic_write_text

METADATA_FILE = "pretraining_metadata.json"
# The largest metadata file read: a list of 100,000 shards takes about 4
# MB; a hostile one of 1e7 entries (360 MB) passed 6 GiB when parsed.
MAX_METADATA_BYTES = CONFIG_BYTES
FORMAT_VERSION = 1
_INT_FEATURES = ("token_ids", "segment_ids", "padding_mask")
_AUTOTUNE = tf.data.AUTOTUNE


class PretrainingDataError(BertzooError, ValueError):
    """Pre-training files do not match what the reader was asked for."""


def _format(token_ids, segment_ids, padding_mask, positions, mask_ids, weights, labels, objective):
    x = {
        "token_ids": tf.cast(token_ids, tf.int32),
        "segment_ids": tf.cast(segment_ids, tf.int32),
        "padding_mask": tf.cast(padding_mask, tf.int32),
        "mask_positions": tf.cast(positions, tf.int32),
    }
    y = {"mlm": tf.cast(mask_ids, tf.int32)}
    sample_weight = {"mlm": tf.cast(weights, tf.float32)}
    if objective != "none":
        y["sentence"] = tf.cast(labels, tf.int32)
        # Keras wants one sample_weight entry per entry of y.
        sample_weight["sentence"] = tf.ones_like(y["sentence"], tf.float32)
    return x, y, sample_weight


def _check_masker(masker, seq_len):
    if masker.seq_len != seq_len:
        raise PretrainingDataError(
            f"The masker was built for seq_len={masker.seq_len} but the examples have seq_len={seq_len}."
        )


def _unmasked_slices(examples):
    return {
        "token_ids": examples.token_ids,
        "segment_ids": examples.segment_ids,
        "padding_mask": examples.padding_mask,
        "label": examples.labels,
    }


def _check_start_batch(start_batch):
    if isinstance(start_batch, bool) or not isinstance(start_batch, (int, np.integer)):
        raise TypeError(f"start_batch must be an int, got {start_batch!r}.")
    if start_batch < 0:
        raise ValueError(f"start_batch must be >= 0, got {start_batch}.")
    return int(start_batch)


@tf.autograph.experimental.do_not_convert
def _mask_batch(batch, masker, pair, objective):
    masked, positions, ids, weights = masker(batch["token_ids"], batch["padding_mask"], pair)
    return _format(
        masked,
        batch["segment_ids"],
        batch["padding_mask"],
        positions,
        ids,
        weights,
        batch["label"],
        objective,
    )


def _mask_seeds(seed, start_batch, endless):
    """The masking seed pairs, one per batch. Endless streams: (seed, b) for
    batch b, from `start_batch` on. Finite ones: drawn from a seeded random
    stream that is re-drawn every iteration (epoch), for fresh masks."""
    if endless:
        seed = tf.constant(seed, tf.int64)
        return tf.data.Dataset.counter(start_batch).map(lambda b: tf.stack([seed, b]))
    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)


def _mask_dynamically(batched, masker, seed, objective, start_batch=0, endless=False, parse=None):
    """Masks each batch with its seed pair (see `_mask_seeds`). `batched`
    must already start at `start_batch` when `endless`; otherwise the first
    `start_batch` batches are skipped here, before `parse` and masking."""
    ds = tf.data.Dataset.zip((batched, _mask_seeds(seed, start_batch, endless)))
    if not endless and start_batch:
        ds = ds.skip(start_batch)

    def apply(batch, pair):
        if parse is not None:
            batch = parse(batch)
        return _mask_batch(batch, masker, pair, objective)

    return ds.map(apply, num_parallel_calls=_AUTOTUNE, deterministic=True)


def _endless_in_memory(examples, batch_size, masker, seed, shuffle, start_batch):
    """Batch b holds elements b*B .. b*B+B-1 of the endless stream; element i
    is example `perm_e(i mod n)` of epoch e = i // n, with `perm_e` a
    stateless permutation keyed by (seed, e). Any batch is computed directly,
    so `start_batch` costs nothing."""
    n = len(examples)
    if n == 0:
        raise PretrainingDataError("No examples.")
    columns = {k: tf.constant(v) for k, v in _unmasked_slices(examples).items()}
    seed64 = tf.constant(seed, tf.int64)
    offsets = tf.range(batch_size, dtype=tf.int64)
    # A third seed word for the raw op (tf.random.experimental.index_shuffle
    # pads [2] seeds to [3] itself, but pads [n, 2] ones along the wrong axis).
    salt = tf.fill([batch_size], tf.constant(498247692, tf.int64))
    last = tf.constant(n - 1, tf.int64)

    def load(b):
        i = b * batch_size + offsets
        j = i % n
        if shuffle:
            keys = tf.stack([salt, tf.fill([batch_size], seed64), i // n], axis=1)
            j = tf.raw_ops.RandomIndexShuffle(index=j, seed=keys, max_index=last, rounds=4)
        batch = {k: tf.gather(v, j) for k, v in columns.items()}
        return _mask_batch(batch, masker, tf.stack([seed64, b]), examples.objective)

    ds = tf.data.Dataset.counter(start_batch).map(
        load, num_parallel_calls=_AUTOTUNE, deterministic=True
    )
    return ds.prefetch(_AUTOTUNE)


def make_pretraining_dataset(
    examples,
    batch_size,
    masker,
    seed=0,
    shuffle=True,
    drop_remainder=True,
    repeat=False,
    start_batch=0,
):
    """Dynamic masking over in-memory `PretrainingExamples`: a batched
    `tf.data.Dataset` of (x, y, sample_weight), re-masked every epoch.

    Args:
        examples: `PretrainingExamples` (unmasked).
        batch_size, drop_remainder: batching (with `repeat`, every batch is
            full).
        masker: the `MaskedLMMasker`.
        seed: shuffling and masking randomness.
        shuffle: shuffle the examples, differently every epoch.
        repeat: an endless stream whose epochs run into each other; every
            iterator over it yields the same batches (see the module
            docstring), which makes it resumable.
        start_batch: begin at this batch of the stream, as if `start_batch`
            batches had been consumed (to resume training). With
            `repeat=False`, skips the first `start_batch` batches of every
            iteration.
    """
    _check_masker(masker, examples.seq_len)
    start_batch = _check_start_batch(start_batch)
    if repeat:
        return _endless_in_memory(examples, batch_size, masker, seed, shuffle, start_batch)
    ds = tf.data.Dataset.from_tensor_slices(_unmasked_slices(examples))
    if shuffle:
        ds = ds.shuffle(max(1, len(examples)), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return _mask_dynamically(ds, masker, seed, examples.objective, start_batch).prefetch(_AUTOTUNE)


def _int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _serialize(features):
    feats = {k: _int_feature(v) for k, v in features.items() if k != "mask_weights"}
    if "mask_weights" in features:
        feats["mask_weights"] = tf.train.Feature(
            float_list=tf.train.FloatList(value=features["mask_weights"])
        )
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def write_pretraining_tfrecords(
    examples, output_dir, num_shards=1, masker=None, seed=0, prefix="pretraining", batch_size=1024
):
    """Writes `PretrainingExamples` as sharded TFRecords + metadata.

    With a `masker`, examples are masked now (static mode; each example gets
    its own randomness, so the dupe passes of `create_examples` are masked
    differently). With `masker=None` the files hold unmasked examples for
    dynamic masking at read time. Each shard is written to a temporary
    name and renamed; the metadata file is written last.

    Returns the list of shard paths.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}.")
    if len(examples) == 0:
        raise PretrainingDataError("No examples to write.")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if masker is not None:
        _check_masker(masker, examples.seq_len)
    ds = tf.data.Dataset.from_tensor_slices(_unmasked_slices(examples)).batch(batch_size)
    if masker is not None:

        def apply(i, batch):
            masked, positions, ids, weights = masker(
                batch["token_ids"], batch["padding_mask"], tf.stack([tf.cast(seed, tf.int64), i])
            )
            return {
                "token_ids": masked,
                "segment_ids": batch["segment_ids"],
                "padding_mask": batch["padding_mask"],
                "mask_positions": positions,
                "mask_ids": ids,
                "mask_weights": weights,
                "label": batch["label"],
            }

        ds = ds.enumerate().map(apply, num_parallel_calls=_AUTOTUNE, deterministic=True)
    n = len(examples)
    bounds = np.linspace(0, n, num_shards + 1).astype(int)
    paths = [
        output_dir / f"{prefix}-{s:05d}-of-{num_shards:05d}.tfrecord" for s in range(num_shards)
    ]
    it = ds.prefetch(2).as_numpy_iterator()
    pending, index = {}, 0  # column arrays of the current batch
    for s, path in enumerate(paths):
        with atomic_path(path) as tmp, tf.io.TFRecordWriter(str(tmp)) as writer:
            for _ in range(bounds[s], bounds[s + 1]):
                if not pending or index >= len(pending["token_ids"]):
                    pending, index = next(it), 0
                row = {k: v[index].tolist() for k, v in pending.items()}
                row["label"] = [row["label"]]
                writer.write(_serialize(row))
                index += 1
    metadata = {
        "format_version": FORMAT_VERSION,
        "seq_len": examples.seq_len,
        "objective": examples.objective,
        "vocabulary_size": examples.vocabulary_size,
        "masked": masker is not None,
        "max_predictions_per_seq": masker.max_predictions_per_seq if masker is not None else None,
        "masking": masker.config() if masker is not None else None,
        "num_examples": n,
        "shards": [p.name for p in paths],
        "seed": seed,
    }
    atomic_write_text(output_dir / METADATA_FILE, json.dumps(metadata, indent=2))
    return paths


def _resolve(pattern):
    """A directory (its metadata's shards) or a glob -> (files, metadata)."""
    pattern = str(pattern)
    if os.path.isdir(pattern):
        directory = Path(pattern)
        files = None
    else:
        files = sorted(glob.glob(pattern))
        if not files:
            raise FileNotFoundError(f"No pre-training files match {pattern!r}.")
        dirs = {str(Path(f).parent) for f in files}
        if len(dirs) > 1:
            raise PretrainingDataError(
                f"{pattern!r} matches files in several directories: {sorted(dirs)}."
            )
        directory = Path(dirs.pop())
    meta_path = directory / METADATA_FILE
    if not meta_path.is_file():
        raise PretrainingDataError(
            f"{directory} has no {METADATA_FILE}; write the files with write_pretraining_tfrecords."
        )
    # Read once, bounded, before anything is sized from it.
    meta_text = read_bounded_text(
        meta_path, MAX_METADATA_BYTES, "records metadata file", PretrainingDataError
    )
    # A directory with a manifest (`prepare-records` writes one) is checked
    # against it: its metadata, and every record file it is read from.
    manifest = manifest_lib.read_manifest(directory)
    try:
        if manifest is not None:
            manifest_lib.verify_directory(directory, names=[METADATA_FILE], manifest=manifest)
        metadata = json.loads(meta_text)
        shards = metadata.get("shards") if isinstance(metadata, dict) else None
        if (
            not isinstance(shards, list)
            or not all(isinstance(n, str) and manifest_lib.inside(n) for n in shards)
            or len(set(shards)) != len(shards)
        ):
            raise PretrainingDataError(
                f"{meta_path}: its shards must be a list of distinct file names inside "
                f"{directory}; the file is damaged or not bertzoo's."
            )
        if files is None:
            files = [str(directory / name) for name in shards]
            missing = [f for f in files if not os.path.isfile(f)]
            if missing:
                raise FileNotFoundError(f"Shards listed in {meta_path} are missing: {missing}.")
        if manifest is not None:
            names = [Path(f).name for f in files]
            unlisted = [n for n in names if n not in manifest["files"]]
            if unlisted:
                raise PretrainingDataError(
                    f"{directory}: {unlisted[0]} is not in its manifest "
                    f"({manifest_lib.MANIFEST_FILE}); it was not written there by bertzoo."
                )
            manifest_lib.verify_directory(directory, names=names, manifest=manifest)
    except IntegrityError as e:
        raise PretrainingDataError(str(e)) from None
    return files, metadata, meta_path


def checked_files(
    pattern, seq_len, max_predictions_per_seq=None, masker=None, vocabulary_size=None
):
    """The checks `read_pretraining_dataset` makes of its arguments against
    the files' metadata -> (files, metadata)."""
    files, meta, meta_path = _resolve(pattern)
    if meta["seq_len"] != seq_len:
        raise PretrainingDataError(
            f"{meta_path.parent} was written for seq_len={meta['seq_len']}, but seq_len={seq_len} "
            "was requested; create the examples again with this seq_len (e.g. phase 2 of "
            "a two-phase run needs its own files)."
        )
    if vocabulary_size is not None and meta["vocabulary_size"] != vocabulary_size:
        raise PretrainingDataError(
            f"{meta_path.parent} was written with a vocabulary of {meta['vocabulary_size']} tokens, "
            f"the model has {vocabulary_size}."
        )
    if meta["masked"]:
        P = meta["max_predictions_per_seq"]
        if max_predictions_per_seq is not None and max_predictions_per_seq != P:
            raise PretrainingDataError(
                f"{meta_path.parent} was written with max_predictions_per_seq={P}, but "
                f"{max_predictions_per_seq} was requested."
            )
        if masker is not None:
            raise PretrainingDataError(
                f"{meta_path.parent} holds masked examples; do not pass a masker."
            )
    else:
        if masker is None:
            raise PretrainingDataError(
                f"{meta_path.parent} holds unmasked examples (dynamic masking): pass masker=MaskedLMMasker(...)."
            )
        _check_masker(masker, seq_len)
        if (
            max_predictions_per_seq is not None
            and max_predictions_per_seq != masker.max_predictions_per_seq
        ):
            raise PretrainingDataError(
                f"max_predictions_per_seq={max_predictions_per_seq} differs from the masker's "
                f"{masker.max_predictions_per_seq}."
            )
    return files, meta


def record_parser(meta, seq_len):
    """serialized records (a batch) -> their feature columns (int32; masked
    files: with mask_positions, mask_ids, mask_weights)."""
    spec = {k: tf.io.FixedLenFeature([seq_len], tf.int64) for k in _INT_FEATURES}
    spec["label"] = tf.io.FixedLenFeature([1], tf.int64)
    if meta["masked"]:
        P = meta["max_predictions_per_seq"]
        spec["mask_positions"] = tf.io.FixedLenFeature([P], tf.int64)
        spec["mask_ids"] = tf.io.FixedLenFeature([P], tf.int64)
        spec["mask_weights"] = tf.io.FixedLenFeature([P], tf.float32)

    def parse(serialized):
        f = tf.io.parse_example(serialized, spec)
        out = {k: tf.cast(v, tf.int32) for k, v in f.items() if k != "mask_weights"}
        out["label"] = out["label"][:, 0]
        if "mask_weights" in f:
            out["mask_weights"] = f["mask_weights"]
        return out

    return parse


def read_pretraining_dataset(
    pattern,
    batch_size,
    seq_len,
    max_predictions_per_seq=None,
    masker=None,
    vocabulary_size=None,
    shuffle=True,
    seed=0,
    shuffle_buffer=10000,
    drop_remainder=True,
    repeat=False,
    start_batch=0,
):
    """Reads files from `write_pretraining_tfrecords` as a batched
    `tf.data.Dataset` of (x, y, sample_weight) with static shapes.

    Args:
        pattern: the output directory, or a glob over its shards.
        batch_size, drop_remainder: batching (drop_remainder keeps the batch
            dimension static, as TPUs need).
        seq_len: the length the model expects; must match the files.
        max_predictions_per_seq: for masked files, checked when given.
        masker: required for unmasked files (dynamic masking at read time).
        vocabulary_size: checked against the metadata when given.
        shuffle, seed, shuffle_buffer: shard order and example shuffling
            (and, for unmasked files, the masking randomness).
        repeat: an endless stream (epochs run into each other, each
            shuffled differently); every iterator over it yields the same
            batches (see the module docstring), which makes it resumable.
        start_batch: begin at this batch of the stream, as if `start_batch`
            batches had been consumed (to resume training): whole epochs
            are skipped without reading them, the rest of the skipped
            records are read but neither parsed nor masked. With
            `repeat=False`, skips the first `start_batch` batches of every
            iteration.
    """
    start_batch = _check_start_batch(start_batch)
    files, meta = checked_files(pattern, seq_len, max_predictions_per_seq, masker, vocabulary_size)
    parse = record_parser(meta, seq_len)

    if repeat:
        records = _endless_records(
            files, meta, shuffle, seed, shuffle_buffer, start_batch * batch_size
        )
    else:
        records = _records(files, shuffle, seed, shuffle_buffer, reshuffle=True)
    batches = records.batch(batch_size, drop_remainder=drop_remainder)
    objective = meta["objective"]
    if meta["masked"]:
        if start_batch and not repeat:
            batches = batches.skip(start_batch)
        ds = batches.map(
            lambda serialized: _format_static(parse(serialized), objective),
            num_parallel_calls=_AUTOTUNE,
            deterministic=True,
        )
    else:
        ds = _mask_dynamically(
            batches, masker, seed, objective, start_batch, endless=repeat, parse=parse
        )
    return ds.prefetch(_AUTOTUNE)


@tf.autograph.experimental.do_not_convert
def _format_static(b, objective):
    return _format(
        b["token_ids"],
        b["segment_ids"],
        b["padding_mask"],
        b["mask_positions"],
        b["mask_ids"],
        b["mask_weights"],
        b["label"],
        objective,
    )


def _records(files, shuffle, seed, shuffle_buffer, reshuffle):
    """One pass over the serialized records: shard order shuffled, shards
    interleaved, records shuffled in a buffer (or file order, as written)."""
    if not shuffle:
        return tf.data.TFRecordDataset(files)
    ds = tf.data.Dataset.from_tensor_slices(files).shuffle(
        len(files), seed=seed, reshuffle_each_iteration=reshuffle
    )
    ds = ds.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(len(files), 8),
        num_parallel_calls=_AUTOTUNE,
        deterministic=True,
    )
    return ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=reshuffle)


def _count_records(files, meta):
    if sorted(os.path.basename(f) for f in files) == sorted(meta["shards"]):
        return int(meta["num_examples"])
    return int(tf.data.TFRecordDataset(files).reduce(np.int64(0), lambda n, _: n + 1))


_EPOCH_GRAPH_SEED = 20181011  # any nonzero constant


def _endless_records(files, meta, shuffle, seed, shuffle_buffer, skip):
    """The endless record stream from record `skip` on: epoch e is one pass
    shuffled with seeds drawn from (seed, e), the same on every iteration."""
    if all(os.path.getsize(f) == 0 for f in files):
        raise PretrainingDataError(
            f"{files} hold no records."
        )  # else an endless loop over empty epochs
    first_epoch = 0
    if skip:
        n = _count_records(files, meta)
        if n == 0:
            raise PretrainingDataError(f"{files} hold no records.")
        first_epoch, skip = divmod(skip, n)
    seed64 = tf.constant(seed, tf.int64)

    def epoch(e):
        if not shuffle:
            return tf.data.TFRecordDataset(files)
        # This runs while tf.data traces `epoch` as a graph function: pin
        # that graph's seed, so the stream does not depend on the global
        # seed (`keras.utils.set_random_seed`), and a global seed of 0 does
        # not reach TF's `seeds == (0, 0)` test with a tensor op seed.
        tf.compat.v1.set_random_seed(_EPOCH_GRAPH_SEED)
        key = tf.stack([seed64, e])
        op_seed = tf.random.stateless_uniform([], key, minval=None, maxval=None, dtype=tf.int64)
        return _records(files, True, op_seed, shuffle_buffer, reshuffle=False)

    ds = tf.data.Dataset.counter(first_epoch).flat_map(epoch)
    return ds.skip(skip) if skip else ds


def read_metadata(pattern):
    """The metadata dict of pre-training files (a directory or shard glob)."""
    return _resolve(pattern)[1]
