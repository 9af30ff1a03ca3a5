"""Strings -> BERT inputs: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, padded
to a fixed length, in TensorFlow ops (eager, `tf.data`, exported graphs)."""

import logging

import keras
import tensorflow as tf

from bertzoo.convert.loader import resolve_preset
from bertzoo.input_checks import check_sequence_length
from bertzoo.loader_registry import register_preprocessor_factory
from bertzoo.presets import classify, max_input_length, read_section
from bertzoo.tokenizers.base import (
    Tokenizer,
    TokenizerError,
    check_utf8,
    count_long_texts,
    cut_message,
    cut_texts,
    text_cap,
    to_backend_output,
    to_string_tensor,
)
from bertzoo.tokenizers.base import (
    from_preset as tokenizer_from_preset,
)

logger = logging.getLogger(__name__)

PAIR_TRUNCATIONS = ("google", "hf-fast")

# The longest sequence `packed_lengths` measures texts for: each text is
# cut to `text_cap(LONGEST_MEASURED)` characters first, so a length
# above any model's positions still reads as "longer than the sequence".
LONGEST_MEASURED = 8192

# Rows of texts tokenized at once by the eager batch helpers
# (`packed_lengths`, `text_chunks`): at most this many rows, and at most
# `CHUNK_CHARS` characters of (cut) text, so their memory is bounded by
# these settings, never by the data.
CHUNK_ROWS = 1024
CHUNK_CHARS = 1 << 20


def text_chunks(rows, max_chars, batch_size=CHUNK_ROWS, chunk_chars=CHUNK_CHARS):
    """Slices `(start, stop)` of `rows` (tuples of texts) holding at most
    `batch_size` rows and at most `chunk_chars` characters once each text is
    cut to `max_chars` (a single row may exceed it: at most `max_chars` per
    text)."""
    start, chars = 0, 0
    for i, row in enumerate(rows):
        size = sum(min(len(t), max_chars) for t in row)
        if i > start and (i - start >= batch_size or chars + size > chunk_chars):
            yield start, i
            start, chars = i, 0
        chars += size
    if start < len(rows):
        yield start, len(rows)


def packed_lengths(tokenizer, rows, batch_size=CHUNK_ROWS):
    """The length of each row of texts (1-tuples, or 2-tuples for pairs)
    packed without truncation: `[CLS] a [SEP]` is 2 + len(a) tokens, `[CLS]
    a [SEP] b [SEP]` 3 + len(a) + len(b) (4 + ... for a tokenizer with two
    separators between the texts, RoBERTa's `<s> a </s></s> b </s>`). A run compares these with its
    sequence length to say how many examples it cuts (numpy int64). Each
    text is measured over its first `text_cap(LONGEST_MEASURED)`
    characters: a longer one reads as longer than any sequence, without
    tokenizing all of it."""
    import numpy as np

    max_chars = text_cap(LONGEST_MEASURED)
    out = []
    for start, stop in text_chunks(rows, max_chars, batch_size):
        batch = rows[start:stop]
        width = len(batch[0])
        total = np.full(len(batch), special_tokens(tokenizer, width), "int64")
        for j in range(width):
            texts = cut_texts(tf.constant([r[j] for r in batch]), max_chars)
            total += tokenizer.tokenize_ids(texts).row_lengths().numpy()
        out.append(total)
    return np.concatenate(out) if out else np.zeros(0, "int64")


def special_tokens(tokenizer, segments):
    """The special tokens packed around one text (2: `[CLS] a [SEP]`) or a
    pair (3, or 4 for a tokenizer with two separators between the texts)."""
    return 2 if segments == 1 else 2 + tokenizer.pair_separators


def segment_inputs(num_segments):
    """How a backbone with `num_segments` segment rows (its `num_segments`)
    takes packed texts, as `BertPreprocessor`'s keyword arguments:
    `segment_ids` (whether it takes them: not for DistilBERT's 0) and
    `pair_segment_id` (the id of a pair's second text: 1, or 0 where the
    table has one row -- RoBERTa, XLM-R, KLUE-RoBERTa -- which must never
    see id 1). The one rule every packer follows (the task kinds, QA's
    windows, serving, distillation). A bool, as older callers pass (whether
    the model takes segment ids), reads as BERT's 2 rows or none."""
    if isinstance(num_segments, bool):
        num_segments = 2 if num_segments else 0
    num_segments = int(num_segments)
    return {"segment_ids": num_segments > 0, "pair_segment_id": 1 if num_segments > 1 else 0}


def truncate_longest_first(len_a, len_b, budget, rule="google"):
    """Segment lengths after longest-first pair truncation to `budget`
    tokens, for int tensors of any shape, by one of two rules that differ
    only in who keeps an odd budget's extra token when both segments are cut:
    - "google" (google-research/bert `_truncate_seq_pair`, HF's Python
      tokenizers): drop the last token of the longer segment (the second on
      ties) until both fit; the first segment keeps the extra token;
    - "hf-fast" (the Rust `tokenizers` library): the shorter segment keeps
      min(its length, budget // 2) at least, the longer the rest; on ties
      the second segment keeps the extra token.
    """
    if rule not in PAIR_TRUNCATIONS:
        raise ValueError(f"rule must be one of {', '.join(PAIR_TRUNCATIONS)}, got {rule!r}.")
    total_fits = len_a + len_b <= budget
    half_up = (budget + 1) // 2
    if rule == "hf-fast":
        half_up = tf.where(len_a > len_b, half_up, budget // 2)
    keep_a = tf.minimum(len_a, tf.maximum(half_up, budget - len_b))
    keep_b = tf.minimum(len_b, budget - keep_a)
    return tf.where(total_fits, len_a, keep_a), tf.where(total_fits, len_b, keep_b)


def _head(ragged, lengths):
    """The first `lengths[i]` values of each row, gathered from the kept
    values only (a mask over the rows would cost batch x longest row)."""
    keep = tf.minimum(ragged.row_lengths(), tf.cast(lengths, ragged.row_splits.dtype))
    starts = ragged.row_splits[:-1]
    at = tf.ragged.range(starts, starts + keep).flat_values
    return tf.RaggedTensor.from_row_lengths(tf.gather(ragged.flat_values, at), keep)


def _fill_like(ragged, value):
    return tf.zeros_like(ragged) + value


class BertPreprocessor(keras.layers.Layer):
    """Tokenizes and packs one or two segments for a BERT-family backbone.

    Call it on a batch of strings (list, numpy array or tf.string tensor),
    on a tuple `(texts_a,)` or `(texts_a, texts_b)` for sentence pairs, or on
    a single string. Following Keras' convention, `preprocessor(x, y,
    sample_weight)` passes labels through, so `dataset.map(preprocessor)`
    works on `(x, y)` datasets.

    Returns `{"token_ids", "segment_ids", "padding_mask"}` (int32, shape
    `(batch, sequence_length)`; no segment_ids for backbones without segment
    embeddings). Pairs are truncated longest-first by the rule of the
    tokenizer's reference (`truncate_longest_first`).

    Args:
        tokenizer: a `bertzoo.tokenizers.Tokenizer`.
        sequence_length: packed length, special tokens included: an int
            >= 3 ([CLS] A [SEP] with one token).

        segment_ids: whether to output segment ids.
        pair_segment_id: the segment id of a pair's second text: 1, or 0
            for backbones with one segment row (RoBERTa, XLM-R, KLUE-RoBERTa,
            whose pairs differ by their separators only).

    Texts must be valid Unicode: bytes that are not UTF-8 (or a str with a
    lone surrogate) are an error naming the text, not silently dropped --
    eagerly a `TextEncodingError`, inside `tf.data`/`tf.function` a failed
    assertion at run time.

    Each text is cut to `max_text_chars` (`text_cap(sequence_length)`, 64
    characters per token) before tokenizing, so one long text costs no more
    than that; called eagerly, the preprocessor logs the first cut once and
    counts the texts it cut in `texts_cut`.
    """

    def __init__(
        self, tokenizer, sequence_length=128, segment_ids=True, pair_segment_id=1, **kwargs
    ):
        kwargs.setdefault("dtype", "int32")
        super().__init__(trainable=False, **kwargs)
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(
                f"tokenizer must be a bertzoo Tokenizer, got {type(tokenizer).__name__}."
            )
        # An int >= 3 ([CLS] A [SEP] with one token); 5.7 or True would be
        # silently truncated.
        self.tokenizer = tokenizer
        self.sequence_length = check_sequence_length(sequence_length)
        self.segment_ids = bool(segment_ids)
        if pair_segment_id not in (0, 1) or isinstance(pair_segment_id, bool):
            raise ValueError(f"pair_segment_id must be 0 or 1, got {pair_segment_id!r}.")
        self.pair_segment_id = pair_segment_id
        self.max_text_chars = text_cap(self.sequence_length)
        self.texts_cut = 0  # texts cut to max_text_chars by eager calls
        # Strings are not backend tensors: let them through Layer.__call__.
        self._convert_input_args = False
        self._allow_non_tensor_positional_args = True
        self.built = True

    @classmethod
    def from_preset(cls, preset, sequence_length=None, vocabulary=None, **tokenizer_kwargs):
        """The preprocessor of a preset directory (bertzoo or Hugging Face
        format) or of a built-in preset with `vocabulary=` given.
        `sequence_length` defaults to the backbone's maximum (RoBERTa's 514
        positions hold 512 tokens: the first two serve padding)."""
        data, _, _ = resolve_preset(preset)
        backbone = data["backbone"]
        max_length = max_input_length(backbone)
        if sequence_length is None:
            sequence_length = max_length
        sequence_length = check_sequence_length(sequence_length)
        if sequence_length > max_length:
            raise TokenizerError(
                f"sequence_length={sequence_length} is longer than the model's "
                f"{max_length} positions (max_sequence_length of {preset!r}"
                + (
                    ", less the positions that serve padding)."
                    if backbone.get("position_padding_id") is not None
                    else ")."
                )
            )
        tokenizer = tokenizer_from_preset(preset, vocabulary=vocabulary, **tokenizer_kwargs)
        return cls(
            tokenizer,
            sequence_length=sequence_length,
            **segment_inputs(backbone.get("num_segments", 2)),
        )

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "segment_ids": self.segment_ids,
            "pair_segment_id": self.pair_segment_id,
        }

    def _segments(self, x):
        segments = tuple(x) if isinstance(x, tuple) else (x,)
        if not 1 <= len(segments) <= 2:
            raise ValueError(
                f"BertPreprocessor packs one or two segments, got a tuple of {len(segments)}."
            )
        segments = [to_string_tensor(s) for s in segments]
        # Invalid UTF-8 is an error, not silently dropped bytes.
        names = (
            ("", "") if len(segments) == 1 else (" of the first segment", " of the second segment")
        )
        segments = [check_utf8(s, of) for s, of in zip(segments, names)]
        if tf.executing_eagerly():
            cut = sum(count_long_texts(s, self.max_text_chars) for s in segments)
            if cut and not self.texts_cut:
                logger.warning(
                    cut_message(
                        cut,
                        sum(int(tf.size(s)) for s in segments),
                        self.max_text_chars,
                        self.sequence_length,
                        "BertPreprocessor: ",
                    )
                    + " Later cuts are counted in texts_cut."
                )
            self.texts_cut += cut
        # One long text costs at most max_text_chars in the ops below.
        segments = [cut_texts(s, self.max_text_chars) for s in segments]
        for s in segments:
            # A (batch, 1) column (e.g. keras.Input(shape=(1,), dtype="string"))
            # is a batch; anything wider would be silently flattened.
            rank = s.shape.rank
            if rank is not None and (rank > 2 or rank == 2 and s.shape[1] not in (None, 1)):
                raise ValueError(
                    f"BertPreprocessor takes a string or a 1-D batch of strings per "
                    f"segment (or a (batch, 1) column), got shape {s.shape}. For "
                    "sentence pairs pass a tuple (texts_a, texts_b), not a list of pairs."
                )
        return segments

    @tf.autograph.experimental.do_not_convert
    def pack(self, x):
        segments = self._segments(x)
        scalar = segments[0].shape.rank == 0
        if any(s.shape.rank != segments[0].shape.rank for s in segments):
            raise ValueError(
                "Both segments must have the same shape (one string each, or batches)."
            )
        flat = [tf.reshape(s, [-1]) for s in segments]
        if len(flat) == 2:
            n_a, n_b = flat[0].shape[0], flat[1].shape[0]
            if n_a is not None and n_b is not None and n_a != n_b:
                raise ValueError(
                    f"The two segments of a pair must hold the same number of texts, "
                    f"got {n_a} and {n_b}."
                )
            check = tf.debugging.assert_equal(
                tf.size(flat[0]),
                tf.size(flat[1]),
                message="The two segments of a pair must hold the same number of texts",
            )
            with tf.control_dependencies([check]):
                flat = [tf.identity(f) for f in flat]
        ids = [self.tokenizer.tokenize_ids(f) for f in flat]
        tok = self.tokenizer
        rows = ids[0].row_lengths()
        # A (batch, 1) ragged column for the special tokens.
        one = tf.RaggedTensor.from_row_lengths(tf.zeros_like(rows, tf.int32), tf.ones_like(rows))
        cls_col, sep_col = one + tok.cls_token_id, one + tok.sep_token_id
        if len(ids) == 1:
            a = _head(
                ids[0], tf.fill(tf.shape(rows), tf.cast(self.sequence_length - 2, rows.dtype))
            )
            parts = [(cls_col, 0), (a, 0), (sep_col, 0)]
        else:
            if self.sequence_length < special_tokens(tok, 2):
                raise ValueError(
                    f"sequence_length={self.sequence_length} cannot hold a pair's "
                    f"{special_tokens(tok, 2)} special tokens ({tok.pair_separators} separators "
                    "between the texts); use a longer sequence_length."
                )
            budget = tf.cast(self.sequence_length - special_tokens(tok, 2), rows.dtype)
            ka, kb = truncate_longest_first(rows, ids[1].row_lengths(), budget, tok.pair_truncation)
            a, b = _head(ids[0], ka), _head(ids[1], kb)
            second = self.pair_segment_id
            between = [(sep_col, 0)] * tok.pair_separators
            parts = [(cls_col, 0), (a, 0), *between, (b, second), (sep_col, second)]
        token_ids = tf.concat([p for p, _ in parts], axis=1)
        segment_ids = tf.concat([_fill_like(p, s) for p, s in parts], axis=1)
        shape = [None, self.sequence_length]
        out = {
            "token_ids": token_ids.to_tensor(tok.pad_token_id, shape=shape),
            "padding_mask": tf.ones_like(token_ids).to_tensor(0, shape=shape),
        }
        if self.segment_ids:
            out["segment_ids"] = segment_ids.to_tensor(0, shape=shape)
        if scalar:
            out = {k: v[0] for k, v in out.items()}
        return out

    def call(self, x, y=None, sample_weight=None):
        out = to_backend_output(self.pack(x))
        return keras.utils.pack_x_y_sample_weight(out, y, sample_weight)


def preset_preprocessor(preset, sequence_length=None):
    """The `BertPreprocessor` a task model's `from_preset` attaches: the
    preset directory's tokenizer, packing to `sequence_length` (default: the
    length the preset's `preprocessor` section records, e.g. its fine-tuning
    run's, else the backbone's maximum). None for a built-in preset (an
    architecture, no vocabulary) or a directory without a usable vocabulary."""
    if classify(preset)[0] == "builtin":
        return None
    if sequence_length is None:
        sequence_length = read_section(preset, "preprocessor").get("sequence_length")
    try:
        return BertPreprocessor.from_preset(preset, sequence_length=sequence_length)
    except TokenizerError as error:
        logger.info("No preprocessor attached (the model takes token-id dicts): %s", error)
        return None


register_preprocessor_factory(preset_preprocessor)
