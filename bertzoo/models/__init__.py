from bertzoo.models.backbone import BertBackbone, group_of_layer

__all__ = ["BertBackbone", "group_of_layer"]
