"""Sentence (pair) classification: TSV/CSV/JSONL tables or GLUE files in,
class probabilities out; `BertClassifier` with `num_classes >= 2`; best
epoch by accuracy."""

import dataclasses

import numpy as np

from bertzoo import metrics
from bertzoo.data.readers import GLUE_TASKS, LabelSet
from bertzoo.lazy import LazyAttribute, LazyModule
from bertzoo.tasks import sentences
from bertzoo.tasks.base import TaskData, TaskKind, register
from bertzoo.tasks.classification import builtin

# Imported when first used: the task kinds import without TensorFlow.
tf = LazyModule("tensorflow")


class Classification(TaskKind):
    """Texts or text pairs -> one of the training file's classes."""

    name = "classification"
    description = "classification"
    model_class = LazyAttribute("bertzoo.models.tasks:BertClassifier")
    settings_class = sentences.SentenceSettings
    main_metric = "accuracy"
    file_formats = ("tsv", "csv", "jsonl", "glue")
    builtin_files = ("train.tsv", "validation.tsv")
    builtin_description = builtin.DESCRIPTION
    builtin_training = {"sequence_length": 64}
    labelled = True

    def settings_error(self, settings, sequence_length=None, own_files=True, separators=1):
        return sentences.settings_error(
            settings, sequence_length, own_files, separators
        ) or super().settings_error(settings, sequence_length, own_files, separators)

    def builtin_settings(self, settings):
        """The built-in TSV files' columns."""
        return dataclasses.replace(
            settings, text_columns=builtin.TEXT_COLUMNS, label_column=builtin.LABEL_COLUMN
        )

    def builtin_splits(self, seed):
        return builtin.sentiment(seed)

    def builtin_text(self, rows):
        return builtin.text(rows)

    def load(self, settings, path, tokenizer, sequence_length, segments, label_set=None):
        """Labels are class names; without `label_set` the GLUE task's label
        order, or else the sorted labels of this (training) file, define it."""
        examples = sentences.read_labelled(settings, path, self.name)
        features = sentences.example_features(
            examples, tokenizer, sequence_length, segments, source=str(path)
        )
        if label_set is None:
            if settings.glue_task is not None:
                label_set = LabelSet(GLUE_TASKS[settings.glue_task]["labels"])
            else:
                label_set = LabelSet.from_examples(examples, str(path))
        targets = np.array([label_set.index(e.label, str(path), e.line) for e in examples], "int32")
        return TaskData(features, targets, examples, {"label_set": label_set}), label_set

    def packed_lengths(self, data, tokenizer):
        return sentences.example_lengths(data, tokenizer)

    def evaluate(self, settings, predictions, data):
        logits = np.asarray(predictions)  # (n, num_classes)
        predicted = np.argmax(logits, axis=-1)
        return metrics.classification_metrics(data.targets, predicted, logits.shape[-1])

    def build_model(self, settings, preset, label_set, **kwargs):
        return self.model_class.from_preset(
            preset, num_classes=len(label_set), label_names=list(label_set.names), **kwargs
        )

    def serving_settings(self, settings, train):
        return {"pairs": len(train.examples[0].texts) == 2}

    def serving_inputs(self, pairs):
        return sentences.serving_inputs(pairs)

    def serve(self, serving_model, texts):
        """`probabilities` (B, C), `label_id` (B,), `label` (B,) names and
        `text_cut` (B,) (`sentences.serving_texts_cut`)."""
        logits = sentences.serving_logits(serving_model, texts)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label_id": label_id,
            "label": tf.gather(tf.constant(serving_model.label_names), label_id),
            "text_cut": sentences.serving_texts_cut(serving_model, texts),
        }


CLASSIFICATION = register(Classification())
