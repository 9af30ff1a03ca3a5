"""WordPiece tokenizer (BERT, DistilBERT, TinyBERT vocabularies) in
TensorFlow ops, token-for-token identical to the reference tokenizer.

The steps and their reference semantics are those of `basic.py` (the plain
Python specification). Here each step is a string op over the whole batch:
character classes (control, whitespace, punctuation, nonspacing marks, CJK)
are computed from Python's `unicodedata` -- the same tables the reference
tokenizer uses -- and compiled into RE2 character classes; lowercasing and
NFD use ICU (`tf.strings.lower`, `tensorflow_text.normalize_utf8`), with a
correction table for the few code points where ICU and Python's Unicode
versions disagree; WordPiece is tensorflow-text's greedy longest-match
`FastWordpieceTokenizer`, with the reference's 100-character word limit
applied first.
"""

import functools
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

from bertzoo.io.publish import atomic_write_text
from bertzoo.tokenizers import basic, unicode
from bertzoo.tokenizers.base import Tokenizer, TokenizerError, register_tokenizer, row_ids


@functools.cache
def _kept_cjk_class(control_chars):
    """The CJK ideograph ranges minus the characters cleaning drops (the
    ranges hold a few unassigned code points, which "hf" mode drops): a
    dropped character must stay inside its piece, never split it."""

    def dropped(char):
        return char in "\x00\ufffd" or basic.is_control(char, control_chars)

    parts = []
    for lo, hi in basic.CJK_RANGES:
        start = None
        for cp in range(lo, hi + 2):
            keep = cp <= hi and not dropped(chr(cp))
            if keep and start is None:
                start = cp
            elif not keep and start is not None:
                parts.append(f"\\x{{{start:x}}}-\\x{{{cp - 1:x}}}")
                start = None
    return "[" + "".join(parts) + "]"


GREEK_CAPITAL_SIGMA = 0x3A3


def write_vocabulary(path, tokens):
    """Writes a vocab.txt (one token per line) atomically."""
    atomic_write_text(path, "".join(t + "\n" for t in tokens))


def read_vocabulary(vocabulary):
    """A vocab.txt path (one token per line) or a sequence of tokens -> list."""
    if isinstance(vocabulary, str | Path):
        path = Path(vocabulary)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TokenizerError(f"Vocabulary file {path} does not exist.") from None
        except UnicodeDecodeError as e:
            raise TokenizerError(f"Vocabulary file {path} is not UTF-8: {e}") from None
        tokens = text.split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        tokens = [t.rstrip("\r") for t in tokens]
        source = str(path)
    else:
        tokens = [str(t) for t in vocabulary]
        source = "The vocabulary"
    if not tokens:
        raise TokenizerError(f"{source} is empty.")
    seen, dupes = set(), []
    for t in tokens:
        if t in seen:
            dupes.append(t)
        seen.add(t)
    if dupes:
        raise TokenizerError(
            f"{source} lists {len(dupes)} token(s) more than once (e.g. "
            f"{', '.join(repr(t) for t in dupes[:5])}); each token needs one id."
        )
    if "" in seen:
        raise TokenizerError(f"{source} has an empty line (token {tokens.index('')}).")
    return tokens, source


@register_tokenizer
class BertTokenizer(Tokenizer):
    """Text -> WordPiece ids, exactly as the reference BERT tokenizer.

    Args:
        vocabulary: path to a `vocab.txt` or a list of tokens (index = id).
        lowercase: lowercase the text (uncased checkpoints).
        strip_accents: NFD + drop nonspacing marks; None follows `lowercase`
            (the reference default). Note this decomposes Hangul syllables
            into jamo: keep it off for Korean vocabularies trained without it.
        control_chars: "hf" (drop all category C*) or "google" (Cc, Cf only).
        *_token: the special tokens; all must be in the vocabulary.

    >>> tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ...                            "hello", "world", "##s", "!"])
    >>> tokenizer.detokenize(tokenizer("Hello worlds!"))
    ['hello', 'world', '##s', '!']
    """

    vocabulary_file = "vocab.txt"
    kind = "wordpiece"

    def __init__(
        self,
        vocabulary,
        lowercase=True,
        strip_accents=None,
        control_chars="hf",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
    ):
        super().__init__(cls_token, sep_token, pad_token, unk_token, mask_token)
        basic.check_control_chars(control_chars)
        self.vocabulary, source = read_vocabulary(vocabulary)
        self._check_special_tokens(source)
        self.lowercase = bool(lowercase)
        self.strip_accents = basic.resolve_strip_accents(lowercase, strip_accents)
        self.control_chars = control_chars
        self._patterns = unicode.wordpiece_patterns(control_chars)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self.vocabulary,
            suffix_indicator="##",
            max_bytes_per_word=4 * basic.MAX_CHARS_PER_WORD + 4,
            unknown_token=unk_token,
            no_pretokenization=True,
            support_detokenization=False,
        )

    def get_config(self):
        return {
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "control_chars": self.control_chars,
            **{
                f"{r}_token": getattr(self, f"{r}_token")
                for r in ("cls", "sep", "pad", "unk", "mask")
            },
        }

    def words(self, strings):
        """The reference BasicTokenizer in graph ops: a 1-D string batch ->
        ragged words (tf.string), normalised as WordPiece will see them."""
        p = self._patterns
        # Invalid UTF-8 becomes U+FFFD, which cleaning then drops.
        text = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        text = tf.strings.regex_replace(text, p["drop"], "")
        text = tf.strings.regex_replace(text, p["space"], " ")
        text = tf.strings.regex_replace(text, f"({p['cjk']})", r" \1 ")
        if self.lowercase:
            text = unicode.python_lower(text)
        if self.strip_accents:
            text = tf_text.normalize_utf8(text, "NFD")
            text = tf.strings.regex_replace(text, p["mark"], "")
        text = tf.strings.regex_replace(text, f"({p['punct']})", r" \1 ")
        return tf.strings.split(text, sep=None)

    def tokenize_ids(self, strings):
        words = self.words(strings)
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > basic.MAX_CHARS_PER_WORD
        flat = tf.where(too_long, self.unk_token, words.flat_values)
        # Words over the limit become the [UNK] token itself, which WordPiece
        # then matches whole (it is in the vocabulary).
        pieces = self._wordpiece.tokenize(flat)  # (words, pieces)
        ids = words.with_flat_values(pieces).merge_dims(1, 2)
        return tf.cast(ids, tf.int32)

    def _offset_split_patterns(self):
        """Pieces for `tokenize_with_offsets`: split at whitespace (dropped)
        and around every punctuation character and CJK ideograph (each kept
        as a piece). The reference's words never cross these boundaries, so
        the pieces tokenize to exactly the tokens of the whole text. Control
        characters are not boundaries: cleaning deletes them inside words
        ("a\\u200bb" is one word "ab"). A few characters that only become
        punctuation after normalisation (U+1FEF GREEK VARIA -> "`" under
        strip_accents) stay inside their piece: still the same tokens, with
        the piece's span."""
        p = self._patterns
        kept = f"{p['punct']}|{_kept_cjk_class(self.control_chars)}"
        return f"{p['space']}|{kept}", kept

    def _offset_prepare(self, strings):
        """Lowercasing is per character except for Greek capital sigma, whose
        lowercase (final "ς" or "σ") depends on the letters around it, also
        across punctuation ("ΟΔΟΣ.Χ" vs "ΟΔΟΣ" alone). So each Σ is replaced
        up front by the letter the whole text lowercases it to (2 bytes
        like Σ: offsets are unchanged). The context is computed on the text
        as `words` lowercases it, with each dropped character replaced by
        U+00AD (case-ignorable, so the same for the final-sigma rule as
        deleting it) and U+0130 by "I" (its lowercase is two characters), so
        that characters stay aligned. Rows with invalid UTF-8 are left as
        they are."""
        if not self.lowercase:
            return strings
        p = self._patterns
        rows = tf.where(tf.strings.regex_full_match(strings, "(?s).*\u03a3.*"))[:, 0]
        chosen = tf.gather(strings, rows)
        chars = tf.strings.unicode_decode(chosen, "UTF-8", errors="replace")
        valid = tf.equal(tf.strings.unicode_encode(chars, "UTF-8"), chosen)
        context = tf.strings.regex_replace(chosen, p["drop"], "\u00ad")
        context = tf.strings.regex_replace(context, p["space"], " ")
        context = tf.strings.regex_replace(context, "\u0130", "I")
        lowered = tf.strings.unicode_decode(
            unicode.python_lower(context), "UTF-8", errors="replace"
        )
        aligned = valid & tf.equal(lowered.row_lengths(), chars.row_lengths())
        # Each character's lowercase, where the row aligns (it always should;
        # a row that does not keeps its raw text).
        row = row_ids(chars.row_splits)
        at = tf.range(tf.size(chars.flat_values, out_type=tf.int64)) - tf.gather(
            chars.row_splits, row
        )
        at = tf.gather(lowered.row_splits, row) + at
        padded = tf.concat([lowered.flat_values, tf.zeros([1], lowered.flat_values.dtype)], 0)
        lower = tf.gather(padded, tf.minimum(at, tf.size(padded, out_type=tf.int64) - 1))
        use = tf.equal(chars.flat_values, GREEK_CAPITAL_SIGMA) & tf.gather(aligned, row)
        fixed = chars.with_flat_values(tf.where(use, lower, chars.flat_values))
        fixed = tf.where(aligned, tf.strings.unicode_encode(fixed, "UTF-8"), chosen)
        return tf.tensor_scatter_nd_update(strings, rows[:, None], fixed)

    def _write_vocabulary(self, path):
        write_vocabulary(path, self.vocabulary)

    def reference_pieces(self, text):
        """The plain-Python reference tokenization of one string (pieces)."""
        tokenizer = basic.BasicTokenizer(self.lowercase, self.strip_accents, self.control_chars)
        return basic.tokenize_to_pieces(text, self._index, tokenizer, self.unk_token)
