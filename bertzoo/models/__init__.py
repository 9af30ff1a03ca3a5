from bertzoo.models.backbone import BertBackbone
from bertzoo.models.electra import ElectraPretrainer
from bertzoo.models.embedder import TextEmbedder
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.models.tasks import (
    BertClassifier,
    BertSpanQA,
    BertTokenClassifier,
    task_model_from_preset,
)

__all__ = [
    "BertBackbone",
    "BertClassifier",
    "BertPretrainer",
    "BertSpanQA",
    "BertTokenClassifier",
    "ElectraPretrainer",
    "TextEmbedder",
    "task_model_from_preset",
]
