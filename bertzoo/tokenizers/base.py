"""What every bertzoo tokenizer offers.

A tokenizer maps strings to token ids with TensorFlow ops only, so the same
object works eagerly, inside `tf.data.Dataset.map` and inside an exported
graph. Input: a string scalar (-> 1-D int32 ids) or a 1-D batch of strings
(-> `tf.RaggedTensor` of int32 ids, one row per string). Under the JAX and
torch backends, eager results come back as numpy (lists of arrays for ragged
rows); inside `tf.data` they stay TensorFlow tensors, as `tf.data` needs.
"""

import inspect
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bertzoo import presets as preset_lib
from bertzoo.errors import InputError, InputTypeError
from bertzoo.tokenizers.hf_config import hf_preset_tokenizer
from bertzoo.tokenizers.kinds import (
    SPECIAL_ROLES,
    TokenizerError,
    add_kind,
    tokenizer_class,
)

# The vocabulary files of the tokenizer kinds inside a preset directory
# (a byte-level BPE's merges.txt goes with its vocab.json; ModernBERT's
# byte-level BPE is a tokenizer.json).
VOCABULARY_FILES = (
    "vocab.txt",
    "spiece.model",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "tokenizer.json",
)


class TextEncodingError(TokenizerError, InputError):
    """An input text is not valid Unicode: bytes that are not UTF-8, or a
    Python str holding a lone surrogate (which has no UTF-8 encoding)."""


# Unicode White_Space: Rust's `char::is_whitespace`, the whitespace of the
# Hugging Face tokenizers' pre-tokenizers and of added tokens' lstrip.
UNICODE_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


# === Input text checks (issue 14) ===


def _text_index(index, shape):
    """How an error names the text at flat `index` of a batch of `shape`."""
    if not shape:
        return "The text"
    if len(shape) == 1:
        return f"Text {index}"
    return f"Text {list(int(i) for i in np.unravel_index(index, shape))}"


def _check_python_text(array):
    """A Python str with a lone surrogate ("a\\ud800b") cannot become UTF-8:
    a TextEncodingError naming the text and the character position."""
    for index, text in enumerate(array.flat):
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise TextEncodingError(
                    f"{_text_index(index, array.shape)} is not valid Unicode: it holds the lone "
                    f"surrogate {text[e.start]!r} at character {e.start}, which has no UTF-8 "
                    "encoding. Fix the text, e.g. text.encode('utf-8', "
                    "errors='replace').decode('utf-8')."
                ) from None


def to_string_tensor(inputs):
    """Lists, numpy arrays, Python and TF strings -> a tf.string tensor."""
    if isinstance(inputs, tf.Tensor | tf.RaggedTensor):
        if inputs.dtype != tf.string:
            raise InputTypeError(
                f"Tokenizers take strings, got a tensor of dtype {inputs.dtype.name}."
            )
        return inputs
    if inputs is None:
        raise InputTypeError("Tokenizers take strings (a str, bytes or a list of them), got None.")
    array = np.asarray(inputs, dtype=object)
    for index, x in enumerate(array.flat):
        if not isinstance(x, str | bytes):
            raise InputTypeError(
                f"Tokenizers take strings, got an element of type {type(x).__name__} "
                f"({_text_index(index, array.shape).lower()}): {x!r}."
            )
    try:
        if isinstance(inputs, bytes | str):
            return tf.constant(inputs)
        return tf.constant(
            array if array.size else np.zeros(array.shape, dtype=bytes), dtype=tf.string
        )
    except (UnicodeEncodeError, ValueError):  # TensorFlow raises either for a lone surrogate
        _check_python_text(array)
        raise


# Valid UTF-8, exactly: any sequence of Unicode scalar values (code points
# other than the surrogates). `.*` would not do: RE2 matches `.` loosely,
# e.g. accepting encoded surrogates.
_VALID_UTF8 = "(?s)[^\\x{D800}-\\x{DFFF}]*"


def check_utf8(strings, of=""):
    """Refuses a tf.string tensor (any shape) holding invalid UTF-8, which
    the tokenizers would otherwise drop without a word.

    Eagerly: a `TextEncodingError` naming the first bad text's index and
    byte offset. In a traced graph (tf.function, `tf.data`): an assertion
    that fails at run time (`tf.errors.InvalidArgumentError`) naming the
    indices. Returns `strings` (in graphs, with the assertion as a control
    dependency). `of` names the batch in messages (" of the second
    segment").

    How: one RE2 full match per text (`_VALID_UTF8`). RE2 compiles a class
    of code points into exact UTF-8 byte ranges, so it matches precisely
    the valid UTF-8 strings: no stray or truncated bytes, no overlong forms,
    no encoded surrogates, nothing above U+10FFFF -- the same verdict as
    Python's `bytes.decode("utf-8")` (tested). A few percent of the
    tokenizer's own time, several times cheaper than transcoding.
    """
    flat = (
        strings.flat_values if isinstance(strings, tf.RaggedTensor) else tf.reshape(strings, [-1])
    )
    valid = tf.strings.regex_full_match(flat, _VALID_UTF8)
    fix = (
        "bertzoo does not drop such bytes silently: decode the text with "
        'errors="replace" (data.decode("utf-8", errors="replace")) or fix its encoding.'
    )
    if tf.executing_eagerly():
        if bool(tf.reduce_all(valid)):
            return strings
        index = int(tf.where(~valid)[0, 0])
        raw = flat[index].numpy()
        try:
            raw.decode("utf-8")
            where = "it"  # only if RE2 and Python ever disagreed (not seen)
        except UnicodeDecodeError as e:
            where = f"byte {e.start} (0x{raw[e.start]:02x})"
        shape = [None] if isinstance(strings, tf.RaggedTensor) else strings.shape.as_list()
        name = _text_index(index, shape)
        raise TextEncodingError(f"{name}{of} is not valid UTF-8: {where} cannot be decoded; {fix}")
    check = tf.debugging.Assert(
        tf.reduce_all(valid),
        [f"Invalid UTF-8 in the texts{of} at (flat) indices", tf.where(~valid)[:, 0], fix],
        summarize=10,
    )
    with tf.control_dependencies([check]):
        return tf.identity(strings)


# === End of input text checks ===


# === Text length caps (issue 30) ===

# Every path that packs strings into a sequence of `sequence_length` tokens
# cuts each text to `text_cap(sequence_length)` characters before any
# tokenizer op, so one long text (a scraped page in a table cell) costs at
# most that much, not its whole length times the ops' intermediates.
# Ordinary text needs 4 to 6 characters per token, so the cut never reaches
# the tokens a sequence keeps. A text whose first tokens are spread wider
# (long runs of whitespace or control characters, many words over the
# tokenizer's word limit, each a single [UNK]) can lose tokens; the paths
# that cut count the texts they cut and say so.
MAX_CHARS_PER_TOKEN = 64


def text_cap(sequence_length):
    """The characters kept of each text packed into `sequence_length` tokens
    (`MAX_CHARS_PER_TOKEN` per token)."""
    return MAX_CHARS_PER_TOKEN * int(sequence_length)


def cut_texts(strings, max_chars):
    """A tf.string tensor (any shape) with every text longer than
    `max_chars` characters cut to its first `max_chars` characters (UTF-8
    characters; a byte that is not valid UTF-8 counts as one). TensorFlow
    ops: eager, `tf.data` and exported graphs. A text of at most `max_chars`
    bytes is never touched."""
    long = tf.strings.length(strings) > max_chars  # bytes: >= characters
    return tf.where(long, tf.strings.substr(strings, 0, max_chars, unit="UTF8_CHAR"), strings)


def count_long_texts(strings, max_chars):
    """(eagerly) How many texts of the tf.string tensor `strings` are longer
    than `max_chars` characters: those `cut_texts` cuts."""
    # In Python: TensorFlow's eager ops cost half a millisecond a call,
    # more than the rest of a short text's way through an int8 model. A
    # text of at most `max_chars` bytes has at most that many characters;
    # only longer ones are decoded (the texts are valid UTF-8 here).
    flat = np.asarray(strings.numpy() if hasattr(strings, "numpy") else strings).reshape(-1)
    return sum(
        1 for b in flat if len(b) > max_chars and len(b.decode("utf-8", "replace")) > max_chars
    )


def cut_message(count, total, max_chars, sequence_length, where=""):
    """The one line a path logs for the texts it cut."""
    texts = "texts is" if count == 1 else "texts are"
    return (
        f"{where}{count} of {total} {texts} longer than {max_chars:,} characters: cut to "
        f"{max_chars:,} before tokenizing ({MAX_CHARS_PER_TOKEN} characters per token of "
        f"sequence_length={sequence_length}: far more than the sequence holds)."
    )


# === End of text length caps ===


def row_ids(row_splits):
    """The row of every value of a ragged tensor with these row splits:
    `value_rowids()`, in a handful of graph ops (its own graph version
    builds some seventy)."""
    values = tf.range(row_splits[-1], dtype=row_splits.dtype)
    return tf.searchsorted(row_splits[1:], values, side="right", out_type=row_splits.dtype)


def regex_pieces(strings, delimiters, kept=None):
    """Splits a 1-D string batch at every match of the RE2 pattern
    `delimiters`; matches of `kept` (a subset, or None) are pieces of their
    own, the others dropped. Returns (the pieces' text, flat; their start
    and end byte offsets, ragged [batch, (pieces)], int64)."""
    # tensorflow-text's split stops at a NUL byte: split a copy with NUL as
    # U+0001 (a delimiter for no tokenizer). Its pieces are the text's own,
    # except in a text holding NUL: those pieces are cut from the text.
    nul_free = tf.strings.regex_replace(strings, "\\x00", "\x01")
    pieces, starts, ends = tf_text.regex_split_with_offsets(nul_free, delimiters, kept or "")
    has_nul = ~tf.strings.regex_full_match(strings, "(?s)[^\\x00]*")
    row = row_ids(starts.row_splits)
    at = tf.where(tf.gather(has_nul, row))[:, 0]
    own = _cut_pieces(strings, row, starts.flat_values, ends.flat_values, at)
    pieces = tf.tensor_scatter_nd_update(pieces.flat_values, at[:, None], own)
    return pieces, starts, ends


def _cut_pieces(strings, row, starts, ends, at):
    """The text of pieces `at` (flat indices; `row`, `starts`, `ends`: every
    piece's text and byte span) cut from `strings` through their bytes, in
    time and memory linear in the texts' length (a substr of a gathered copy
    of the text per piece would be quadratic)."""
    texts = tf.gather(row, at)
    used, text_of = tf.unique(texts, out_idx=tf.int64)
    chars = tf.strings.bytes_split(tf.gather(strings, used))  # (texts, (bytes))
    base = tf.gather(chars.row_splits, text_of)
    begin = base + tf.cast(tf.gather(starts, at), tf.int64)
    end = base + tf.cast(tf.gather(ends, at), tf.int64)
    spans = tf.ragged.range(begin, end)
    return tf.strings.reduce_join(
        spans.with_flat_values(tf.gather(chars.flat_values, spans.flat_values)), axis=1
    )


def in_tf_graph():
    return not tf.executing_eagerly()


def to_backend_output(value):
    """TF tensors inside graphs and under the TF backend; numpy otherwise."""
    if in_tf_graph() or keras.backend.backend() == "tensorflow":
        return value
    if isinstance(value, tf.RaggedTensor):
        return [np.asarray(row) for row in value.numpy()]
    if isinstance(value, dict):
        return {k: to_backend_output(v) for k, v in value.items()}
    return value.numpy()


class Tokenizer(tf.Module):
    """Base class: a fixed vocabulary with BERT's five special tokens.

    A `tf.Module`, so the lookup tables it owns are tracked when a graph
    that uses it is saved (`tf.saved_model.save`, Keras `export`).

    Subclasses set `self.vocabulary` (list of token strings, index = id) and
    the special token strings, and implement `tokenize_ids(tf.string
    tensor of rank 1) -> tf.RaggedTensor`.
    """

    vocabulary_file = None  # file name inside a preset directory (one of VOCABULARY_FILES)
    companion_files = ()  # files read beside it (a byte-level BPE's merges.txt)
    kind = None  # the preset's tokenizer "kind"
    # The reference's rule for cutting a sentence pair to fit
    # (`bertzoo.preprocessing.truncate_longest_first`).
    pair_truncation = "google"
    # Separators between a pair's two texts: 1 for BERT's `[CLS] A [SEP] B
    # [SEP]`, 2 for RoBERTa's and XLM-R's `<s> A </s></s> B </s>`.
    pair_separators = 1
    # The characters the mask token absorbs before it when typed in a text
    # (RoBERTa's and XLM-R's "<mask>" take the whitespace before them:
    # "the <mask>" is "the" + <mask>); none for BERT's "[MASK]".
    mask_absorbs = ""
    # Whether tokenizing a text puts a space before its start (XLM-R's "▁",
    # `add_prefix_space`): a predicted token's space there is no part of the text.
    adds_prefix_space = False

    def __init__(self, cls_token, sep_token, pad_token, unk_token, mask_token):
        super().__init__(name=type(self).__name__.lower())
        self.cls_token = cls_token
        self.sep_token = sep_token
        self.pad_token = pad_token
        self.unk_token = unk_token
        self.mask_token = mask_token

    def _check_special_tokens(self, source):
        index = {token: i for i, token in enumerate(self.vocabulary)}
        missing = [
            getattr(self, f"{role}_token")
            for role in SPECIAL_ROLES
            if getattr(self, f"{role}_token") not in index
        ]
        if missing:
            raise TokenizerError(
                f"{source} lacks the special token(s) {', '.join(missing)}; a BERT "
                "vocabulary needs "
                + ", ".join(getattr(self, f"{r}_token") for r in SPECIAL_ROLES)
                + "."
            )
        self._index = index

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def token_to_id(self, token):
        try:
            return self._index[token]
        except KeyError:
            raise KeyError(f"{token!r} is not in the vocabulary.") from None

    def id_to_token(self, token_id):
        if not 0 <= int(token_id) < len(self.vocabulary):
            raise IndexError(f"Token id {token_id} is outside [0, {len(self.vocabulary)}).")
        return self.vocabulary[int(token_id)]

    cls_token_id = property(lambda self: self._index[self.cls_token])
    sep_token_id = property(lambda self: self._index[self.sep_token])
    pad_token_id = property(lambda self: self._index[self.pad_token])
    unk_token_id = property(lambda self: self._index[self.unk_token])
    mask_token_id = property(lambda self: self._index[self.mask_token])

    @property
    def special_token_ids(self):
        return sorted({getattr(self, f"{role}_token_id") for role in SPECIAL_ROLES})

    @tf.autograph.experimental.do_not_convert
    def tokenize(self, inputs):
        """Strings -> int32 token ids (see the module docstring for shapes)."""
        strings = to_string_tensor(inputs)
        if strings.shape.rank is not None and strings.shape.rank > 1:
            raise ValueError(
                f"Tokenizers take a string or a 1-D batch of strings, got shape {strings.shape}."
            )
        scalar = strings.shape.rank == 0
        strings = check_utf8(strings)
        ids = self.tokenize_ids(tf.reshape(strings, [-1]) if scalar else strings)
        if scalar:
            ids = ids[0]
        return to_backend_output(ids)

    __call__ = tokenize

    def tokenize_ids(self, strings):
        """A 1-D `tf.string` tensor -> `tf.RaggedTensor` of int32 ids, one row
        per string, in TensorFlow ops (no input checks, no backend
        conversion: for `tf.data` pipelines and graphs; `tokenize` is the
        checked entry point)."""
        raise NotImplementedError

    def tokenize_word_ids(self, words):
        """A 1-D `tf.string` tensor of pre-split words (a sentence's words
        laid end to end) -> `tf.RaggedTensor` of int32 ids, one row per word,
        as the reference tokenizes words with `is_split_into_words=True`
        (token tagging). `tokenize_ids` by default: WordPiece and
        SentencePiece tokenize a word alone as they do in its sentence; the
        byte-level BPE overrides it (a RoBERTa word takes a prefix space)."""
        return self.tokenize_ids(words)

    @tf.autograph.experimental.do_not_convert
    def tokenize_with_offsets(self, strings):
        """Strings -> (ids, starts, ends): the ids of `tokenize_ids` with the
        byte span in the original UTF-8 string that each token comes from.

        Takes a 1-D batch of strings (or one string: then one row each) and
        returns three `tf.RaggedTensor`s shaped alike, `[batch, (tokens)]`:
        int32 ids and int64 byte offsets `[start, end)`. TensorFlow ops only,
        so it works eagerly, in `tf.data` and in exported graphs; the results
        stay TensorFlow tensors under every Keras backend.

        How: each tokenizer class declares a split of the raw text into
        pieces (`_offset_split_patterns`) such that tokenizing every piece on
        its own and concatenating gives exactly the tokens of the whole
        string. The pieces are tokenized with `tokenize_ids`, and every
        token gets the span of the piece it came from. The granularity is
        therefore the piece -- for WordPiece a basic token (a word, a
        punctuation character or a CJK ideograph), for SentencePiece a
        whitespace-delimited word: the sub-tokens of one piece share a span.
        Bytes of invalid UTF-8 stay where they are (they belong to a piece).
        """
        strings = to_string_tensor(strings)
        rank = strings.shape.rank
        if rank is not None and rank > 1:
            raise ValueError(
                f"tokenize_with_offsets takes a string or a 1-D batch of strings, got shape {strings.shape}."
            )
        scalar = rank == 0
        if scalar:
            strings = tf.reshape(strings, [-1])
        prepared = self._offset_prepare(strings)
        piece_text, starts, ends = self._offset_pieces(prepared)
        # (pieces, (tokens)) -> (batch, (pieces), (tokens)) -> (batch, (tokens))
        sub = self.tokenize_ids(piece_text).with_row_splits_dtype(starts.row_splits.dtype)
        ids = starts.with_flat_values(sub).merge_dims(1, 2)
        piece = row_ids(sub.row_splits)  # the piece of every token
        token_starts = ids.with_flat_values(tf.gather(tf.cast(starts.flat_values, tf.int64), piece))
        token_ends = ids.with_flat_values(tf.gather(tf.cast(ends.flat_values, tf.int64), piece))
        if scalar:
            return ids[0], token_starts[0], token_ends[0]
        return ids, token_starts, token_ends

    def _offset_split_patterns(self):
        """(delimiters, kept): RE2 patterns for `tokenize_with_offsets`. The
        raw text is split at every match of `delimiters`; matches of `kept`
        (a subset, or None) are pieces of their own, the others dropped.
        Subclasses that support offsets override this."""
        raise NotImplementedError(f"{type(self).__name__} does not provide token offsets.")

    def _offset_pieces(self, strings):
        """(piece text, starts, ends) of the split `tokenize_with_offsets`
        tokenizes piece by piece (`regex_pieces` by default)."""
        return regex_pieces(strings, *self._offset_split_patterns())

    def _offset_prepare(self, strings):
        """A byte-length-preserving rewrite of the raw text applied before the
        split (e.g. context-dependent case mapping); identity by default."""
        return strings

    def detokenize(self, ids):
        """Token ids (one sequence) -> list of token strings."""
        return [self.id_to_token(i) for i in np.asarray(ids).reshape(-1)]

    def token_text(self, token_id):
        """The text a token stands for, with its space where the token
        carries one (byte-level BPE "Ġcat" and SentencePiece "▁cat" read
        " cat"); the vocabulary's token itself here (WordPiece "cat", "##s")
        and for special tokens."""
        return self.id_to_token(token_id)

    def check_vocabulary_size(self, vocabulary_size, source):
        """Fails when the vocabulary does not fit a model's embedding table."""
        if vocabulary_size != self.vocabulary_size:
            raise TokenizerError(
                f"{source}: the vocabulary has {self.vocabulary_size} tokens but the "
                f"model's embedding table has {vocabulary_size} rows; they must be "
                "equal (is this the vocabulary this checkpoint was trained with?)."
            )

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """The tokenizer of a preset directory (bertzoo or Hugging Face
        format). Built-in presets ship no vocabulary: pass `vocabulary=`."""
        return from_preset(preset, expected=cls, **kwargs)

    def save_to_preset(self, preset_dir):
        """Writes the vocabulary file into the preset directory `preset_dir`,
        published with its manifest (`bertzoo.io.publish`): the preset's
        other files stay, an earlier vocabulary of either kind is replaced.
        Returns the vocabulary file's path."""
        from bertzoo.io.publish import publish_directory

        # Into a bertzoo preset or a Hugging Face directory bertzoo wrote.
        with publish_directory(preset_dir, ("preset", "hf"), replaces=VOCABULARY_FILES) as staging:
            self._write_vocabulary(Path(staging) / self.vocabulary_file)
        return Path(preset_dir) / self.vocabulary_file

    def _write_vocabulary(self, path):
        raise NotImplementedError

    def preset_section(self):
        """The preset document's `tokenizer` section that rebuilds this
        tokenizer: kind, lowercase, strip_accents and the special tokens
        that differ from the kind's defaults."""
        defaults = inspect.signature(type(self).__init__).parameters
        section = {
            "kind": self.kind,
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
        }
        for role in SPECIAL_ROLES:
            token = getattr(self, f"{role}_token")
            if token != defaults[f"{role}_token"].default:
                section[f"{role}_token"] = token
        return section


def register_tokenizer(cls):
    """Class decorator: registers a `Tokenizer` subclass under its `kind`, so
    presets, checkpoints and saved serving configs can name it
    (`tokenizer_class`)."""
    if not (isinstance(cls, type) and issubclass(cls, Tokenizer)) or not cls.kind:
        raise TypeError(f"register_tokenizer takes a Tokenizer subclass with a kind, got {cls!r}.")
    add_kind(cls)
    return cls


def from_preset(preset, vocabulary=None, expected=Tokenizer, check_model=True, **kwargs):
    """Builds the tokenizer a preset names (wordpiece or sentencepiece) with
    the settings it records; `vocabulary` overrides the preset's own file."""
    kind, location = preset_lib.classify(preset)
    directory = None if kind == "builtin" else location
    if kind == "hf":
        section, vocabulary_size = hf_preset_tokenizer(location, kwargs.get("reference"))
    else:
        data = preset_lib.read_document(kind, location)
        section, vocabulary_size = (
            data.get("tokenizer", {}),
            data["backbone"].get("vocabulary_size"),
        )
    settings = dict(section)
    kind = settings.pop("kind", "wordpiece")
    cls = tokenizer_class(kind)
    # The file the preset names (a byte-level BPE's tokenizer.json), else the kind's.
    vocabulary_file = settings.pop("vocabulary_file", cls.vocabulary_file)
    if not issubclass(cls, expected):
        raise TokenizerError(
            f"Preset {preset!r} uses a {kind} tokenizer, not a {expected.__name__}."
        )
    if vocabulary is None:
        if directory is None:
            raise TokenizerError(
                f"Built-in preset {preset!r} is an architecture and ships no "
                f"vocabulary: pass vocabulary= (a {vocabulary_file} file) or use "
                "a preset directory that holds one."
            )
        vocabulary = Path(directory) / vocabulary_file
        if not vocabulary.is_file():
            raise TokenizerError(f"{directory} has no {vocabulary_file} ({kind} tokenizer).")
    tokenizer = cls(vocabulary, **{**settings, **kwargs})
    if check_model:
        tokenizer.check_vocabulary_size(vocabulary_size, vocabulary)
    return tokenizer
