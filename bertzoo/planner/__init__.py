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
  input that XLA keeps once a batch holds a few thousand tokens), plus 2
  with a gated feed-forward layer (ModernBERT's GeGLU: its 2F-wide first
  projection, gate and value; measured within 1% of the compiled step on a
  ModernBERT-shaped config with dropout); heads x S
  x S, in float32: 3 on the fused path (training without
  attention-probability dropout: XLA keeps the exponentials, their sums
  broadcast to that shape and the probabilities), 2 + 2 with that dropout
  (the explicit path: scores, probabilities, + mask and dropped
  probabilities), 0 with a flash kernel. A local layer past
  `bertzoo.local_layout.BLOCKED_MIN_LENGTH` tokens computes in blocks of
  b = window / 2: S x 3b scores instead (queries padded to whole blocks)
  and 6 S x H more (its key and value spans). Embeddings: 6 S x H (E
  wide before a projection) + 2 for their dropout. Pre-training adds 3 P x V
  (masked-LM logits, their softmax and its gradient, at P masked
  positions).
- **Inference** keeps no activations for a backward pass: the peak is the
  weights plus one layer's working set, 3 heads x S x S (scores,
  exponentials, probabilities) plus the first feed-forward projection's
  output (S x F; a GLU's S x 2F).

Element sizes: 4 bytes in float32; under mixed precision 2, except the
attention scores and softmax, which bertzoo computes in float32.

The tensor counts were calibrated on the XLA-compiled JAX training step's
`memory_analysis()` on CPU and validated on other presets and lengths
(`benchmarks/plan_calibration.py`; BENCHMARKS.md has the table). XLA on
CPU keeps bfloat16 activations as float32, so there a mixed-precision step
measures as float32 does; the 16-bit sizes are what GPUs and TPUs keep.

Parameter counts and FLOPs follow the switches too: no biases (and
LayerNorms without theirs) where `use_bias=False`, a GLU's first projection
twice as wide, no position table with rotary positions. Local attention is
planned as bertzoo computes it at a known length (JAX): on the full S x S
scores with a band mask up to `BLOCKED_MIN_LENGTH` tokens, as global
attention, and in blocks beyond (`Architecture.score_shapes`).

FLOPs per step: forward 2 x (non-embedding weights used per token) per
token + 4 x H x each layer's score entries (S x S; S x 3b for a local layer
in blocks: attention scores and weighted sum), plus the head; training is
3x the forward pass.

Modules: `architecture` (the sizes read from a backbone config, parameter
counts), `estimate` (`plan`, `Plan`: memory by part, largest batch,
FLOPs), `measure` (`measure_peak`, the compiled step's peak it is
calibrated against; `device_memory`).

Example:
>>> p = plan("bert_base", seq_len=512, memory="12GiB")
>>> p.max_batch
9
>>> print(p.table())  # doctest: +SKIP
"""

from bertzoo.planner.architecture import Architecture
from bertzoo.planner.estimate import (
    ATTENTION_PATHS,
    MODES,
    OPTIMIZERS,
    PRECISIONS,
    Plan,
    activation_bytes,
    flops_per_sequence,
    format_bytes,
    parse_memory,
    plan,
)
from bertzoo.planner.measure import device_memory, measure_peak

__all__ = [
    "ATTENTION_PATHS",
    "MODES",
    "OPTIMIZERS",
    "PRECISIONS",
    "Architecture",
    "Plan",
    "activation_bytes",
    "device_memory",
    "flops_per_sequence",
    "format_bytes",
    "measure_peak",
    "parse_memory",
    "plan",
]
