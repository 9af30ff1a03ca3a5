"""Tokenized documents -> unmasked pre-training examples.

Follows the reference `create_pretraining_data.py` (BERT; ALBERT for SOP):

* `max_num_tokens = seq_len - 3` for pairs (`[CLS] A [SEP] B [SEP]`),
  `seq_len - 2` for single segments (`[CLS] A [SEP]`).
* Per document (and per dupe pass), with probability `short_seq_prob` the
  target length is `randint(2, max_num_tokens)`, else `max_num_tokens`.
* Whole sentences are gathered into a chunk until it reaches the target (or
  the document ends); A = the first `randint(1, len(chunk) - 1)` sentences.
* NSP: with p=0.5 (always for a one-sentence chunk) B comes from a random
  other document starting at a random sentence, label 1; the chunk's unused
  sentences are put back. Else B = the rest of the chunk, label 0.
* SOP (ALBERT): a one-sentence chunk takes B from a random document (label
  1) as above; otherwise with p=0.5 A and B are swapped (label 1), else in
  order (label 0).
* "none": the whole chunk is one segment, no sentence label.
* Truncation: drop one token at a time from the longer segment (B on ties),
  from its front or back at random, until the pair fits.

All randomness comes from one `random.Random(seed)`, so a seed fixes the
result.
"""

import dataclasses
import logging
import random

import numpy as np

from bertzoo.data.corpus import CorpusError
from bertzoo.models.pretrainer import OBJECTIVES

logger = logging.getLogger("bertzoo.data")


@dataclasses.dataclass
class PretrainingExamples:
    """Unmasked examples as padded numpy arrays (N examples, seq_len S).

    token_ids, segment_ids, padding_mask: int32 (N, S); labels: int32 (N,)
    (all 0 for objective "none"); document_ids: int32 (N,) index of the
    document A came from (for inspection; not written to files).
    """

    token_ids: np.ndarray
    segment_ids: np.ndarray
    padding_mask: np.ndarray
    labels: np.ndarray
    document_ids: np.ndarray
    seq_len: int
    objective: str
    vocabulary_size: int
    # Examples that lost tokens to the length limit (the reference's
    # truncate_seq_pair: a sentence or pair longer than seq_len).
    truncated: int = 0

    def __len__(self):
        return len(self.token_ids)


def _truncate(a, b, max_num_tokens, rng):
    """The reference truncate_seq_pair on index ranges: a, b are [start, end].
    Returns the number of tokens it dropped."""
    before = (a[1] - a[0]) + (b[1] - b[0])
    while (a[1] - a[0]) + (b[1] - b[0]) > max_num_tokens:
        trunc = a if (a[1] - a[0]) > (b[1] - b[0]) else b
        if rng.random() < 0.5:
            trunc[0] += 1
        else:
            trunc[1] -= 1
    return before - (a[1] - a[0]) - (b[1] - b[0])


def _random_b(documents, document_index, target_b_length, rng):
    for _ in range(10):
        other = rng.randint(0, len(documents) - 1)
        if other != document_index:
            break
    doc = documents[other]
    start = rng.randint(0, len(doc) - 1)
    pieces, length = [], 0
    for j in range(start, len(doc)):
        pieces.append(doc[j])
        length += len(doc[j])
        if length >= target_b_length:
            break
    return np.concatenate(pieces)


def _document_examples(documents, document_index, seq_len, objective, short_seq_prob, rng):
    """Yields (tokens_a, tokens_b or None, label, tokens dropped) for one
    document."""
    document = documents[document_index]
    single = objective == "none"
    max_num_tokens = seq_len - (2 if single else 3)
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    chunk, length, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            if single:
                tokens = np.concatenate(chunk)
                a = [0, len(tokens)]
                dropped = _truncate(a, [0, 0], max_num_tokens, rng)
                yield tokens[a[0] : a[1]], None, 0, dropped
            else:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a = np.concatenate(chunk[:a_end])
                if len(chunk) == 1 or (objective == "nsp" and rng.random() < 0.5):
                    label = 1
                    tokens_b = _random_b(documents, document_index, target - len(tokens_a), rng)
                    i -= len(chunk) - a_end  # put the unused sentences back
                elif objective == "sop" and rng.random() < 0.5:
                    label = 1
                    tokens_a, tokens_b = np.concatenate(chunk[a_end:]), tokens_a
                else:
                    label = 0
                    tokens_b = np.concatenate(chunk[a_end:])
                a, b = [0, len(tokens_a)], [0, len(tokens_b)]
                dropped = _truncate(a, b, max_num_tokens, rng)
                yield tokens_a[a[0] : a[1]], tokens_b[b[0] : b[1]], label, dropped
            chunk, length = [], 0
        i += 1


def min_seq_len(objective):
    """The shortest `seq_len` `create_examples` takes: 5 for sentence pairs
    (nsp, sop: [CLS] A [SEP] B [SEP]), 4 without ("none")."""
    return 4 if objective == "none" else 5


def create_examples(
    documents,
    tokenizer,
    seq_len=128,
    objective="nsp",
    short_seq_prob=0.1,
    dupe_factor=1,
    seed=12345,
    shuffle=True,
):
    """Tokenized documents (from `tokenize_documents`) -> PretrainingExamples.

    Args:
        documents: list of documents, each a list of int id arrays.
        tokenizer: the bertzoo tokenizer (for [CLS]/[SEP]/[PAD] ids and the
            vocabulary size).
        seq_len: total length including special tokens.
        objective: "nsp" (BERT), "sop" (ALBERT) or "none" (MLM only,
            single segment).
        short_seq_prob: probability of a shorter random target length.
        dupe_factor: passes over the documents; each pass re-chunks with
            fresh randomness (and masks get fresh seeds downstream).
        seed: seeds the one `random.Random` that drives everything.
        shuffle: shuffle documents first and examples last, as the
            reference does.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}.")
    min_len = min_seq_len(objective)
    if seq_len < min_len:
        raise ValueError(
            f"seq_len={seq_len} is too small: {objective!r} examples need at least {min_len}."
        )
    if dupe_factor < 1:
        raise ValueError(f"dupe_factor must be >= 1, got {dupe_factor}.")
    documents = [d for d in documents if len(d)]
    if not documents:
        raise CorpusError("The corpus is empty: no tokenized documents to make examples from.")
    if len(documents) == 1 and objective != "none":
        logger.warning(
            "The corpus has a single document: random-segment (%s label 1) examples take B "
            "from that same document. Separate documents with blank lines.",
            objective.upper(),
        )
    rng = random.Random(seed)
    order = list(range(len(documents)))
    if shuffle:
        rng.shuffle(order)
    documents = [documents[i] for i in order]
    cls_id, sep_id, pad_id = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id

    rows, segs, labels, doc_ids, truncated = [], [], [], [], 0
    for _ in range(dupe_factor):
        for d in range(len(documents)):
            for a, b, label, dropped in _document_examples(
                documents, d, seq_len, objective, short_seq_prob, rng
            ):
                truncated += dropped > 0
                if b is None:
                    ids = np.concatenate([[cls_id], a, [sep_id]])
                    seg = np.zeros(len(ids), np.int32)
                else:
                    ids = np.concatenate([[cls_id], a, [sep_id], b, [sep_id]])
                    seg = np.zeros(len(ids), np.int32)
                    seg[len(a) + 2 :] = 1
                rows.append(ids)
                segs.append(seg)
                labels.append(label)
                doc_ids.append(order[d])
    n = len(rows)
    index = list(range(n))
    if shuffle:
        rng.shuffle(index)
    token_ids = np.full((n, seq_len), pad_id, np.int32)
    segment_ids = np.zeros((n, seq_len), np.int32)
    padding_mask = np.zeros((n, seq_len), np.int32)
    for k, i in enumerate(index):
        m = len(rows[i])
        token_ids[k, :m] = rows[i]
        segment_ids[k, :m] = segs[i]
        padding_mask[k, :m] = 1
    return PretrainingExamples(
        token_ids=token_ids,
        segment_ids=segment_ids,
        padding_mask=padding_mask,
        labels=np.asarray(labels, np.int32)[index] if n else np.zeros(0, np.int32),
        document_ids=np.asarray(doc_ids, np.int32)[index] if n else np.zeros(0, np.int32),
        seq_len=seq_len,
        objective=objective,
        vocabulary_size=tokenizer.vocabulary_size,
        truncated=truncated,
    )
