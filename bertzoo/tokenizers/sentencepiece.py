"""SentencePiece tokenizer (ALBERT vocabularies) in TensorFlow ops, id-for-id
identical to the reference ALBERT tokenizer.

The reference is google-research/albert `tokenization.py` with an
`spm_model_file` (Hugging Face's slow, sentencepiece-based `AlbertTokenizer`
is the same code). For one string it does:

1. `" ".join(text.strip().split())`: trim, and collapse every run of
   whitespace (`str.isspace`: also U+001C..U+001F, U+0085, U+00A0, U+2028,
   ...) into one space;
2. replace "``" and "''" by '"';
3. unless accents are kept: NFKD, then drop every character whose canonical
   combining class is not 0 (`unicodedata.combining`);
4. lowercase (`str.lower`) if uncased;
5. SentencePiece-encode to pieces (the model's own normaliser, e.g.
   nmt_nfkc, runs inside; it NFKC-composes, so the Hangul jamo NFKD makes in
   step 3 are syllables again before segmentation);
6. every piece longer than one character that ends in "," after a digit
   (`str.isdigit`), e.g. "▁9," or "0,", is re-encoded without its "," and
   without any "▁": if the piece did not start with "▁" but the re-encoding
   does, that leading "▁" is removed (the piece dropped if it was only "▁");
   then "," follows as its own piece;
7. each piece -> `PieceToId(piece)` (pieces not in the vocabulary, such as
   runs of unknown characters, are <unk>).

Here every step is a string op over the whole batch: the character classes
of steps 1, 3 and 6 are computed from Python's `unicodedata` (the tables the
reference uses) and compiled into RE2 classes; NFKD is ICU's
(`tensorflow_text.normalize_utf8`) and lowercasing ICU's (`tf.strings.lower`)
corrected to Python's `str.lower` where their Unicode versions disagree
(the WordPiece tokenizer's table); steps 5-7 use tensorflow-text's
`SentencepieceTokenizer` (the same sentencepiece library). Steps 3-4 run on
the text between NULs and code points that this Python's `unicodedata` does
not know yet, which stay as they are, as in Python (TensorFlow's lowercasing
op would end the string at a NUL; its ICU, of a later Unicode version, would
decompose or reorder some new code points). So steps 1-4 agree with this
Python on every code point (tested), and the ids with the reference on
100,000 fuzz strings in each setting (uncased, uncased keeping accents,
cased; tests/fixtures/make_sentencepiece_fuzz.py).

Not modelled: Hugging Face's slow tokenizer also splits out special-token
strings ("[MASK]", "<pad>", ...) typed in the input text; the reference
google-research tokenizer (and this one) treats them as text.
"""

from pathlib import Path

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from bertzoo.io.bounded import TOKENIZER_BYTES, read_bounded
from bertzoo.io.publish import atomic_path
from bertzoo.tokenizers import basic, unicode
from bertzoo.tokenizers.base import Tokenizer, TokenizerError, register_tokenizer

SPIECE_UNDERLINE = "\u2581"


def read_model_proto(proto):
    """A `.model` path or its bytes -> (bytes, source description)."""
    if isinstance(proto, bytes | bytearray | memoryview):
        return bytes(proto), "The SentencePiece model"
    path = Path(proto)
    try:
        return read_bounded(path, TOKENIZER_BYTES, "SentencePiece model", TokenizerError), str(path)
    except FileNotFoundError:
        raise TokenizerError(f"SentencePiece model file {path} does not exist.") from None
    except IsADirectoryError:
        raise TokenizerError(
            f"{path} is a directory; pass its spiece.model (or use from_preset)."
        ) from None


def model_pieces(proto, source="The SentencePiece model"):
    """The pieces of a serialised SentencePiece model (index = id)."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(proto)
    except (RuntimeError, OSError, TypeError) as e:
        raise TokenizerError(f"{source} is not a valid SentencePiece model: {e}") from None
    return [processor.IdToPiece(i) for i in range(processor.GetPieceSize())]


class AlbertPreprocessor:
    """The reference's `preprocess_text` in graph ops (steps 1-4 of the
    module docstring): a 1-D string batch -> normalised strings. The
    tokenizer and the vocabulary trainer (`train.train_sentencepiece`) share
    it, so a model is trained on exactly the text it will be asked to encode.
    """

    def __init__(self, lowercase=True, strip_accents=True):
        self.lowercase = bool(lowercase)
        self.strip_accents = basic.resolve_strip_accents(lowercase, strip_accents)
        self._patterns = unicode.albert_patterns()

    def __call__(self, strings):
        p = self._patterns
        # Invalid UTF-8 becomes U+FFFD (a Python str cannot hold it anyway).
        text = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        text = tf.strings.regex_replace(text, p["space"] + "+", " ")
        text = tf.strings.regex_replace(text, "^ | $", "")
        # Two passes like the reference (the two patterns cannot overlap).
        text = tf.strings.regex_replace(text, "``", '"')
        text = tf.strings.regex_replace(text, "''", '"')
        if self.strip_accents or self.lowercase:
            text = self._between_opaque(text, self._accents_and_case)
        return text

    def _accents_and_case(self, text):
        if self.strip_accents:
            text = tf_text.normalize_utf8(text, "NFKD")
            text = tf.strings.regex_replace(text, self._patterns["combining"], "")
        if self.lowercase:
            text = unicode.python_lower(text)
        return text

    def _between_opaque(self, text, transform):
        """`transform` (steps 3-4) applied to the text between the
        characters that Python leaves alone and ICU does not, which stay as
        they are:

        - NUL: TensorFlow's lowercasing op ends a string at its first NUL,
          where Python lowercases all of it and keeps the NUL;
        - code points unassigned in this Python's Unicode version: Python's
          NFKD keeps them, whereas ICU's, of a later version, decomposes some
          (e.g. U+1CCD6..U+1CCEF, outlined Latin capitals, into letters that
          lowercasing then changes) and reorders new combining marks.

        Both are, for Python, starters without a decomposition (canonical
        reordering stops at them), neither combining nor cased nor
        case-ignorable (the final-sigma context stops at them), and their
        own lowercase: so transforming the runs between them one by one is
        exactly what Python does to the whole string. The runs are cut at a
        byte 0xFF, which valid UTF-8 never holds."""
        opaque = f"(?:\\x00|{self._patterns['unassigned']})"
        plain = transform(text)
        has = tf.strings.regex_full_match(text, f"(?s).*{opaque}.*")

        def in_runs():  # only the rows that hold such a character
            rows = tf.where(has)[:, 0]
            marked = tf.strings.regex_replace(tf.gather(text, rows), f"({opaque})", b"\xff\\1\xff")
            runs = tf.strings.split(marked, b"\xff")  # [rows, (runs)]
            flat = runs.flat_values
            flat = tf.where(tf.strings.regex_full_match(flat, opaque), flat, transform(flat))
            joined = tf.strings.reduce_join(runs.with_flat_values(flat), axis=-1)
            return tf.tensor_scatter_nd_update(plain, rows[:, None], joined)

        return tf.cond(tf.reduce_any(has), in_runs, lambda: plain)


@register_tokenizer
class SentencePieceTokenizer(Tokenizer):
    """Text -> SentencePiece ids, exactly as the reference ALBERT tokenizer.

    Args:
        proto: path to a SentencePiece `.model` file (ALBERT's `spiece.model`)
            or its bytes.
        lowercase: lowercase the text (ALBERT's `do_lower_case`).
        strip_accents: NFKD + drop combining characters (ALBERT strips unless
            `keep_accents`); None follows `lowercase`.
        *_token: the special tokens; all must be pieces of the model.

    Example, with a model trained by `bertzoo.tokenizers.train`:

        train_sentencepiece(["corpus.txt"], 8000, "spiece.model")
        tokenizer = SentencePieceTokenizer("spiece.model")
        ids = tokenizer(["Hello world", "Café"])  # ragged int32 ids
        tokenizer.detokenize(ids[0])              # ['▁hello', '▁world']
    """

    vocabulary_file = "spiece.model"
    kind = "sentencepiece"

    def __init__(
        self,
        proto,
        lowercase=True,
        strip_accents=True,
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="[MASK]",
    ):
        super().__init__(cls_token, sep_token, pad_token, unk_token, mask_token)
        self.proto, source = read_model_proto(proto)
        self.vocabulary = model_pieces(self.proto, source)
        self._check_special_tokens(source)
        self._preprocessor = AlbertPreprocessor(lowercase, strip_accents)
        self.lowercase = self._preprocessor.lowercase
        self.strip_accents = self._preprocessor.strip_accents
        self._digit = unicode.albert_patterns()["digit"]

    def get_config(self):
        return {
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            **{
                f"{r}_token": getattr(self, f"{r}_token")
                for r in ("cls", "sep", "pad", "unk", "mask")
            },
        }

    def preprocess(self, strings):
        """Steps 1-4 of the module docstring on a 1-D string batch."""
        return self._preprocessor(strings)

    def _encoder(self):
        """A tensorflow-text SentencePiece op over this model. Made per call,
        not once: its model resource belongs to an op kernel, and
        `keras.backend.clear_session()` (TensorFlow backend) clears the eager
        kernel cache, which would delete a resource made once and break the
        tokenizer. Per call, eager mode finds the kernel in the cache (a
        fraction of a millisecond) and a traced function (tf.function,
        tf.data, an exported graph) holds the op in its own graph."""
        return tf_text.SentencepieceTokenizer(model=self.proto, out_type=tf.string)

    def _split_digit_commas(self, encoder, pieces):
        """Step 6 of the module docstring on ragged pieces [batch, (pieces)]."""
        flat = pieces.flat_values  # (n,)
        hit = tf.strings.regex_full_match(flat, "(?s).*" + self._digit + ",")
        where = tf.where(hit)[:, 0]  # (k,) positions of the pieces to re-split
        chosen = tf.gather(flat, where)
        body = tf.strings.regex_replace(chosen, ",$", "")
        body = tf.strings.regex_replace(body, SPIECE_UNDERLINE, "")
        parts = encoder.tokenize(body)  # (k, (m))
        # Where the piece did not start with "▁" but its re-encoding does,
        # strip that "▁" from the first part, or drop the part if it is "▁".
        fix_row = ~tf.strings.regex_full_match(chosen, f"(?s){SPIECE_UNDERLINE}.*")
        rowids = parts.value_rowids()
        first = tf.equal(
            tf.range(tf.size(parts.flat_values, out_type=parts.row_splits.dtype)),
            tf.gather(parts.row_splits, rowids),
        )
        fix = (
            first
            & tf.gather(fix_row, rowids)
            & tf.strings.regex_full_match(parts.flat_values, f"(?s){SPIECE_UNDERLINE}.*")
        )
        values = tf.where(
            fix,
            tf.strings.regex_replace(parts.flat_values, "^" + SPIECE_UNDERLINE, ""),
            parts.flat_values,
        )
        keep = ~(fix & tf.equal(parts.flat_values, SPIECE_UNDERLINE))
        parts = tf.ragged.boolean_mask(parts.with_flat_values(values), parts.with_flat_values(keep))
        comma = tf.RaggedTensor.from_tensor(tf.fill([tf.size(where), 1], ","))
        parts = tf.concat([parts, comma], axis=1)
        # Each piece becomes a row: itself, or its re-split parts.
        rows = tf.concat([tf.RaggedTensor.from_tensor(flat[:, None]), parts], axis=0)
        n = tf.size(flat, out_type=tf.int64)
        order = tf.tensor_scatter_nd_update(
            tf.range(n), where[:, None], n + tf.range(tf.size(where, out_type=tf.int64))
        )
        expanded = tf.gather(rows, order)  # (n, (r))
        return pieces.with_values(expanded).merge_dims(1, 2)

    def pieces(self, strings, encoder=None):
        """A 1-D string batch -> ragged pieces (tf.string), as the reference
        produces them before looking up their ids."""
        encoder = encoder or self._encoder()
        pieces = encoder.tokenize(self.preprocess(strings))
        return self._split_digit_commas(encoder, pieces)

    def tokenize_ids(self, strings):
        encoder = self._encoder()
        ids = encoder.string_to_id(self.pieces(strings, encoder))
        return tf.cast(ids, tf.int32)

    def _offset_split_patterns(self):
        """Pieces for `tokenize_with_offsets`: whitespace-delimited words
        (`str.isspace`, the characters step 1 turns into spaces). With the
        SentencePiece models ALBERT uses (whitespace pre-splitting and a
        dummy "▁" prefix, the defaults) no piece crosses whitespace, so
        every word tokenizes alone to exactly its tokens in the whole text;
        all the tokens of a word share its span."""
        return self._preprocessor._patterns["space"], None

    def _write_vocabulary(self, path):
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(self.proto)
