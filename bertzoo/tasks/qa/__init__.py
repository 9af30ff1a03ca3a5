"""Extractive question answering (SQuAD 1.1 / 2.0 JSON): a question and a
context in, an answer span out; `BertSpanQA` over overlapping windows;
best epoch by SQuAD F1.

The kind's package holds all of it: `squad` (the SQuAD JSON reader),
`features` (windows, offsets, answer extraction, in numpy and TensorFlow),
`metrics` (SQuAD exact match and F1) and the built-in dataset."""

import dataclasses

import numpy as np

from bertzoo.lazy import LazyAttribute, LazyModule
from bertzoo.tasks.base import TaskData, TaskKind, TaskSettings, register, setting
from bertzoo.tasks.qa import builtin
from bertzoo.tasks.qa.metrics import squad_scores
from bertzoo.tasks.qa.squad import read_squad

# Imported when first used (TensorFlow): the task kinds import without it.
qa = LazyModule("bertzoo.tasks.qa.features")
preprocessing = LazyModule("bertzoo.preprocessing")

_MODEL_INPUTS = ("token_ids", "segment_ids", "padding_mask")
# The built-in dataset's questions are short.
_BUILTIN_QUERY_LENGTH = 24


@dataclasses.dataclass
class QASettings(TaskSettings):
    """How contexts are windowed and answers extracted."""

    doc_stride: int = setting(128, "QA: tokens between window starts", group="training")
    max_query_length: int = setting(64, "QA: question tokens kept", group="training")
    max_answer_length: int = setting(30, "QA: longest answer, in tokens", group="training")
    null_score_diff_threshold: float = setting(
        0.0,
        "SQuAD 2.0: answer nothing when the null score beats the best span by more",
        group="training",
    )

    def problem(self):
        for name in ("doc_stride", "max_query_length", "max_answer_length"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                return f"{name} must be positive, got {value}."
        return None


class QuestionAnswering(TaskKind):
    """(question, context) -> answer text and its byte offsets."""

    name = "qa"
    description = "qa (SQuAD 1.1/2.0 JSON)"
    model_class = LazyAttribute("bertzoo.models.tasks:BertSpanQA")
    settings_class = QASettings
    cuts_text = False
    main_metric = "f1"
    file_formats = ("squad",)
    builtin_files = ("train.json", "validation.json")
    builtin_description = builtin.DESCRIPTION
    builtin_training = {"sequence_length": 64, "learning_rate": 1e-4, "batch_size": 16, "epochs": 4}

    def settings_error(self, settings, sequence_length=None, own_files=True, separators=1):
        """The window must leave room for context after the question and
        the special tokens: `[CLS] q [SEP] c [SEP]`, or `<s> q </s></s> c
        </s>` with a tokenizer's two `separators`."""
        lengths = (sequence_length, settings.max_query_length)
        if None not in lengths and min(lengths) > 0:  # else: not positive
            specials = 2 + separators
            if sequence_length <= settings.max_query_length + specials:
                between = (
                    "" if separators == 1 else f", with this tokenizer's {separators} separators"
                )
                return (
                    f"sequence_length ({sequence_length}) must exceed max_query_length "
                    f"+ {specials} ({settings.max_query_length + specials}: the special "
                    f"tokens{between}) to leave room for context; the minimum is "
                    f"{settings.max_query_length + specials + 1}."
                )
        return super().settings_error(settings, sequence_length, own_files, separators)

    def builtin_settings(self, settings):
        """Shorter questions, unless the user chose a length."""
        if settings.max_query_length == QASettings.max_query_length:
            return dataclasses.replace(settings, max_query_length=_BUILTIN_QUERY_LENGTH)
        return settings

    def builtin_splits(self, seed):
        return builtin.questions(seed)

    def builtin_text(self, rows):
        return builtin.text(rows)

    def load(self, settings, path, tokenizer, sequence_length, segments, label_set=None):
        """One model row per context window (`settings.doc_stride`,
        `max_query_length`); no label set (None)."""
        examples = read_squad(path)
        layout = preprocessing.segment_inputs(segments)
        features = qa.qa_training_features(
            tokenizer,
            examples,
            sequence_length=sequence_length,
            doc_stride=settings.doc_stride,
            max_query_length=settings.max_query_length,
            pair_segment_id=layout["pair_segment_id"],
        )
        inputs = {
            k: features[k] for k in _MODEL_INPUTS if layout["segment_ids"] or k != "segment_ids"
        }
        targets = {k: features[k] for k in ("start_positions", "end_positions")}
        return TaskData(inputs, targets, examples, {"qa_features": features}), None

    def evaluate(self, settings, predictions, data):
        """SQuAD exact match and F1 of the extracted answers."""
        answers, _ = qa.extract_answers(
            np.asarray(predictions["start_logits"]),
            np.asarray(predictions["end_logits"]),
            data.extra["qa_features"],
            [e.context for e in data.examples],
            max_answer_length=settings.max_answer_length,
            version_2=any(e.is_impossible for e in data.examples),
            null_score_diff_threshold=settings.null_score_diff_threshold,
        )
        predicted = {e.id: a for e, a in zip(data.examples, answers)}
        references = {e.id: [text for text, _ in e.answers] for e in data.examples}
        scores = squad_scores(predicted, references)
        return {"exact_match": scores["exact_match"], "f1": scores["f1"]}

    def build_model(self, settings, preset, label_set, **kwargs):
        return self.model_class.from_preset(preset, **kwargs)

    def serving_settings(self, settings, train):
        return {
            "doc_stride": settings.doc_stride,
            "max_query_length": settings.max_query_length,
            "max_answer_length": settings.max_answer_length,
            "null_score_diff_threshold": settings.null_score_diff_threshold,
            "version_2": any(e.is_impossible for e in train.examples),
        }

    def serving_inputs(self, pairs):
        return ("question", "context")

    def serve(self, serving_model, texts):
        """`answer` (B,), `start` and `end` byte offsets in the context (-1:
        no answer) and `score` (B,)."""
        features = qa.encode_qa(
            serving_model.tokenizer,
            texts["question"],
            texts["context"],
            sequence_length=serving_model.sequence_length,
            doc_stride=serving_model.doc_stride,
            max_query_length=serving_model.max_query_length,
            pair_segment_id=preprocessing.segment_inputs(serving_model.num_segments)[
                "pair_segment_id"
            ],
        )
        logits = serving_model.run(features)
        found = qa.serve_answers(
            features,
            logits["start_logits"],
            logits["end_logits"],
            texts["context"],
            max_answer_length=serving_model.max_answer_length,
            version_2=serving_model.version_2,
            null_score_diff_threshold=serving_model.null_score_diff_threshold,
        )
        return {
            "answer": found["answers"],
            "start": found["start_offsets"],
            "end": found["end_offsets"],
            "score": found["scores"],
        }


QA = register(QuestionAnswering())
