"""What the sentence (pair) kinds, classification and regression, share:
reading labelled tables (or GLUE files), packing texts into model inputs,
and the serving graph that packs string inputs and runs the classifier;
and their settings (`SentenceSettings`: which columns, or which GLUE task)."""

import dataclasses
import logging

import numpy as np

from bertzoo.data.readers import GLUE_TASKS, TaskDataError, read_glue, read_table
from bertzoo.lazy import LazyModule
from bertzoo.tasks.base import TaskSettings, setting

# Imported when first used: the task kinds import without TensorFlow.
tf = LazyModule("tensorflow")
preprocessing = LazyModule("bertzoo.preprocessing")
tokenizers = LazyModule("bertzoo.tokenizers.base")

logger = logging.getLogger(__name__)


def _comma_strings(text):
    """ "a,b" -> ("a", "b")."""
    return tuple(part.strip() for part in str(text).split(",") if part.strip())


@dataclasses.dataclass
class SentenceSettings(TaskSettings):
    """Where the texts and labels are in the files of the sentence kinds."""

    glue_task: str | None = setting(
        None,
        "read GLUE TSV files with their fixed columns and label order: sst2, mrpc, mnli, "
        "stsb, qnli, rte, qqp",
        kind_only=True,
    )
    text_columns: tuple = setting(
        (),
        "text column(s) of TSV/CSV/JSONL files: NAME, or NAME_A,NAME_B for pairs",
        flag="--text-column",
        parse=_comma_strings,
    )
    label_column: str | None = setting(None, "label column of TSV/CSV/JSONL files")
    file_format: str | None = setting(
        None,
        "file format (default: from the file suffix)",
        flag="--format",
        choices=("tsv", "csv", "jsonl"),
    )

    def problem(self):
        if self.glue_task is not None and self.glue_task not in GLUE_TASKS:
            return (
                f"glue_task must be one of {', '.join(sorted(GLUE_TASKS))}, got {self.glue_task!r}."
            )
        return None

    @property
    def pairs(self):
        """Whether the texts are pairs (two text columns, or a GLUE pair task)."""
        glue = GLUE_TASKS.get(self.glue_task, {})
        return len(self.text_columns) == 2 or len(glue.get("text_columns", ())) == 2


def read_labelled(settings, path, task):
    """The labelled examples of a table (`settings.text_columns`,
    `label_column`, `file_format`) or of a GLUE file (`settings.glue_task`);
    `task` is "classification" or "regression". An example without a label,
    or a file mixing single texts and pairs, is a `TaskDataError`."""
    if settings.glue_task is not None:
        examples = read_glue(path, settings.glue_task)
    else:
        examples = read_table(
            path,
            list(settings.text_columns),
            settings.label_column,
            format=settings.file_format,
            task=task,
        )
    missing = [e for e in examples if e.label is None]
    if missing:
        raise TaskDataError(
            f"{path}:{missing[0].line}: the example has no label; training and validation files "
            "need labels."
        )
    if len({len(e.texts) for e in examples}) != 1:
        raise TaskDataError(f"{path}: rows mix single texts and pairs.")
    return examples


def text_features(preprocessor, rows, batch_size=None, source=None):
    """Packs rows of texts (1-tuples, or 2-tuples for pairs) into numpy model
    inputs, at most `batch_size` rows (default `CHUNK_ROWS`) and
    `CHUNK_CHARS` characters at a time. Each text is cut to the
    preprocessor's `max_text_chars` first (logged once, with the count,
    naming `source`)."""
    if batch_size is None:
        batch_size = preprocessing.CHUNK_ROWS
    limit = preprocessor.max_text_chars
    cut = sum(1 for r in rows for t in r if len(t) > limit)
    if cut:
        where = f"{source}: " if source else ""
        total = sum(len(r) for r in rows)
        logger.warning(
            tokenizers.cut_message(cut, total, limit, preprocessor.sequence_length, where)
        )
        rows = [tuple(t[:limit] if isinstance(t, str) else t for t in r) for r in rows]
    chunks = []
    for start, stop in preprocessing.text_chunks(rows, limit, batch_size):
        batch = rows[start:stop]
        segments = tuple(tf.constant([r[j] for r in batch]) for j in range(len(batch[0])))
        packed = preprocessor.pack(segments if len(segments) == 2 else segments[0])
        chunks.append({k: v.numpy() for k, v in packed.items()})
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def settings_error(settings, sequence_length, own_files, separators=1):
    """Files of your own (not GLUE) need one or two text columns and a label
    column, and pairs need a token of each text besides the special tokens:
    5 (`[CLS] a [SEP] b [SEP]`), or 6 with a tokenizer's two `separators`
    between them (RoBERTa's `<s> a </s></s> b </s>`); the message says so,
    or None."""
    columns = 1 <= len(settings.text_columns) <= 2 and settings.label_column is not None
    if own_files and settings.glue_task is None and not columns:
        return (
            "Classification and regression files need --text-column (one, or two for pairs) "
            "and --label-column, or --glue-task NAME for GLUE TSV files."
        )
    needed = 4 + separators
    if sequence_length is not None and settings.pairs and sequence_length < needed:
        layout = (
            "[CLS] A [SEP] B [SEP]; 6 where the tokenizer puts two separators between them, "
            "RoBERTa's <s> A </s></s> B </s>"
            if separators == 1
            else f"<s> A {'</s>' * separators} B </s>: this tokenizer puts {separators} "
            "separators between the texts"
        )
        return (
            f"--sequence-length {sequence_length} is too short: sentence pairs need at least "
            f"{needed} tokens ({layout})."
        )
    return None


def example_features(examples, tokenizer, sequence_length, segments, source=None):
    """Model inputs of `TextExample`s: `[CLS] a [SEP] (b [SEP])` (with the
    tokenizer's `pair_separators` between a pair's texts), padded, with the
    segment ids of a backbone with `segments` segment rows (its
    `num_segments`; `bertzoo.preprocessing.segment_inputs`); `source` (the
    file) names them when texts are cut."""
    preprocessor = preprocessing.BertPreprocessor(
        tokenizer, sequence_length, **preprocessing.segment_inputs(segments)
    )
    return text_features(preprocessor, [e.texts for e in examples], source=source)


def example_lengths(data, tokenizer):
    """Each example's packed length without truncation."""
    return preprocessing.packed_lengths(tokenizer, [e.texts for e in data.examples])


def serving_inputs(pairs):
    """`text`, plus `text_pair` for sentence-pair models."""
    return ("text", "text_pair") if pairs else ("text",)


def serving_texts_cut(serving_model, texts):
    """(B,) bool, the serving graph's `text_cut`: whether a text of the row
    is longer than `text_cap(sequence_length)` characters, cut there before
    tokenizing (far more than the sequence holds: only a text whose first
    tokens are very long words can lose a token). A graph cannot log, so it
    says so in its outputs, where Keras' `predict` logs a line."""
    cap = tokenizers.text_cap(serving_model.sequence_length)
    cut = [tf.strings.length(texts[k], unit="UTF8_CHAR") > cap for k in serving_model.input_names]
    return tf.reduce_any(tf.stack(cut), axis=0)


def serving_logits(serving_model, texts):
    """The classifier's logits for string batches `texts` (`text`, and
    `text_pair` for pairs), packed in the graph."""
    preprocessor = preprocessing.BertPreprocessor(
        serving_model.tokenizer,
        serving_model.sequence_length,
        **preprocessing.segment_inputs(serving_model.num_segments),
    )
    segments = tuple(texts[k] for k in serving_model.input_names)
    packed = preprocessor.pack(segments if len(segments) == 2 else segments[0])
    return serving_model.run(packed)
