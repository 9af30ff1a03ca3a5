"""RoBERTa and XLM-RoBERTa in Hugging Face names (`model_type` "roberta":
RobertaModel and its `RobertaFor*` task models, KLUE-RoBERTa included;
"xlm-roberta": the same tensors under XLM-R's names): BERT's blocks, one
segment row, positions counted past the padding id, and a classification
head on the first token instead of the pooler."""

from bertzoo.convert.hf.bert import BERT
from bertzoo.convert.hf.spec import BERT_SIZES, HfSpec


def _roberta_spec(model_type, name, tokenizer_kind, tokenizer_class):
    return HfSpec(
        model_type=model_type,
        prefix="roberta.",
        config_keys=BERT_SIZES
        + (
            ("dropout", "hidden_dropout_prob", 0.1),
            ("attention_dropout", "attention_probs_dropout_prob", 0.1),
            # transformers' padding_idx for positions is pad_token_id.
            ("position_padding_id", "pad_token_id", 1),
        ),
        activation_key="hidden_act",
        activation_default="gelu",
        fixed={},
        block=BERT.block,
        block_tensors=BERT.block_tensors,
        pooler="pooler.dense",
        projection=None,
        heads=("lm_head.", "classifier.", "qa_outputs."),
        buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
        architectures=(
            ("lm_head.", None, f"{name}ForMaskedLM"),
            ("qa_outputs.", None, f"{name}ForQuestionAnswering"),
            ("classifier.out_proj.", None, f"{name}ForSequenceClassification"),
            ("classifier.", None, f"{name}ForTokenClassification"),
        ),
        base_architecture=f"{name}Model",
        tokenizer_kind=tokenizer_kind,
        tokenizer_class=tokenizer_class,
        hf_extra={
            "add_cross_attention": False,
            "bos_token_id": 0,
            "classifier_dropout": None,
            "eos_token_id": 2,
            "is_decoder": False,
            "tie_word_embeddings": True,
            "use_cache": True,
        },
        record_model_type=True,
    )


# Byte-level BPE (vocab.json + merges.txt) and XLM-R's SentencePiece with
# fairseq's id mapping are recorded by kind; KLUE's BertTokenizer
# (tokenizer_config.json) is WordPiece.
ROBERTA = _roberta_spec("roberta", "Roberta", "byte_level_bpe", "RobertaTokenizer")
XLM_ROBERTA = _roberta_spec(
    "xlm-roberta", "XLMRoberta", "fairseq_sentencepiece", "XLMRobertaTokenizer"
)
