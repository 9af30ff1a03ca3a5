"""The models: graphs only (the backbone, the pretrainers, the task heads).
Reading and writing them in any format is the preset loader's
(`bertzoo.convert`), reached through `bertzoo.loader_registry`. The text
embedder, a model with its preprocessing, is `bertzoo.embedder`."""

from bertzoo.models.backbone import BertBackbone
from bertzoo.models.electra import ElectraPretrainer
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
    "task_model_from_preset",
]
