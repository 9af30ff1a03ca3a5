"""Plain-text corpora -> documents -> token ids.

Two layouts:
  * "sentences" (the reference BERT layout): one sentence per line, a blank
    line between documents.
  * "documents": one document per line (no sentence split; the line is the
    document's only "sentence").

Bytes that are not UTF-8 are replaced with U+FFFD (`errors="replace"`) and
the number of lines affected is reported in one log line.
"""

import logging

import numpy as np
import tensorflow as tf

from bertzoo.errors import BertzooError
from bertzoo.io import textfiles

logger = logging.getLogger("bertzoo.data")

LAYOUTS = ("sentences", "documents")


class CorpusError(BertzooError, ValueError):
    """A corpus is missing, empty or unusable."""


class CorpusFilesError(CorpusError, textfiles.InputFilesError):
    """The corpus files named cannot be used (none, a directory, a damaged
    `.gz`)."""


class CorpusFileNotFoundError(CorpusFilesError, textfiles.InputFileNotFoundError):
    """A corpus file does not exist, or a pattern matches no file."""


def expand_files(files):
    """A path, a glob pattern or a list of them -> the files (Paths), in the
    order given, each pattern's matches sorted, each file once
    (`bertzoo.io.textfiles.expand_inputs`). Raises `CorpusFileNotFoundError`
    (a `FileNotFoundError`) for a missing file or a pattern that matches
    none, `CorpusFilesError` for the rest; both are `CorpusError`s."""
    return textfiles.expand_inputs(
        files, "corpus file", error=CorpusFilesError, not_found=CorpusFileNotFoundError
    )


def _decode_lines(path):
    """-> (list of str lines, number of lines with invalid UTF-8)."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
        return text.splitlines(), 0
    except UnicodeDecodeError:
        pass
    lines, bad = [], 0
    for raw in data.splitlines():
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(raw.decode("utf-8", errors="replace"))
            bad += 1
    return lines, bad


def read_corpus(files, layout="sentences"):
    """Reads text files into documents (lists of non-empty stripped lines).

    Args:
        files: a path, a glob pattern or a list of them.
        layout: "sentences" (one sentence per line, blank line between
            documents) or "documents" (one document per line).

    Returns:
        list of documents, each a list of str. Documents of one sentence are
        kept (they make random-B examples as the reference does).

    Raises:
        CorpusFileNotFoundError (a FileNotFoundError): a file is missing.
        CorpusError: the files cannot be used or hold no text.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}.")
    paths = expand_files(files)
    documents, bad_lines, bad_files = [], 0, []
    for path in paths:
        lines, bad = _decode_lines(path)
        if bad:
            bad_lines += bad
            bad_files.append(str(path))
        current = []
        for line in lines:
            line = line.strip()
            if layout == "documents":
                if line:
                    documents.append([line])
                continue
            if line:
                current.append(line)
            elif current:
                documents.append(current)
                current = []
        if current:  # documents never span files
            documents.append(current)
    if bad_lines:
        logger.warning(
            "%d line(s) with non-UTF-8 bytes replaced by U+FFFD in %s.",
            bad_lines,
            ", ".join(bad_files),
        )
    if not documents:
        raise CorpusError(f"The corpus is empty: no text in {', '.join(map(str, paths))}.")
    return documents


def tokenize_documents(documents, tokenizer, batch_size=4096, source="the corpus"):
    """Documents of str sentences -> documents of int32 numpy id arrays.

    Sentences are tokenized in batches with the tokenizer's TF ops. As in
    the reference, sentences that tokenize to nothing are dropped, and so
    are documents left with no sentence.
    """
    flat = [s for doc in documents for s in doc]
    ids, splits = [], [0]
    for start in range(0, len(flat), batch_size):
        ragged = tokenizer.tokenize_ids(tf.constant(flat[start : start + batch_size], tf.string))
        ids.append(ragged.flat_values.numpy().astype(np.int32))
        splits.append(ragged.row_lengths().numpy())
    if not flat:
        raise CorpusError(f"The corpus is empty: {source} has no sentences.")
    ids = np.concatenate(ids)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(splits[1:]))])
    out, k = [], 0
    for doc in documents:
        sentences = []
        for _ in doc:
            start, end = offsets[k], offsets[k + 1]
            k += 1
            if end > start:
                sentences.append(ids[start:end])
        if sentences:
            out.append(sentences)
    if not out:
        raise CorpusError(f"The corpus is empty after tokenization: {source} yields no tokens.")
    return out
