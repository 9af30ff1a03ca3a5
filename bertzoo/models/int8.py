"""int8 models: `model.quantize("int8")` on a backbone, a task model or a
`TextEmbedder` switches it to bertzoo's fastest int8 CPU path.

    classifier.quantize("int8")            # LiteRT where it can be had
    classifier.predict(texts)              # int8 weights, int8 activations
    classifier.save_to_preset("int8")      # the graph is saved beside the weights

`runtime` chooses what runs underneath:

- "litert": the model (a task model with its head, an embedder with its
  pooling and normalisation, a backbone with its sequence and pooled
  outputs) is converted to a LiteRT graph with int8 weights, activations
  quantized per call and per row (`bertzoo.models.litert`), and `predict`
  runs it on token-id dicts, datasets of them and, with a preprocessor,
  texts: each row cut to its own length, rows shared out over
  `interpreters` interpreters of one thread each (a single row: one
  interpreter with that many threads). Nothing is compiled per
  shape. Outputs per token come back padded to the inputs' width as the
  float32 `predict` pads them. Converting takes seconds for a tiny model,
  10-30 s for a MiniLM; it needs the TensorFlow backend, and running needs
  `ai-edge-litert` (`pip install ".[export]"` in the checkout). The Keras
  graph (calling the model on tensors, `evaluate`, `.keras` files) keeps
  its float32 weights.
- "keras": Keras' int8 layers in the backbone (`bertzoo.models.quantize`),
  under any backend; the Keras graph itself is int8.
- "auto" (the default): "litert" where the backend is TensorFlow and
  ai-edge-litert is installed, else "keras".

Measured on all-MiniLM-L6-v2 (BENCHMARKS.md): the LiteRT graph runs 3-8x
the float32 speed, Keras' int8 layers about 1.2x.

A LiteRT-int8 model's `save_to_preset` writes its float32 weights and the
graph (`bertzoo.presets.INT8_GRAPH_FILES`, by the model that runs it) with
`"quantization": {"mode": "int8", "runtime": "litert", "graph": FILE}`,
listed in the checksum manifest. `from_preset` loads the graph without
converting, under any backend, when the model asked for is the one that
saved it; otherwise, or when an option would change the graph (another
head, dtype, an embedder's pooling), the float32 model runs and a warning
says so (`use_saved_graph`).
"""

import itertools
import logging
import sys

import keras
import numpy as np

from bertzoo.batching import pad_positions
from bertzoo.io.snapshot import shown_path
from bertzoo.models import litert
from bertzoo.models.quantize import QuantizationError, check_quantizable, quantize
from bertzoo.presets import INT8_GRAPH_FILES

logger = logging.getLogger(__name__)

INT8_RUNTIMES = ("auto", "litert", "keras")
# The graph's output name when the Keras model has a single output.
SINGLE_OUTPUT = "output"
# How each kind of model is named in messages.
_OWNER_NAMES = {"backbone": "a backbone", "task": "a task model", "embedder": "an embedder"}


def _named_outputs(model):
    """{name: symbolic output} of a Keras model (one output: `SINGLE_OUTPUT`)."""
    output = model.output
    return dict(output) if isinstance(output, dict) else {SINGLE_OUTPUT: output}


def per_token_outputs(model):
    """The names of `model`'s outputs with a position axis: (B, S, ...)."""
    return [
        name
        for name, tensor in _named_outputs(model).items()
        if len(tensor.shape) >= 2 and tensor.shape[1] is None
    ]


def litert_graph(model):
    """The int8 LiteRT flatbuffer (bytes) of `model` (TensorFlow backend)."""

    def outputs(inputs):
        out = model(inputs, training=False)
        return dict(out) if isinstance(out, dict) else {SINGLE_OUTPUT: out}

    return litert.flatbuffer(outputs, list(model.input), int8=True)


def use_litert(model, graph, interpreters=None):
    """Makes `model`'s `predict` run the LiteRT `graph` (bytes)."""
    runner = litert.LiteRTRunner(graph, interpreters, per_token_outputs(model))
    model.__dict__[litert.RUNNER_ATTRIBUTE] = runner
    model._litert_ready()
    return model


def quantize_model(model, mode="int8", runtime="auto", interpreters=None):
    """`model.quantize(mode, runtime, interpreters)`: see the module
    docstring. Every check comes before the conversion starts."""
    if not isinstance(runtime, str) or runtime not in INT8_RUNTIMES:
        raise QuantizationError(
            f"runtime must be one of {', '.join(INT8_RUNTIMES)}, got {runtime!r}."
        )
    check_quantizable(model, mode)
    can_convert = keras.backend.backend() == "tensorflow"
    if runtime == "auto":
        runtime = "litert" if can_convert and litert.available() else "keras"
        if runtime == "keras":
            # Said once per call, in one line: which runtime the user gets, and
            # how to get the fast one (before, `pip install .` silently gave
            # the slower Keras layers).
            why = (
                f"the Keras backend is {keras.backend.backend()} (the LiteRT graph is converted "
                "through TensorFlow)"
                if not can_convert
                else f"the LiteRT runtime is not installed ({litert.INSTALL})"
            )
            logger.warning(
                "quantize('int8'): Keras' int8 layers run, not bertzoo's fastest int8 CPU path "
                "(a LiteRT graph, several times faster: BENCHMARKS.md), because %s. "
                "runtime='keras' chooses them without this line.",
                why,
            )
    if runtime == "keras":
        if interpreters is not None:
            raise QuantizationError(
                "interpreters= sets the LiteRT runtime's interpreters; runtime='keras' "
                "runs the Keras model."
            )
        return quantize(model, mode)
    try:
        litert.check_interpreters(interpreters)
    except ValueError as e:
        raise QuantizationError(str(e)) from None
    if not can_convert:
        raise QuantizationError(
            f"runtime='litert' converts the model through TensorFlow, and the Keras "
            f"backend is {keras.backend.backend()}: use KERAS_BACKEND=tensorflow (a "
            "saved LiteRT-int8 preset then loads under any backend), or runtime='keras'."
        )
    if not litert.available():
        raise QuantizationError(
            f"runtime='litert' needs the LiteRT runtime: {litert.INSTALL}; or use runtime='keras'."
        )
    return use_litert(model, litert_graph(model), interpreters)


# === predict through the LiteRT runner ===


def _batches(x, steps):
    """The dicts of token-id arrays of predict's input `x`: a dict of arrays,
    a list of them, or a `tf.data.Dataset` of them (alone or as the first
    item of each element), `steps` batches of it at most."""
    if isinstance(x, dict):
        return [x]
    if isinstance(x, list) and all(isinstance(b, dict) for b in x):
        return x
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        elements = (e[0] if isinstance(e, tuple) else e for e in x.as_numpy_iterator())
        return itertools.islice(elements, steps)
    raise TypeError(
        "A LiteRT-int8 model predicts on a dict of token-id arrays, a tf.data.Dataset of "
        f"them, or texts (with a preprocessor); got {type(x).__name__}."
    )


def _empty(tensor):
    return np.zeros((0, *(d or 0 for d in tensor.shape[1:])), np.float32)


def predict_litert(model, x, steps=None):
    """`model`'s outputs (its structure: an array, or a dict) from its LiteRT
    runner, for predict's input `x` (see `_batches`). Per-token outputs are
    padded to the widest batch's width (`bertzoo.batching.pad_positions`)."""
    runner = litert.attached_runner(model)
    names = list(model.input)
    parts = [runner.run({k: np.asarray(b[k]) for k in names}) for b in _batches(x, steps)]
    parts = [p for p in parts if p]  # batches with rows
    out = {}
    for name, tensor in _named_outputs(model).items():
        if not parts:
            out[name] = _empty(tensor)
            continue
        values = [p[name] for p in parts]
        if name in runner.per_token:
            width = max(v.shape[1] for v in values)
            values = [pad_positions(v, width) for v in values]
        out[name] = np.concatenate(values)
    return out if isinstance(model.output, dict) else out[SINGLE_OUTPUT]


# === Presets ===


def saved_graph(model):
    """`(file name, bytes)` of `model`'s LiteRT graph for its preset, or None."""
    runner = litert.attached_runner(model)
    if runner is None:
        return None
    return INT8_GRAPH_FILES[model.int8_graph_owner], runner.model


def use_saved_graph(model, saved, preset, changed=None):
    """Runs `model` on the LiteRT graph a preset saved (`saved`: `(owner,
    bytes)`, or None when it saved none) when the graph is `model`'s own
    kind's and nothing changes it; else logs why the float32 model runs.
    `changed`: what was given that would change the graph, or None."""
    if saved is None:
        return model
    owner, graph = saved
    if owner != model.int8_graph_owner:
        why = (
            f"it is {_OWNER_NAMES[owner]}'s graph, and this is "
            f"{_OWNER_NAMES[model.int8_graph_owner]}"
        )
    elif changed:
        why = f"{changed} was given"
    elif not litert.available():
        why = f"the LiteRT runtime is not installed ({litert.INSTALL})"
    else:
        return use_litert(model, graph)
    logger.warning(
        f"{shown_path(preset)}: its int8 LiteRT graph is not used ({why}); the float32 model runs: "
        "quantize it again for int8."
    )
    return model


class QuantizeMethods:
    """`quantize(mode, runtime, interpreters)` on bertzoo's models, in
    place of Keras' `Model.quantize` (whose per-layer walk would also
    quantize task heads and whose errors name modes bertzoo does not
    support). `int8_graph_owner` names the model's kind in presets
    ("backbone", "task", "embedder")."""

    int8_graph_owner = None

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls, *args, **kwargs)
        # Keras sets a wrapper around `quantize` on each instance that runs
        # its own checks first (its list of modes); bertzoo's method checks.
        instance.__dict__.pop("quantize", None)
        return instance

    def quantize(self, mode="int8", runtime="auto", interpreters=None, **kwargs):
        """Switches this model to int8 inference, in place; returns it.

        runtime: "litert" (a LiteRT graph with int8 weights that `predict`
        runs, each row at its own length over `interpreters` interpreters
        of one thread each; default one per core, at most 4), "keras"
        (Keras' int8 layers in the backbone, under any backend), or "auto"
        (the default: "litert" where the backend is TensorFlow and
        ai-edge-litert is installed, else "keras"). See
        `bertzoo.models.int8`. The task head stays float32 either way.
        Only `mode="int8"`."""
        if kwargs:
            raise QuantizationError(
                "quantize() takes mode, runtime and interpreters on bertzoo models, not "
                f"{', '.join(sorted(kwargs))}: the backbone's Dense and Embedding layers "
                "are quantized, the task head stays float32."
            )
        return quantize_model(self, mode, runtime, interpreters)

    def _litert_ready(self):
        """Called once the LiteRT graph is attached (a warm-up, if any)."""
