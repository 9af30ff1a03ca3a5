"""The Hugging Face model types bertzoo reads and writes, one spec per
family module."""

from bertzoo.convert.common import CheckpointError
from bertzoo.convert.hf.albert import ALBERT
from bertzoo.convert.hf.bert import BERT
from bertzoo.convert.hf.distilbert import DISTILBERT
from bertzoo.convert.hf.electra import ELECTRA
from bertzoo.convert.hf.modernbert import MODERNBERT
from bertzoo.convert.hf.roberta import ROBERTA, XLM_ROBERTA

SPECS = {
    spec.model_type: spec
    for spec in (BERT, ALBERT, DISTILBERT, ELECTRA, ROBERTA, XLM_ROBERTA, MODERNBERT)
}
SUPPORTED_MODEL_TYPES = tuple(SPECS)


def spec_of(model_type, where=None):
    """The spec of `model_type`; `where` (a path) prefixes the error."""
    if model_type not in SPECS:
        place = f"{where}: " if where is not None else ""
        raise CheckpointError(
            f"{place}model_type {model_type!r} is not supported. Supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    return SPECS[model_type]
