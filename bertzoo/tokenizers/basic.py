"""BERT's text normalisation and WordPiece, in plain Python.

This is the specification the TensorFlow-op tokenizer (`wordpiece.py`) is
tested against, and the pre-tokenizer the vocabulary trainer counts words
with. It follows the reference tokenizer (google-research/bert
`tokenization.py`, Hugging Face `BertTokenizer`) step by step:

1. clean: drop U+0000, U+FFFD and control characters; every whitespace
   character becomes a space;
2. put spaces around CJK ideographs (so each is its own word);
3. split on whitespace;
4. per word: lowercase (`str.lower`), strip accents (NFD, then drop
   nonspacing marks, category Mn: this also decomposes Hangul syllables
   into jamo, as the reference does), split off every punctuation character;
5. WordPiece: greedy longest-match-first with "##" continuations; a word
   longer than 200 characters (100 in the Hugging Face implementations), or
   one that cannot be covered, is [UNK].

The reference implementations differ in details, and a checkpoint expects
the ones it was trained with; `reference` names them (`REFERENCES`):
- "google": google-research/bert `tokenization.py` exactly: cleaning drops
  categories Cc and Cf (an unassigned or private-use code point stays in
  its word), Python's `str.lower` (final sigma by context), words and
  special-token strings ("[SEP]" in a text) are plain text;
- "hf-python": transformers' Python port (`BertTokenizerLegacy`): cleaning
  drops every category C*, the text is NFC-composed after cleaning and CJK
  padding, and special-token strings in the text are matched as tokens;
- "hf-fast": the Rust `tokenizers` library behind every `tokenizer.json`
  (`hf_fast.py`: its own character tables and Unicode versions, no
  final-sigma context, accents stripped before lowercasing), special-token
  strings matched as tokens.
The pair-truncation rule differs too (`bertzoo.preprocessing`).
`control_chars` ("google" or "hf") overrides the cleaning of the two
Python references; earlier bertzoo versions used "google" with "hf".
"""

import re
import unicodedata

REFERENCES = ("google", "hf-python", "hf-fast")
CONTROL_CATEGORIES = {"hf": ("Cc", "Cf", "Cn", "Co", "Cs"), "google": ("Cc", "Cf")}
_REFERENCE_CONTROL_CHARS = {"google": "google", "hf-python": "hf"}
# A longer word is [UNK] as a whole: google-research/bert's WordpieceTokenizer
# allows 200 characters, both Hugging Face implementations 100.
MAX_CHARS_PER_WORD = {"google": 200, "hf-python": 100, "hf-fast": 100}

# CJK Unified Ideographs blocks as the reference lists them (not Hangul,
# Hiragana or Katakana, which are written with spaces or handled by WordPiece).
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_whitespace(char):
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_control(char, control_chars="hf"):
    if char in "\t\n\r":
        return False
    return unicodedata.category(char) in CONTROL_CATEGORIES[control_chars]


def is_punctuation(char):
    cp = ord(char)
    # All non-alphanumeric ASCII counts ("^", "$", "`" are not category P).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(char):
    cp = ord(char)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def check_reference(reference):
    if reference not in REFERENCES:
        raise ValueError(
            f"reference must be one of {', '.join(REFERENCES)} (the tokenizer implementation "
            f"a checkpoint was trained with), got {reference!r}."
        )
    return reference


def resolve_control_chars(reference, control_chars=None):
    """The cleaning rule ("google" or "hf") of a Python reference; None for
    "hf-fast", whose cleaning is its own table."""
    check_reference(reference)
    if reference == "hf-fast":
        if control_chars is not None:
            raise ValueError(
                'control_chars applies to the "google" and "hf-python" references; '
                '"hf-fast" cleans text as the Rust tokenizer does. Leave control_chars unset.'
            )
        return None
    if control_chars is None:
        return _REFERENCE_CONTROL_CHARS[reference]
    if control_chars not in CONTROL_CATEGORIES:
        raise ValueError(
            f"control_chars must be one of {', '.join(CONTROL_CATEGORIES)}, got {control_chars!r}."
        )
    return control_chars


def matches_special_tokens(reference):
    """Whether special-token strings written in a text ("[SEP]") become
    those tokens (the Hugging Face references) or plain text (google)."""
    return check_reference(reference) != "google"


def special_token_pattern(tokens):
    """A regular expression (Python `re` and RE2 alike) matching any of
    `tokens`, leftmost and then longest first, as Hugging Face's added-token
    trie does."""
    return "|".join(re.escape(t) for t in sorted(set(tokens), key=lambda t: (-len(t), t)))


def split_special_tokens(text, tokens):
    """[(piece, is_special)] of `text` split around the special `tokens`."""
    if not tokens:
        return [(text, False)]
    out, start = [], 0
    for m in re.finditer(special_token_pattern(tokens), text):
        out.append((text[start : m.start()], False))
        out.append((m.group(), True))
        start = m.end()
    out.append((text[start:], False))
    return [(piece, special) for piece, special in out if piece]


def resolve_strip_accents(lowercase, strip_accents):
    """The reference's default: accents are stripped iff lowercasing."""
    return lowercase if strip_accents is None else bool(strip_accents)


class BasicTokenizer:
    """Text -> words, exactly as the reference BasicTokenizer.

    Args:
        lowercase: lowercase words (uncased checkpoints).
        strip_accents: NFD + drop marks. None follows `lowercase`.
        reference: "google", "hf-python" or "hf-fast" (module docstring).
        control_chars: None (the reference's), "hf" or "google".
        special_tokens: strings kept whole where written in the text (only
            with the Hugging Face references).
    """

    def __init__(
        self,
        lowercase=True,
        strip_accents=None,
        reference="google",
        control_chars=None,
        special_tokens=(),
    ):
        self.reference = check_reference(reference)
        self.control_chars = resolve_control_chars(reference, control_chars)
        self.lowercase = bool(lowercase)
        self.strip_accents = resolve_strip_accents(lowercase, strip_accents)
        self.special_tokens = tuple(special_tokens) if matches_special_tokens(reference) else ()

    def clean(self, text):
        out = []
        for char in text:
            if char == "\x00" or char == "\ufffd" or is_control(char, self.control_chars):
                continue
            out.append(" " if is_whitespace(char) else char)
        return "".join(out)

    def normalize_word(self, word):
        if self.lowercase:
            word = word.lower()
        if self.strip_accents:
            word = "".join(
                c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn"
            )
        return word

    def tokenize(self, text):
        words = []
        for piece, special in split_special_tokens(text, self.special_tokens):
            words.extend([piece] if special else self._words(piece))
        return words

    def _words(self, text):
        if self.reference == "hf-fast":
            return self._hf_fast_words(text)
        text = self.clean(text)
        text = "".join(f" {c} " if is_cjk(c) else c for c in text)
        if self.reference == "hf-python":
            text = unicodedata.normalize("NFC", text)
        words = []
        for word in text.split():
            if word in self.special_tokens:  # hf-python's "never_split"
                words.append(word)
                continue
            word = self.normalize_word(word)
            current = []
            for char in word:
                if is_punctuation(char):
                    if current:
                        words.append("".join(current))
                        current = []
                    words.append(char)
                else:
                    current.append(char)
            if current:
                words.append("".join(current))
        # The reference re-splits on whitespace: lowercasing or NFD never
        # creates whitespace, but str.split also splits on U+2028/U+2029 etc.
        return [w for word in words for w in word.split()]

    def _hf_fast_words(self, text):
        from bertzoo.tokenizers import hf_fast

        text = hf_fast.normalize(text, self.lowercase, self.strip_accents)
        words, current = [], []
        for char in text + " ":
            space, punct = hf_fast.is_whitespace(char), hf_fast.is_punctuation(char)
            if (space or punct) and current:
                words.append("".join(current))
                current = []
            if punct:
                words.append(char)
            elif not space:
                current.append(char)
        return words


def wordpiece(word, vocabulary, unk_token="[UNK]", max_chars=100):
    """Greedy longest-match-first WordPiece of one word (a set or dict of
    tokens); a word that cannot be covered is [UNK] as a whole."""
    if len(word) > max_chars:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocabulary:
                break
            end -= 1
        else:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def tokenize_to_pieces(text, vocabulary, basic, unk_token="[UNK]"):
    """Reference tokenization: text -> WordPiece strings (a special token
    matched in the text is one piece)."""
    specials = set(basic.special_tokens)
    limit = MAX_CHARS_PER_WORD[basic.reference]
    return [
        p
        for word in basic.tokenize(text)
        for p in ([word] if word in specials else wordpiece(word, vocabulary, unk_token, limit))
    ]
