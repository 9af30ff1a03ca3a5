"""Long context: the cost of ModernBERT's local (sliding-window) attention,
banded (an `S x S` score matrix under a band mask) against blocked
(`bertzoo.layers.local_attention`: `S x 1.5 window` scores), from 512 to
8,192 tokens.

    python benchmarks/long_context.py [--lengths 512 1024 2048 4096 8192]
                                      [--backends tensorflow jax] [--repeats 3]
    python benchmarks/long_context.py --quick   # smoke run: short lengths, no file

Shapes: ModernBERT-base's attention (12 heads of 64, window 128, rotary
positions) and width (hidden 768, GeGLU 1152, vocabulary 50,368), batch 1.
Measured at each length in a process of its own, on the current CPU:

- `local attention`: one local layer's attention alone (queries, keys and
  values given: the part the two forms compute differently);
- `model`: a 3-layer ModernBERT-base-shaped backbone (layer 0 global,
  layers 1 and 2 local: one period of ModernBERT's pattern; the released
  model has 22 layers), its local layers banded or blocked.

Time: compiled forward calls (`training=False`; the backbone through
`predict_on_batch`), both forms timed in interleaved rounds so that the
machine's load hits both alike: the median of at least `--repeats` rounds
(more, up to 2 s of rounds, for fast calls; one round where a first call
took over 5 s). Peak memory: the most resident memory during each form's
first call at the length (tracing, compilation and the forward pass) above
what the process held before it, sampled every 2 ms, after a first call on
16 tokens (the runtime's one-time set-up). The attention's blocked form
runs first (its smaller peak is measured before the banded one's); the
model's forms each in a process of their own (a model's peak is one layer
at a time: memory one form's global layer freed would hide the other's).
In the same run, on lengths 128 to 512, both forms of the local attention
(where the blocks start to win: `BLOCKED_MIN_LENGTH`) and the fused
`keras.ops.dot_product_attention` against the explicit softmax for a
global layer (which one runs on CPU).

Writes benchmarks/results/long_context.json.
"""

import argparse
import json
import os
import resource
import threading
import time
from pathlib import Path

from common import RESULTS, backend_child, cpu_info, versions

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("blocked", "banded")
HEADS, HEAD_DIM, WINDOW = 12, 64, 128
MODEL = dict(
    vocabulary_size=50368,
    num_layers=3,
    num_heads=HEADS,
    hidden_dim=HEADS * HEAD_DIM,
    intermediate_dim=1152,
    activation="gelu",
    max_sequence_length=8192,
    num_segments=0,
    use_pooler=False,
    norm_first=True,
    use_bias=False,
    gated_feedforward=True,
    rope_theta=160000.0,
    local_rope_theta=10000.0,
    local_attention_window=WINDOW,
    global_attention_every=3,
)


def _resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


class _PeakMemory:
    """The most resident memory above what the process held on entry,
    sampled every 2 ms while the block runs (the process's lifetime peak,
    `ru_maxrss`, also counts imports and compilation)."""

    def __enter__(self):
        self.start = self.peak = _resident_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._done.wait(0.002):
            self.peak = max(self.peak, _resident_mb())

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _resident_mb())
        self.mb = round(self.peak - self.start, 1)


def _interleaved(calls, repeats, budget=2.0):
    """name -> (median seconds, peak MB). Each call's first run (tracing,
    compilation, the forward pass) is its memory measure, in the order
    given; then rounds that run every call once, so that the machine's load
    hits all alike: at least `repeats` rounds, more while they take under
    `budget` seconds in all (at most 50); one when a first run took over
    5 s."""
    peaks, slow = {}, False
    for name, call in calls.items():
        start = time.perf_counter()
        with _PeakMemory() as memory:
            call()
        peaks[name] = memory.mb
        slow = slow or time.perf_counter() - start > 5.0
    repeats = 1 if slow else repeats
    times = {name: [] for name in calls}
    rounds = 0
    while rounds < repeats or (sum(map(sum, times.values())) < budget and rounds < 50):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
        rounds += 1
    return {name: (sorted(t)[len(t) // 2], peaks[name]) for name, t in times.items()}


def _compiled(function):
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    import tensorflow as tf

    return tf.function(function, jit_compile=True)


def _set_local_path(model, path):
    from bertzoo.layers import BertSelfAttention

    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, BertSelfAttention):
            layer.local_attention_path = path


def _attention_forms(seq_len):
    """name -> compiled (q, k, v, mask) -> context for one length."""
    import math

    from keras import ops

    from bertzoo.layers.local_attention import blocked_sliding_window_attention
    from bertzoo.layers.rotary import sliding_window_mask

    scale = 1.0 / math.sqrt(HEAD_DIM)

    def fused(q, k, v, mask):
        return ops.dot_product_attention(q, k, v, mask=mask, scale=scale)

    def explicit(q, k, v, mask):
        logits = ops.einsum("btnh,bsnh->bnts", q, k) * scale
        logits = ops.where(mask, logits, -0.7 * 3.4028234663852886e38)
        return ops.einsum("bnts,bsnh->btnh", ops.softmax(logits, axis=-1), v)

    def banded(q, k, v, padding):
        band = sliding_window_mask(seq_len, WINDOW)[None, None]
        mask = ops.logical_and(ops.cast(padding, "bool")[:, None, None, :], band)
        return fused(q, k, v, mask)

    def blocked(q, k, v, padding):
        return blocked_sliding_window_attention(q, k, v, padding, WINDOW, fused)

    def global_mask(padding):
        return ops.cast(padding, "bool")[:, None, None, :]

    return {
        "banded": _compiled(banded),
        "blocked": _compiled(blocked),
        "global fused": _compiled(lambda q, k, v, p: fused(q, k, v, global_mask(p))),
        "global explicit": _compiled(lambda q, k, v, p: explicit(q, k, v, global_mask(p))),
    }


def _qkv(seq_len):
    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, seq_len, HEADS, HEAD_DIM)).astype("float32") for _ in "qkv")
    return q, k, v, np.ones((1, seq_len), "int32")


def measure(kind, seq_len, repeats, path=None):
    """Both local forms at one length, in this process (blocked first, so
    that the banded form's larger peak is not hidden by memory the blocked
    one freed): {form: {seconds, peak_mb}}."""
    import numpy as np
    from keras import ops

    calls = {}
    if kind == "local attention":
        forms = _attention_forms(seq_len)
        args = _qkv(seq_len)
        for path in PATHS:
            calls[path] = lambda f=forms[path]: ops.convert_to_numpy(f(*args))
        # The runtime's one-time set-up, outside the measures.
        ops.convert_to_numpy(_attention_forms(16)["blocked"](*_qkv(16)))
    else:
        import bertzoo

        def inputs(length):
            ids = np.random.default_rng(0).integers(5, MODEL["vocabulary_size"], (1, length))
            return {"token_ids": ids.astype("int32"), "padding_mask": np.ones_like(ids, "int32")}

        full = inputs(seq_len)
        for form in PATHS if path is None else (path,):
            backbone = bertzoo.BertBackbone(**MODEL)
            _set_local_path(backbone, form)
            backbone.predict_on_batch(inputs(16))  # one-time set-up, outside the measures
            calls[form] = lambda b=backbone: b.predict_on_batch(full)
        if path is not None:
            # A model's memory, one form per process: a model's peak is one
            # layer's at a time, and memory one form freed would hide the
            # other's.
            with _PeakMemory() as memory:
                calls[path]()
            return {"peak_mb": memory.mb}
    measured = _interleaved(calls, repeats)
    return {
        form: {"seconds": round(seconds, 4), "peak_mb": peak if kind != "model" else None}
        for form, (seconds, peak) in measured.items()
    }


def crossover(lengths, repeats):
    """Short lengths, one process: both local forms, and the fused and
    explicit global attention."""
    from keras import ops

    rows = {}
    for seq_len in lengths:
        args = _qkv(seq_len)
        forms = _attention_forms(seq_len)
        calls = {name: lambda f=f, a=args: ops.convert_to_numpy(f(*a)) for name, f in forms.items()}
        rows[seq_len] = {
            name: round(seconds, 5) for name, (seconds, _) in _interleaved(calls, repeats).items()
        }
        print(seq_len, rows[seq_len], flush=True)
    return rows


def _child(backend, task):
    return backend_child(__file__, backend, task)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--backends", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--crossover", type=int, nargs="+", default=[128, 256, 384, 512])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        task = json.loads(args.child)
        if task["kind"] == "crossover":
            result = crossover(task["lengths"], task["repeats"])
        else:
            result = measure(task["kind"], task["seq_len"], task["repeats"], task.get("path"))
        print(json.dumps(result))
        return
    if args.quick:
        args.lengths, args.crossover, args.repeats = [256, 512], [128, 256], 1
    results = {
        "machine": cpu_info(),
        "load_average_at_start": os.getloadavg(),
        "versions": versions("tensorflow", "jax", "keras"),
        "shape": {**MODEL, "batch": 1},
        "repeats": args.repeats,
        "backends": {},
    }
    start = time.perf_counter()
    for backend in args.backends:
        rows = {"crossover": {}, "local attention": {}, "model": {}}
        task = {"kind": "crossover", "lengths": args.crossover, "repeats": args.repeats}
        rows["crossover"] = _child(backend, task)
        for kind in ("local attention", "model"):
            for seq_len in args.lengths:
                task = {"kind": kind, "seq_len": seq_len, "repeats": args.repeats}
                rows[kind][str(seq_len)] = _child(backend, task)
                if kind == "model":
                    for path in PATHS:
                        memory = _child(backend, {**task, "path": path})
                        rows[kind][str(seq_len)][path]["peak_mb"] = memory["peak_mb"]
                print(backend, kind, seq_len, rows[kind][str(seq_len)], flush=True)
        results["backends"][backend] = rows
    results["load_average_at_end"] = os.getloadavg()
    results["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(results["backends"], indent=1))
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "long_context.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
