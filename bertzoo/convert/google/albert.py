"""google-research/albert checkpoints (`model.ckpt-best.*`,
`albert_config.json`, `30k-clean.model`): BERT's names, with the embedding
projection and parameter groups of ALBERT:

    bert/encoder/embedding_hidden_mapping_in/{kernel,bias}   (E -> H)
    bert/encoder/transformer/group_{g}/inner_group_0/
        attention_1/self/{query,key,value}/...
        attention_1/output/dense/...
        LayerNorm/...          (after attention)
        ffn_1/intermediate/dense/...
        ffn_1/intermediate/output/dense/...
        LayerNorm_1/...        (after the feed-forward block)
"""

import re

from bertzoo.convert.common import CheckpointError, check_group_map
from bertzoo.convert.google.bert import cls_head_map
from bertzoo.convert.google.spec import TANH_GELU, TANH_GELU_NOTE, GoogleFamily


def _block_names(scope, group):
    p = f"{scope}/encoder/transformer/group_{group}/inner_group_0"
    return (
        f"{p}/attention_1",
        f"{p}/LayerNorm",
        f"{p}/ffn_1/intermediate/dense",
        f"{p}/ffn_1/intermediate/output/dense",
        f"{p}/LayerNorm_1",
    )


def _head_map(hidden, embedding, vocabulary):
    # AlbertForPreTraining: predictions.*, sop_classifier.classifier.*
    names = ("predictions", "predictions", "sop_classifier.classifier")
    return cls_head_map(hidden, embedding, vocabulary, names)


def _backbone_extras(config, source):
    """Factorised embeddings and parameter groups, checked against what
    bertzoo computes."""
    inner = config.get("inner_group_num", 1)
    if inner != 1:
        raise CheckpointError(
            f"{source}: inner_group_num={inner} is not supported: bertzoo's "
            "BertBackbone runs one attention + feed-forward block per layer "
            "(inner_group_num=1, as in every released ALBERT model)."
        )
    num_layers = config["num_hidden_layers"]
    num_groups = config.get("num_hidden_groups", 1)
    # The reference code's float form: int(i / num_layers * num_groups).
    check_group_map(
        num_layers,
        num_groups,
        lambda i: int(i / num_layers * num_groups),
        source,
        "the reference code",
    )
    return {"embedding_dim": config.get("embedding_size", 128), "num_groups": num_groups}


SPEC = GoogleFamily(
    model_type="albert",
    scope="bert",
    head_scopes=("cls/",),
    names=re.compile(r"/transformer/group_\d+/inner_group_\d+/"),
    config_files=("albert_config.json", "*config*.json"),
    config_required=True,
    activations=TANH_GELU,
    gelu_note=TANH_GELU_NOTE,
    default_dropout=0.0,  # AlbertConfig's
    has_pooler=True,
    vocabulary=("sentencepiece", ("*.model",), "SentencePiece model"),
    projection="{scope}/encoder/embedding_hidden_mapping_in",
    block_names=_block_names,
    head_map=_head_map,
    backbone_extras=_backbone_extras,
)
