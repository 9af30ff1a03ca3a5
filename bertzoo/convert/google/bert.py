"""google-research/bert checkpoints (`bert_model.ckpt.*`, `bert_config.json`,
`vocab.txt`):

    bert/embeddings/{word,position,token_type}_embeddings, LayerNorm/{gamma,beta}
    bert/encoder/layer_{i}/attention/self/{query,key,value}/{kernel,bias}
    bert/encoder/layer_{i}/attention/output/{dense,LayerNorm}/...
    bert/encoder/layer_{i}/{intermediate,output}/dense/...
    bert/encoder/layer_{i}/output/LayerNorm/...
    bert/pooler/dense/{kernel,bias}
    cls/predictions/transform/{dense,LayerNorm}/..., cls/predictions/output_bias
    cls/seq_relationship/output_weights (2, H), cls/seq_relationship/output_bias
"""

import re

from bertzoo.convert.google.spec import TANH_GELU, TANH_GELU_NOTE, GoogleFamily, bert_block_names


def cls_head_map(hidden, width, vocabulary, names):
    """The `cls/` pre-training heads of BERT and ALBERT: Google head tensor
    -> (Hugging Face name, transpose?, TF1 shape), for an encoder `hidden`
    wide whose MLM transform is `width` wide. `names`: the Hugging Face
    prefixes (MLM bias, MLM transform, sentence head). Torch Linear weights
    are (out, in); `output_weights` of the NSP/SOP head is already stored
    (2, H) by the reference code."""
    H, V = hidden, vocabulary
    mlm, transform, order = names
    return {
        "cls/predictions/transform/dense/kernel": (f"{transform}.dense.weight", True, (H, width)),
        "cls/predictions/transform/dense/bias": (f"{transform}.dense.bias", False, (width,)),
        "cls/predictions/transform/LayerNorm/gamma": (
            f"{transform}.LayerNorm.weight",
            False,
            (width,),
        ),
        "cls/predictions/transform/LayerNorm/beta": (
            f"{transform}.LayerNorm.bias",
            False,
            (width,),
        ),
        "cls/predictions/output_bias": (f"{mlm}.bias", False, (V,)),
        "cls/seq_relationship/output_weights": (f"{order}.weight", False, (2, H)),
        "cls/seq_relationship/output_bias": (f"{order}.bias", False, (2,)),
    }


def _head_map(hidden, embedding, vocabulary):
    # BertForPreTraining: cls.predictions.*, cls.seq_relationship.*
    names = ("cls.predictions", "cls.predictions.transform", "cls.seq_relationship")
    return cls_head_map(hidden, hidden, vocabulary, names)


SPEC = GoogleFamily(
    model_type="bert",
    scope="bert",
    head_scopes=("cls/",),
    names=re.compile(r"^bert/encoder/layer_\d+/"),
    config_files=("bert_config.json", "*config*.json"),
    config_required=True,
    activations=TANH_GELU,
    gelu_note=TANH_GELU_NOTE,
    default_dropout=0.1,  # BertConfig's
    has_pooler=True,
    vocabulary=("wordpiece", ("vocab.txt", "*vocab*.txt"), "WordPiece vocabulary"),
    projection="{scope}/encoder/embedding_hidden_mapping_in",
    block_names=bert_block_names,
    head_map=_head_map,
)
