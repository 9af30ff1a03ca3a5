"""Plain-text corpora -> documents -> token ids.

Two layouts:
  * "sentences" (the reference BERT layout): one sentence per line, a blank
    line between documents.
  * "documents": one document per line (no sentence split; the line is the
    document's only "sentence").

Bytes that are not UTF-8 are replaced with U+FFFD (`errors="replace"`) and
the number of lines affected is reported in one log line.
"""

import glob
import logging
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertzoo.errors import BertzooError

logger = logging.getLogger("bertzoo.data")

LAYOUTS = ("sentences", "documents")


class CorpusError(BertzooError, ValueError):
    """A corpus is missing, empty or unusable."""


def expand_files(files):
    """A path, a glob pattern or a list of them -> sorted list of Paths.
    Missing files are an error that names them."""
    if isinstance(files, str | Path):
        files = [files]
    paths, missing = [], []
    for f in files:
        f = str(f)
        # A file whose name has glob characters (wiki[1].txt) is that file.
        if any(c in f for c in "*?[") and not Path(f).exists():
            matches = sorted(glob.glob(f))
            if not matches:
                missing.append(f)
            paths.extend(Path(m) for m in matches)
        elif Path(f).is_file():
            paths.append(Path(f))
        else:
            missing.append(f)
    if missing:
        raise FileNotFoundError(f"Corpus file(s) not found: {', '.join(missing)}.")
    if not paths:
        raise CorpusError("No corpus files given.")
    return paths


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
        FileNotFoundError: a file is missing.
        CorpusError: the files hold no text.
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
