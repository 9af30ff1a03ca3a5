"""BERT in Hugging Face names (`model_type` "bert": BertModel and its
`BertFor*` task models)."""

from bertzoo.convert.hf.spec import BERT_SIZES, HfSpec, shared_architectures

BERT = HfSpec(
    model_type="bert",
    prefix="bert.",
    config_keys=BERT_SIZES
    + (
        ("dropout", "hidden_dropout_prob", 0.1),
        ("attention_dropout", "attention_probs_dropout_prob", 0.1),
    ),
    activation_key="hidden_act",
    activation_default="gelu",
    fixed={},
    block="encoder.layer.{}",
    block_tensors=(
        "attention.self.query",
        "attention.self.key",
        "attention.self.value",
        "attention.output.dense",
        "attention.output.LayerNorm",
        "intermediate.dense",
        "output.dense",
        "output.LayerNorm",
    ),
    pooler="pooler.dense",
    projection=None,
    heads=("cls.", "classifier.", "qa_outputs."),
    buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
    architectures=(
        ("cls.seq_relationship.", None, "BertForPreTraining"),
        ("cls.predictions.", None, "BertForMaskedLM"),
    )
    + shared_architectures("Bert"),
    base_architecture="BertModel",
    tokenizer_kind="wordpiece",
    tokenizer_class="BertTokenizer",
    hf_extra={
        "add_cross_attention": False,
        "bos_token_id": None,
        "classifier_dropout": None,
        "eos_token_id": None,
        "is_decoder": False,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "use_cache": True,
    },
)
