"""ELECTRA in Hugging Face names (`model_type` "electra": ElectraModel and
its `ElectraFor*` task models): BERT's blocks, an optional E -> H
projection, no pooler."""

from bertzoo.convert.hf.bert import BERT
from bertzoo.convert.hf.spec import HfSpec

ELECTRA = HfSpec(
    model_type="electra",
    prefix="electra.",
    config_keys=BERT.config_keys + (("embedding_dim", "embedding_size", 128),),
    activation_key="hidden_act",
    activation_default="gelu",
    # No pooler: the discriminator, the generator and ELECTRA's task heads
    # all read the sequence output.
    fixed={"use_pooler": False},
    block="encoder.layer.{}",
    block_tensors=BERT.block_tensors,
    pooler=None,
    # ElectraModel's E -> H projection, when embedding_size != hidden_size.
    projection="embeddings_project",
    heads=(
        "discriminator_predictions.",
        "generator_predictions.",
        "generator_lm_head.",
        "classifier.",
        "qa_outputs.",
    ),
    buffers=("embeddings.position_ids", "embeddings.token_type_ids"),
    architectures=(
        ("discriminator_predictions.", None, "ElectraForPreTraining"),
        ("generator_lm_head.", None, "ElectraForMaskedLM"),
        ("qa_outputs.", None, "ElectraForQuestionAnswering"),
        ("classifier.out_proj.", None, "ElectraForSequenceClassification"),
        ("classifier.", None, "ElectraForTokenClassification"),
    ),
    base_architecture="ElectraModel",
    tokenizer_kind="wordpiece",
    tokenizer_class="ElectraTokenizer",
    hf_extra={
        **BERT.hf_extra,
        "position_embedding_type": "absolute",
        "summary_activation": "gelu",
        "summary_last_dropout": 0.1,
        "summary_type": "first",
        "summary_use_proj": True,
    },
    record_model_type=True,
)
