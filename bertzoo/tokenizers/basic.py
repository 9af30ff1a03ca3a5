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
   longer than 100 characters, or one that cannot be covered, is [UNK].

Control characters differ between the two references: google-research/bert
drops categories Cc and Cf, Hugging Face every category starting with "C"
(also Co private use and Cn unassigned). `control_chars="hf"` (default) or
`"google"` picks one.
"""

import unicodedata

CONTROL_CATEGORIES = {"hf": ("Cc", "Cf", "Cn", "Co", "Cs"), "google": ("Cc", "Cf")}
MAX_CHARS_PER_WORD = 100

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


def check_control_chars(control_chars):
    if control_chars not in CONTROL_CATEGORIES:
        raise ValueError(
            f"control_chars must be one of {', '.join(CONTROL_CATEGORIES)}, got {control_chars!r}."
        )


def resolve_strip_accents(lowercase, strip_accents):
    """The reference's default: accents are stripped iff lowercasing."""
    return lowercase if strip_accents is None else bool(strip_accents)


class BasicTokenizer:
    """Text -> words, exactly as the reference BasicTokenizer.

    Args:
        lowercase: lowercase words (uncased checkpoints).
        strip_accents: NFD + drop marks. None follows `lowercase`.
        control_chars: "hf" or "google" (see the module docstring).
    """

    def __init__(self, lowercase=True, strip_accents=None, control_chars="hf"):
        check_control_chars(control_chars)
        self.lowercase = bool(lowercase)
        self.strip_accents = resolve_strip_accents(lowercase, strip_accents)
        self.control_chars = control_chars

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
        text = self.clean(text)
        text = "".join(f" {c} " if is_cjk(c) else c for c in text)
        words = []
        for word in text.split():
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


def wordpiece(word, vocabulary, unk_token="[UNK]", max_chars=MAX_CHARS_PER_WORD):
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
    """Reference tokenization: text -> WordPiece strings."""
    return [p for word in basic.tokenize(text) for p in wordpiece(word, vocabulary, unk_token)]
