"""What a distillation run reports: the student's inference speed-up over
its teacher, measured side by side, and how much of the teacher's quality it
kept (classification accuracy, or the cosine between last hidden states)."""

import time

import keras
import numpy as np

from bertzoo.distill import losses as loss_lib


def _significant(seconds, digits=6):
    """`seconds` to `digits` significant digits: the report keeps the times
    the speed-up was computed from, not a rounding that, for a tiny model's
    sub-millisecond calls, would change their ratio."""
    return float(f"{seconds:.{digits}g}")


def benchmark_inputs(backbone, batch_size, sequence_length, seed=0):
    """One batch of random backbone inputs (token ids past the special
    tokens, no padding) for timing models built on `backbone`."""
    rng = np.random.default_rng(seed)
    low = 999 if backbone.vocabulary_size > 2000 else 5  # past the special tokens
    ids = rng.integers(low, backbone.vocabulary_size, (batch_size, sequence_length)).astype("int32")
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    if backbone.num_segments:
        x["segment_ids"] = np.zeros_like(ids)
    return x


def measure_speedup(teacher, student, batch_size=32, sequence_length=128, repeats=7):
    """Inference time of `teacher` and `student` (Keras models taking backbone
    inputs) on one random batch, measured side by side: one warm-up call each,
    then `repeats` alternating timed calls; medians and their ratio."""
    x = benchmark_inputs(getattr(teacher, "backbone", teacher), batch_size, sequence_length)
    times = {"teacher": [], "student": []}
    models = {"teacher": teacher, "student": student}
    inputs = {name: {k: x[k] for k in model.input if k in x} for name, model in models.items()}
    for name, model in models.items():
        model.predict_on_batch(inputs[name])
    for _ in range(repeats):
        for name, model in models.items():
            start = time.perf_counter()
            keras.tree.map_structure(np.asarray, model.predict_on_batch(inputs[name]))
            times[name].append(time.perf_counter() - start)
    t, s = float(np.median(times["teacher"])), float(np.median(times["student"]))
    return {
        "teacher_seconds": _significant(t),
        "student_seconds": _significant(s),
        "speedup": round(t / s, 3),
        "batch_size": batch_size,
        "sequence_length": sequence_length,
        "repeats": repeats,
        "backend": keras.backend.backend(),
    }


def measure_speedup_on_features(teacher, student, features, batch_size=32, repeats=3):
    """Inference time of `teacher` and `student` over real inputs: every row
    of `features` (a dict of `(n, S)` arrays, padded to S), run as a user's
    prediction runs them (length-sorted batches trimmed to their bucket,
    `batching.predict_by_length`, compiled once per model). One warm-up pass
    each (it compiles every bucket's shape), then `repeats` alternating timed
    passes; medians and their ratio. On short texts per-call overhead weighs
    more than at a fixed 128 tokens, so this speed-up is the one a user sees."""
    from bertzoo.batching import compiled_forward, predict_by_length, sequence_lengths

    models = {"teacher": teacher, "student": student}
    sequence_length = int(np.shape(features["token_ids"])[1])
    inputs = {name: {k: features[k] for k in model.input} for name, model in models.items()}
    forwards = {name: compiled_forward(model) for name, model in models.items()}

    def run(name):
        return predict_by_length(forwards[name], inputs[name], batch_size, sequence_length)

    times = {"teacher": [], "student": []}
    for name in models:
        run(name)
    for _ in range(repeats):
        for name in models:
            start = time.perf_counter()
            run(name)
            times[name].append(time.perf_counter() - start)
    t, s = float(np.median(times["teacher"])), float(np.median(times["student"]))
    lengths = sequence_lengths(features)
    rows = len(lengths)
    return {
        "teacher_seconds": _significant(t),
        "student_seconds": _significant(s),
        "teacher_texts_per_second": round(rows / t, 1),
        "student_texts_per_second": round(rows / s, 1),
        "speedup": round(t / s, 3),
        "texts": rows,
        "mean_tokens": round(float(np.mean(lengths)), 1),
        "max_tokens": int(np.max(lengths)),
        "batch_size": batch_size,
        "repeats": repeats,
        "backend": keras.backend.backend(),
    }


def accuracy(model, features, labels, batch_size):
    """The share of `labels` that the classifier `model` predicts (argmax of
    its logits) for `features`."""
    logits = np.asarray(model.predict(features, batch_size=batch_size, verbose=0))
    return float(np.mean(np.argmax(logits, -1) == labels))


def hidden_cosine(distiller, dataset, project):
    """Mean cosine between the teacher's last hidden state and the
    student's (projected when the widths differ) at real tokens, over the
    batches of model inputs in `dataset`."""
    values, counts = [], []
    for x in dataset:
        out = distiller(x, training=False)
        if project:
            t, s = out["teacher_hidden"][-1], out["student_hidden"][-1]
        else:
            t, s = out["teacher_hidden"], out["student_hidden"]
        mask = np.asarray(x["padding_mask"])
        values.append(1.0 - float(loss_lib.hidden_cosine_loss(t, s, mask)))
        counts.append(mask.sum())
    return float(np.average(values, weights=counts))
