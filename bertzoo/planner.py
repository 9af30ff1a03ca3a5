"""Memory and batch-size planner: what a preset's training (or inference)
step holds in device memory, the largest batch that fits, and its FLOPs.

The model is computed from the architecture alone (nothing is built):

- **State.** Float32 weights (also under mixed precision, where Keras keeps
  float32 variables and casts them per step: +2 bytes a parameter for the
  16-bit copies), two Adam/LAMB moments (8 bytes a parameter), a gradient
  accumulator with `gradient_accumulation > 1` (4 bytes).
- **Gradients.** Global-norm clipping needs every gradient before the first
  update, but by then the activations are freed, so the step's peak holds
  either the activations or all the gradients, whichever is larger. In
  fine-tuning the dense token-embedding gradient is also alive with the
  activations (measured; in pre-training the tied table's gradient starts in
  the masked-LM head and adds nothing).
- **Activations, per sequence and layer**, as the compiled (XLA) training
  step keeps them for the backward pass, in tensors of shape (the counts are
  fitted; the names say what they most likely are):
  S x H: 12 (inputs of the four projections and of the two LayerNorms,
  residual sums, LayerNorm statistics and outputs), plus 2 for each of the
  two dropouts (mask and output); S x F: 4 (intermediate, its activation,
  the activation's derivative input, and a copy of the second projection's
  input that XLA keeps once a batch holds a few thousand tokens); heads x S
  x S: 2 (scores and probabilities) on the fused path, 4 with
  attention-probability dropout (which takes the explicit path: + mask and
  dropped probabilities), 0 with a flash kernel. Embeddings: 6 S x H (E
  wide before a projection) + 2 for their dropout. Pre-training adds 3 P x V
  (masked-LM logits, their softmax and its gradient, at P masked
  positions).
- **Inference** keeps no activations for a backward pass: the peak is the
  weights plus one layer's working set, 3 heads x S x S (scores,
  exponentials, probabilities) plus one S x F.

Element sizes: 4 bytes in float32; under mixed precision 2, except the
attention scores and softmax, which bertzoo computes in float32.

The tensor counts were calibrated on the XLA-compiled JAX training step's
`memory_analysis()` on CPU and validated on other presets and lengths
(`benchmarks/plan_calibration.py`; BENCHMARKS.md has the table). XLA on
CPU keeps bfloat16 activations as float32, so there a mixed-precision step
measures as float32 does; the 16-bit sizes are what GPUs and TPUs keep.

FLOPs per step: forward 2 x (non-embedding weights used per token) +
4 x layers x S x H (attention scores and weighted sum) per token, plus the
head; training is 3x the forward pass.

Example:
>>> p = plan("bert_base", seq_len=512, memory="12GiB")
>>> p.max_batch
9
>>> print(p.table())  # doctest: +SKIP
"""

import dataclasses
import math
import re

MODES = ("finetune", "pretrain", "inference")
OPTIMIZERS = ("adamw", "lamb", "adam")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
ATTENTION_PATHS = ("auto", "flash")

# Calibrated saved-tensor counts (see the module docstring).
_PER_LAYER_SH = 12
_PER_DROPOUT = 2
_PER_LAYER_SF = 4
_SCORES_FUSED = 2
_SCORES_DROPOUT = 2  # extra, with attention-probability dropout
_EMBEDDING_SE = 6
_MLM_LOGITS = 3
_INFERENCE_SCORES = 3
_INFERENCE_SF = 1

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_memory(text):
    """Bytes from a size such as "12GiB", "16 GB", "800MiB" or a plain number
    of bytes. GB is 10**9 bytes, GiB 2**30."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"memory={text!r} must be positive.")
        return int(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    unit = match and (match.group(2).lower() or "b")
    if not match or unit not in _UNITS or float(match.group(1)) <= 0:
        raise ValueError(
            f"memory={text!r} is not a size. Valid: a positive number with one of the units "
            "B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), "
            'e.g. "12GiB".'
        )
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(n):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _architecture(preset):
    if isinstance(preset, dict):
        return dict(preset)
    config = getattr(preset, "get_config", None)
    if config is not None:  # a BertBackbone
        return config()
    from bertzoo.convert.loader import resolve_preset  # Keras: only when a preset is read

    document, _, _ = resolve_preset(preset)
    return dict(document["backbone"])


_REQUIRED = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """The sizes the planner reads from a backbone config (`BertBackbone`'s
    constructor arguments; the optional ones at their defaults)."""

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int
    embedding_dim: int
    num_groups: int
    num_segments: int
    use_pooler: bool
    dropout: float
    attention_dropout: float
    max_sequence_length: int

    @classmethod
    def of(cls, preset):
        c = _architecture(preset)
        missing = [k for k in _REQUIRED if k not in c]
        if missing:
            raise ValueError(
                f"The backbone config lacks {', '.join(missing)}; a config needs "
                f"{', '.join(_REQUIRED)} (and may give embedding_dim, num_groups, "
                "num_segments, use_pooler, dropout, attention_dropout, max_sequence_length)."
            )
        dropout = c.get("dropout", 0.1)
        attention_dropout = c.get("attention_dropout")
        return cls(
            vocabulary_size=c["vocabulary_size"],
            num_layers=c["num_layers"],
            num_heads=c["num_heads"],
            hidden_dim=c["hidden_dim"],
            intermediate_dim=c["intermediate_dim"],
            embedding_dim=c.get("embedding_dim") or c["hidden_dim"],
            num_groups=c.get("num_groups") or c["num_layers"],
            num_segments=c.get("num_segments", 2),
            use_pooler=c.get("use_pooler", True),
            dropout=dropout,
            attention_dropout=dropout if attention_dropout is None else attention_dropout,
            max_sequence_length=c.get("max_sequence_length", 512),
        )

    def block_params(self):
        h, f = self.hidden_dim, self.intermediate_dim
        # q, k, v, output projections; two LayerNorms; the feed-forward pair.
        return 4 * (h * h + h) + 2 * 2 * h + (h * f + f) + (f * h + h)

    def embedding_params(self):
        e, h = self.embedding_dim, self.hidden_dim
        tables = (self.vocabulary_size + self.max_sequence_length + self.num_segments) * e
        projection = e * h + h if e != h else 0
        return tables + 2 * e + projection

    def pooler_params(self):
        h = self.hidden_dim
        return h * h + h if self.use_pooler else 0

    def backbone_params(self):
        """Exactly `BertBackbone.count_params()` (ALBERT's shared blocks
        counted once)."""
        return (
            self.embedding_params() + self.num_groups * self.block_params() + self.pooler_params()
        )

    def head_params(self, mode, num_classes):
        e, h, v = self.embedding_dim, self.hidden_dim, self.vocabulary_size
        if mode == "pretrain":
            # MaskedLMHead: H -> E transform + LayerNorm + output bias (tied
            # table); NSP/SOP Dense(2) on the pooled output.
            return h * e + e + 2 * e + v + (2 * h + 2 if self.use_pooler else 0)
        return h * num_classes + num_classes


@dataclasses.dataclass
class Plan:
    """What `plan()` found. Byte counts are for one step of `batch` sequences
    (micro-batches of `micro_batch` with gradient accumulation)."""

    preset: str
    mode: str
    seq_len: int
    precision: str
    optimizer: str
    gradient_accumulation: int
    attention: str
    memory: int
    parameters: int
    weights_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes_per_sequence: int
    max_micro_batch: int
    flops_per_sequence: float
    tflops: float | None
    utilisation: float

    @property
    def max_batch(self):
        """The largest batch per weight update that fits (0: not even one)."""
        return self.max_micro_batch * self.gradient_accumulation

    def state_bytes(self):
        return self.weights_bytes + self.optimizer_bytes

    def peak_bytes(self, micro_batch):
        """Predicted peak memory of one step over `micro_batch` sequences."""
        activations = micro_batch * self.activation_bytes_per_sequence
        if self.mode == "inference":
            return self.weights_bytes + activations
        return self.state_bytes() + max(activations + self._embedding_gradient, self.gradient_bytes)

    _embedding_gradient: int = 0

    def flops_per_step(self, batch=None):
        batch = self.max_batch if batch is None else batch
        return self.flops_per_sequence * batch

    def seconds_per_step(self, batch=None):
        if not self.tflops:
            return None
        return self.flops_per_step(batch) / (self.tflops * 1e12 * self.utilisation)

    def as_dict(self):
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name[0] != "_"}
        out["max_batch"] = self.max_batch
        out["peak_bytes"] = self.peak_bytes(self.max_micro_batch)
        out["seconds_per_step"] = self.seconds_per_step()
        return out

    def table(self):
        """The plan as an aligned text table."""
        b = self.max_micro_batch
        rows = [
            ("preset", self.preset),
            (
                "step",
                f"{self.mode}, seq_len {self.seq_len}, {self.precision}"
                + ("" if self.mode == "inference" else f", {self.optimizer}")
                + (
                    f", {self.gradient_accumulation} accumulated micro-batches"
                    if self.gradient_accumulation > 1
                    else ""
                ),
            ),
            ("parameters", f"{self.parameters:,}"),
            ("weights", format_bytes(self.weights_bytes)),
        ]
        if self.mode != "inference":
            rows += [
                ("gradients", format_bytes(self.gradient_bytes)),
                ("optimizer state", format_bytes(self.optimizer_bytes - self._accumulator_bytes())),
            ]
            if self.gradient_accumulation > 1:
                rows.append(("gradient accumulator", format_bytes(self._accumulator_bytes())))
        rows += [
            ("activations / sequence", format_bytes(self.activation_bytes_per_sequence)),
            ("memory", format_bytes(self.memory)),
        ]
        if b:
            rows += [
                (
                    "largest batch",
                    f"{self.max_batch}"
                    + (f" ({b} per micro-batch)" if self.gradient_accumulation > 1 else ""),
                ),
                ("peak at that batch", format_bytes(self.peak_bytes(b))),
                ("FLOPs / step", f"{self.flops_per_step():.3e}"),
            ]
            seconds = self.seconds_per_step()
            if seconds is not None:
                rows.append(
                    (
                        "time / step",
                        f"{seconds * 1e3:.1f} ms at {self.tflops:g} TFLOP/s x "
                        f"{self.utilisation:.0%} utilisation",
                    )
                )
        else:
            rows.append(
                ("largest batch", f"0: one sequence needs {format_bytes(self.peak_bytes(1))}")
            )
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def _accumulator_bytes(self):
        return 4 * self.parameters if self.gradient_accumulation > 1 else 0


def _check_choice(name, value, valid):
    if value not in valid:
        raise ValueError(f"{name}={value!r} is not supported. Valid: {', '.join(valid)}.")


def activation_bytes(
    arch, seq_len, mode="finetune", precision="float32", attention="auto", max_predictions=None
):
    """Bytes one sequence of `seq_len` tokens adds to the step's peak."""
    s, h, f, e = seq_len, arch.hidden_dim, arch.intermediate_dim, arch.embedding_dim
    heads, layers = arch.num_heads, arch.num_layers
    act = 4 if precision == "float32" else 2
    square = heads * s * s
    if mode == "inference":
        scores = 0 if attention == "flash" else _INFERENCE_SCORES * 4 * square
        return scores + _INFERENCE_SF * act * s * f
    dropouts = 1 if arch.dropout > 0 else 0
    per_layer = (_PER_LAYER_SH + 2 * _PER_DROPOUT * dropouts) * act * s * h
    per_layer += _PER_LAYER_SF * act * s * f
    if attention != "flash":
        # Scores and softmax in float32; with dropout, the mask and the
        # dropped probabilities in the compute dtype.
        per_layer += _SCORES_FUSED * 4 * square
        if arch.attention_dropout > 0:
            per_layer += _SCORES_DROPOUT * act * square
    embeddings = (_EMBEDDING_SE + _PER_DROPOUT * dropouts) * act * s * e
    total = layers * per_layer + embeddings
    if mode == "pretrain":
        predictions = max_predictions or max(1, math.ceil(s * 0.15 - 1e-9))
        total += _MLM_LOGITS * 4 * predictions * arch.vocabulary_size
    return total


def flops_per_sequence(arch, seq_len, mode="finetune", max_predictions=None):
    """Training (3x forward) or inference FLOPs for one sequence."""
    s, h = seq_len, arch.hidden_dim
    per_token = 2 * arch.num_layers * (4 * h * h + 2 * h * arch.intermediate_dim)  # matmuls
    if arch.embedding_dim != arch.hidden_dim:
        per_token += 2 * arch.embedding_dim * h
    per_token += 4 * arch.num_layers * s * h  # QK^T and PV
    forward = per_token * s + 2 * arch.pooler_params()
    if mode == "pretrain":
        predictions = max_predictions or max(1, math.ceil(s * 0.15 - 1e-9))
        e, v = arch.embedding_dim, arch.vocabulary_size
        forward += predictions * 2 * (h * e + e * v)
    return forward if mode == "inference" else 3 * forward


def plan(
    preset,
    seq_len=512,
    memory="12GiB",
    precision="float32",
    optimizer="adamw",
    mode="finetune",
    gradient_accumulation=1,
    attention="auto",
    tflops=None,
    utilisation=0.4,
    num_classes=2,
    max_predictions=None,
):
    """Plans a step of `preset` (a name, a preset or Hugging Face directory,
    a `BertBackbone` or its config dict): memory by part, the largest batch
    that fits `memory`, and FLOPs (and time at `tflops` x `utilisation`).

    Args:
        seq_len: tokens per sequence (at most the preset's
            `max_sequence_length`).
        memory: device memory, bytes or a size such as "12GiB".
        precision: "float32", "mixed_bfloat16" or "mixed_float16".
        optimizer: "adamw", "lamb" or "adam" (the same state: two moments).
        mode: "finetune" (a task head), "pretrain" (masked LM + NSP/SOP at
            ceil(0.15 x seq_len) positions unless `max_predictions`) or
            "inference".
        gradient_accumulation: micro-batches per update; the largest batch
            is this times the largest micro-batch.
        attention: "auto" (bertzoo's path: explicit with attention dropout
            in training, the fused op otherwise; both keep the S x S
            probabilities) or "flash" (a kernel that keeps none).
    """
    _check_choice("mode", mode, MODES)
    _check_choice("precision", precision, PRECISIONS)
    _check_choice("optimizer", optimizer, OPTIMIZERS)
    _check_choice("attention", attention, ATTENTION_PATHS)
    budget = parse_memory(memory)  # bad input fails before a preset is read
    arch = Architecture.of(preset)
    if not isinstance(seq_len, int) or not 1 <= seq_len <= arch.max_sequence_length:
        raise ValueError(
            f"seq_len={seq_len!r} must be an integer from 1 to the preset's "
            f"max_sequence_length {arch.max_sequence_length}."
        )
    if not isinstance(gradient_accumulation, int) or gradient_accumulation < 1:
        raise ValueError(
            f"gradient_accumulation={gradient_accumulation!r} must be an integer >= 1."
        )
    if tflops is not None and tflops <= 0:
        raise ValueError(f"tflops={tflops!r} must be positive.")
    if not 0 < utilisation <= 1:
        raise ValueError(f"utilisation={utilisation!r} must be in (0, 1].")
    params = arch.backbone_params() + arch.head_params(mode, num_classes)
    weights = 4 * params + (2 * params if precision != "float32" else 0)
    training = mode != "inference"
    moments = 8 * params if training else 0
    accumulator = 4 * params if training and gradient_accumulation > 1 else 0
    per_sequence = activation_bytes(arch, seq_len, mode, precision, attention, max_predictions)
    name = preset if isinstance(preset, str) else getattr(preset, "name", "backbone")
    result = Plan(
        preset=str(name),
        mode=mode,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        gradient_accumulation=gradient_accumulation,
        attention=attention,
        memory=budget,
        parameters=params,
        weights_bytes=weights,
        gradient_bytes=4 * params if training else 0,
        optimizer_bytes=moments + accumulator,
        activation_bytes_per_sequence=per_sequence,
        max_micro_batch=0,
        flops_per_sequence=float(flops_per_sequence(arch, seq_len, mode, max_predictions)),
        tflops=tflops,
        utilisation=utilisation,
        # Fine-tuning builds the token table's dense gradient beside the
        # activations; in pre-training the tied table's gradient starts in the
        # masked-LM head and measured no extra peak.
        _embedding_gradient=4 * arch.vocabulary_size * arch.embedding_dim
        if mode == "finetune"
        else 0,
    )
    result.max_micro_batch = _largest_fitting(result, budget)
    return result


def _largest_fitting(p, budget):
    if p.peak_bytes(1) > budget:
        return 0
    lo, hi = 1, 2
    while p.peak_bytes(hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if p.peak_bytes(mid) <= budget else (lo, mid)
    return lo


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
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(
            f"measure_peak needs the JAX backend (KERAS_BACKEND=jax); this is "
            f"{keras.backend.backend()!r}."
        )
    import jax

    from bertzoo.models.backbone import BertBackbone
    from bertzoo.models.pretrainer import BertPretrainer
    from bertzoo.models.tasks import BertClassifier

    _check_choice("mode", mode, MODES)
    _check_choice("precision", precision, PRECISIONS)
    arch = _architecture(preset)
    arch.pop("name", None)
    arch.pop("trainable", None)
    arch["dtype"] = precision

    def spec(*shape, dtype="int32"):
        return jax.ShapeDtypeStruct(shape, dtype)

    def shapes(variables):
        return [spec(*v.shape, dtype=v.dtype) for v in variables]

    backbone = BertBackbone(**arch)
    names = (
        ("token_ids", "segment_ids", "padding_mask")
        if backbone.num_segments
        else ("token_ids", "padding_mask")
    )
    x = {name: spec(batch, seq_len) for name in names}
    if mode == "pretrain":
        predictions = max_predictions or max(1, math.ceil(seq_len * 0.15 - 1e-9))
        model = BertPretrainer(backbone, objective="nsp" if backbone.use_pooler else "none")
        x["mask_positions"] = spec(batch, predictions)
        y = {"mlm": spec(batch, predictions)}
        if backbone.use_pooler:
            y["sentence"] = spec(batch)
        data = (x, y, {"mlm": spec(batch, predictions, dtype="float32")})
    else:
        model = BertClassifier(backbone, num_classes=num_classes)
        data = (x, spec(batch))
    if mode == "inference":
        state = (shapes(model.trainable_variables), shapes(model.non_trainable_variables))
        compiled = jax.jit(model.predict_step).lower(state, (x,)).compile()
    else:
        accumulate = gradient_accumulation if gradient_accumulation > 1 else None
        optimizer = keras.optimizers.AdamW(
            gradient_accumulation_steps=accumulate, global_clipnorm=1.0
        )
        model.compile(optimizer=optimizer, jit_compile=True)
        optimizer.build(model.trainable_variables)
        state = tuple(
            shapes(v)
            for v in (
                model.trainable_variables,
                model.non_trainable_variables,
                optimizer.variables,
                model.metrics_variables,
            )
        )
        compiled = jax.jit(model.train_step, donate_argnums=0).lower(state, data).compile()
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
