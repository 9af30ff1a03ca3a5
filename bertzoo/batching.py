"""Length-aware batching: each batch is padded only to its longest sequence,
rounded up to one of a few bucket lengths, instead of to the full
`sequence_length`.

Short texts (tweets, titles, queries: 20-40 tokens) padded to 128 or 256
spend most of the model's work on padding, and attention grows with the
square of the length. Trimming a batch to its real length changes nothing
the model computes for the real tokens (padding positions are masked out of
attention and pooling), so outputs agree with fixed padding up to float
rounding (tests/test_batching.py states how close).

One mechanism serves every place sequences are batched:

- `training_plan`: the batches of one training epoch, as index arrays and
  lengths. A pure function of the seed and the examples' lengths, so a run
  resumed at epoch e sees the same batches as one that never stopped.
  Modes (`BATCHING_MODES`):
  - "padded" (the runs' default): the same random batches as "fixed", each
    padded to its longest example's bucket (what dynamic padding in other
    tools does). Trains exactly what "fixed" trains, with less work.
  - "buckets": examples are shuffled, then grouped by bucket length
    (stable, so the order within a bucket stays random), cut into batches
    and the batches shuffled. Almost every batch holds examples of one
    bucket: least padding (2.5x the throughput of "padded" on short real
    texts), but where text length goes with the label, batches of mostly
    one label train worse: 0.02-0.05 lower accuracy after one epoch in
    BENCHMARKS.md.
  - "fixed": random batches padded to `sequence_length` (static shapes).
  Every mode yields `len(lengths) // batch_size` full batches per epoch
  (`drop_remainder`), the examples left out being a random few.
- `training_dataset`: a `tf.data` stream of those batches, trimmed.
- `inference_plan` + `predict_by_length`: sorted by length ("smart
  batching"), trimmed, run through a function compiled once per model
  (`compiled_forward`), and returned in the input order, per-token outputs
  padded back to `sequence_length`.
- `trim_to_bucket`: the same trimming in TensorFlow ops, inside graphs (the
  serving signature, pre-training evaluation batches).

The bucket lengths are 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
512, ... (two per octave, so a batch pads to less than 1.5x its longest
sequence),
capped at `sequence_length`, which is always one. Under XLA (and JAX's jit),
which compile once per shape, a run therefore compiles at most a handful of
shapes (9 for `sequence_length=128`) per batch size.
"""

import functools

import numpy as np

# The model inputs that have one entry per token position.
SEQUENCE_KEYS = ("token_ids", "segment_ids", "padding_mask")
BATCHING_MODES = ("buckets", "padded", "fixed")
_SMALLEST_BUCKET = 8


def bucket_lengths(sequence_length):
    """The padded lengths a batch may have, ascending, ending with
    `sequence_length`."""
    sequence_length = int(sequence_length)
    lengths, base = [], _SMALLEST_BUCKET
    while base < sequence_length:
        lengths += [base, base * 3 // 2]
        base *= 2
    return sorted({n for n in lengths if n < sequence_length} | {sequence_length})


def bucket_length(length, sequence_length):
    """The bucket a sequence (or an array of sequences) of `length` real
    tokens is padded to."""
    buckets = np.asarray(bucket_lengths(sequence_length))
    index = np.searchsorted(buckets, np.minimum(length, sequence_length), side="left")
    out = buckets[index]
    return int(out) if np.ndim(out) == 0 else out


def sequence_lengths(features):
    """Real tokens per row: the sum of `padding_mask` (numpy, int)."""
    return np.asarray(features["padding_mask"]).astype(bool).sum(axis=-1).astype(np.int64)


def is_array_batch(x):
    """A dict of in-memory arrays (numpy, lists) with a 2-D `padding_mask`
    of at least one row: what `predict_by_length` takes."""
    if not isinstance(x, dict) or "padding_mask" not in x:
        return False
    if not all(isinstance(v, np.ndarray | list) for v in x.values()):
        return False
    return np.ndim(x["padding_mask"]) == 2 and len(x["padding_mask"]) > 0


def _take(tree, index):
    if isinstance(tree, dict):
        return {k: _take(v, index) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_take(v, index) for v in tree)
    return np.asarray(tree)[index]


def trim(tree, length, sequence_length):
    """Cuts every array of `tree` (dict / tuple / array) whose second axis
    is `sequence_length` (token ids, masks, per-token labels) to `length`
    positions; other arrays pass unchanged."""
    if isinstance(tree, dict):
        return {k: trim(v, length, sequence_length) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(trim(v, length, sequence_length) for v in tree)
    array = np.asarray(tree)
    if array.ndim >= 2 and array.shape[1] == sequence_length:
        return array[:, :length]
    return array


def check_mode(mode):
    if mode not in BATCHING_MODES:
        raise ValueError(f"batching must be one of {', '.join(BATCHING_MODES)}; got {mode!r}.")
    return mode


def training_plan(lengths, batch_size, seed, sequence_length, mode="padded"):
    """The batches of one epoch: a list of `(row indices, padded length)`,
    `len(lengths) // batch_size` of them, each of `batch_size` rows; see the
    module docstring for the modes. Deterministic in `seed`."""
    check_mode(mode)
    lengths = np.asarray(lengths)
    batch_size = int(batch_size)
    steps = len(lengths) // batch_size
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))[: steps * batch_size]
    if mode == "buckets":
        # Stable: within a bucket the random order is kept.
        order = order[np.argsort(bucket_length(lengths[order], sequence_length), kind="stable")]
    batches = order.reshape(steps, batch_size) if steps else np.zeros((0, batch_size), np.int64)
    if mode == "buckets":
        batches = batches[rng.permutation(steps)]
    if mode == "fixed":
        padded = [int(sequence_length)] * steps
    else:
        padded = [bucket_length(int(lengths[rows].max()), sequence_length) for rows in batches]
    return list(zip(batches, padded))


def inference_plan(lengths, batch_size, sequence_length):
    """Rows sorted by length and cut into batches of `batch_size` (the last
    may be smaller): a list of `(row indices, padded length)`."""
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    plan = []
    for start in range(0, len(order), int(batch_size)):
        rows = order[start : start + int(batch_size)]
        plan.append((rows, bucket_length(int(lengths[rows].max()), sequence_length)))
    return plan


def training_dataset(
    features,
    targets,
    batch_size,
    seed,
    sequence_length,
    mode="padded",
    epochs=1,
    start_batch=0,
    per_token_targets=True,
):
    """A `tf.data.Dataset` of trimmed `(features, targets)` batches (or
    `features` alone when `targets` is None): epoch e of `epochs` (None:
    endless) follows `training_plan(..., seed + e, ...)`. `start_batch`
    starts the same stream later, as if that many batches had been consumed
    (resuming a run). Shapes: `(batch_size, None)` per-token arrays (the
    padded length varies by batch), so a graph traced once serves every
    bucket. Targets whose second axis is `sequence_length` are taken for
    per-token labels and trimmed too, unless `per_token_targets` is False
    (e.g. class logits, whose count may equal the length)."""
    import tensorflow as tf

    lengths = sequence_lengths(features)
    steps = len(lengths) // int(batch_size)
    if steps == 0:
        raise ValueError(
            f"{len(lengths)} examples make no full batch of {batch_size}; use a smaller batch size."
        )

    def batches():
        epoch, skip = start_batch // steps, start_batch % steps
        while epochs is None or epoch < epochs:
            plan = training_plan(lengths, batch_size, seed + epoch, sequence_length, mode)
            for rows, length in plan[skip:]:
                x = trim(_take(features, rows), length, sequence_length)
                if targets is None:
                    yield x
                    continue
                y = _take(targets, rows)
                yield x, (trim(y, length, sequence_length) if per_token_targets else y)
            epoch, skip = epoch + 1, 0

    def spec(array, per_token=True):
        array = np.asarray(array)
        shape = [int(batch_size)] + list(array.shape[1:])
        if per_token and array.ndim >= 2 and array.shape[1] == sequence_length:
            shape[1] = None
        return tf.TensorSpec(shape, tf.as_dtype(array.dtype))

    import keras

    signature = keras.tree.map_structure(spec, features)
    if targets is not None:
        target_spec = functools.partial(spec, per_token=per_token_targets)
        signature = (signature, keras.tree.map_structure(target_spec, targets))
    ds = tf.data.Dataset.from_generator(batches, output_signature=signature)
    if epochs is not None:
        # The stream's length is known: Keras then shows progress against it
        # and does not take the end of the data for an error.
        total = max(steps * int(epochs) - int(start_batch), 0)
        ds = ds.apply(tf.data.experimental.assert_cardinality(total))
    return ds.prefetch(2)


def trim_to_bucket(features, sequence_length, keys=SEQUENCE_KEYS):
    """TensorFlow ops: cuts `keys` of a batch of packed features to the
    bucket of the batch's longest sequence (for use inside graphs)."""
    import tensorflow as tf

    buckets = tf.constant(bucket_lengths(sequence_length), tf.int32)
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(features["padding_mask"], tf.int32), axis=-1))
    longest = tf.minimum(longest, sequence_length)
    length = tf.gather(buckets, tf.searchsorted(buckets, tf.reshape(longest, [1]))[0])
    return {k: (v[:, :length] if k in keys else v) for k, v in features.items()}


def trim_dataset(dataset, sequence_length):
    """`dataset` (batches of `x` or `(x, y, ...)` with `x` a dict of packed
    features, e.g. the pre-training pipeline's) with each batch's `x` cut
    by `trim_to_bucket`. Masked positions index real tokens, so they stay
    valid."""
    import tensorflow as tf

    def trim_element(x, *rest):
        x = trim_to_bucket(x, sequence_length)
        return (x, *rest) if rest else x

    return dataset.map(tf.autograph.experimental.do_not_convert(trim_element))


# === Inference ===


def uses_xla(model):
    """Whether `compiled_forward` compiles `model` with XLA, by measurement
    (BENCHMARKS.md). On CPUs, no: TensorFlow's oneDNN kernels run a graph
    traced once for every shape, while XLA compiles each new batch shape
    when first seen (about 1.1 s for MiniLM on 2 cores, on the call that
    meets it). XLA's float32 forward pass is faster once compiled (1.15x
    warm on short texts), but a fresh process embedding 2,000 texts ran
    2.15x faster on oneDNN (254 against 118 texts/s), and no call after
    the first waits on a compiler (slowest 22 ms against 1.1 s). bf16 runs
    on oneDNN anyway: XLA does not use the CPU's bf16 instructions. With a
    GPU, XLA. JAX always compiles. An int8 model (`quantize("int8")` with
    Keras' kernels) always compiles too: TensorFlow's own int8 matmul ran a
    quantized MiniLM feed-forward layer 6x slower than XLA's (85 against
    13 ms for 32 x 48 tokens), and slower than float32."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return True
    if any(layer.quantization_mode for layer in model._flatten_layers(include_self=False)):
        return True
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def pad_rows(inputs):
    """Pads a batch's rows (with copies of its first row) to a power of two,
    so XLA, which compiles per shape, sees a few row counts per bucket
    length. Works on numpy arrays and on TensorFlow tensors (in graphs);
    returns `(padded inputs, real row count)`."""
    first = next(iter(inputs.values()))
    if isinstance(first, np.ndarray):
        rows = len(first)
        extra = (1 << (rows - 1).bit_length()) - rows
        return {
            k: np.concatenate([v, np.repeat(v[:1], extra, axis=0)]) for k, v in inputs.items()
        }, rows
    import tensorflow as tf

    rows = tf.shape(first)[0]
    target = tf.cast(
        2 ** tf.math.ceil(tf.math.log(tf.cast(rows, tf.float32)) / tf.math.log(2.0)), tf.int32
    )
    target = tf.maximum(target, rows)  # float rounding never drops a row
    extra = target - rows
    return {k: tf.concat([v, tf.repeat(v[:1], extra, axis=0)], 0) for k, v in inputs.items()}, rows


def forward_function(model):
    """TensorFlow: `model`'s forward pass (`training=False`) as a
    `tf.function` of a dict of int32 `(rows, length)` inputs, traced once,
    with XLA where `uses_xla(model)` (XLA compiles each new shape once;
    feed it `pad_rows` batches). Cached on the model."""
    cached = model.__dict__.get("_bertzoo_forward_function")
    if cached is None:
        import tensorflow as tf

        if not isinstance(model.input, dict):
            raise TypeError(f"{type(model).__name__} does not take a dict of inputs.")
        spec = {k: tf.TensorSpec([None, None], tf.int32, name=k) for k in model.input}
        cached = tf.function(
            lambda inputs: model(inputs, training=False),
            input_signature=[spec],
            jit_compile=uses_xla(model),
            autograph=False,
        )
        model.__dict__["_bertzoo_forward_function"] = cached
    return cached


def compiled_forward(model):
    """`model`'s forward pass (`training=False`) as a function of a dict of
    int32 numpy inputs with any batch size and length, returning numpy:
    compiled once and cached on the model. TensorFlow: `forward_function`
    (XLA per `uses_xla`); other backends: the model's cached predict
    function (`predict_on_batch`). Where a compiler sees shapes, rows are
    padded to a power of two (`pad_rows`): a bounded number of programs per
    bucket length."""
    cached = model.__dict__.get("_bertzoo_forward")
    if cached is not None:
        return cached
    import keras

    names = list(model.input) if isinstance(model.input, dict) else None
    if names is None:
        raise TypeError(f"{type(model).__name__} does not take a dict of inputs.")
    tensorflow = keras.backend.backend() == "tensorflow"
    xla = uses_xla(model)

    def forward(inputs):
        arrays = {k: np.asarray(inputs[k], np.int32) for k in names}
        rows = len(arrays[names[0]])
        if xla:
            arrays, rows = pad_rows(arrays)
        if tensorflow:
            outputs = forward_function(model)(arrays)
            outputs = keras.tree.map_structure(lambda t: t.numpy(), outputs)
        else:
            outputs = model.predict_on_batch(arrays)
        return keras.tree.map_structure(lambda a: np.asarray(a)[:rows], outputs)

    model.__dict__["_bertzoo_forward"] = forward
    return forward


def pad_positions(array, sequence_length):
    """Pads the position axis back to `sequence_length`: floats (logits)
    with a very negative value, so padding never ranks among the best
    positions; integers with 0."""
    array = np.asarray(array)
    if array.ndim < 2 or array.shape[1] == sequence_length:
        return array
    widths = [(0, 0)] * array.ndim
    widths[1] = (0, sequence_length - array.shape[1])
    fill = np.finfo(array.dtype).min / 2 if np.issubdtype(array.dtype, np.floating) else 0
    return np.pad(array, widths, constant_values=fill)


def predict_by_length(forward, features, batch_size, sequence_length, per_token=False):
    """Runs `forward` (e.g. `compiled_forward(model)`) over `features` (a
    dict of `(n, sequence_length)` arrays) in length-sorted, trimmed batches
    and returns its outputs (array or dict of arrays) in the input order.
    With `per_token`, outputs with a position axis are padded back to
    `sequence_length` (see `pad_positions`)."""
    import keras

    lengths = sequence_lengths(features)
    if len(lengths) == 0:
        raise ValueError("predict_by_length needs at least one row.")
    order, parts = [], []
    for rows, length in inference_plan(lengths, batch_size, sequence_length):
        out = forward(trim(_take(features, rows), length, sequence_length))
        if per_token:
            out = keras.tree.map_structure(lambda a: pad_positions(a, sequence_length), out)
        order.append(rows)
        parts.append(keras.tree.map_structure(np.asarray, out))
    inverse = np.empty(len(lengths), np.int64)
    inverse[np.concatenate(order)] = np.arange(len(lengths))
    return keras.tree.map_structure(lambda *a: np.concatenate(a, axis=0)[inverse], *parts)
