"""Keras' int8 layers: what `model.quantize("int8", runtime="keras")` does
on a backbone, a task model or a `TextEmbedder` (the runtime under any
backend; `bertzoo.models.int8` chooses the runtime, and runs the default,
LiteRT, where it can be had).

    classifier.quantize("int8", runtime="keras")
    classifier.predict(texts)              # int8 weights, int8 activations
    classifier.save_to_preset("int8")      # loads back quantized

What it does is Keras' int8 quantization (`keras.layers.Dense.quantize`,
`keras.layers.Embedding.quantize`) applied to every `Dense` and `Embedding`
layer of the backbone: the attention projections, the feed-forward layers,
the pooler, ALBERT's embedding projection, and the token and segment
tables. Each kernel becomes int8 with one float32 scale per output unit
(absmax), each table row int8 with a scale per row; at run time each
token's activations are quantized to int8 on the fly (absmax over the
features, one scale per token: dynamic quantization) and the matrix
products run on int8. What stays float32: the position table, the layer
norms, biases, and a task model's head (`head_layers()`: a few thousand
weights that produce the logits directly). A `TextEmbedder` quantizes its
backbone; pooling and normalisation are unchanged.

Only "int8" is supported. An int8 model is for inference: `fit` and
`enable_lora` refuse it (fine-tune the float32 model, then quantize), and
a model with LoRA enabled is refused here until its adapters are merged
(its `save_to_preset` merges them; load that preset and quantize it).

A quantized model's preset records `"quantization": {"mode": "int8"}`;
`from_preset` quantizes the freshly built layers before loading the
weights, so the int8 weights load into int8 variables.
"""

import contextlib
import gc

import keras

from bertzoo.errors import BertzooError
from bertzoo.models import litert
from bertzoo.models.lora import lora_settings
from bertzoo.presets import QUANTIZATION_MODES as SUPPORTED_MODES

# Why each mode Keras offers is not one of bertzoo's.
# int4 and float8, measured on all-MiniLM-L6-v2 (cosine to float32 over 200
# real texts; speed of warm passes on the same CPU): int4 0.950 mean / 0.885
# min at 0.97x the float32 speed; float8 0.997 / 0.994 at 0.99x, its kernels
# still float32 (Keras simulates float8 products: a training format).
_UNSUPPORTED = {
    "int4": "per-channel int4 loses too much: cosine to float32 0.95 mean, 0.89 min on MiniLM",
    "float8": "Keras keeps float8 models' kernels in float32: nothing smaller or faster",
    "gptq": "GPTQ calibrates on a dataset, which this quantize does not take",
    "awq": "AWQ calibrates on a dataset, which this quantize does not take",
}
# The layer types whose weights are quantized.
QUANTIZED_LAYER_TYPES = (keras.layers.Dense, keras.layers.Embedding)


class QuantizationError(BertzooError, ValueError):
    """A quantization mode or a model state quantization does not support."""


def _backbone(model):
    return getattr(model, "backbone", model)


def _layers(backbone):
    return [
        layer
        for layer in backbone._flatten_layers(include_self=False)
        if type(layer) in QUANTIZED_LAYER_TYPES
    ]


def int8_runtime(model):
    """The runtime that runs `model`'s int8 inference ("litert", "keras"),
    or None for a float model."""
    runner = litert.attached_runner(model)
    if runner is not None:
        return runner.name
    return "keras" if quantization_mode(model) is not None else None


def quantization_mode(model):
    """The quantization mode of a bertzoo model ("int8"), whichever runtime
    runs it, or None when it runs float. (A function, not a model
    attribute: Keras reads a layer's `quantization_mode` to route its
    calls.)"""
    if litert.attached_runner(model) is not None:
        return "int8"
    return layer_quantization_mode(model)


def layer_quantization_mode(model):
    """The quantization mode of the layers of a model's backbone (what its
    weights files and configs hold), or None when they are float: a model
    run by LiteRT keeps float layers."""
    for layer in _layers(_backbone(model)):
        if layer.quantization_mode is not None:
            return layer.quantization_mode
    return None


def check_mode(mode):
    """`mode` if bertzoo supports it, else a one-line `QuantizationError`."""
    if isinstance(mode, str) and mode in SUPPORTED_MODES:
        return mode
    why = f" ({_UNSUPPORTED[mode]})" if isinstance(mode, str) and mode in _UNSUPPORTED else ""
    raise QuantizationError(
        f"Quantization mode {mode!r} is not supported{why}; bertzoo models support: "
        f"{', '.join(SUPPORTED_MODES)}."
    )


def check_float(model, what):
    """A one-line `QuantizationError` when `model` is quantized: `what`
    (e.g. "fit") needs float weights."""
    mode = quantization_mode(model)
    if mode is not None:
        raise QuantizationError(
            f"{model.name} is {mode}-quantized, and {what} needs float weights: use the float "
            "model (or the preset it was quantized from) and quantize after."
        )


@contextlib.contextmanager
def _one_collection():
    """Keras' `Layer.__delattr__` runs `gc.collect()` for every variable a
    layer drops, and quantizing drops each kernel: with TensorFlow loaded,
    0.3-0.5 s per layer (19 s for BERT-base). One collection at the end
    frees the same memory."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        collect()


def _forget_compiled(model):
    """Drops what was compiled or traced over the float variables (Keras'
    train/test/predict functions, bertzoo's cached forward passes)."""
    for m in {id(m): m for m in (model, _backbone(model))}.values():
        for name in ("_bertzoo_forward_function", "_bertzoo_forward", "_text_functions"):
            m.__dict__.pop(name, None)
        m.train_function = m.test_function = m.predict_function = None


def check_quantizable(model, mode):
    """A one-line `QuantizationError` unless `model` can be quantized to
    `mode`: a supported mode, float weights, no LoRA adapters."""
    check_mode(mode)
    current = quantization_mode(model)
    if current is not None:
        raise QuantizationError(
            f"{model.name} is already {current}-quantized: quantize a float model once."
        )
    settings = lora_settings(model)
    if settings is not None:
        raise QuantizationError(
            f"{model.name} has LoRA enabled (rank {settings['rank']} on "
            f"{', '.join(settings['targets'])}): merge the adapters first "
            "(save_to_preset merges them; load that preset), then quantize."
        )


def quantize(model, mode="int8"):
    """Quantizes the backbone of `model` (a `BertBackbone`, a task model or
    a `TextEmbedder`) in place; see the module docstring. Returns `model`."""
    check_quantizable(model, mode)
    with _one_collection():
        for layer in _layers(_backbone(model)):
            layer.quantize(mode)
    _forget_compiled(model)
    return model
