"""Strings into a task model's `fit`, `evaluate` and `predict`.

A task model that carries a preprocessor (`BertClassifier.from_preset` on a
preset with a vocabulary attaches one) takes texts where it takes token-id
dicts: a string, a list / numpy array / tf tensor of strings, a tuple
`(texts_a, texts_b)` of two such batches for sentence pairs, or a
`tf.data.Dataset` whose elements are batches of those (alone, or as `(x, y)`
/ `(x, y, sample_weight)`). They are packed batch by batch inside `tf.data`,
so memory is bounded by the batch size and the sequence length, never by the
number of texts. Each batch is cut to the shortest of a few lengths (16, 32,
64, ... up to the preprocessor's `sequence_length`) that holds its longest
text: short texts cost short sequences, and a compiled step sees at most a
handful of shapes. Padding is masked, so the result does not depend on it.

`predict` on in-memory texts packs them without a dataset
(`packed_chunks`: one traced function, chunks of 1,024 texts), then runs
them as token ids: a dataset's pipeline is traced anew for every call,
seconds for one text.
"""

import sys

import numpy as np

from bertzoo.errors import InputError

# The shortest packed length a batch of texts is cut to.
SHORTEST_BUCKET = 16


def _tf():
    import tensorflow as tf

    return tf


def _is_text_leaf(x):
    if isinstance(x, str | bytes):
        return True
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "US":
            return True
        return x.dtype == object and x.size > 0 and isinstance(x.flat[0], str | bytes)
    if isinstance(x, list):
        return bool(x) and all(isinstance(t, str | bytes) for t in x)
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.Tensor):
        return x.dtype == tf.string
    return False


def _is_text_spec(spec):
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string


def is_pair(x):
    """Whether `x` is a sentence pair `(texts_a, texts_b)` (a tuple of two)."""
    return isinstance(x, tuple) and len(x) == 2 and all(_is_text_leaf(s) for s in x)


def is_texts(x):
    """Whether `x` is text input: strings, a batch of them, or a pair tuple."""
    if isinstance(x, tuple):
        return is_pair(x) or (bool(x) and all(isinstance(t, str | bytes) for t in x))
    return _is_text_leaf(x)


def is_dataset(x):
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(x, tf.data.Dataset)


def dataset_text_layout(dataset):
    """For a `tf.data.Dataset` of texts: "x" when each element is the texts
    alone (a batch, or a pair tuple of batches), "xy" when the first item
    of each element tuple holds them; None when it holds no strings."""
    spec = dataset.element_spec
    if _is_text_spec(spec):
        return "x"
    if isinstance(spec, tuple) and spec:
        if all(_is_text_spec(s) for s in spec):
            return "x" if len(spec) == 2 else None  # a pair of segments
        first = spec[0]
        if _is_text_spec(first) or (
            isinstance(first, tuple) and first and all(_is_text_spec(s) for s in first)
        ):
            return "xy"
    return None


def has_texts(x):
    return is_texts(x) or (is_dataset(x) and dataset_text_layout(x) is not None)


def _segments(x):
    """The text segments of in-memory input, as 1-D tf.string tensors."""
    from bertzoo.tokenizers.base import to_string_tensor

    tf = _tf()
    segments = x if is_pair(x) else (list(x) if isinstance(x, tuple) else x,)
    out = []
    for segment in segments:
        if isinstance(segment, str | bytes):
            segment = [segment]
        tensor = to_string_tensor(segment)
        out.append(tf.reshape(tensor, [-1]))
    sizes = {int(s.shape[0]) for s in out}
    if len(sizes) > 1:
        raise InputError(
            f"The two segments of a text pair must hold the same number of texts, got "
            f"{int(out[0].shape[0])} and {int(out[1].shape[0])}."
        )
    return tuple(out)


def count(x):
    """The number of examples in in-memory text input."""
    return int(_segments(x)[0].shape[0])


def buckets(sequence_length):
    """The lengths a packed batch is cut to: 16, 32, ... and `sequence_length`."""
    lengths, length = [], SHORTEST_BUCKET
    while length < sequence_length:
        lengths.append(length)
        length *= 2
    return lengths + [sequence_length]


def packer(preprocessor):
    """A `tf.data`-mappable function: texts (a batch, or a pair tuple) ->
    the model's input dict, cut to the shortest bucket that holds the
    batch's longest text."""
    tf = _tf()
    pack = getattr(preprocessor, "pack", None) or preprocessor
    sequence_length = getattr(preprocessor, "sequence_length", None)
    lengths = tf.constant(buckets(sequence_length), tf.int32) if sequence_length else None

    def texts_to_inputs(texts):
        features = pack(texts)
        if lengths is None or "padding_mask" not in features:
            return features
        mask = tf.cast(features["padding_mask"], tf.int32)
        longest = tf.reduce_max(tf.reduce_sum(mask, axis=1))
        width = tf.gather(lengths, tf.argmax(tf.cast(lengths >= longest, tf.int32)))
        return {k: v[:, :width] for k, v in features.items()}

    return texts_to_inputs


def packed_chunks(preprocessor, x, cache, size=1024):
    """In-memory texts -> a list of numpy dicts of packed inputs (each of
    `size` texts at most, padded to the preprocessor's length), for models
    that run numpy batches (a LiteRT-int8 model's `predict`). Packed by one
    `tf.function` per preprocessor and segment count, kept in `cache` (a
    dict the caller holds): traced once, not per call as a dataset is."""
    tf = _tf()
    segments = _segments(x)
    key = (id(preprocessor), len(segments))
    if key not in cache:
        pack = getattr(preprocessor, "pack", None) or preprocessor
        cache.clear()  # one preprocessor at a time
        cache[key] = tf.function(
            lambda *texts: pack(texts if len(texts) == 2 else texts[0]),
            input_signature=[tf.TensorSpec([None], tf.string)] * len(segments),
            autograph=False,
        )
    total = int(segments[0].shape[0])
    return [
        {k: v.numpy() for k, v in cache[key](*(s[i : i + size] for s in segments)).items()}
        for i in range(0, total, size)
    ]


def text_dataset(preprocessor, x, y=None, sample_weight=None, batch_size=32, shuffle=False):
    """In-memory texts (and labels, sample weights) -> a batched, packed
    `tf.data.Dataset` of `(inputs[, y[, sample_weight]])`, reshuffled each
    epoch when `shuffle`."""
    tf = _tf()
    segments = _segments(x)
    x_part = segments if len(segments) == 2 else segments[0]
    items = [x_part] + [v for v in (y, sample_weight) if v is not None]
    if sample_weight is not None and y is None:
        raise InputError("sample_weight needs labels y.")
    n = int(segments[0].shape[0])
    for name, value in (("y", y), ("sample_weight", sample_weight)):
        if value is not None and len(value) != n:
            raise InputError(f"{n} texts but {len(value)} values in {name}: give one per text.")
    dataset = tf.data.Dataset.from_tensor_slices(tuple(items) if len(items) > 1 else x_part)
    if shuffle:
        dataset = dataset.shuffle(n, reshuffle_each_iteration=True)
    dataset = dataset.batch(int(batch_size))
    return map_texts(dataset, preprocessor, "xy" if len(items) > 1 else "x")


def map_texts(dataset, preprocessor, layout):
    """Packs the texts of a dataset of batches (`dataset_text_layout`)."""
    tf = _tf()
    to_inputs = packer(preprocessor)
    if layout == "x":

        def fn(*texts):
            return to_inputs(texts if len(texts) == 2 else texts[0])
    else:

        def fn(texts, *rest):
            return (to_inputs(texts), *rest)

    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def split_tail(values, fraction):
    """`values` cut into (head, tail), the tail the last `fraction` of the
    rows (Keras' `validation_split`); pairs and None follow along."""
    if values is None:
        return None, None
    if is_pair(values):
        heads, tails = zip(*(split_tail(v, fraction) for v in values), strict=True)
        return tuple(heads), tuple(tails)
    if isinstance(values, str | bytes):
        values = [values]
    n = len(values)
    cut = int(n * (1.0 - fraction))
    return values[:cut], values[cut:]


def softmax(logits):
    """Numerically stable softmax over the last axis (numpy)."""
    logits = np.asarray(logits, np.float64)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)
