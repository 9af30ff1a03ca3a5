"""Attention maps: what every head of every layer attends to, as numbers
and as a picture.

    maps = bertzoo.attention_maps.attention_maps(preset, "The cat sat.", pair="It slept.")
    bertzoo.attention_maps.plot_attention(maps, "attn.png")            # layers x heads grid
    bertzoo.attention_maps.plot_attention(maps, "l3h2.png", layer=3, head=2)
    python -m bertzoo attention PRESET "text" [--pair "text b"] --out attn.png [--layer L] [--head H] [--scores]

The numbers come from `BertBackbone.feature_model()`: the pre-softmax
scores `QK^T / sqrt(d_head)` of every layer, and their softmax over the
keys (the attention probabilities the model uses; one text is run without
padding, so no position is masked). Layers and heads are numbered from 1.
The picture needs matplotlib (`pip install ".[plot]"` in the bertzoo checkout).

Beside the heat maps, a summary panel shows per layer the average
attention each token pays to [CLS], to [SEP] and to itself, the patterns
Clark et al. 2019 (What Does BERT Look At?) describe.
"""

import dataclasses
import textwrap
from pathlib import Path

import numpy as np
from keras import ops

from bertzoo.models.backbone import BertBackbone
from bertzoo.preprocessing import BertPreprocessor, segment_inputs
from bertzoo.presets import max_input_length
from bertzoo.tokenizers import from_preset as tokenizer_from_preset


@dataclasses.dataclass
class AttentionMaps:
    """One text's attention.

    tokens: the token strings, [CLS] ... [SEP] (... [SEP]), no padding.
    probabilities: float64 `(layers, heads, tokens, tokens)`, rows are
        queries, columns keys; each row sums to 1.
    scores: float64, the same shape: the pre-softmax scores.
    """

    tokens: list
    probabilities: np.ndarray
    scores: np.ndarray

    @property
    def num_layers(self):
        return self.probabilities.shape[0]

    @property
    def num_heads(self):
        return self.probabilities.shape[1]

    def summary(self):
        """Per layer (averaged over heads and query tokens): the attention
        paid to [CLS] (position 0), to the [SEP]s, and to the token itself.
        A dict of three `(layers,)` arrays."""
        p = self.probabilities
        sep = [i for i, t in enumerate(self.tokens) if i and t == self.tokens[-1]]
        n = p.shape[-1]
        return {
            "[CLS]": p[..., 0].mean(axis=(1, 2)),
            "[SEP]": p[..., sep].sum(-1).mean(axis=(1, 2)),
            "self": p[..., np.arange(n), np.arange(n)].mean(axis=(1, 2)),
        }


def _softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def attention_maps(model, text, pair=None, tokenizer=None):
    """The attention of `model` on `text` (and the second segment `pair`).

    Args:
        model: a preset (name or directory) or a `BertBackbone` (then pass
            `tokenizer`).
        text, pair: the text and the optional second segment.
        tokenizer: the model's tokenizer (default: the preset's).

    Returns an `AttentionMaps`.
    """
    if isinstance(model, (str, Path)):
        tokenizer = tokenizer or tokenizer_from_preset(model)
        model = BertBackbone.from_preset(model)
    if not isinstance(model, BertBackbone):
        raise TypeError(f"model must be a preset or a BertBackbone, got {type(model).__name__}.")
    if tokenizer is None:
        raise ValueError("Pass tokenizer= with a BertBackbone (a preset brings its own).")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, got {text!r}.")
    preprocessor = BertPreprocessor(
        tokenizer,
        sequence_length=max_input_length(model.get_config()),
        **segment_inputs(model.num_segments),
    )
    packed = preprocessor.pack(text if pair is None else (text, pair))
    length = int(np.asarray(packed["padding_mask"]).sum())
    inputs = {k: np.asarray(v)[None, :length].astype("int32") for k, v in packed.items()}
    outputs = model.feature_model()(inputs)
    scores = np.stack(
        [np.asarray(ops.convert_to_numpy(s), "float64")[0] for s in outputs["attention_scores"]]
    )  # (layers, heads, tokens, tokens)
    tokens = [tokenizer.id_to_token(int(i)) for i in inputs["token_ids"][0]]
    return AttentionMaps(tokens=tokens, probabilities=_softmax(scores), scores=scores)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            'Drawing attention maps needs matplotlib: pip install matplotlib, or pip install ".[plot]" '
            "in the bertzoo checkout. attention_maps() returns the numbers without it."
        ) from None
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    return plt


def _check_index(name, value, count):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= count:
        raise ValueError(f"{name} must be an integer in 1..{count}, got {value!r}.")
    return value - 1


GRID_LABEL_POINTS = 7  # token labels in the layer x head grid
LARGE_LABEL_POINTS = 9  # ... on one head's large map


def plot_attention(maps, out, layer=None, head=None, scores=False, dpi=100):
    """Draws `maps` (an `AttentionMaps`) as a PNG at `out`: with no `layer`
    and `head`, a grid of every layer x head; with both, one large heat map
    of that head (with `layer` alone, that layer's heads). The tokens label
    both axes (rows: queries, columns: keys) and a summary panel shows each
    layer's average attention to [CLS], [SEP] and the token itself.
    `scores`: draw the pre-softmax scores instead of the probabilities.
    Layers and heads count from 1. Returns `{"path", "drawn", "label_points",
    "dpi"}`: `drawn` maps `(layer, head)` (1-based) to the matrix drawn, and
    the token labels are `label_points` high (x dpi / 72 pixels)."""
    plt = _pyplot()
    values = maps.scores if scores else maps.probabilities
    li = _check_index("layer", layer, maps.num_layers)
    hi = _check_index("head", head, maps.num_heads)
    if hi is not None and li is None:
        raise ValueError("head= needs layer= (the head of which layer).")
    layers = range(maps.num_layers) if li is None else [li]
    heads = range(maps.num_heads) if hi is None else [hi]
    rows, cols = len(layers), len(heads)
    n = len(maps.tokens)
    big = rows * cols == 1
    # Token labels stay legible at any length: the font has a floor in
    # points, and each cell grows with the tokens so that its rows are
    # spaced at least one label (plus 2 points) apart.
    label_size = LARGE_LABEL_POINTS if big else GRID_LABEL_POINTS
    per_token = (label_size + 2) / 72  # inches
    cell = max(per_token * n, 4.0) if big else max(per_token * n, 1.6)
    fig = plt.figure(figsize=(cols * cell + 0.5, rows * cell + 3.2), dpi=dpi)
    grid = fig.add_gridspec(rows + 1, cols, height_ratios=[cell] * rows + [2.6])
    drawn = {}
    vmin, vmax = (None, None) if scores else (0.0, 1.0)
    for r, li_ in enumerate(layers):
        for c, hi_ in enumerate(heads):
            ax = fig.add_subplot(grid[r, c])
            matrix = values[li_, hi_]
            image = ax.imshow(matrix, cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest")
            drawn[(li_ + 1, hi_ + 1)] = np.asarray(image.get_array())
            ax.set_title(f"layer {li_ + 1} head {hi_ + 1}", fontsize=label_size + 1)
            ax.set_xticks(range(n))
            ax.set_yticks(range(n))
            ax.set_xticklabels(
                maps.tokens if (big or r == rows - 1) else [], rotation=90, fontsize=label_size
            )
            ax.set_yticklabels(maps.tokens if (big or c == 0) else [], fontsize=label_size)
            if big:
                fig.colorbar(
                    image,
                    ax=ax,
                    fraction=0.046,
                    pad=0.04,
                    label="score" if scores else "probability",
                )
    summary = maps.summary()
    ax = fig.add_subplot(grid[rows, :])
    x = np.arange(1, maps.num_layers + 1)
    for name, line in summary.items():
        ax.plot(x, line, marker="o", label=f"to {name}")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean attention")
    ax.set_xticks(x)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("average attention per layer (all heads and tokens)", fontsize=9)
    what = "pre-softmax scores" if scores else "attention probabilities"
    width = int(fig.get_figwidth() * 11)
    fig.suptitle(textwrap.fill(f"{what}: {' '.join(maps.tokens)}", width), fontsize=10)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    plt.close(fig)
    return {"path": out, "drawn": drawn, "label_points": label_size, "dpi": dpi}
