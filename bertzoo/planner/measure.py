"""The peak memory XLA assigns to one compiled step (`measure_peak`), which
the planner's estimate is calibrated and checked against, and the device
memory `--batch-size auto` plans for (`device_memory`)."""

import dataclasses
import math

from bertzoo.planner.architecture import backbone_config
from bertzoo.planner.estimate import MODES, PRECISIONS, check_choice


@dataclasses.dataclass(frozen=True)
class _Step:
    """The step `measure_peak` compiles: its shapes and what it trains."""

    seq_len: int
    batch: int
    mode: str
    gradient_accumulation: int
    num_classes: int
    max_predictions: int | None


def _spec(*shape, dtype="int32"):
    import jax

    return jax.ShapeDtypeStruct(shape, dtype)


def _shapes(variables):
    return [_spec(*v.shape, dtype=v.dtype) for v in variables]


def _require_jax():
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(
            f"measure_peak needs the JAX backend (KERAS_BACKEND=jax); this is "
            f"{keras.backend.backend()!r}."
        )


def _backbone(preset, precision):
    """A `BertBackbone` of the preset's architecture, at `precision`
    (initialised, never loaded)."""
    from bertzoo.models.backbone import BertBackbone

    arch = backbone_config(preset)
    arch.pop("name", None)
    arch.pop("trainable", None)
    arch["dtype"] = precision
    return BertBackbone(**arch)


def _model_and_data(backbone, step):
    """The model of `step.mode` around `backbone`, its inputs `x` and its
    training data `(x, y[, sample weights])`, as shapes."""
    from bertzoo.models.pretrainer import BertPretrainer
    from bertzoo.models.tasks import BertClassifier

    batch, seq_len = step.batch, step.seq_len
    names = (
        ("token_ids", "segment_ids", "padding_mask")
        if backbone.num_segments
        else ("token_ids", "padding_mask")
    )
    x = {name: _spec(batch, seq_len) for name in names}
    if step.mode != "pretrain":
        model = BertClassifier(backbone, num_classes=step.num_classes)
        return model, x, (x, _spec(batch))
    predictions = step.max_predictions or max(1, math.ceil(seq_len * 0.15 - 1e-9))
    model = BertPretrainer(backbone, objective="nsp" if backbone.use_pooler else "none")
    # The pre-training model takes segment_ids always (ignored without
    # segment embeddings: RoBERTa, ModernBERT).
    x["segment_ids"] = _spec(batch, seq_len)
    x["mask_positions"] = _spec(batch, predictions)
    y = {"mlm": _spec(batch, predictions)}
    if backbone.use_pooler:
        y["sentence"] = _spec(batch)
    return model, x, (x, y, {"mlm": _spec(batch, predictions, dtype="float32")})


def _compile_training_step(model, data, gradient_accumulation):
    """`model.train_step` with AdamW, lowered on shapes and compiled."""
    import jax
    import keras

    accumulate = gradient_accumulation if gradient_accumulation > 1 else None
    optimizer = keras.optimizers.AdamW(gradient_accumulation_steps=accumulate, global_clipnorm=1.0)
    model.compile(optimizer=optimizer, jit_compile=True)
    optimizer.build(model.trainable_variables)
    state = tuple(
        _shapes(v)
        for v in (
            model.trainable_variables,
            model.non_trainable_variables,
            optimizer.variables,
            model.metrics_variables,
        )
    )
    return jax.jit(model.train_step, donate_argnums=0).lower(state, data).compile()


def _compile_inference_step(model, x):
    import jax

    state = (_shapes(model.trainable_variables), _shapes(model.non_trainable_variables))
    return jax.jit(model.predict_step).lower(state, (x,)).compile()


def measure_peak(
    preset,
    seq_len,
    batch,
    mode="finetune",
    precision="float32",
    gradient_accumulation=1,
    num_classes=2,
    max_predictions=None,
):
    """The peak memory XLA assigns to one compiled step, in bytes: arguments
    + outputs - donated (aliased) buffers + temporaries, from
    `jax.jit(step).lower(...).compile().memory_analysis()`. Nothing runs and
    no weights are loaded: the step is lowered on shapes only. Under the JAX
    backend only; AdamW state (the same size as LAMB's).

    This is what `plan()` is calibrated and checked against.
    """
    _require_jax()
    check_choice("mode", mode, MODES)
    check_choice("precision", precision, PRECISIONS)
    step = _Step(seq_len, batch, mode, gradient_accumulation, num_classes, max_predictions)
    model, x, data = _model_and_data(_backbone(preset, precision), step)
    if mode == "inference":
        compiled = _compile_inference_step(model, x)
    else:
        compiled = _compile_training_step(model, data, gradient_accumulation)
    m = compiled.memory_analysis()
    return (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )


def device_memory():
    """`(bytes, where)`: the memory `--batch-size auto` plans for. The first
    accelerator's (JAX: its allocator's limit; TensorFlow on a GPU: the
    card's total from nvidia-smi), else the machine's available memory.
    Raises RuntimeError where it cannot tell (pass the memory explicitly)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform != "cpu":
            limit = (device.memory_stats() or {}).get("bytes_limit")
            if limit:
                return int(limit), f"{device.device_kind} (JAX allocator limit)"
            raise RuntimeError(
                f"{device.device_kind} does not report its memory; pass it explicitly."
            )
    elif keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if tf.config.list_physical_devices("GPU"):
            import subprocess

            try:
                text = subprocess.run(
                    [
                        "nvidia-smi",
                        "--query-gpu=memory.total,name",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=30,
                ).stdout.splitlines()[0]
                mib, name = (part.strip() for part in text.split(",", 1))
                return int(mib) * 2**20, f"{name} (nvidia-smi)"
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                raise RuntimeError(
                    "A GPU is visible but nvidia-smi did not report its memory; pass it explicitly."
                ) from None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this machine's available memory (CPU)"
    except OSError:
        pass
    raise RuntimeError("Cannot tell this machine's available memory; pass it explicitly.")
