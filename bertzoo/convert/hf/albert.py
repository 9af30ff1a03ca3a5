"""ALBERT in Hugging Face names (`model_type` "albert": AlbertModel and its
`AlbertFor*` task models); a block is a parameter group."""

from bertzoo.convert.hf.spec import BERT_SIZES, HfSpec, shared_architectures

ALBERT = HfSpec(
    model_type="albert",
    prefix="albert.",
    config_keys=BERT_SIZES
    + (
        ("embedding_dim", "embedding_size", 128),
        ("num_groups", "num_hidden_groups", 1),
        ("dropout", "hidden_dropout_prob", 0.0),
        ("attention_dropout", "attention_probs_dropout_prob", 0.0),
    ),
    activation_key="hidden_act",
    activation_default="gelu_new",
    fixed={},
    block="encoder.albert_layer_groups.{}.albert_layers.0",
    block_tensors=(
        "attention.query",
        "attention.key",
        "attention.value",
        "attention.dense",
        "attention.LayerNorm",
        "ffn",
        "ffn_output",
        "full_layer_layer_norm",
    ),
    pooler="pooler",
    projection="encoder.embedding_hidden_mapping_in",
    heads=("predictions.", "sop_classifier.", "classifier.", "qa_outputs."),
    buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
    architectures=(
        ("sop_classifier.", None, "AlbertForPreTraining"),
        ("predictions.", None, "AlbertForMaskedLM"),
    )
    + shared_architectures("Albert"),
    base_architecture="AlbertModel",
    tokenizer_kind="sentencepiece",
    tokenizer_class="AlbertTokenizer",
    hf_extra={
        "bos_token_id": 2,
        "classifier_dropout_prob": 0.1,
        "eos_token_id": 3,
        "inner_group_num": 1,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
    },
)
