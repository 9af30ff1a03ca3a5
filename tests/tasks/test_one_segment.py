"""One-segment backbones (RoBERTa, XLM-R, KLUE-RoBERTa: one token-type row)
never see segment id 1, wherever texts are packed; and tokenizers with two
separators between a pair's texts pack Hugging Face's RoBERTa layout
`<s> A </s></s> B </s>` in sentence pairs and QA windows alike."""

from types import SimpleNamespace

import pytest

import bertzoo
from bertzoo.preprocessing import segment_inputs
from bertzoo.tasks import sentences
from bertzoo.tasks.qa.features import encode_qa, qa_training_features

# A RoBERTa-style vocabulary: <s> 0, <pad> 1, </s> 2, as in roberta-base.
VOCAB = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "a", "b", "c", "d", "e"]
S, PAD, END = 0, 1, 2
A, B, C, D, E = 5, 6, 7, 8, 9


class RobertaStyle(bertzoo.BertTokenizer):
    """WordPiece over RoBERTa's special tokens, with RoBERTa's two
    separators between a pair's texts."""

    pair_separators = 2

    def __init__(self):
        super().__init__(
            VOCAB,
            cls_token="<s>",
            sep_token="</s>",
            pad_token="<pad>",
            unk_token="<unk>",
            mask_token="<mask>",
        )


@pytest.fixture(scope="module")
def roberta_style():
    return RobertaStyle()


def test_segment_inputs_follow_the_backbone_s_segment_rows():
    assert segment_inputs(0) == {"segment_ids": False, "pair_segment_id": 0}
    assert segment_inputs(1) == {"segment_ids": True, "pair_segment_id": 0}
    assert segment_inputs(2) == {"segment_ids": True, "pair_segment_id": 1}
    # A bool (whether the model takes segment ids) reads as BERT's 2 rows, or none.
    assert segment_inputs(True) == segment_inputs(2)
    assert segment_inputs(False) == segment_inputs(0)


def _example(*texts):
    from bertzoo.data.readers import TextExample

    return TextExample(texts=texts, label="x", line=1)


def test_classification_pairs_pack_roberta_s_layout(roberta_style):
    """Hugging Face's RobertaTokenizer.build_inputs_with_special_tokens(A, B)
    is `<s> A </s></s> B </s>`, token_type_ids all 0."""
    examples = [_example("a b", "c"), _example("d", "e e")]
    features = sentences.example_features(examples, roberta_style, 9, 1)
    assert features["token_ids"].tolist() == [
        [S, A, B, END, END, C, END, PAD, PAD],
        [S, D, END, END, E, E, END, PAD, PAD],
    ]
    assert features["padding_mask"].tolist() == [[1] * 7 + [0] * 2] * 2
    assert not features["segment_ids"].any()
    # A BERT backbone (two rows) with the same tokenizer marks B as segment 1.
    bert = sentences.example_features(examples, roberta_style, 9, 2)
    assert bert["segment_ids"][0].tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0]
    # No segment rows (DistilBERT): no segment ids at all.
    assert "segment_ids" not in sentences.example_features(examples, roberta_style, 9, 0)


def test_qa_windows_pack_roberta_s_layout(roberta_style):
    """Hugging Face's RoBERTa/XLM-R QA inputs: `<s> question </s></s> context
    </s>`, every token type 0; windows hold sequence_length - question - 4
    context tokens."""
    f = encode_qa(roberta_style, ["a b"], ["c d e c d"], 10, 2, 4, pair_segment_id=0)
    f = {k: v.numpy() for k, v in f.items()}
    # 10 - 2 question tokens - 4 special tokens = 4 context tokens a window.
    assert f["token_ids"].tolist() == [
        [S, A, B, END, END, C, D, E, C, END],
        [S, A, B, END, END, E, C, D, END, PAD],
    ]
    assert f["padding_mask"].tolist() == [[1] * 10, [1] * 9 + [0]]
    assert not f["segment_ids"].any()
    assert f["context_mask"][0].tolist() == [0] * 5 + [1] * 4 + [0]
    assert f["context_position"][1].tolist() == [-1] * 5 + [2, 3, 4] + [-1] * 2
    # A two-segment backbone marks the context and the last separator as 1.
    two = encode_qa(roberta_style, ["a b"], ["c d e c d"], 10, 2, 4)["segment_ids"].numpy()
    assert two[1].tolist() == [0] * 5 + [1] * 4 + [0]
    with pytest.raises(ValueError, match=r"sequence_length >= max_query_length \+ 5"):
        encode_qa(roberta_style, ["a"], ["b"], sequence_length=8, max_query_length=4)
    with pytest.raises(ValueError, match="pair_segment_id must be 0 or 1, got 2"):
        encode_qa(roberta_style, ["a"], ["b"], 10, 2, 4, pair_segment_id=2)


def test_qa_training_labels_point_into_the_context_after_two_separators(roberta_style):
    example = SimpleNamespace(
        id="q1", question="a", context="b c d", answers=[("d", 4)], is_impossible=False
    )
    f = qa_training_features(
        roberta_style, [example], sequence_length=12, max_query_length=4, pair_segment_id=0
    )
    # <s> a </s> </s> b c d </s>: the answer "d" is column 6.
    assert f["token_ids"][0, :8].tolist() == [S, A, END, END, B, C, D, END]
    assert (f["start_positions"][0], f["end_positions"][0]) == (6, 6)
    assert not f["segment_ids"].any()


def test_the_wordpiece_layout_is_unchanged_with_one_separator():
    """KLUE's WordPiece (one separator) keeps `[CLS] q [SEP] context [SEP]`."""
    tok = bertzoo.BertTokenizer(
        VOCAB,
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    )
    f = encode_qa(tok, ["a b"], ["c d"], 8, 2, 4, pair_segment_id=0)
    assert f["token_ids"].numpy().tolist() == [[S, A, B, END, C, D, END, PAD]]
    assert not f["segment_ids"].numpy().any()
