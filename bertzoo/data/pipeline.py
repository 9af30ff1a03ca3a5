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
"""

import glob
import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertzoo.io_utils import atomic_path, atomic_write_text

METADATA_FILE = "pretraining_metadata.json"
FORMAT_VERSION = 1
_INT_FEATURES = ("token_ids", "segment_ids", "padding_mask")
_AUTOTUNE = tf.data.AUTOTUNE


class PretrainingDataError(ValueError):
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


def _mask_dynamically(batched, masker, seed, objective):
    """Masks each batch with a seed pair drawn from a seeded random stream
    that is re-drawn every iteration (epoch): fresh masks, reproducible."""
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)

    def apply(batch, pair):
        masked, positions, ids, weights = masker(batch["token_ids"], batch["padding_mask"], pair)
        return _format(masked, batch["segment_ids"], batch["padding_mask"], positions, ids, weights, batch["label"], objective)

    return tf.data.Dataset.zip((batched, seeds)).map(apply, num_parallel_calls=_AUTOTUNE, deterministic=True)


def make_pretraining_dataset(examples, batch_size, masker, seed=0, shuffle=True, drop_remainder=True, repeat=False):
    """Dynamic masking over in-memory `PretrainingExamples`: a batched
    `tf.data.Dataset` of (x, y, sample_weight), re-masked every epoch."""
    _check_masker(masker, examples.seq_len)
    ds = tf.data.Dataset.from_tensor_slices(_unmasked_slices(examples))
    if shuffle:
        ds = ds.shuffle(max(1, len(examples)), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return _mask_dynamically(ds, masker, seed, examples.objective).prefetch(_AUTOTUNE)


def _int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _serialize(features):
    feats = {k: _int_feature(v) for k, v in features.items() if k != "mask_weights"}
    if "mask_weights" in features:
        feats["mask_weights"] = tf.train.Feature(float_list=tf.train.FloatList(value=features["mask_weights"]))
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def write_pretraining_tfrecords(examples, output_dir, num_shards=1, masker=None, seed=0, prefix="pretraining", batch_size=1024):
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
            masked, positions, ids, weights = masker(batch["token_ids"], batch["padding_mask"], tf.stack([tf.cast(seed, tf.int64), i]))
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
    paths = [output_dir / f"{prefix}-{s:05d}-of-{num_shards:05d}.tfrecord" for s in range(num_shards)]
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
            raise PretrainingDataError(f"{pattern!r} matches files in several directories: {sorted(dirs)}.")
        directory = Path(dirs.pop())
    meta_path = directory / METADATA_FILE
    if not meta_path.is_file():
        raise PretrainingDataError(
            f"{directory} has no {METADATA_FILE}; write the files with write_pretraining_tfrecords."
        )
    metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    if files is None:
        files = [str(directory / name) for name in metadata["shards"]]
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            raise FileNotFoundError(f"Shards listed in {meta_path} are missing: {missing}.")
    return files, metadata, meta_path


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
        shuffle, seed, shuffle_buffer: shard order and example shuffling.
        repeat: repeat forever (before batching).
    """
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
            raise PretrainingDataError(f"{meta_path.parent} holds masked examples; do not pass a masker.")
    else:
        if masker is None:
            raise PretrainingDataError(
                f"{meta_path.parent} holds unmasked examples (dynamic masking): pass masker=MaskedLMMasker(...)."
            )
        _check_masker(masker, seq_len)
        if max_predictions_per_seq is not None and max_predictions_per_seq != masker.max_predictions_per_seq:
            raise PretrainingDataError(
                f"max_predictions_per_seq={max_predictions_per_seq} differs from the masker's "
                f"{masker.max_predictions_per_seq}."
            )

    spec = {k: tf.io.FixedLenFeature([seq_len], tf.int64) for k in _INT_FEATURES}
    spec["label"] = tf.io.FixedLenFeature([1], tf.int64)
    if meta["masked"]:
        spec["mask_positions"] = tf.io.FixedLenFeature([P], tf.int64)
        spec["mask_ids"] = tf.io.FixedLenFeature([P], tf.int64)
        spec["mask_weights"] = tf.io.FixedLenFeature([P], tf.float32)

    if shuffle:
        ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = ds.interleave(
            tf.data.TFRecordDataset, cycle_length=min(len(files), 8), num_parallel_calls=_AUTOTUNE, deterministic=True
        )
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    else:  # file order, as written
        ds = tf.data.TFRecordDataset(files)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)

    def parse(serialized):
        f = tf.io.parse_example(serialized, spec)
        out = {k: tf.cast(v, tf.int32) for k, v in f.items() if k != "mask_weights"}
        out["label"] = out["label"][:, 0]
        if "mask_weights" in f:
            out["mask_weights"] = f["mask_weights"]
        return out

    ds = ds.map(parse, num_parallel_calls=_AUTOTUNE, deterministic=True)
    objective = meta["objective"]
    if meta["masked"]:
        ds = ds.map(
            lambda b: _format(
                b["token_ids"], b["segment_ids"], b["padding_mask"], b["mask_positions"],
                b["mask_ids"], b["mask_weights"], b["label"], objective,
            ),
            num_parallel_calls=_AUTOTUNE,
            deterministic=True,
        )
    else:
        ds = _mask_dynamically(ds, masker, seed, objective)
    return ds.prefetch(_AUTOTUNE)


def read_metadata(pattern):
    """The metadata dict of pre-training files (a directory or shard glob)."""
    return _resolve(pattern)[1]
