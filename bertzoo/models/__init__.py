from bertzoo.models.backbone import BertBackbone, group_of_layer
from bertzoo.models.embedder import TextEmbedder
from bertzoo.models.pretrainer import BertPretrainer

__all__ = ["BertBackbone", "BertPretrainer", "TextEmbedder", "group_of_layer"]
