"""Pre-training data: corpus -> documents -> NSP/SOP/MLM-only examples ->
masking (token, whole-word, ALBERT n-gram) -> `tf.data` (static TFRecords or
dynamic per-epoch masking).

    docs = read_corpus("corpus.txt")                       # list of str docs
    ids = tokenize_documents(docs, tokenizer)               # TF-batched
    examples = create_examples(ids, tokenizer, seq_len=128, objective="nsp")
    masker = MaskedLMMasker(tokenizer, 128, 20, kind="whole_word")
    write_pretraining_tfrecords(examples, "data/128", num_shards=4, masker=masker)
    ds = read_pretraining_dataset("data/128", batch_size=32, seq_len=128)
    # or dynamic masking, re-drawn every epoch:
    ds = make_pretraining_dataset(examples, batch_size=32, masker=masker, seed=0)
"""

from bertzoo.data.corpus import CorpusError, read_corpus, tokenize_documents
from bertzoo.data.examples import OBJECTIVES, PretrainingExamples, create_examples
from bertzoo.data.masking import KINDS as MASKING_KINDS
from bertzoo.data.masking import MaskedLMMasker, word_start_table
from bertzoo.data.pipeline import (
    METADATA_FILE,
    PretrainingDataError,
    make_pretraining_dataset,
    read_metadata,
    read_pretraining_dataset,
    write_pretraining_tfrecords,
)

__all__ = [
    "CorpusError",
    "MASKING_KINDS",
    "METADATA_FILE",
    "MaskedLMMasker",
    "OBJECTIVES",
    "PretrainingDataError",
    "PretrainingExamples",
    "create_examples",
    "make_pretraining_dataset",
    "read_corpus",
    "read_metadata",
    "read_pretraining_dataset",
    "tokenize_documents",
    "word_start_table",
    "write_pretraining_tfrecords",
]
