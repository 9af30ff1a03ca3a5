"""DistilBERT in Hugging Face names (`model_type` "distilbert":
DistilBertModel and its `DistilBertFor*` task models); no segments, no
pooler."""

from bertzoo.convert.hf.spec import REQUIRED, HfSpec

DISTILBERT = HfSpec(
    model_type="distilbert",
    prefix="distilbert.",
    config_keys=(
        ("vocabulary_size", "vocab_size", REQUIRED),
        ("num_layers", "n_layers", REQUIRED),
        ("num_heads", "n_heads", REQUIRED),
        ("hidden_dim", "dim", REQUIRED),
        ("intermediate_dim", "hidden_dim", REQUIRED),
        ("max_sequence_length", "max_position_embeddings", 512),
        ("initializer_range", "initializer_range", 0.02),
        ("dropout", "dropout", 0.1),
        ("attention_dropout", "attention_dropout", 0.1),
    ),
    activation_key="activation",
    activation_default="gelu",
    # transformers hard-codes eps=1e-12 in every DistilBERT LayerNorm.
    fixed={"num_segments": 0, "use_pooler": False, "layer_norm_epsilon": 1e-12},
    block="transformer.layer.{}",
    block_tensors=(
        "attention.q_lin",
        "attention.k_lin",
        "attention.v_lin",
        "attention.out_lin",
        "sa_layer_norm",
        "ffn.lin1",
        "ffn.lin2",
        "output_layer_norm",
    ),
    pooler=None,
    projection=None,
    heads=(
        "vocab_transform.",
        "vocab_layer_norm.",
        "vocab_projector.",
        "pre_classifier.",
        "classifier.",
        "qa_outputs.",
    ),
    buffers=("embeddings.position_ids",),
    architectures=(
        ("vocab_projector.", None, "DistilBertForMaskedLM"),
        ("pre_classifier.", None, "DistilBertForSequenceClassification"),
        ("qa_outputs.", None, "DistilBertForQuestionAnswering"),
        ("classifier.", None, "DistilBertForTokenClassification"),
    ),
    base_architecture="DistilBertModel",
    tokenizer_kind="wordpiece",
    tokenizer_class="DistilBertTokenizer",
    hf_extra={
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": 0,
        "qa_dropout": 0.1,
        "seq_classif_dropout": 0.2,
        # bertzoo's table is an ordinary (trainable) one; see hf_to_preset.
        "sinusoidal_pos_embds": False,
        "tie_word_embeddings": True,
    },
)
