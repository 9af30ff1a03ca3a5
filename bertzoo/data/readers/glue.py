"""GLUE TSV files with their fixed columns and label order (`read_glue`)."""

from __future__ import annotations

from pathlib import Path

from bertzoo.data.readers.common import LabelSet, data_error, listing
from bertzoo.data.readers.tables import read_table


def _glue(text_columns, label_column, labels, label_range=None):
    return {
        "text_columns": text_columns,
        "label_column": label_column,
        "labels": labels,
        "task": "regression" if labels is None else "classification",
        "label_range": label_range,
    }


# name -> {"text_columns", "label_column", "labels" (class names in label-id
# order; None for regression), "task", "label_range" (regression only)}.
GLUE_TASKS = {
    "sst2": _glue(("sentence",), "label", ("0", "1")),
    "mrpc": _glue(("#1 String", "#2 String"), "Quality", ("0", "1")),
    # The order of the BERT reference run_classifier.py (MnliProcessor).
    # Hugging Face `datasets` uses entailment=0, neutral=1, contradiction=2.
    "mnli": _glue(
        ("sentence1", "sentence2"), "gold_label", ("contradiction", "entailment", "neutral")
    ),
    "stsb": _glue(("sentence1", "sentence2"), "score", None, (0.0, 5.0)),
    "qnli": _glue(("question", "sentence"), "label", ("entailment", "not_entailment")),
    "rte": _glue(("sentence1", "sentence2"), "label", ("entailment", "not_entailment")),
    "qqp": _glue(("question1", "question2"), "is_duplicate", ("0", "1")),
    "wnli": _glue(("sentence1", "sentence2"), "label", ("0", "1")),
}


def _glue_task(path, task):
    key = str(task).lower().replace("-", "").replace("_", "")
    if key not in GLUE_TASKS:
        raise data_error(
            path, None, f"unknown GLUE task {task!r}; valid tasks: {listing(GLUE_TASKS)}"
        )
    return GLUE_TASKS[key]


def _check_glue_labels(path, spec, examples):
    labels = None if spec["labels"] is None else LabelSet(spec["labels"])
    for example in examples:
        if example.label is None:
            continue
        if labels is not None:
            labels.index(example.label, path, example.line)
        elif spec["label_range"] is not None:
            low, high = spec["label_range"]
            if not low <= example.label <= high:
                raise data_error(
                    path,
                    example.line,
                    f"score {example.label!r} is outside the valid range {low:g}..{high:g}",
                )


def read_glue(path, task):
    """Reads a GLUE task's TSV file (train, dev or test) -> list[TextExample].

    task: one of GLUE_TASKS ("sst2", "mrpc", "mnli", "stsb", "qnli", "rte",
    "qqp", "wnli"; case, "-" and "_" are ignored: "SST-2" works). Columns
    and labels (label ids follow the order given):

        sst2  sentence                     label         "0", "1"
        mrpc  #1 String, #2 String         Quality       "0", "1"
        mnli  sentence1, sentence2         gold_label    "contradiction",
                                                         "entailment", "neutral"
        stsb  sentence1, sentence2         score         float in 0..5
        qnli  question, sentence           label         "entailment",
                                                         "not_entailment"
        rte   sentence1, sentence2         label         (as qnli)
        qqp   question1, question2         is_duplicate  "0", "1"
        wnli  sentence1, sentence2         label         "0", "1"

    The MNLI order is that of the original BERT reference implementation
    (run_classifier.py, MnliProcessor.get_labels), so checkpoints
    fine-tuned there keep their meaning; it differs from the Hugging Face
    `datasets` GLUE order (entailment, neutral, contradiction).

    Example (SST-2 train.tsv, tab-separated, quotes are plain text):

        sentence<TAB>label
        it 's a "charming" journey<TAB>1

    Test files have no label column: their labels are None. A label outside
    the task's label set is a TaskDataError naming the file and line. CoLA's
    train/dev files have no header row; read them with
    read_table(path, [3], 1, format="tsv").
    """
    path = Path(path)
    spec = _glue_task(path, task)
    examples = read_table(
        path,
        spec["text_columns"],
        spec["label_column"],
        format="tsv",
        task=spec["task"],
        label_required=False,
    )
    _check_glue_labels(path, spec, examples)
    return examples
