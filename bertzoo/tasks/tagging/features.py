"""Word-level tags <-> sub-token model inputs for token classification.

Each word is tokenized on its own, as the reference tokenizes words with
`is_split_into_words=True` (`Tokenizer.tokenize_word_ids`: RoBERTa's
byte-level BPE puts a prefix space before every word, ModernBERT's none);
the word's label sits on its first
sub-token and every other position gets `IGNORE_LABEL` (-100), so the loss
and the predictions are per word. The same TensorFlow-op encoding serves
training data (eagerly) and exported serving graphs (which split raw text
into words on whitespace first).
"""

import logging

import numpy as np
import tensorflow as tf

from bertzoo import preprocessing
from bertzoo.layers.losses import IGNORE_LABEL
from bertzoo.tokenizers.base import text_cap

logger = logging.getLogger(__name__)


def encode_words(tokenizer, words, sequence_length):
    """Packs pre-split words as `[CLS] pieces... [SEP]` + padding.

    Args:
        tokenizer: a bertzoo tokenizer.
        words: `tf.RaggedTensor` of strings, `(batch, (words))`.
        sequence_length: packed length, special tokens included.

    Returns a dict of int32 tensors: `token_ids`, `segment_ids`,
    `padding_mask` `(batch, sequence_length)`, and `word_starts`
    `(batch, max_words)`: the position of each word's first sub-token, or
    -1 where the word is padding, was cut off by the length limit, or
    produced no tokens (e.g. only control characters).
    """
    budget = sequence_length - 2
    pieces = tokenizer.tokenize_word_ids(words.flat_values)  # (total_words, (pieces))
    n_pieces = tf.cast(pieces.row_lengths(), tf.int32)  # (total_words,)
    per_word = words.with_flat_values(n_pieces)  # (batch, (words))
    ends = tf.math.cumsum(per_word, axis=1)  # inclusive, per sentence
    starts = ends - per_word + 1  # +1 for [CLS]
    kept = tf.logical_and(per_word > 0, starts <= budget)
    word_starts = tf.where(kept, starts, -1).to_tensor(-1)
    tokens = words.with_flat_values(pieces).merge_dims(1, 2)[:, :budget]  # (batch, (tokens))
    rows = tokens.row_lengths()
    # A (batch, 1) ragged column for [CLS] / [SEP], with tokens' row_splits dtype.
    one = tf.RaggedTensor.from_row_lengths(tf.zeros_like(rows, tf.int32), tf.ones_like(rows))
    packed = tf.concat([one + tokenizer.cls_token_id, tokens, one + tokenizer.sep_token_id], axis=1)
    shape = [None, sequence_length]
    token_ids = packed.to_tensor(tokenizer.pad_token_id, shape=shape)
    return {
        "token_ids": token_ids,
        "segment_ids": tf.zeros_like(token_ids),
        "padding_mask": tf.ones_like(packed).to_tensor(0, shape=shape),
        "word_starts": tf.cast(word_starts, tf.int32),
    }


def max_words(sequence_length):
    """The words of a sentence (or serving text) encoded for a sequence of
    `sequence_length` tokens: every word but one of only control characters
    yields a token, so no more than `sequence_length - 2` of them fit; twice
    the length leaves room for tokenless words. The rest are cut (issue 30:
    one long sentence would cost its whole length, and widen `word_starts`
    for every sentence)."""
    return 2 * int(sequence_length)


def _kept_words(words, sequence_length):
    """`words` itself when it is within the caps, else its first
    `max_words` words, each cut to `text_cap` characters."""
    limit, cap = max_words(sequence_length), text_cap(sequence_length)
    if len(words) <= limit and all(len(w) <= cap for w in words):
        return words
    return [w[:cap] for w in words[:limit]]


def _measured_words(words, max_chars):
    """The words within a sentence's first `max_chars` characters (the last
    one cut there), which `packed_lengths` tokenizes."""
    kept, chars = [], 0
    for word in words:
        if chars + len(word) > max_chars:
            kept.append(word[: max_chars - chars])
            break
        kept.append(word)
        chars += len(word)
    return tuple(kept)


def packed_lengths(tokenizer, sentences):
    """Each sentence's length packed without truncation, `[CLS]` + every
    word's pieces + `[SEP]`, with the words tokenized as `encode_words`
    tokenizes them (numpy int64). A sentence is measured over the words of
    its first `text_cap(LONGEST_MEASURED)` characters, a longer one reading
    as longer than any sequence, and the sentences are tokenized in chunks
    bounded as `preprocessing.packed_lengths` bounds its own."""
    max_chars = text_cap(preprocessing.LONGEST_MEASURED)
    rows = [_measured_words(s.words, max_chars) for s in sentences]
    out = [np.zeros(0, "int64")]
    for start, stop in preprocessing.text_chunks(rows, max_chars):
        words = _ragged_words(rows[start:stop])
        pieces = tokenizer.tokenize_word_ids(words.flat_values).row_lengths()
        per_word = words.with_flat_values(tf.cast(pieces, tf.int64))
        out.append(2 + tf.reduce_sum(per_word, axis=1).numpy())
    return np.concatenate(out)


def _ragged_words(sentences):
    return (
        tf.ragged.constant([list(words) for words in sentences], dtype=tf.string, ragged_rank=1)
        if sentences
        else tf.ragged.constant([[]], dtype=tf.string)[:0]
    )


def tagging_features(
    tokenizer, sentences, label_set=None, sequence_length=128, source="", batch_size=512
):
    """Training or evaluation features for `BertTokenClassifier`.

    Args:
        tokenizer: a bertzoo tokenizer.
        sentences: `bertzoo.data.readers.TaggedSentence`s (or objects with
            `words`, `tags` and `line`).
        label_set: a `bertzoo.data.readers.LabelSet` of tag names; when given
            (and the sentences have tags), `labels` are produced and an
            unknown tag is an error naming the line.
        sequence_length: packed length.
        source: the file the sentences came from (for error messages).

    Returns `(features, labels, word_starts, truncated)`: numpy inputs for
    the model, int32 labels `(n, sequence_length)` with -100 where not
    scored (None without `label_set`), the first sub-token position of
    every word (-1: not in the model input), and the number of words cut
    off by the length limit (logged).
    """
    sentences = list(sentences)
    kept = [_kept_words(s.words, sequence_length) for s in sentences]
    cut = sum(1 for s, k in zip(sentences, kept) if k is not s.words)
    if cut:
        logger.warning(
            "%s%d of %d sentences have more than %d words (or a word over %d characters): cut "
            "to that before tokenizing (a %d-token sequence holds far fewer).",
            f"{source}: " if source else "",
            cut,
            len(sentences),
            max_words(sequence_length),
            text_cap(sequence_length),
            sequence_length,
        )
    chunks = []
    for i in range(0, len(sentences), batch_size):
        words = _ragged_words(kept[i : i + batch_size])
        encoded = encode_words(tokenizer, words, sequence_length)
        chunks.append({k: v.numpy() for k, v in encoded.items()})
    if not chunks:
        raise ValueError("No sentences to encode.")
    width = max(c["word_starts"].shape[1] for c in chunks)
    starts = np.concatenate(
        [
            np.pad(
                c["word_starts"],
                ((0, 0), (0, width - c["word_starts"].shape[1])),
                constant_values=-1,
            )
            for c in chunks
        ]
    )
    features = {
        k: np.concatenate([c[k] for c in chunks])
        for k in ("token_ids", "segment_ids", "padding_mask")
    }
    lengths = np.array([len(s.words) for s in sentences])
    truncated = int(lengths.sum() - np.sum(starts >= 0))
    if truncated:
        logger.warning(
            "%d of %d words are not in the model input (cut off at sequence_length=%d, or "
            "no tokens); they are predicted as the first label.",
            truncated,
            int(lengths.sum()),
            sequence_length,
        )
    labels = None
    if label_set is not None:
        labels = np.full(features["token_ids"].shape, IGNORE_LABEL, np.int32)
        for row, sentence in enumerate(sentences):
            if sentence.tags is None:
                raise ValueError(
                    f"{source}:{sentence.line}: the sentence has no tags (a tag column is needed for training and evaluation)."
                )
            for j, tag in enumerate(sentence.tags):
                index = label_set.index(tag, source, sentence.line + j)
                if j < width and starts[row, j] >= 0:
                    labels[row, starts[row, j]] = index
    return features, labels, starts, truncated


def word_predictions(logits, word_starts, lengths, label_names):
    """Per-word tag names from token logits `(n, seq, labels)`: each word
    takes the argmax at its first sub-token; words not in the model input
    get "O" (or `label_names[0]` when there is no "O")."""
    fallback = "O" if "O" in label_names else label_names[0]
    best = np.argmax(np.asarray(logits), axis=-1)  # (n, seq)
    out = []
    width = np.shape(word_starts)[1]
    for row, n in enumerate(lengths):
        tags = []
        for j in range(n):
            position = word_starts[row, j] if j < width else -1
            tags.append(label_names[best[row, position]] if position >= 0 else fallback)
        out.append(tags)
    return out
