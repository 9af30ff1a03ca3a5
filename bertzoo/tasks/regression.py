"""Sentence (pair) regression: one score per text (e.g. GLUE STS-B);
`BertClassifier` with `num_classes=1` (mean squared error); best epoch by
Pearson correlation."""

import numpy as np

from bertzoo import metrics
from bertzoo.lazy import LazyAttribute, LazyModule
from bertzoo.tasks import sentences
from bertzoo.tasks.base import TaskData, TaskKind, register

# Imported when first used: the task kinds import without TensorFlow.
tf = LazyModule("tensorflow")


class Regression(TaskKind):
    """Texts or text pairs -> a float score."""

    name = "regression"
    description = "regression (one score per text)"
    model_class = LazyAttribute("bertzoo.models.tasks:BertClassifier")
    settings_class = sentences.SentenceSettings
    main_metric = "pearson"
    file_formats = ("tsv", "csv", "jsonl", "glue")
    labelled = False

    def settings_error(self, settings, sequence_length=None, own_files=True, separators=1):
        return sentences.settings_error(
            settings, sequence_length, own_files, separators
        ) or super().settings_error(settings, sequence_length, own_files, separators)

    def load(self, settings, path, tokenizer, sequence_length, segments, label_set=None):
        """Targets are the float labels; there is no label set (None)."""
        examples = sentences.read_labelled(settings, path, self.name)
        features = sentences.example_features(
            examples, tokenizer, sequence_length, segments, source=str(path)
        )
        targets = np.array([float(e.label) for e in examples], "float32")
        return TaskData(features, targets, examples, {"label_set": label_set}), label_set

    def packed_lengths(self, data, tokenizer):
        return sentences.example_lengths(data, tokenizer)

    def evaluate(self, settings, predictions, data):
        return metrics.regression_metrics(data.targets, np.asarray(predictions).reshape(-1))

    def build_model(self, settings, preset, label_set, **kwargs):
        return self.model_class.from_preset(preset, num_classes=1, label_names=None, **kwargs)

    def serving_settings(self, settings, train):
        return {"pairs": len(train.examples[0].texts) == 2}

    def serving_inputs(self, pairs):
        return sentences.serving_inputs(pairs)

    def serve(self, serving_model, texts):
        """`score` (B,) and `text_cut` (B,) (`sentences.serving_texts_cut`)."""
        return {
            "score": tf.reshape(sentences.serving_logits(serving_model, texts), [-1]),
            "text_cut": sentences.serving_texts_cut(serving_model, texts),
        }


REGRESSION = register(Regression())
