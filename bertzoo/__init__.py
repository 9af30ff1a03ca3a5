"""bertzoo: BERT and its derived variants (ALBERT, DistilBERT, TinyBERT) for
Keras 3, from named presets."""

from bertzoo import data, layers, tokenizers, training
from bertzoo.models import BertBackbone, BertPretrainer, TextEmbedder
from bertzoo.preprocessing import BertPreprocessor
from bertzoo.presets import PresetError, list_presets
from bertzoo.tokenizers import BertTokenizer, TokenizerError

__version__ = "0.1.0"

__all__ = [
    "BertBackbone",
    "BertPreprocessor",
    "BertPretrainer",
    "BertTokenizer",
    "PresetError",
    "TextEmbedder",
    "TokenizerError",
    "data",
    "layers",
    "list_presets",
    "tokenizers",
    "training",
    "__version__",
]
