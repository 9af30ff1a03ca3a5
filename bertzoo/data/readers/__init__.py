"""Fine-tuning data readers: sentence (pair) tables and GLUE (the CoNLL and
SQuAD readers are the tagging and QA kinds': `bertzoo.tasks.tagging.conll`,
`bertzoo.tasks.qa.squad`).

Pure Python (standard library only), so it can be imported and tested
without TensorFlow. Every reader returns plain dataclasses:

    read_table("train.tsv", ["sentence"], "label")   -> list[TextExample]
    read_glue("MNLI/dev_matched.tsv", "mnli")        -> list[TextExample]

Every problem with a file is a `TaskDataError` whose message starts with
"path:line: " (1-based line number) and says what is wrong and what is
valid. Only problems with the whole file (missing file, unknown format)
carry no line number. Files must be UTF-8 (a leading byte-order mark is
ignored).

One module per format: `common` (errors, example dataclasses, `LabelSet`),
`tables` (TSV/CSV/JSONL), `glue`.
"""

from bertzoo.data.readers.common import (
    LabelSet,
    QAExample,
    TaggedSentence,
    TaskDataError,
    TextExample,
)
from bertzoo.data.readers.glue import GLUE_TASKS, read_glue
from bertzoo.data.readers.tables import FORMATS, TABLE_TASKS, read_table

__all__ = [
    "FORMATS",
    "GLUE_TASKS",
    "LabelSet",
    "QAExample",
    "TABLE_TASKS",
    "TaggedSentence",
    "TaskDataError",
    "TextExample",
    "read_glue",
    "read_table",
]
