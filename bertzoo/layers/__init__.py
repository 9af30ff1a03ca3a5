"""Keras layers that every bertzoo model is built from (keras.ops only)."""

from bertzoo.layers.attention import BertSelfAttention
from bertzoo.layers.common import ACTIVATION_NAMES, get_activation, kernel_initializer
from bertzoo.layers.embeddings import BertEmbeddings
from bertzoo.layers.heads import MaskedLMHead, gather_positions
from bertzoo.layers.pooling import POOLING_MODES, TokenPooling
from bertzoo.layers.transformer import BertTransformerBlock

__all__ = [
    "ACTIVATION_NAMES",
    "BertEmbeddings",
    "BertSelfAttention",
    "BertTransformerBlock",
    "MaskedLMHead",
    "POOLING_MODES",
    "TokenPooling",
    "gather_positions",
    "get_activation",
    "kernel_initializer",
]
