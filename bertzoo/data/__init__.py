"""Data: pre-training corpus -> documents -> NSP/SOP/MLM-only examples ->
masking (token, whole-word, ALBERT n-gram) -> `tf.data` (static TFRecords or
dynamic per-epoch masking); fine-tuning file readers (`bertzoo.data.readers`,
no TensorFlow), the built-in datasets' shared word lists (the tagging and
QA features, readers and metrics are their kinds': `bertzoo.tasks.tagging`,
`bertzoo.tasks.qa`).

    docs = read_corpus("corpus.txt")                       # list of str docs
    ids = tokenize_documents(docs, tokenizer)               # TF-batched
    examples = create_examples(ids, tokenizer, seq_len=128, objective="nsp")
    masker = MaskedLMMasker(tokenizer, 128, 20, kind="whole_word")
    write_pretraining_tfrecords(examples, "data/128", num_shards=4, masker=masker)
    ds = read_pretraining_dataset("data/128", batch_size=32, seq_len=128)
    # or dynamic masking, re-drawn every epoch:
    ds = make_pretraining_dataset(examples, batch_size=32, masker=masker, seed=0)

A corpus of any size: prepared once into document shards (parallel,
resumable, bounded memory), then streamed from them:

    prepare_corpus(["corpus/*.txt.gz"], tokenizer, "prepared/", PrepareSettings(workers=8))
    ds, stream = prepared_dataset("prepared/", tokenizer, masker,
                                  StreamSettings(batch_size=32, seq_len=128), start=position)
    position = stream.position_after(steps_done, position)     # for the checkpoint
    write_prepared_records(open_prepared("prepared/"), "records/", tokenizer, masker)

Records made on other hosts by the tf.data service (`bertzoo.data.service`,
docs/scale-out.md):

    ds = records_dataset_via_service("records/", 32, 128, None, "grpc://d0:5050")

Names are imported on first use (`bertzoo.lazy`), so `bertzoo.data.readers`
imports without TensorFlow.
"""

from bertzoo.lazy import lazy_exports

_EXPORTS = {
    "CorpusChangedError": "bertzoo.data.shards",
    "CorpusError": "bertzoo.data.corpus",
    "ExampleStream": "bertzoo.data.shards",
    "PrepareSettings": "bertzoo.data.prepare",
    "RecordSettings": "bertzoo.data.prepared_records",
    "StreamPosition": "bertzoo.data.shards",
    "StreamSettings": "bertzoo.data.shards",
    "open_prepared": "bertzoo.data.shards",
    "prepare_corpus": "bertzoo.data.prepare",
    "prepared_dataset": "bertzoo.data.shards",
    "write_prepared_records": "bertzoo.data.prepared_records",
    "MASKING_KINDS": "bertzoo.data.masking:KINDS",
    "METADATA_FILE": "bertzoo.data.pipeline",
    "MaskedLMMasker": "bertzoo.data.masking",
    "OBJECTIVES": "bertzoo.data.examples",
    "PretrainingDataError": "bertzoo.data.pipeline",
    "PretrainingExamples": "bertzoo.data.examples",
    "create_examples": "bertzoo.data.examples",
    "make_pretraining_dataset": "bertzoo.data.pipeline",
    "read_corpus": "bertzoo.data.corpus",
    "read_metadata": "bertzoo.data.pipeline",
    "read_pretraining_dataset": "bertzoo.data.pipeline",
    "records_dataset_via_service": "bertzoo.data.service",
    "tokenize_documents": "bertzoo.data.corpus",
    "word_start_table": "bertzoo.data.masking",
    "write_pretraining_tfrecords": "bertzoo.data.pipeline",
}
_SUBMODULES = (
    "builtin_corpus",
    "builtin_words",
    "corpus",
    "examples",
    "masking",
    "pipeline",
    "prepare",
    "prepared_records",
    "progress",
    "readers",
    "service",
    "shardfile",
    "shards",
    "textstream",
)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)

__all__ = sorted(_EXPORTS)
