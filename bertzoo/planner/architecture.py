"""The sizes of a backbone that the planner reads from its config alone
(`Architecture`), and parameter counts."""

import dataclasses
import os
from pathlib import Path

from bertzoo.local_layout import BLOCKED_MIN_LENGTH, local_score_shape


def backbone_config(preset):
    """The backbone config (`BertBackbone`'s arguments) of a preset name or
    directory, a `BertBackbone` or a config dict."""
    if isinstance(preset, dict):
        return dict(preset)
    config = getattr(preset, "get_config", None)
    if config is not None:  # a BertBackbone
        return config()
    from bertzoo import presets as preset_lib

    # A built-in name (or one that names nothing: PresetError) is answered
    # without Keras or TensorFlow; directories go through the one loader
    # (which verifies them once).
    if not (isinstance(preset, str | os.PathLike) and Path(preset).is_dir()):
        kind, location = preset_lib.classify(preset)  # a directory is never read here
        return dict(preset_lib.read_document(kind, location)["backbone"])
    from bertzoo.convert.loader import resolve_preset  # Keras: only when a directory is read

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
    # RoBERTa: the first position_padding_id + 1 rows serve padding only.
    position_padding_id: int | None = None
    # ModernBERT: pre-LN blocks (the first without its attention LayerNorm)
    # and a final LayerNorm, no biases, GLU feed-forward layers, rotary
    # positions (no position table).
    norm_first: bool = False
    use_bias: bool = True
    gated_feedforward: bool = False
    learned_positions: bool = True
    # Local (sliding-window) attention in all layers but each
    # global_attention_every-th.
    local_attention_window: int | None = None
    global_attention_every: int = 1

    @property
    def max_input_length(self):
        """The longest sequence the position table embeds."""
        if self.position_padding_id is None:
            return self.max_sequence_length
        return self.max_sequence_length - self.position_padding_id - 1

    @classmethod
    def of(cls, preset):
        c = backbone_config(preset)
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
            position_padding_id=c.get("position_padding_id"),
            norm_first=c.get("norm_first", False),
            use_bias=c.get("use_bias", True),
            gated_feedforward=c.get("gated_feedforward", False),
            learned_positions=c.get("rope_theta") is None,
            local_attention_window=c.get("local_attention_window"),
            global_attention_every=c.get("global_attention_every", 1),
        )

    def score_shapes(self, seq_len):
        """Per layer, `(queries, keys, blocked)`: the per-head score tensor
        of one sequence of `seq_len` tokens, as the layer computes it at a
        known length (JAX; a TensorFlow graph traced for any length runs its
        local layers in blocks at every length). Global layers: `(S, S)`;
        local ones banded up to `BLOCKED_MIN_LENGTH` tokens, in blocks
        beyond (`bertzoo.local_layout`)."""
        shapes = []
        for i in range(self.num_layers):
            if self.local_attention_window is None or i % self.global_attention_every == 0:
                shapes.append((seq_len, seq_len, False))
            else:
                queries, keys = local_score_shape(seq_len, self.local_attention_window)
                shapes.append((queries, keys, seq_len > BLOCKED_MIN_LENGTH))
        return shapes

    def _dense(self, inputs, outputs):
        return inputs * outputs + (outputs if self.use_bias else 0)

    def _layer_norm(self, width):
        return 2 * width if self.use_bias else width

    @property
    def feedforward_width(self):
        """The first feed-forward Dense layer's width (a GLU's is doubled)."""
        return 2 * self.intermediate_dim if self.gated_feedforward else self.intermediate_dim

    def block_params(self):
        h, f = self.hidden_dim, self.intermediate_dim
        # q, k, v, output projections; two LayerNorms; the feed-forward pair.
        return (
            4 * self._dense(h, h)
            + 2 * self._layer_norm(h)
            + self._dense(h, self.feedforward_width)
            + self._dense(f, h)
        )

    def embedding_params(self):
        e, h = self.embedding_dim, self.hidden_dim
        positions = self.max_sequence_length if self.learned_positions else 0
        tables = (self.vocabulary_size + positions + self.num_segments) * e
        projection = self._dense(e, h) if e != h else 0
        return tables + self._layer_norm(e) + projection

    def pooler_params(self):
        h = self.hidden_dim
        return h * h + h if self.use_pooler else 0

    def backbone_params(self):
        """Exactly `BertBackbone.count_params()` (ALBERT's shared blocks
        counted once). A pre-LN encoder's first block has no attention
        LayerNorm and a final LayerNorm follows the last block: the same
        count."""
        return (
            self.embedding_params() + self.num_groups * self.block_params() + self.pooler_params()
        )

    def head_params(self, mode, num_classes):
        e, h, v = self.embedding_dim, self.hidden_dim, self.vocabulary_size
        if mode == "pretrain":
            # MaskedLMHead: H -> E transform + LayerNorm + output bias (tied
            # table); NSP/SOP Dense(2) on the pooled output.
            return (
                self._dense(h, e) + self._layer_norm(e) + v + (2 * h + 2 if self.use_pooler else 0)
            )
        return h * num_classes + num_classes
