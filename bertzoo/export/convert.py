"""The graph over token ids as an ONNX or LiteRT file, float32 or int8.

- ONNX: tf2onnx (what Keras' own `export(format="onnx")` runs) on a
  `tf.function` with dynamic batch and length; `int8`: ONNX Runtime's
  dynamic quantization (`quantize_dynamic`): int8 weights per output
  channel, activations quantized per call to uint8 (the u8 x s8 products
  that AVX-512 VNNI and AVX-VNNI run), weight-by-activation matrix
  products only (the attention's activation-by-activation products stay
  float32), but for the feed-forward output projections (`FLOAT32_NODES`).
  The full 8-bit range is used (`reduce_range=False`: VNNI has no
  overflow to avoid).
- LiteRT: TensorFlow's converter (`tf.lite`) on the graph with its
  variables folded into constants, batch 1 with any length (the converter
  cannot lower the model's slicing with both dimensions unknown; a phone
  runs one text at a time anyway); `int8`: dynamic-range quantization
  (int8 weights, activations quantized per call and per row by the
  kernels).
"""

import contextlib
import logging
import os

import numpy as np

from bertzoo.export.sources import ExportError
from bertzoo.models import litert

OPSET = 17


@contextlib.contextmanager
def _quiet_tf2onnx():
    """tf2onnx and the quantizer log every step at INFO and WARNING; an
    error still raises."""
    loggers = [logging.getLogger(n) for n in ("tf2onnx", "onnxruntime", None)]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    # Without this, tf2onnx deep-copies the whole graph (weights included)
    # to roll back a failing step.
    old = os.environ.get("TF2ONNX_CATCH_ERRORS")
    os.environ["TF2ONNX_CATCH_ERRORS"] = "FALSE"
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if old is None:
            os.environ.pop("TF2ONNX_CATCH_ERRORS", None)
        else:
            os.environ["TF2ONNX_CATCH_ERRORS"] = old


_ERFC_REGISTERED = False


def _register_erfc():
    """tf2onnx has no handler for TensorFlow's Erfc, which the exact GELU
    (`tf.nn.gelu(approximate=False)`: 0.5 x erfc(-x / sqrt 2)) uses:
    erfc(x) = 1 - erf(x), one ONNX Erf and one Sub."""
    global _ERFC_REGISTERED
    if _ERFC_REGISTERED:
        return
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Erfc")
    class Erfc:
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            node.type = "Erf"
            dtype = ctx.get_dtype(node.output[0])
            one = ctx.make_const(
                utils.make_name(f"{node.name}_one"),
                np.array(1, dtype=utils.map_onnx_to_numpy_type(dtype)),
            )
            sub = ctx.insert_new_node_on_output(
                "Sub",
                node.output[0],
                name=utils.make_name(node.name),
                inputs=[one.output[0], node.output[0]],
            )
            ctx.copy_shape(node.output[0], sub.output[0])
            ctx.set_dtype(sub.output[0], dtype)

    _ERFC_REGISTERED = True


# Nodes whose name holds this (the feed-forward output projection of every
# transformer layer, `bertzoo.layers.transformer`) stay float32 in int8 ONNX
# exports: their input, the GELU activations, has outliers that one uint8
# scale per call cannot hold. On all-MiniLM-L6-v2 and 1,000 real texts, the
# cosine to float32 goes from mean 0.9929 / min 0.974 (all quantized) to
# 0.9961 / 0.987, for 34.7 MB instead of 24.1 MB.
FLOAT32_NODES = "/output_dense"


def to_onnx(source, path, int8=False):
    """Writes `source`'s graph to `path` (ONNX, opset 17): what
    `tf2onnx.convert.from_function` does, without tf2onnx's own graph
    optimizers. ONNX Runtime optimizes the graph when it loads it (the same
    speed measured with and without them), they took over half the
    conversion time, and together they rewrite the attention's
    head-splitting Reshape into one with wrong dimensions."""
    import tensorflow as tf
    from tf2onnx import tf_loader
    from tf2onnx.convert import _convert_common, tensor_names_from_structed

    _register_erfc()
    function, _ = litert.int32_function(source.outputs, source.inputs, None)
    concrete = function.get_concrete_function()
    inputs = [t.name for t in concrete.inputs if t.dtype != tf.resource]
    outputs = [t.name for t in concrete.outputs if t.dtype != tf.resource]
    target = str(path) + ".float32" if int8 else str(path)
    with _quiet_tf2onnx():
        frozen = tf_loader.from_function(concrete, inputs, outputs)
        _convert_common(
            frozen,
            name=concrete.name,
            continue_on_error=False,
            opset=OPSET,
            input_names=inputs,
            output_names=outputs,
            tensors_to_rename=tensor_names_from_structed(concrete, inputs, outputs),
            optimizers={},
            output_path=target,
        )
    if int8:
        quantize_onnx(target, path)
        os.remove(target)


def quantize_onnx(source_path, path):
    """ONNX Runtime's dynamic quantization of a float32 ONNX file (see the
    module docstring and `FLOAT32_NODES`)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source_path), load_external_data=False).graph
    kept = [n.name for n in graph.node if n.op_type == "MatMul" and FLOAT32_NODES in n.name]
    with _quiet_tf2onnx():
        quantize_dynamic(
            str(source_path),
            str(path),
            per_channel=True,
            reduce_range=False,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=kept,
            extra_options={"MatMulConstBOnly": True},
        )


def to_litert(source, path, int8=False):
    """Writes `source`'s graph to `path` (a .tflite flatbuffer, batch 1,
    signature `serving_default`: `bertzoo.models.litert.flatbuffer`)."""
    try:
        model = litert.flatbuffer(source.outputs, source.inputs, int8)
    except litert.LiteRTError as e:
        raise ExportError(str(e)) from e
    with open(path, "wb") as f:
        f.write(model)


def reference_outputs(source, inputs):
    """The Keras model's outputs for numpy inputs (TensorFlow, eagerly)."""
    import tensorflow as tf

    feed = {k: tf.constant(v) for k, v in inputs.items()}
    return {k: np.asarray(v) for k, v in source.outputs(feed).items()}
