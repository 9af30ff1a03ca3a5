from bertzoo.models.backbone import BertBackbone, group_of_layer
from bertzoo.models.embedder import TextEmbedder

__all__ = ["BertBackbone", "TextEmbedder", "group_of_layer"]
