"""A prepared corpus -> masked TFRecords, written once, one file per shard
(static masking with a dupe factor, for TPUs reading from a bucket).

Each shard's documents become examples with `create_examples` (its
`dupe_factor` passes re-chunk the shard with fresh randomness), are masked
and written with `write_pretraining_tfrecords`, so `read_pretraining_dataset`
reads the directory as it reads any other. Shards are written one at a time
(memory: one shard's examples), each renamed into place when complete; a
journal records finished ones (key and SHA-256), and a rerun after an
interruption writes only the rest. `pretraining_metadata.json` and the manifest (kind "records") are
written last: until then the directory is not readable as a whole.
"""

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path

from bertzoo.data import pipeline
from bertzoo.data.corpus import CorpusError
from bertzoo.data.shards import (
    HeldOut,
    StreamSettings,
    _derive_seed,
    documents_examples,
    shard_documents,
)
from bertzoo.io import manifest as manifest_lib
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import atomic_write_text, check_output_directory
from bertzoo.io.rundir import LOCK_FILE, RunDirectory

JOURNAL_FILE = ".records-journal.json"
MANIFEST_KIND = "records"


@dataclasses.dataclass(frozen=True)
class RecordSettings:
    """seq_len, objective, dupe_factor, seed, short_seq_prob: as
    `create_examples` takes them (per shard); packing and held_out: as
    `StreamSettings` (full-sentence packing; documents left out)."""

    seq_len: int = 128
    objective: str = "nsp"
    dupe_factor: int = 1
    seed: int = 12345
    short_seq_prob: float = 0.1
    packing: str | None = None
    held_out: HeldOut | None = None

    def stream_settings(self):
        return StreamSettings(
            batch_size=1,
            seq_len=self.seq_len,
            objective=self.objective,
            short_seq_prob=self.short_seq_prob,
            packing=self.packing,
            held_out=self.held_out,
        )

    def check(self):
        self.stream_settings().check()
        if self.dupe_factor < 1:
            raise CorpusError(f"dupe_factor must be >= 1, got {self.dupe_factor}.")


# The record files (one per prepared shard, named after it) and their
# working folders: the only names replaced or deleted in the output.
RECORD_NAME = re.compile(r"(\.work-)?shard-\d{5,}-\d{5,}-\d{5,}(\.tfrecord)?")


def _check_output(output):
    """As `prepare`'s: names are claimed only in a records directory of
    bertzoo's (its journal, written first, or its manifest); anywhere else a
    `.tfrecord` or a metadata file is the user's, refused and kept."""
    fixed = {JOURNAL_FILE, manifest_lib.MANIFEST_FILE, pipeline.METADATA_FILE}
    check_output_directory(
        output,
        MANIFEST_KIND,
        "pre-training records",
        lambda name: name in fixed or ".tmp-" in name or RECORD_NAME.fullmatch(name) is not None,
        journal=JOURNAL_FILE,
        always=(LOCK_FILE,),
    )


def _key(prepared, index, settings, masker):
    document = {
        "shard": prepared.document["shards"][index]["name"],
        "shard_sha256": manifest_lib.read_manifest(prepared.directory)["files"][
            prepared.document["shards"][index]["name"]
        ]["sha256"],
        "settings": dataclasses.asdict(settings),
        "masking": masker.config(),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _still_good(output, entry, key):
    """A finished file of the journal: same key, same SHA-256."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        return False
    path = output / Path(entry.get("name", "")).name
    return path.is_file() and manifest_lib.sha256_file(path) == entry.get("sha256")


def _load_journal(output):
    try:
        return load_json(output / JOURNAL_FILE)
    except (OSError, ValueError):
        return {}


def _write_shard(prepared, index, tokenizer, masker, settings, output):
    """-> (file name, number of examples); the file is renamed into place."""
    seed = _derive_seed(settings.seed, index)
    documents = shard_documents(prepared, index, settings.held_out)
    examples = documents_examples(
        documents, tokenizer, settings.stream_settings(), seed, dupe_factor=settings.dupe_factor
    )
    stem = Path(prepared.document["shards"][index]["name"]).stem
    work = output / f".work-{stem}"
    shutil.rmtree(work, ignore_errors=True)
    (path,) = pipeline.write_pretraining_tfrecords(
        examples, work, num_shards=1, masker=masker, seed=seed, prefix=stem
    )
    name = f"{stem}.tfrecord"
    path.replace(output / name)
    shutil.rmtree(work, ignore_errors=True)
    return name, len(examples)


def write_prepared_records(prepared, output, tokenizer, masker, settings=None):
    """Writes masked TFRecords for every non-empty shard of `prepared` (a
    `PreparedCorpus`) into `output` and returns the metadata document."""
    settings = settings or RecordSettings()
    settings.check()
    if settings.objective != "none" and prepared.document["settings"].get("layout") == "documents":
        raise CorpusError(
            f"objective {settings.objective} trains on pairs of consecutive sentences, but "
            f"{prepared.directory} was prepared with --layout documents: each line is a whole "
            "document, so every pair would take a random second segment. Use --objective none, "
            "or prepare the corpus with one sentence per line (--layout sentences)."
        )
    prepared.check_tokenizer(tokenizer)
    pipeline._check_masker(masker, settings.seq_len)
    output = Path(output)
    _check_output(output)
    shards = [i for i, s in enumerate(prepared.document["shards"]) if s["documents"] > 0]
    with RunDirectory(output):
        (output / manifest_lib.MANIFEST_FILE).unlink(missing_ok=True)
        journal, done = _load_journal(output), {}
        # The journal first: it marks the directory as this command's, so a
        # rerun after a kill claims the record files it finds (_check_output).
        atomic_write_text(output / JOURNAL_FILE, json.dumps(journal, indent=1, sort_keys=True))
        for index in shards:
            key = _key(prepared, index, settings, masker)
            entry = journal.get(str(index))
            if _still_good(output, entry, key):
                done[str(index)] = entry
                continue
            name, count = _write_shard(prepared, index, tokenizer, masker, settings, output)
            digest = manifest_lib.sha256_file(output / name)
            done[str(index)] = {"key": key, "name": name, "examples": count, "sha256": digest}
            atomic_write_text(output / JOURNAL_FILE, json.dumps(done, indent=1, sort_keys=True))
        entries = [done[str(i)] for i in shards]
        metadata = {
            "format_version": pipeline.FORMAT_VERSION,
            "seq_len": settings.seq_len,
            "objective": settings.objective,
            "vocabulary_size": tokenizer.vocabulary_size,
            "masked": True,
            "max_predictions_per_seq": masker.max_predictions_per_seq,
            "masking": masker.config(),
            "num_examples": sum(e["examples"] for e in entries),
            "shards": [e["name"] for e in entries],
            "seed": settings.seed,
            "dupe_factor": settings.dupe_factor,
            "prepared": str(prepared.directory.resolve()),
        }
        atomic_write_text(output / pipeline.METADATA_FILE, json.dumps(metadata, indent=2))
        names = [e["name"] for e in entries] + [pipeline.METADATA_FILE]
        files = manifest_lib.describe_files(output, names)
        atomic_write_text(
            output / manifest_lib.MANIFEST_FILE, manifest_lib.manifest_text(MANIFEST_KIND, files)
        )
    return metadata
