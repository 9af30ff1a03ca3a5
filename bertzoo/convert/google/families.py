"""The Google TF1 checkpoint families bertzoo reads, one module each: adding
a family is one module with its `GoogleFamily` and a line here."""

from bertzoo.convert.common import CheckpointError
from bertzoo.convert.google import albert, bert, electra
from bertzoo.convert.google.spec import backbone_arguments, is_ignored

FAMILIES = {spec.model_type: spec for spec in (bert.SPEC, albert.SPEC, electra.SPEC)}
MODEL_TYPES = tuple(FAMILIES)
# ALBERT's encoder names are BERT's scope with groups: tried first.
_DETECTION_ORDER = ("albert", "electra", "bert")


def family(model_type):
    """The `GoogleFamily` of `model_type`; an unknown one is a `CheckpointError`."""
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"model_type must be one of {', '.join(MODEL_TYPES)} (or None to detect it), "
            f"got {model_type!r}."
        )
    return FAMILIES[model_type]


def detect_model_type(names, source="checkpoint"):
    """ "albert" when the names have ALBERT's `group_*/inner_group_*` scopes,
    "electra" for `electra/encoder/layer_*` or `generator/encoder/layer_*`,
    "bert" for `bert/encoder/layer_*`, else an error."""
    for model_type in _DETECTION_ORDER:
        if any(FAMILIES[model_type].names.search(n) for n in names):
            return model_type
    sample = ", ".join(sorted(n for n in names if not is_ignored(n))[:8])
    raise CheckpointError(
        f"{source} does not look like a Google BERT, ALBERT or ELECTRA checkpoint: no "
        "'bert/encoder/layer_N/...', 'bert/encoder/transformer/group_N/"
        "inner_group_M/...' or 'electra/encoder/layer_N/...' variables (first names: "
        f"{sample or 'none'})."
    )


def google_config_to_backbone(config, model_type, source="config", shapes=None, scope=None):
    """Maps a `bert_config.json` / `albert_config.json` dict (for ELECTRA:
    the same keys, as `electra_config` makes them) to `BertBackbone`
    arguments.

    Args:
        config: the parsed JSON.
        model_type: "bert", "albert" or "electra".
        source: what to name in errors.
        shapes: the checkpoint's `{name: shape}`; fills `type_vocab_size` and
            `max_position_embeddings` when the config leaves them out, and
            tells whether the checkpoint has a pooler (ELECTRA never has).
        scope: the checkpoint scope of the encoder's embeddings and pooler
            (default: the model type's, "bert" or "electra").
    """
    return backbone_arguments(config, family(model_type), source, shapes, scope)
