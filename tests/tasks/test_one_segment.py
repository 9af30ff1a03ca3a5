"""One-segment backbones (RoBERTa, XLM-R, KLUE-RoBERTa: one token-type row)
never see segment id 1, wherever texts are packed; and tokenizers with two
separators between a pair's texts pack Hugging Face's RoBERTa layout
`<s> A </s></s> B </s>` in sentence pairs and QA windows alike."""

import json
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

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


@pytest.mark.backend_independent  # packing: TensorFlow ops, no model
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


@pytest.mark.backend_independent
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


@pytest.mark.backend_independent
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


@pytest.mark.backend_independent
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


@pytest.mark.backend_independent
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


# === Fine-tuning from KLUE-RoBERTa (an HF directory: one segment row) ===

KLUE = Path(__file__).parents[1] / "fixtures" / "roberta" / "klue_masked_lm"
KOREAN = [
    "이 원피스 정말 예뻐요.",
    "사이즈가 조금 커요.",
    "가격 대비 품질이 좋아요.",
    "꽃무늬 원피스가 화사하고 예뻐요.",
    "원피스 길이가 무릎까지 와요.",
    "동생도 이 원피스를 샀어요.",
    "교환 신청을 했는데 금방 처리됐어요.",
    "가방이 생각보다 작아요.",
]


def _write_files(tmp_path, kind):
    """(train, validation, the kind's settings) for a tiny dataset of `kind`."""
    rows = [(KOREAN[i], KOREAN[(i + 3) % len(KOREAN)], i % 2) for i in range(len(KOREAN))]
    if kind in ("classification", "regression"):
        lines = ["a,b,label"] + [f"{a},{b},{'yes' if y else 'no'}" for a, b, y in rows]
        if kind == "regression":
            lines = ["a,b,label"] + [f"{a},{b},{y * 0.5 + 0.25}" for a, b, y in rows]
        text, suffix = "\n".join(lines) + "\n", "csv"
        settings = {"text_columns": ("a", "b"), "label_column": "label"}
    elif kind == "tagging":
        sentences = [
            "\n".join(
                f"{w} {'B-ITEM' if j == 0 else 'O'}" for j, w in enumerate(t.rstrip(".").split())
            )
            for t in KOREAN
        ]
        text, suffix, settings = "\n\n".join(sentences) + "\n", "conll", {}
    else:
        paragraphs = []
        for i, t in enumerate(KOREAN):
            answer = t.split()[-1]
            paragraphs.append(
                {
                    "context": t,
                    "qas": [
                        {
                            "id": f"q{i}",
                            "question": t.split()[0],
                            "answers": [{"text": answer, "answer_start": t.rindex(answer)}],
                        }
                    ],
                }
            )
        text = json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]})
        suffix, settings = "json", {"max_query_length": 8, "doc_stride": 8}
    paths = []
    for split in ("train", "validation"):
        path = tmp_path / f"{split}.{suffix}"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return paths[0], paths[1], settings


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["classification", "regression", "tagging", "qa"])
def test_fine_tuning_klue_roberta_never_feeds_segment_id_one(tmp_path, monkeypatch, kind):
    """Every task kind fine-tunes from KLUE-RoBERTa's HF directory (one
    token-type row; pairs and QA contexts were segment 1, an index error),
    and its fine-tuned model serves strings with segment ids 0 only."""
    from bertzoo import tasks as task_kinds
    from bertzoo.serving import ServingModel, serving_model_from_preset
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    registered, fed = task_kinds.get(kind), []
    real_load = registered.load

    def load(*args, **kwargs):
        data, label_set = real_load(*args, **kwargs)
        fed.append(data.features)
        return data, label_set

    monkeypatch.setattr(registered, "load", load)
    train, validation, settings = _write_files(tmp_path, kind)
    config = FinetuneConfig(
        task=kind,
        train=train,
        validation=validation,
        init=str(KLUE),
        output=str(tmp_path / "run"),
        epochs=1,
        batch_size=4,
        sequence_length=38,  # the fixture's 40 positions less 2 that serve padding
        learning_rate=1e-3,
        verbose=0,
        **settings,
    )
    result = run_finetuning(config)
    main = task_kinds.get(kind).main_metric
    assert np.isfinite(result["validation"][main]), result
    assert fed and all(f["segment_ids"].max() == 0 for f in fed), kind
    if kind in ("classification", "regression"):
        # Both texts of a pair are packed ([CLS] A [SEP] B [SEP]; [SEP] is
        # 2), all segment 0.
        assert ((fed[0]["token_ids"] == 2).sum(axis=1) == 2).all()
    if keras.backend.backend() != "tensorflow":
        return  # the serving model runs the tokenizer in TensorFlow: the TensorFlow pass

    served = []
    real_inputs = ServingModel.model_inputs

    def model_inputs(self, packed):
        if tf.executing_eagerly():
            served.append(np.asarray(packed["segment_ids"]))
        else:  # the compiled graph: checked when it runs
            tf.debugging.assert_equal(tf.reduce_max(packed["segment_ids"]), 0)
        return real_inputs(self, packed)

    monkeypatch.setattr(ServingModel, "model_inputs", model_inputs)
    serving = serving_model_from_preset(tmp_path / "run" / "best")
    assert serving.num_segments == 1
    texts = {
        "text": KOREAN[:2],
        "text_pair": KOREAN[2:4],
        "question": ["원피스", "가방이"],
        "context": KOREAN[:2],
    }
    texts = {k: tf.constant(texts[k]) for k in serving.input_names}
    outputs = serving.task_kind.serve(serving, texts)  # eagerly: the packed ids are numbers
    assert all(np.all(np.isfinite(v)) for v in outputs.values() if v.dtype.is_floating)
    assert served and all(s.max() == 0 for s in served)
    if kind != "classification":
        return
    # The compiled graph the export saves gives the same answers (one kind:
    # tracing costs seconds).
    compiled = serving.answer(**{k: v.numpy().tolist() for k, v in texts.items()})
    for key, value in outputs.items():
        if value.dtype.is_floating:
            np.testing.assert_allclose(compiled[key], value.numpy(), rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(compiled[key], value.numpy())


# === Distillation from a KLUE-RoBERTa teacher ===


@pytest.mark.slow  # about 60 s on 2 shared cores: a fine-tune run, then both stages
# TensorFlow pass only: segment ids are data, and JAX task distillation runs in
# tests/test_distill_recipe.py.
@pytest.mark.backend_independent
def test_tinybert_task_distillation_from_a_klue_roberta_classifier(tmp_path, monkeypatch):
    """A classifier fine-tuned from KLUE-RoBERTa distils into the default
    student, which keeps the teacher's one segment row, its padding-aware
    positions and RoBERTa's classification head; no stage feeds segment
    id 1, and the published student loads and classifies."""
    import bertzoo.training.distill_task_data as distill_data
    from bertzoo.training.distill import DistillConfig, run_distillation
    from bertzoo.training.finetune import FinetuneConfig, run_finetuning

    rows = [(t, "good" if i % 2 else "bad") for i, t in enumerate(KOREAN)]
    files = {}
    for split in ("train", "validation"):
        files[split] = tmp_path / f"{split}.csv"
        files[split].write_text(
            "sentence,label\n" + "".join(f"{t},{y}\n" for t, y in rows), encoding="utf-8"
        )
    common = {
        "train": str(files["train"]),
        "validation": str(files["validation"]),
        "text_columns": ("sentence",),
        "label_column": "label",
        "batch_size": 4,
        "sequence_length": 24,
        "verbose": 0,
    }
    run_finetuning(
        FinetuneConfig(
            task="classification",
            init=str(KLUE),
            output=str(tmp_path / "ft"),
            epochs=1,
            learning_rate=1e-3,
            **common,
        )
    )
    teacher = tmp_path / "ft" / "best"
    assert bertzoo.BertClassifier.from_preset(teacher).head_style == "roberta"

    fed = []
    real_features = distill_data.text_features

    def text_features(preprocessor, rows, *args, **kwargs):
        features = real_features(preprocessor, rows, *args, **kwargs)
        fed.append(features)
        return features

    monkeypatch.setattr(distill_data, "text_features", text_features)
    report = run_distillation(
        DistillConfig(
            method="tinybert-task",
            teacher=str(teacher),
            output=str(tmp_path / "distill"),
            steps=3,
            prediction_steps=3,
            learning_rate=1e-3,
            augment=1,
            benchmark_batch_size=2,
            benchmark_sequence_length=16,
            **common,
        )
    )
    assert fed and all(f["segment_ids"].max() == 0 for f in fed)
    assert np.isfinite(report["student_metric"]), report
    student = bertzoo.BertClassifier.from_preset(tmp_path / "distill" / "student")
    backbone = student.backbone
    assert (backbone.num_segments, backbone.position_padding_id) == (1, 1)
    assert student.head_style == "roberta" and student.head_loaded
    packed = bertzoo.BertPreprocessor.from_preset(tmp_path / "distill" / "student", 24)(KOREAN)
    assert np.isfinite(np.asarray(student(packed))).all()
