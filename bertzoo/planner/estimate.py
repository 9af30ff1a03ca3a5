"""The planner's estimate: memory by part, the largest batch that fits and
FLOPs of one step, from the architecture alone (the model is described in
`bertzoo.planner`'s docstring)."""

import dataclasses
import math
import re

from bertzoo.planner.architecture import Architecture

MODES = ("finetune", "pretrain", "inference")
OPTIMIZERS = ("adamw", "lamb", "adam")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
ATTENTION_PATHS = ("auto", "flash")

# Calibrated saved-tensor counts (see the module docstring).
_PER_LAYER_SH = 12
_PER_DROPOUT = 2
_PER_LAYER_SF = 4
_GATED_SF = 2  # extra, with a gated (GLU) feed-forward layer: its 2F-wide projection
_SCORES_FUSED = 3  # the fused op's exponentials, their sums broadcast, probabilities
_SCORES_EXPLICIT = 2  # scores and probabilities, with attention-probability dropout
_SCORES_DROPOUT = 2  # and that dropout's mask and dropped probabilities
_BLOCK_SPANS = 6  # S x H: a blocked local layer's key and value spans, 3 blocks each
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
    """Bytes from a size such as "12GiB", "16 GB", "800MiB" or "4096B", or a
    number of bytes given as a Python int or float. GB is 10**9 bytes, GiB
    2**30. A string without a unit ("16", what `--memory 16` passes) is
    refused: it was read as 16 bytes, a plan for no memory at all."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"memory={text!r} must be positive.")
        return int(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if match and not match.group(2):
        number = match.group(1)
        raise ValueError(
            f"memory={text!r} has no unit. Valid: a size with its unit, e.g. {number}GiB "
            f"({number} x 2**30 bytes), {number}GB ({number} x 10**9) or {number}B (bytes)."
        )
    unit = match and match.group(2).lower()
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


def check_choice(name, value, valid):
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
        # One feed-forward working set: the first projection's output (a
        # GLU's twice as wide).
        scores = 0 if attention == "flash" else _INFERENCE_SCORES * 4 * square
        return scores + _INFERENCE_SF * act * s * arch.feedforward_width
    dropouts = 1 if arch.dropout > 0 else 0
    per_layer = (_PER_LAYER_SH + 2 * _PER_DROPOUT * dropouts) * act * s * h
    # A GLU keeps its 2F-wide projection (gate and value) besides the F-wide
    # tensors of an ungated layer.
    gated = _GATED_SF if arch.gated_feedforward else 0
    per_layer += (_PER_LAYER_SF + gated) * act * s * f
    embeddings = (_EMBEDDING_SE + _PER_DROPOUT * dropouts) * act * s * e
    total = layers * per_layer + embeddings + _attention_bytes(arch, s, act, attention)
    if mode == "pretrain":
        predictions = max_predictions or max(1, math.ceil(s * 0.15 - 1e-9))
        total += _MLM_LOGITS * 4 * predictions * arch.vocabulary_size
    return total


def _attention_bytes(arch, seq_len, act, attention):
    """What the layers' attention keeps for the backward pass besides the
    S x H tensors: per layer its score tensors (heads x queries x keys,
    `Architecture.score_shapes`), in float32: 3 on the fused path (training
    without attention-probability dropout), 2 + 2 with that dropout (the
    explicit path: + its mask and the dropped probabilities, in the compute
    dtype), none with a flash kernel; and in a blocked local layer the key
    and value spans (each block's three-block span: 3 S x H each)."""
    total = 0
    for queries, keys, blocked in arch.score_shapes(seq_len):
        if blocked:
            total += _BLOCK_SPANS * act * queries * arch.hidden_dim
        if attention == "flash":
            continue
        scores = arch.num_heads * queries * keys
        if arch.attention_dropout > 0:
            total += _SCORES_EXPLICIT * 4 * scores + _SCORES_DROPOUT * act * scores
        else:
            total += _SCORES_FUSED * 4 * scores
    return total


def flops_per_sequence(arch, seq_len, mode="finetune", max_predictions=None):
    """Training (3x forward) or inference FLOPs for one sequence."""
    s, h = seq_len, arch.hidden_dim
    # The matmuls: four projections, the feed-forward pair (a GLU's first
    # one twice as wide).
    feedforward = h * (arch.feedforward_width + arch.intermediate_dim)
    per_token = 2 * arch.num_layers * (4 * h * h + feedforward)
    if arch.embedding_dim != arch.hidden_dim:
        per_token += 2 * arch.embedding_dim * h
    # QK^T and PV over each layer's scores (a blocked local layer's S x 3b).
    attention = 4 * h * sum(queries * keys for queries, keys, _ in arch.score_shapes(s))
    forward = per_token * s + attention + 2 * arch.pooler_params()
    if mode == "pretrain":
        predictions = max_predictions or max(1, math.ceil(s * 0.15 - 1e-9))
        e, v = arch.embedding_dim, arch.vocabulary_size
        forward += predictions * 2 * (h * e + e * v)
    return forward if mode == "inference" else 3 * forward


def _check_step(arch, seq_len, gradient_accumulation, tflops, utilisation):
    """Refuses a step the architecture cannot take, and bad speed figures."""
    if not isinstance(seq_len, int) or not 1 <= seq_len <= arch.max_input_length:
        reserved = (
            ""
            if arch.position_padding_id is None
            else f" less the {arch.position_padding_id + 1} positions that serve padding"
        )
        raise ValueError(
            f"seq_len={seq_len!r} must be an integer from 1 to the preset's "
            f"max_sequence_length {arch.max_sequence_length}{reserved}."
        )
    if not isinstance(gradient_accumulation, int) or gradient_accumulation < 1:
        raise ValueError(
            f"gradient_accumulation={gradient_accumulation!r} must be an integer >= 1."
        )
    if tflops is not None and tflops <= 0:
        raise ValueError(f"tflops={tflops!r} must be positive.")
    if not 0 < utilisation <= 1:
        raise ValueError(f"utilisation={utilisation!r} must be in (0, 1].")


def _state_bytes(arch, step, num_classes):
    """The `Plan` fields of the step's state: parameters, weights, gradients,
    optimizer moments (+ accumulator) and the fine-tuning embedding gradient.
    `step` holds the `Plan` fields of the step's settings."""
    mode = step["mode"]
    params = arch.backbone_params() + arch.head_params(mode, num_classes)
    training = mode != "inference"
    moments = 8 * params if training else 0
    accumulate = training and step["gradient_accumulation"] > 1
    return {
        "parameters": params,
        "weights_bytes": 4 * params + (2 * params if step["precision"] != "float32" else 0),
        "gradient_bytes": 4 * params if training else 0,
        "optimizer_bytes": moments + (4 * params if accumulate else 0),
        # Fine-tuning builds the token table's dense gradient beside the
        # activations; in pre-training the tied table's gradient starts in the
        # masked-LM head and measured no extra peak.
        "_embedding_gradient": 4 * arch.vocabulary_size * arch.embedding_dim
        if mode == "finetune"
        else 0,
    }


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
            in training, the fused op otherwise; both keep S x S tensors)
            or "flash" (a kernel that keeps none).
    """
    check_choice("mode", mode, MODES)
    check_choice("precision", precision, PRECISIONS)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("attention", attention, ATTENTION_PATHS)
    budget = parse_memory(memory)  # bad input fails before a preset is read
    arch = Architecture.of(preset)
    _check_step(arch, seq_len, gradient_accumulation, tflops, utilisation)
    name = preset if isinstance(preset, str) else getattr(preset, "name", "backbone")
    step = {  # the Plan fields of the step's settings
        "preset": str(name),
        "mode": mode,
        "seq_len": seq_len,
        "precision": precision,
        "optimizer": optimizer,
        "gradient_accumulation": gradient_accumulation,
        "attention": attention,
        "memory": budget,
        "tflops": tflops,
        "utilisation": utilisation,
    }
    per_sequence = activation_bytes(arch, seq_len, mode, precision, attention, max_predictions)
    flops = float(flops_per_sequence(arch, seq_len, mode, max_predictions))
    result = Plan(
        **step,
        **_state_bytes(arch, step, num_classes),
        activation_bytes_per_sequence=per_sequence,
        max_micro_batch=0,
        flops_per_sequence=flops,
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
