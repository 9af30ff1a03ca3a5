"""What the readers of Google's TF1 checkpoints share: the description of
one checkpoint family (`GoogleFamily`, one per module beside this one), the
checkpoint read (`GoogleCheckpoint`), the reading context handed to a
family's hooks (`Reading`) and the mapping of a reference config to
`BertBackbone` arguments (`backbone_arguments`)."""

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from bertzoo.convert.common import CheckpointError

# Google's `get_activation` names (lowercased by the reference code) ->
# bertzoo activations. BERT's and ALBERT's modeling.py define "gelu" as
# 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))); ELECTRA's
# model/modeling.py as x * 0.5 * (1 + erf(x / sqrt(2))).
TANH_GELU = {"gelu": "gelu_approximate", "relu": "relu", "tanh": "tanh"}
TANH_GELU_NOTE = "Google's 'gelu' is the tanh approximation, bertzoo 'gelu_approximate'"

# tf.contrib.layers.layer_norm, which all three reference models use.
LAYER_NORM_EPSILON = 1e-12

# Never part of the model: the step counter, Adam's beta powers, and the
# optimizer slots the reference optimizers create beside each variable:
# "<var>/adam_m", "<var>/adam_v" (BERT's AdamWeightDecayOptimizer, ALBERT's
# LAMBOptimizer) and the slot names of the tf.compat.v1.train optimizers
# (Adam, Momentum, Adagrad, RMSProp, Ftrl, Adadelta); "temperature", a
# training scalar that transformers' ELECTRA reader also skips.
_IGNORED_NAMES = ("global_step", "beta1_power", "beta2_power", "temperature")
_SLOT_SUFFIX = re.compile(
    r"/(adam_m|adam_v|Adam|Adam_1|Momentum|Adagrad|RMSProp|RMSProp_1|Ftrl|Ftrl_1"
    r"|Adadelta|Adadelta_1)$"
)

_REQUIRED_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
)


def is_ignored(name):
    """Whether the checkpoint tensor `name` is a training-state tensor."""
    return name in _IGNORED_NAMES or _SLOT_SUFFIX.search(name) is not None


def bert_block_names(scope, index):
    """The TF1 scopes of BERT's block `index` under `scope`: (attention,
    attention LayerNorm, intermediate Dense, output Dense, output
    LayerNorm)."""
    p = f"{scope}/encoder/layer_{index}"
    return (
        f"{p}/attention",
        f"{p}/attention/output/LayerNorm",
        f"{p}/intermediate/dense",
        f"{p}/output/dense",
        f"{p}/output/LayerNorm",
    )


@dataclasses.dataclass(frozen=True)
class GoogleFamily:
    """How one family's reference code (google-research/bert, albert,
    electra) names its checkpoint, config and vocabulary.

    Attributes:
        model_type: "bert", "albert" or "electra".
        scope: the scope of the encoder's variables.
        head_scopes: prefixes of the pre-training heads' tensors.
        names: a pattern that only this family's encoder names match.
        config_files: glob patterns of its model config, first match wins.
        config_required: whether a checkpoint ships a model config.
        config_exclude: config file names never taken for the model's.
        activations: its `hidden_act` names -> bertzoo activations.
        gelu_note: what its "gelu" is, for errors.
        default_dropout: the reference config's dropout default.
        has_pooler: whether its encoder may have a pooler.
        vocabulary: (tokenizer kind, glob patterns, what) of its vocabulary.
        projection: the scope of the E -> H projection ("{scope}" filled).
        block_names: `(scope, index) -> names` (see `bert_block_names`).
        head_map: `(H, E, V) -> {Google head tensor: (Hugging Face name,
            transpose?, TF1 shape)}`.
        backbone_extras: `(config, source) -> dict`, arguments only this
            family sets (ALBERT's groups, factorised embeddings).
        read_sizes: `reading -> backbone arguments`; None: from the config
            file (`backbone_arguments`).
        generator_parts: `shapes -> (reads, only, head scopes)`: the name
            prefixes a second model in the checkpoint (ELECTRA's generator)
            reads, those only it reads, and its heads' scopes; None when
            there is none.
        read_generator: `(reading, tensors, head_shapes) -> GoogleCheckpoint`,
            that second model, from the tensors `generator_parts` gave it.
    """

    model_type: str
    scope: str
    head_scopes: tuple
    names: re.Pattern
    config_files: tuple
    config_required: bool
    activations: dict
    gelu_note: str
    default_dropout: float
    has_pooler: bool
    vocabulary: tuple
    projection: str
    block_names: Callable
    head_map: Callable
    backbone_extras: Callable = lambda config, source: {}
    config_exclude: re.Pattern | None = None
    read_sizes: Callable | None = None
    read_generator: Callable | None = None
    generator_parts: Callable = lambda shapes: None


@dataclasses.dataclass(frozen=True)
class GoogleCheckpoint:
    """A Google TF1 checkpoint read and checked by `read_google_checkpoint`,
    ready to be loaded into a backbone built from `backbone_config`.

    Attributes:
        prefix: the checkpoint prefix (`<prefix>.index`, `<prefix>.data-*`).
        model_type: "bert", "albert" or "electra".
        config_path: the model config file read; None for an ELECTRA
            checkpoint without one (its sizes come from the tensor shapes).
        backbone_config: `BertBackbone` constructor arguments.
        tensors: checkpoint name -> array, the backbone's tensors.
        head_shapes: checkpoint name -> shape, the pre-training heads.
        vocabulary: the vocabulary file (`vocab.txt` or a SentencePiece model).
        preset_info: the preset's description, tokenizer and metadata sections.
        scope: the checkpoint scope of the backbone's encoder ("bert",
            "electra", or "generator" for ELECTRA's generator).
        embeddings_scope: the scope of its embedding tables (ELECTRA's
            generator: "electra", whose tables it shares).
        generator: the generator of an ELECTRA checkpoint, a
            `GoogleCheckpoint` of its own (same prefix, vocabulary and
            reader); None when there is none.
    """

    prefix: str
    model_type: str
    config_path: Path | None
    backbone_config: dict
    tensors: dict
    head_shapes: dict
    vocabulary: Path
    preset_info: dict
    reader: object = dataclasses.field(repr=False)
    scope: str = "bert"
    embeddings_scope: str = "bert"
    generator: "GoogleCheckpoint | None" = None


@dataclasses.dataclass
class Reading:
    """One checkpoint being read, handed to a family's hooks: its prefix,
    TF reader and `{name: shape}`, folder, family, config file (None: none)
    and its contents, vocabulary, where its sizes come from (for errors) and
    its preset info (`preset_info(what)`)."""

    prefix: str
    reader: object
    shapes: dict
    directory: Path
    family: GoogleFamily
    config_path: Path | None
    config: dict = dataclasses.field(default_factory=dict)
    vocabulary: Path | None = None
    size_source: object = None
    preset_info: Callable | None = None


def _check_activation(config, family, source):
    act = config.get("hidden_act", "gelu")
    act_key = act.lower() if isinstance(act, str) else act
    if act_key not in family.activations:
        raise CheckpointError(
            f"{source}: hidden_act {act!r} is not supported. Supported: "
            f"{', '.join(sorted(family.activations))} ({family.gelu_note})."
        )
    return family.activations[act_key]


def backbone_arguments(config, family, source="config", shapes=None, scope=None):
    """Maps a `bert_config.json` / `albert_config.json` dict (for ELECTRA:
    the same keys, as its sizes are read) to `BertBackbone` arguments, for
    `family` (see `google_config_to_backbone`)."""
    shapes = shapes or {}
    scope = scope or family.scope
    missing = [k for k in _REQUIRED_KEYS if k not in config]
    if missing:
        raise CheckpointError(f"{source}: missing the required key(s) {', '.join(missing)}.")
    activation = _check_activation(config, family, source)

    def from_shape(key, tensor, default):
        if key in config:
            return config[key]
        if tensor in shapes:
            return int(shapes[tensor][0])
        return default

    dropout = family.default_dropout
    return {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "hidden_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "num_segments": from_shape(
            "type_vocab_size", f"{scope}/embeddings/token_type_embeddings", 2
        ),
        "use_pooler": family.has_pooler
        and (not shapes or f"{scope}/pooler/dense/kernel" in shapes),
        "activation": activation,
        "dropout": config.get("hidden_dropout_prob", dropout),
        "attention_dropout": config.get("attention_probs_dropout_prob", dropout),
        "max_sequence_length": from_shape(
            "max_position_embeddings", f"{scope}/embeddings/position_embeddings", 512
        ),
        "layer_norm_epsilon": LAYER_NORM_EPSILON,
        "initializer_range": config.get("initializer_range", 0.02),
        **family.backbone_extras(config, source),
    }
