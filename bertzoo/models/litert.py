"""A model over token ids as a LiteRT flatbuffer, and a runner for it.

`flatbuffer(outputs, input_names, int8)` converts `outputs` (TensorFlow
ops: a dict of int32 (B, S) inputs -> a dict of named outputs) with
TensorFlow's converter into a batch-1, any-length flatbuffer (bytes):
the variables are folded into constants first (the converter otherwise
keeps some as resource variables that the interpreter reads
uninitialised: NaN), and batch 1 because the converter cannot lower the
model's slicing with both dimensions unknown. `int8`: dynamic-range
quantization, int8 weights with activations quantized per call and per
row by the kernels (XNNPACK's u8 x s8 products).

`LiteRTRunner` runs such a flatbuffer on rows of token ids: each row is
cut to its own length (no padding is computed), and rows are shared out
over several interpreters of one thread each (the interpreter releases
the GIL while it runs, so they run in parallel). No shape is compiled:
a new length costs a tensor reallocation (well under a millisecond), so
the first pass of a process runs at the speed of the next ones. Outputs
per row (pooled embeddings, class logits) are stacked; outputs per token
(tagging logits, QA start and end logits, a backbone's sequence output)
are padded back to the inputs' width as `bertzoo.batching.pad_positions`
pads them.

This is what `model.quantize("int8")` runs on backbones, task models and
the embedder (`bertzoo.models.quantize`), and what `python -m bertzoo
export --format litert` writes (`bertzoo.export.convert`).
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bertzoo.batching import pad_positions
from bertzoo.errors import BertzooError

PACKAGE = "ai_edge_litert"
INSTALL = 'pip install ai-edge-litert, or pip install ".[export]" in the bertzoo checkout'


class LiteRTError(BertzooError, RuntimeError):
    """A conversion the LiteRT converter refused, or a missing runtime."""


def available():
    """Whether the LiteRT interpreter (`ai-edge-litert`) is installed."""
    import importlib.util

    return importlib.util.find_spec(PACKAGE) is not None


def int32_function(outputs, input_names, batch):
    """`outputs` as a `tf.function` over int32 inputs of shape (batch,
    None) named `input_names`; returns (function, specs)."""
    import tensorflow as tf

    specs = {k: tf.TensorSpec([batch, None], tf.int32, name=k) for k in input_names}
    return tf.function(outputs, input_signature=[specs], autograph=False), specs


def frozen_function(outputs, input_names, batch):
    """`int32_function` with the variables folded into constants."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    function, specs = int32_function(outputs, input_names, batch)
    concrete = function.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)
    names = sorted(concrete.structured_outputs)  # a dict's flattening order

    def named(inputs):
        return dict(zip(names, frozen(**inputs)))

    return tf.function(named, input_signature=[specs], autograph=False)


def flatbuffer(outputs, input_names, int8=False):
    """The LiteRT flatbuffer (bytes, signature `serving_default`) of
    `outputs` over int32 inputs `input_names`, batch 1, any length."""
    import tensorflow as tf

    function = frozen_function(outputs, input_names, 1)
    # A trackable object, for the signature (names of inputs and outputs).
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [function.get_concrete_function()], tf.Module()
    )
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return converter.convert()
    except Exception as e:  # the converter's own errors are many lines of MLIR
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LiteRTError(f"The LiteRT converter failed: {first}") from e


# Set in a model's __dict__ (out of Keras' tracking) when its inference
# runs a LiteRT graph (`bertzoo.models.quantize`): the `LiteRTRunner`.
RUNNER_ATTRIBUTE = "_bertzoo_int8_runtime"


def attached_runner(model):
    """The `LiteRTRunner` that runs `model`'s inference, or None."""
    runner = getattr(model, "__dict__", {}).get(RUNNER_ATTRIBUTE)
    return runner if isinstance(runner, LiteRTRunner) else None


def check_interpreters(interpreters):
    """`interpreters` if it is None or an integer >= 1, else a ValueError."""
    if interpreters is not None and (
        isinstance(interpreters, bool)
        or not isinstance(interpreters, int | np.integer)
        or interpreters < 1
    ):
        raise ValueError(f"interpreters must be an integer >= 1, got {interpreters!r}.")
    return interpreters


def default_interpreters():
    """One interpreter per core this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class LiteRTRunner:
    """Runs a batch-1 flatbuffer (bytes) on rows of token ids.

    `interpreters`: how many run side by side, one thread each (default:
    one per core, at most 4); a call with one row runs on the calling
    thread's own interpreter, which uses that many threads, so a single
    text's latency gets every core and a batch one core per row.
    `per_token`: the names of the outputs that have a position axis
    (padded back to the inputs' width by `run`)."""

    name = "litert"

    def __init__(self, model, interpreters=None, per_token=()):
        if not available():
            raise LiteRTError(f"The LiteRT runtime is not installed: {INSTALL}.")
        self.model = bytes(model)
        self.interpreters = int(check_interpreters(interpreters) or default_interpreters())
        self.per_token = frozenset(per_token)
        self._local = threading.local()
        self._pool = None
        try:
            self._runner(self.interpreters)  # the model loads here, or fails here
        except (ValueError, RuntimeError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise LiteRTError(f"Not a LiteRT model bertzoo can run: {first}") from e

    def _runner(self, threads):
        """This thread's signature runner, made on first use with `threads`
        threads (the pool's workers: 1)."""
        runner = getattr(self._local, "runner", None)
        if runner is None:
            from ai_edge_litert.interpreter import Interpreter

            interpreter = Interpreter(model_content=self.model, num_threads=threads)
            runner = self._local.runner = interpreter.get_signature_runner()
            self._local.inputs = tuple(runner.get_input_details())
        return runner

    def run_row(self, feed, threads=None):
        """One row: a dict of int32 (1, S) arrays -> the graph's outputs,
        each without its batch dimension."""
        runner = self._runner(threads or self.interpreters)
        out = runner(**{k: feed[k] for k in self._local.inputs})
        return {k: v[0] for k, v in out.items()}

    def run(self, inputs, lengths=None):
        """The graph's outputs for a dict of int32 (B, S) arrays: each row
        cut to `lengths` (default: its padding mask's sum, at least 1); see
        `run_feeds`. The `per_token` outputs are (B, S, ...)."""
        inputs = {k: np.asarray(v, np.int32) for k, v in inputs.items()}
        rows, width = inputs["padding_mask"].shape
        if lengths is None:
            lengths = np.maximum(inputs["padding_mask"].sum(axis=1), 1)
        feeds = [
            {k: v[i : i + 1, : int(n)] for k, v in inputs.items()} for i, n in enumerate(lengths)
        ]
        return self.run_feeds(feeds, width)

    def run_feeds(self, feeds, width=None):
        """The graph's outputs for rows given one by one (dicts of int32
        (1, S_i) arrays), shared out over the interpreters (one row: the
        calling thread's). Returns a dict of (B, ...) float32 arrays in the
        rows' order ({} for no rows), the `per_token` ones (B, width, ...)
        (default: the longest row's) with the positions past each row's
        length filled as `bertzoo.batching.pad_positions` fills them."""
        lengths = [next(iter(feed.values())).shape[1] for feed in feeds]
        if len(feeds) <= 1 or self.interpreters == 1:
            results = [self.run_row(feed) for feed in feeds]
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.interpreters, "bertzoo-litert")
            # Longest rows first, dealt round-robin: the workers finish together.
            order = np.argsort(-np.asarray(lengths), kind="stable")
            shares = [order[k :: self.interpreters] for k in range(self.interpreters)]
            parts = self._pool.map(
                lambda share: [(i, self.run_row(feeds[i], threads=1)) for i in share], shares
            )
            results = [None] * len(feeds)
            for part in parts:
                for i, out in part:
                    results[i] = out
        if not results:
            return {}
        width = max(lengths) if width is None else width
        return {k: self._stack(k, [r[k] for r in results], width) for k in results[0]}

    def _stack(self, name, values, width):
        if name in self.per_token:
            values = [pad_positions(v[None].astype(np.float32), width)[0] for v in values]
        return np.stack(values).astype(np.float32)
