"""bertzoo: BERT and its derived variants (ALBERT, DistilBERT, TinyBERT) for
Keras 3, from named presets."""

from bertzoo import data, layers, tokenizers, training
from bertzoo.models import (
    BertBackbone,
    BertClassifier,
    BertPretrainer,
    BertSpanQA,
    BertTokenClassifier,
    TextEmbedder,
)
from bertzoo.preprocessing import BertPreprocessor
from bertzoo.presets import PresetError, list_presets
from bertzoo.serving import ServingModel, export_serving
from bertzoo.tokenizers import BertTokenizer, TokenizerError

__version__ = "0.1.0"

__all__ = [
    "BertBackbone",
    "BertClassifier",
    "BertPreprocessor",
    "BertPretrainer",
    "BertSpanQA",
    "BertTokenClassifier",
    "BertTokenizer",
    "PresetError",
    "ServingModel",
    "TextEmbedder",
    "TokenizerError",
    "data",
    "export_serving",
    "layers",
    "list_presets",
    "tokenizers",
    "training",
    "__version__",
]
