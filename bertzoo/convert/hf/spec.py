"""What the Hugging Face families share: the description of one model type
(`HfSpec`, one per module beside this one), the activation names, the order
of a transformer block's sub-layers and the file names of a checkpoint
directory."""

import dataclasses
from collections.abc import Callable

SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"

# HF hidden_act -> bertzoo activation.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
    "tanh": "tanh",
}
ACTIVATIONS_TO_HF = {
    "gelu": "gelu",
    "gelu_approximate": "gelu_new",
    "relu": "relu",
    "silu": "silu",
    "tanh": "tanh",
}

# The transformer block's sub-layers, in the order of `HfSpec.block_tensors`.
BLOCK_ROLES = (
    "self_attention.query",
    "self_attention.key",
    "self_attention.value",
    "self_attention.attention_output",
    "attention_layer_norm",
    "intermediate_dense",
    "output_dense",
    "output_layer_norm",
)
REQUIRED = object()  # a config key without a default


@dataclasses.dataclass(frozen=True)
class HfSpec:
    """How one HF model type names its config keys and tensors.

    Tensor names are given without `prefix`, the base-model prefix that the
    `*For*` task models put before every backbone tensor.
    """

    model_type: str
    prefix: str
    # (bertzoo backbone key, HF config key, HF default or REQUIRED)
    config_keys: tuple
    activation_key: str
    activation_default: str
    # Backbone settings this model type fixes (HF has no key for them).
    fixed: dict
    # Name of block `g` ("{}" is g): for ALBERT a parameter group, else a layer.
    block: str
    block_tensors: tuple  # HF names of BLOCK_ROLES inside a block
    pooler: str | None
    projection: str | None  # ALBERT's embedding -> hidden Dense
    heads: tuple  # prefixes of task-head tensors
    buffers: tuple  # non-trainable tensors that may be present and are ignored
    # (head prefix, pooler present? (None: either), architecture); first match wins.
    architectures: tuple
    base_architecture: str
    tokenizer_kind: str
    tokenizer_class: str
    # Keys transformers writes that bertzoo does not model, at HF's defaults.
    hf_extra: dict
    # Record the model type in the preset's metadata: the architecture alone
    # does not say it (ELECTRA reads as BERT without a pooler, XLM-R as
    # RoBERTa), and heads and exports follow it.
    record_model_type: bool = False
    # Tensor names outside the blocks (BERT's by default).
    word_embeddings: str = "embeddings.word_embeddings"
    embedding_norm: str = "embeddings.LayerNorm"
    final_norm: str | None = None  # the last LayerNorm of pre-LN encoders
    # The name, inside a block, of one tensor holding the query, key and
    # value projections stacked on the output axis (ModernBERT's
    # "attn.Wqkv"); `block_tensors` name its thirds "<name>.query", ".key"
    # and ".value", split on reading and joined on writing.
    fused_qkv: str | None = None
    # Rotary positions and the pre-LN blocks (ModernBERT), else BERT's
    # post-LN blocks with learned positions.
    modern: bool = False
    # Config keys that need code both ways: `read_config(hf, config_path)`
    # -> backbone settings, `write_config(backbone)` -> HF keys.
    read_config: Callable | None = None
    write_config: Callable | None = None
    # HF config keys bertzoo does not model but writes back as read (kept
    # in the preset's metadata, `hf_config`): special token ids, the task
    # head's pooling, the architecture.
    carried_keys: tuple = ()


# The size keys BERT, ALBERT and ELECTRA share.
BERT_SIZES = (
    ("vocabulary_size", "vocab_size", REQUIRED),
    ("num_layers", "num_hidden_layers", REQUIRED),
    ("num_heads", "num_attention_heads", REQUIRED),
    ("hidden_dim", "hidden_size", REQUIRED),
    ("intermediate_dim", "intermediate_size", REQUIRED),
    ("num_segments", "type_vocab_size", 2),
    ("max_sequence_length", "max_position_embeddings", 512),
    ("layer_norm_epsilon", "layer_norm_eps", 1e-12),
    ("initializer_range", "initializer_range", 0.02),
)


def shared_architectures(name):
    """The task models shared by BERT and ALBERT; sequence classifiers use the
    pooler, token classifiers are built without one."""
    return (
        ("qa_outputs.", None, f"{name}ForQuestionAnswering"),
        ("classifier.", True, f"{name}ForSequenceClassification"),
        ("classifier.", False, f"{name}ForTokenClassification"),
    )


def hf_group_map(num_layers, num_groups):
    """transformers' ALBERT layer -> group map, in its float form."""
    return [int(i / (num_layers / num_groups)) for i in range(num_layers)]
