"""Token tagging (e.g. named entities): CoNLL BIO files in, one tag per word
out; `BertTokenClassifier` (a word's tag sits on its first sub-token);
best epoch by entity F1.

The kind's package holds all of it: `conll` (the CoNLL BIO reader),
`features` (sub-token labels, word predictions, the serving encoder),
`metrics` (BIO chunks, entity F1) and the built-in dataset."""

import dataclasses

from bertzoo.data.readers import LabelSet
from bertzoo.lazy import LazyAttribute, LazyModule
from bertzoo.tasks.base import TaskData, TaskKind, register
from bertzoo.tasks.tagging import builtin
from bertzoo.tasks.tagging.conll import read_conll
from bertzoo.tasks.tagging.metrics import entity_f1

# Imported when first used (TensorFlow): the task kinds import without it.
tf = LazyModule("tensorflow")
preprocessing = LazyModule("bertzoo.preprocessing")
tokenizers = LazyModule("bertzoo.tokenizers.base")
features_lib = LazyModule("bertzoo.tasks.tagging.features")


@dataclasses.dataclass
class _Tag:
    """One tag occurrence, as `LabelSet.from_examples` takes it."""

    label: str
    line: int


class Tagging(TaskKind):
    """Words -> BIO tags."""

    name = "tagging"
    description = "tagging (CoNLL BIO files)"
    model_class = LazyAttribute("bertzoo.models.tasks:BertTokenClassifier")
    main_metric = "f1"
    file_formats = ("conll",)
    builtin_files = ("train.conll", "validation.conll")
    builtin_description = builtin.DESCRIPTION
    builtin_training = {"sequence_length": 64, "learning_rate": 1e-4, "batch_size": 16, "epochs": 4}
    labelled = True

    def builtin_splits(self, seed):
        return builtin.entities(seed)

    def builtin_text(self, rows):
        return builtin.text(rows)

    def load(self, settings, path, tokenizer, sequence_length, segments, label_set=None):
        """Without `label_set` the sorted tags of this (training) file
        define it; `extra` has the words' first sub-token positions."""
        sentences = read_conll(path)
        if label_set is None:
            label_set = LabelSet.from_examples(
                [_Tag(t, s.line) for s in sentences for t in (s.tags or [])], str(path)
            )
        features, labels, starts, truncated = features_lib.tagging_features(
            tokenizer, sentences, label_set, sequence_length, source=str(path)
        )
        if not preprocessing.segment_inputs(segments)["segment_ids"]:
            features.pop("segment_ids")  # single texts: segment 0 only, never 1
        extra = {"word_starts": starts, "label_set": label_set, "truncated": truncated}
        return TaskData(features, labels, sentences, extra), label_set

    def packed_lengths(self, data, tokenizer):
        """[CLS] + every word's pieces + [SEP]."""
        return features_lib.packed_lengths(tokenizer, data.examples)

    def evaluate(self, settings, predictions, data):
        """Entity precision, recall and F1 of the per-word tags."""
        names = data.extra["label_set"].names
        lengths = [len(s.words) for s in data.examples]
        predicted = features_lib.word_predictions(
            predictions, data.extra["word_starts"], lengths, names
        )
        scores = entity_f1([s.tags for s in data.examples], predicted)
        return {k: scores[k] for k in ("precision", "recall", "f1")}

    def build_model(self, settings, preset, label_set, **kwargs):
        return self.model_class.from_preset(
            preset, num_labels=len(label_set), label_names=list(label_set.names), **kwargs
        )

    def serve(self, serving_model, texts):
        """`text` split into words on whitespace -> `words`, `tags` (B, W)
        padded with "", and `num_words` (B,). A text is cut to
        `text_cap(sequence_length)` characters and `max_words` words first
        (words past those could not be in the model input)."""
        length = serving_model.sequence_length
        text = tokenizers.cut_texts(texts["text"], tokenizers.text_cap(length))
        words = tf.strings.split(text)[:, : features_lib.max_words(length)]  # (B, (words))
        encoded = features_lib.encode_words(
            serving_model.tokenizer, words, serving_model.sequence_length
        )
        logits = serving_model.run(encoded)
        best = tf.argmax(logits, axis=-1, output_type=tf.int32)  # (B, S)
        starts = encoded["word_starts"]  # (B, W), -1: not in the input
        label_names = serving_model.label_names
        names = tf.constant(label_names)
        fallback = label_names.index("O") if "O" in label_names else 0
        at_start = tf.gather(best, tf.maximum(starts, 0), batch_dims=1)
        tag_ids = tf.where(starts >= 0, at_start, fallback)
        num_words = tf.cast(words.row_lengths(), tf.int32)
        present = tf.sequence_mask(num_words, tf.shape(starts)[1])
        return {
            "words": words.to_tensor(""),
            "tags": tf.where(present, tf.gather(names, tag_ids), ""),
            "num_words": num_words,
        }


TAGGING = register(Tagging())
