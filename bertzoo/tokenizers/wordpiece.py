"""WordPiece tokenizer (BERT, DistilBERT, TinyBERT vocabularies) in
TensorFlow ops, token-for-token identical to the reference tokenizer a
checkpoint was trained with (`reference`: "google", "hf-python" or
"hf-fast"; see `basic.py`).

The steps and their reference semantics are those of `basic.py` (the plain
Python specification) and, for "hf-fast", `hf_fast.py` (per-code-point
tables measured from the Rust tokenizer, applied with one lookup per
character). For the Python references each step is a string op over the
whole batch: character classes (control, whitespace, punctuation,
nonspacing marks, CJK) are computed from Python's `unicodedata` -- the same
tables the reference tokenizer uses -- and compiled into RE2 character
classes; lowercasing and NFD use ICU (`tf.strings.lower`,
`tensorflow_text.normalize_utf8`), with a correction table for the few code
points where ICU and Python's Unicode versions disagree and Python's own
final-sigma rule. WordPiece is tensorflow-text's greedy longest-match
`FastWordpieceTokenizer`, with the reference's word limit (200 characters,
100 in the Hugging Face implementations) applied first.
"""

import functools
import unicodedata
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

from bertzoo.io.bounded import MAX_TOKENS, TOKENIZER_BYTES, read_bounded_text
from bertzoo.io.publish import atomic_write_text
from bertzoo.tokenizers import basic, hf_fast, python_wordpiece, unicode
from bertzoo.tokenizers.base import (
    SPECIAL_ROLES,
    Tokenizer,
    TokenizerError,
    regex_pieces,
    register_tokenizer,
    row_ids,
)


@functools.cache
def _nfc_composing_punctuation():
    """Punctuation characters that NFC can compose with a following mark
    ("<" + U+0338 -> U+226E): under "hf-python" (which NFC-composes) they are
    not piece boundaries for offsets."""
    firsts = set()
    for cp in range(0x30000):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<") and len(d.split()) == 2:
            firsts.add(int(d.split()[0], 16))
    return frozenset(c for c in firsts if basic.is_punctuation(chr(c)))


@functools.cache
def _hf_python_kept_punctuation():
    composing = _nfc_composing_punctuation()
    return unicode.char_class(lambda c: basic.is_punctuation(c) and ord(c) not in composing)


@functools.cache
def _hf_fast_offset_classes(lowercase, strip_accents):
    """(whitespace, kept) RE2 classes of raw code points for offsets under
    "hf-fast": what normalises to a space, and what becomes a piece of its
    own (a punctuation character, or a padded CJK ideograph)."""
    mapping = hf_fast.code_point_map(lowercase, strip_accents)
    punct = hf_fast.tables()["punct"]
    is_punct = hf_fast._in_ranges(punct)
    space = [cp for cp, t in mapping.items() if t == (32,)] + [32]
    kept = [c for lo, hi in punct for c in range(lo, hi + 1) if c not in mapping]
    kept += [
        cp
        for cp, t in mapping.items()
        if (len(t) == 1 and t[0] >= 0 and is_punct(t[0])) or (len(t) == 3 and t[0] == t[2] == 32)
    ]
    return unicode.code_point_class(space), unicode.code_point_class(kept)


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


def _whole_where(strings, whole, words_of):
    """Ragged [len(strings), (words)]: `words_of(strings)` where `whole` is
    false, the string itself as one word where it is true."""
    plain = words_of(tf.where(whole, "", strings)).with_row_splits_dtype(tf.int64)
    kept = tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(strings, whole), tf.cast(whole, tf.int64)
    )
    return tf.concat([plain, kept], axis=1)


@functools.cache
def _hf_fast_pretokenizer_classes():
    """(punctuation, whitespace) RE2 classes of the Rust pre-tokenizer."""
    t = hf_fast.tables()
    return unicode.ranges_class(t["punct"]), unicode.ranges_class(t["whitespace"])


GREEK_CAPITAL_SIGMA = 0x3A3


def write_vocabulary(path, tokens):
    """Writes a vocab.txt (one token per line) atomically."""
    atomic_write_text(path, "".join(t + "\n" for t in tokens))


def read_vocabulary(vocabulary):
    """A vocab.txt path (one token per line) or a sequence of tokens -> list."""
    if isinstance(vocabulary, str | Path):
        path = Path(vocabulary)
        try:
            text = read_bounded_text(path, TOKENIZER_BYTES, "vocabulary file", TokenizerError)
        except FileNotFoundError:
            raise TokenizerError(f"Vocabulary file {path} does not exist.") from None
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
    if len(tokens) > MAX_TOKENS:
        raise TokenizerError(
            f"{source} lists {len(tokens):,} tokens; a vocabulary holds at most {MAX_TOKENS:,}."
        )
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
        reference: the implementation the checkpoint was trained with:
            "google" (google-research/bert; the default, and what bertzoo's
            vocabulary trainer uses), "hf-python" (transformers' Python
            port) or "hf-fast" (the Rust `tokenizers` library, i.e. any
            checkpoint shipped with a `tokenizer.json`). Presets record it;
            see `bertzoo/tokenizers/basic.py` for the differences.
        control_chars: None (the reference's), "google" (drop Cc, Cf) or
            "hf" (drop all C*); only for the "google"/"hf-python" references.
        *_token: the special tokens; all must be in the vocabulary.
        added_tokens: more strings that the Hugging Face references match in
            the text as whole tokens (a tokenizer.json's added tokens); each
            must be in the vocabulary.

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
        reference="google",
        control_chars=None,
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
        added_tokens=(),
    ):
        super().__init__(cls_token, sep_token, pad_token, unk_token, mask_token)
        try:
            self.reference = basic.check_reference(reference)
            self._control_chars = basic.resolve_control_chars(reference, control_chars)
        except ValueError as e:
            raise TokenizerError(str(e)) from None
        self.control_chars = control_chars
        self.vocabulary, source = read_vocabulary(vocabulary)
        self._check_special_tokens(source)
        self.added_tokens = tuple(added_tokens)
        missing = [t for t in self.added_tokens if t not in self._index]
        if missing:
            raise TokenizerError(
                f"{source} lacks the added token(s) {', '.join(map(repr, missing[:5]))}; "
                "added tokens must be vocabulary entries."
            )
        self.lowercase = bool(lowercase)
        self.strip_accents = basic.resolve_strip_accents(lowercase, strip_accents)
        self.pair_truncation = "hf-fast" if reference == "hf-fast" else "google"
        self._max_chars = basic.MAX_CHARS_PER_WORD[reference]
        self._special_tokens = (
            tuple(getattr(self, f"{r}_token") for r in SPECIAL_ROLES) + self.added_tokens
            if basic.matches_special_tokens(reference)
            else ()
        )
        self._special_pattern = (
            basic.special_token_pattern(self._special_tokens) if self._special_tokens else None
        )
        if reference != "hf-fast":
            self._patterns = unicode.wordpiece_patterns(self._control_chars)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=self.vocabulary,
            suffix_indicator="##",
            max_bytes_per_word=4 * self._max_chars + 4,
            unknown_token=unk_token,
            no_pretokenization=True,
            support_detokenization=False,
        )

    def get_config(self):
        config = {
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "reference": self.reference,
            **{
                f"{r}_token": getattr(self, f"{r}_token")
                for r in ("cls", "sep", "pad", "unk", "mask")
            },
        }
        if self.control_chars is not None:
            config["control_chars"] = self.control_chars
        if self.added_tokens:
            config["added_tokens"] = list(self.added_tokens)
        return config

    def preset_section(self):
        section = {**super().preset_section(), "reference": self.reference}
        if self.control_chars is not None:
            section["control_chars"] = self.control_chars
        if self.added_tokens:
            section["added_tokens"] = list(self.added_tokens)
        return section

    def python_settings(self):
        """(section, tables): this tokenizer's settings and character
        tables as plain JSON values, for `python_wordpiece` (see there);
        an export writes them beside its `run.py`."""
        section = {
            "kind": self.kind,
            "vocabulary_file": self.vocabulary_file,
            **{f"{r}_token": getattr(self, f"{r}_token") for r in SPECIAL_ROLES},
            "lowercase": self.lowercase,
            "strip_accents": self.strip_accents,
            "reference": self.reference,
            "added_tokens": list(self.added_tokens),
            "max_chars_per_word": self._max_chars,
        }
        if self.reference != "hf-fast":
            tables = {name: unicode.class_ranges(p) for name, p in self._patterns.items()}
            return section, tables
        starts, ends, which, values, splits, ccc = hf_fast._tf_tables(
            self.lowercase, self.strip_accents
        )
        classes = hf_fast.tables()
        tables = {
            "starts": starts,
            "ends": ends,
            "which": which,
            "values": values,
            "splits": splits,
            "ccc": [list(pair) for pair in ccc],
            "punct": classes["punct"],
            "whitespace": classes["whitespace"],
        }
        return section, tables

    def python_tokenizer(self):
        """This tokenizer in plain Python (`python_wordpiece`): the same
        ids for a string, without TensorFlow's cost per call. Built once."""
        cached = self.__dict__.get("_python_tokenizer")
        if cached is None:
            section, tables = self.python_settings()
            cached = python_wordpiece.WordPieceTokenizer(self.vocabulary, section, tables)
            self.__dict__["_python_tokenizer"] = cached
        return cached

    def words(self, strings):
        """The reference BasicTokenizer in graph ops: a 1-D string batch ->
        ragged words (tf.string), normalised as WordPiece will see them. A
        special-token string matched in the text (Hugging Face references)
        is one word, the token itself."""
        # Invalid UTF-8 becomes U+FFFD, which cleaning then drops.
        text = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        if self._special_pattern is None:
            return self._plain_words(text)
        pieces, starts, _ = regex_pieces(text, self._special_pattern, self._special_pattern)
        special = tf.strings.regex_full_match(pieces, self._special_pattern)
        words = _whole_where(pieces, special, self._plain_words)
        return starts.with_flat_values(words).merge_dims(1, 2)

    def _plain_words(self, text):
        if self.reference == "hf-fast":
            text = hf_fast.normalize_ops(text, self.lowercase, self.strip_accents)
            punct, space = _hf_fast_pretokenizer_classes()
            text = tf.strings.regex_replace(text, f"({punct})", r" \1 ")
            text = tf.strings.regex_replace(text, space, " ")
            return tf.strings.split(text, sep=None)
        p = self._patterns
        text = tf.strings.regex_replace(text, p["drop"], "")
        text = tf.strings.regex_replace(text, p["space"], " ")
        text = tf.strings.regex_replace(text, f"({p['cjk']})", r" \1 ")
        if self.reference != "hf-python":
            return self._split_words(text)
        text = tf_text.normalize_utf8(text, "NFC")
        if self._special_pattern is None:
            return self._split_words(text)
        # The Python port keeps a whitespace-delimited word that is a special
        # token once cleaned ("[\u200bSEP]") whole ("never_split").
        words = tf.strings.split(text, sep=None)
        special = tf.strings.regex_full_match(words.flat_values, self._special_pattern)
        return words.with_flat_values(
            _whole_where(words.flat_values, special, self._split_words)
        ).merge_dims(1, 2)

    def _split_words(self, text):
        """Lowercasing, accent stripping and punctuation splitting of cleaned
        text, split into words."""
        p = self._patterns
        if self.lowercase:
            text = unicode.python_lower(text)
        if self.strip_accents:
            text = tf_text.normalize_utf8(text, "NFD")
            text = tf.strings.regex_replace(text, p["mark"], "")
        text = tf.strings.regex_replace(text, f"({p['punct']})", r" \1 ")
        return tf.strings.split(text, sep=None)

    def tokenize_ids(self, strings):
        words = self.words(strings)
        # Words over the limit are [UNK]; a matched special token is never
        # over it (it is a vocabulary entry, and at most a few characters).
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self._max_chars
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
        space, kept = self.offset_classes()
        kept = "|".join(kept)
        if self._special_pattern:
            kept = f"{self._special_pattern}|{kept}"
        return f"{space}|{kept}", kept

    def offset_classes(self):
        """(whitespace class, [kept classes]): the RE2 character classes of
        `_offset_split_patterns` (without the special tokens), which an
        export's runner also splits on (`bertzoo.export.tokenizer_files`)."""
        if self.reference == "hf-fast":
            space, kept = _hf_fast_offset_classes(self.lowercase, self.strip_accents)
            return space, [kept]
        p = self._patterns
        punct = _hf_python_kept_punctuation() if self.reference == "hf-python" else p["punct"]
        return p["space"], [punct, _kept_cjk_class(self._control_chars)]

    def _offset_pieces(self, strings):
        """Under "hf-python" a whitespace-delimited word that is a special
        token once cleaned and NFC-composed ("[\u200bSEP]") is one token, so
        it must stay one piece: words first, then the other words split at
        punctuation and CJK ideographs."""
        if self.reference != "hf-python" or not self._special_pattern:
            return super()._offset_pieces(strings)
        delimiters, kept = self._offset_split_patterns()
        words, word_starts, _ = regex_pieces(strings, self._patterns["space"])
        cleaned = tf_text.normalize_utf8(
            tf.strings.regex_replace(words, self._patterns["drop"], ""), "NFC"
        )
        whole = tf.strings.regex_full_match(cleaned, self._special_pattern)
        _, sub_starts, sub_ends = regex_pieces(tf.where(whole, "", words), kept, kept)
        one = tf.cast(whole, tf.int64)
        zeros = tf.zeros_like(tf.boolean_mask(one, whole))
        sub_starts = tf.concat([sub_starts, tf.RaggedTensor.from_row_lengths(zeros, one)], 1)
        lengths = tf.boolean_mask(tf.cast(tf.strings.length(words), tf.int64), whole)
        sub_ends = tf.concat([sub_ends, tf.RaggedTensor.from_row_lengths(lengths, one)], 1)
        # Offsets within a word -> within its text.
        shift = tf.repeat(word_starts.flat_values, sub_starts.row_lengths())
        starts = word_starts.with_flat_values(sub_starts).merge_dims(1, 2)
        starts = starts.with_flat_values(sub_starts.flat_values + shift)
        ends = starts.with_flat_values(sub_ends.flat_values + shift)
        pieces = tf.strings.substr(
            tf.gather(strings, row_ids(starts.row_splits)),
            starts.flat_values,
            ends.flat_values - starts.flat_values,
        )
        return pieces, starts, ends

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
        if not self.lowercase or self.reference == "hf-fast":  # hf-fast: no context
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
        tokenizer = basic.BasicTokenizer(
            self.lowercase,
            self.strip_accents,
            self.reference,
            self.control_chars,
            special_tokens=self._special_tokens,
        )
        return basic.tokenize_to_pieces(text, self._index, tokenizer, self.unk_token)
