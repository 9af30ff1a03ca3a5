"""bertzoo: BERT and its derived variants (ALBERT, DistilBERT, TinyBERT) for
Keras 3, from named presets."""

from bertzoo import layers
from bertzoo.models import BertBackbone
from bertzoo.presets import PresetError, list_presets

__version__ = "0.1.0"

__all__ = ["BertBackbone", "PresetError", "layers", "list_presets", "__version__"]
