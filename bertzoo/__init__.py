"""bertzoo: BERT and its derived variants (ALBERT, DistilBERT, TinyBERT) for
Keras 3, from named presets."""

from bertzoo import layers, tokenizers
from bertzoo.models import BertBackbone, TextEmbedder
from bertzoo.preprocessing import BertPreprocessor
from bertzoo.presets import PresetError, list_presets
from bertzoo.tokenizers import BertTokenizer, TokenizerError

__version__ = "0.1.0"

__all__ = [
    "BertBackbone",
    "BertPreprocessor",
    "BertTokenizer",
    "PresetError",
    "TextEmbedder",
    "TokenizerError",
    "layers",
    "list_presets",
    "tokenizers",
    "__version__",
]
