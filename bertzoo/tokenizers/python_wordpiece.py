"""bertzoo's WordPiece tokenizer (`BertTokenizer`) in plain Python: text ->
the same token ids (and byte offsets), with the standard library alone.

Two users:
- `TextEmbedder` on its LiteRT int8 path packs single texts and small
  batches here (0.07 ms for a short text, against about 0.4 ms for one
  call of the tokenizer's TensorFlow graph);
- ONNX and LiteRT exports ship this file beside their `run.py` (as
  `wordpiece.py`, loaded by path), which tokenizes with it and needs
  neither TensorFlow nor bertzoo.

So this module imports nothing from bertzoo. What it needs of the
tokenizer comes in three plain values (`BertTokenizer.python_settings`
makes them; an export writes them to `export.json` and
`tokenizer_tables.json`):
- the vocabulary, a list of tokens (index = id);
- `section`: reference, lowercase, strip_accents, the special and added
  tokens, the word length limit;
- `tables`: the character classes of the reference's cleaning, CJK,
  punctuation and accent steps as code point ranges ("google",
  "hf-python"), or the Rust normaliser's per-code-point templates
  ("hf-fast", exact by construction); an export's tables add the classes
  that `tokenize_with_offsets` splits at.
Lowercasing, NFD and NFC of the Python references are Python's own
(`str.lower`, `unicodedata`): what those references run, and what
bertzoo's TensorFlow tokenizer reproduces for the running Python's Unicode
version. So ids are identical in-process, and an export's ids are
bertzoo's on the Python (Unicode) version that wrote it.
"""

import bisect
import re
import unicodedata

# hf-fast normaliser templates: the code point itself; a removed starter.
SELF, BREAK = -1, -2
# What TensorFlow's string split (and so bertzoo) splits words on.
_ASCII_SPACE = re.compile(r"[ \t\n\v\f\r]+")


def _char_class(ranges):
    """A Python `re` character class of inclusive code point ranges."""
    if not ranges:
        return "(?!)"  # matches nothing
    parts = (f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)
    return "[" + "".join(parts) + "]"


def split_words(text):
    return [w for w in _ASCII_SPACE.split(text) if w]


def _special_pattern(tokens):
    """Leftmost, then longest first (Hugging Face's added-token matching)."""
    ordered = sorted(set(tokens), key=lambda t: (-len(t), t))
    return re.compile("|".join(re.escape(t) for t in ordered))


class WordPieceTokenizer:
    """bertzoo's `BertTokenizer` in plain Python: text -> token ids.

    `vocabulary`: the tokens (index = id); `section` and `tables`: see the
    module docstring."""

    def __init__(self, vocabulary, section, tables):
        self.reference = section["reference"]
        self.lowercase = bool(section["lowercase"])
        self.strip_accents = bool(section["strip_accents"])
        self.vocabulary = {t: i for i, t in enumerate(vocabulary)}
        self.special = {role: section[f"{role}_token"] for role in ("cls", "sep", "pad", "unk")}
        self.ids = {role: self.vocabulary[token] for role, token in self.special.items()}
        self.max_chars = int(section["max_chars_per_word"])
        specials = []
        if self.reference != "google":  # the Hugging Face references match them in text
            roles = ("cls", "sep", "pad", "unk", "mask")
            specials = [section[f"{r}_token"] for r in roles] + list(section["added_tokens"])
        self.specials = frozenset(specials)
        self.special_pattern = _special_pattern(specials) if specials else None
        if self.reference == "hf-fast":
            self.starts, self.ends, self.which = tables["starts"], tables["ends"], tables["which"]
            values, splits = tables["values"], tables["splits"]
            self.templates = [values[a:b] for a, b in zip(splits, splits[1:])]
            self.ccc = {cp: c for cp, c in tables["ccc"]}
            self.memo = {}
            self.punct = re.compile(f"({_char_class(tables['punct'])})")
            self.space = re.compile(_char_class(tables["whitespace"]))
        else:
            self.classes = {
                name: re.compile(f"({_char_class(tables[name])})")
                for name in ("drop", "space", "cjk", "punct", "mark")
            }
        self.kept = self.split = None
        if "offset_kept" not in tables:
            return  # no offsets: the tables of `BertTokenizer.python_settings`
        # tokenize_with_offsets: split at whitespace (dropped) and around
        # what is kept as a piece of its own (bertzoo's classes).
        self.kept = re.compile(_char_class(tables["offset_kept"]))
        if self.special_pattern is not None:
            self.kept = re.compile(f"{self.special_pattern.pattern}|{self.kept.pattern}")
        self.split = re.compile(f"{_char_class(tables['offset_space'])}|{self.kept.pattern}")

    def tokenize(self, text):
        """One string -> its token ids (no [CLS]/[SEP])."""
        ids = []
        for word in self.words(text):
            ids.extend(self.wordpiece(word))
        return ids

    def tokenize_with_offsets(self, text):
        """One string -> (ids, starts, ends): each token with the [start,
        end) byte span of the piece it comes from, as bertzoo's
        `tokenize_with_offsets`: the text is split at whitespace and around
        punctuation, CJK ideographs and special tokens, and each piece is
        tokenized on its own (for these pieces, the same tokens as the whole
        text's). Needs the offset classes an export's tables hold."""
        if self.split is None:
            raise ValueError("These tables have no offset classes (offset_space, offset_kept).")
        ids, starts, ends = [], [], []
        byte_at = [0]
        for char in text:
            byte_at.append(byte_at[-1] + len(char.encode("utf-8")))
        for piece, start, end in self._pieces(self._prepare(text)):
            pieces = self.tokenize(piece)
            ids.extend(pieces)
            starts.extend([byte_at[start]] * len(pieces))
            ends.extend([byte_at[end]] * len(pieces))
        return ids, starts, ends

    def _pieces(self, text):
        """(piece, start, end) in characters; under "hf-python" a word that
        is a special token once cleaned and NFC-composed stays whole."""
        if self.reference != "hf-python" or not self.specials:
            return _split_keeping(text, self.split, self.kept)
        out = []
        for word, start, end in _split_keeping(text, self.classes["space"], None):
            cleaned = unicodedata.normalize("NFC", self.classes["drop"].sub("", word))
            if cleaned in self.specials:
                out.append((word, start, end))
            else:
                out.extend(
                    (p, start + a, start + b)
                    for p, a, b in _split_keeping(word, self.kept, self.kept)
                )
        return out

    def _prepare(self, text):
        """Each Greek capital sigma replaced by the letter the whole text
        lowercases it to ("ς" or "σ", by the letters around it), as bertzoo
        prepares a text for offsets (its pieces are lowercased alone)."""
        if not self.lowercase or self.reference == "hf-fast" or "\u03a3" not in text:
            return text
        context = self.classes["drop"].sub("\u00ad", text)
        context = self.classes["space"].sub(" ", context).replace("\u0130", "I")
        lowered = context.lower()
        if len(lowered) != len(text):
            return text
        return "".join(lowered[i] if c == "\u03a3" else c for i, c in enumerate(text))

    def words(self, text):
        """The words WordPiece sees (a special token matched in the text is
        one word, itself)."""
        if self.special_pattern is None:
            return self._plain_words(text)
        words, start = [], 0
        for m in self.special_pattern.finditer(text):
            words.extend(self._plain_words(text[start : m.start()]))
            words.append(m.group())
            start = m.end()
        words.extend(self._plain_words(text[start:]))
        return words

    def _plain_words(self, text):
        if not text:
            return []
        if self.reference == "hf-fast":
            text = self.punct.sub(r" \1 ", self._normalize_fast(text))
            return split_words(self.space.sub(" ", text))
        c = self.classes
        text = c["drop"].sub("", text)
        text = c["space"].sub(" ", text)
        text = c["cjk"].sub(r" \1 ", text)
        if self.reference != "hf-python":
            return self._lower_split(text)
        text = unicodedata.normalize("NFC", text)
        if not self.specials:
            return self._lower_split(text)
        # The Python port keeps a word that is a special token once cleaned whole.
        words = []
        for word in split_words(text):
            words.extend([word] if word in self.specials else self._lower_split(word))
        return words

    def _lower_split(self, text):
        c = self.classes
        if self.lowercase:
            text = text.lower()
        if self.strip_accents:
            text = c["mark"].sub("", unicodedata.normalize("NFD", text))
        return split_words(c["punct"].sub(r" \1 ", text))

    def _normalize_fast(self, text):
        """The Rust BertNormalizer as per-code-point templates (bertzoo's
        `hf_fast` tables), then canonical reordering of kept marks (only
        where a mark with a combining class is there to move)."""
        out, marks = [], False
        for char in text:
            known = self.memo.get(char)
            if known is None:
                cp = ord(char)
                i = bisect.bisect_right(self.starts, cp) - 1
                template = self.templates[self.which[i]] if cp <= self.ends[i] else [SELF]
                mapped = [cp if x == SELF else x for x in template]
                known = self.memo[char] = (mapped, any(self.ccc.get(c, 0) for c in mapped))
            out.extend(known[0])
            marks = marks or known[1]
        if marks:
            out = self._reorder(out)
        return "".join(chr(c) for c in out if c != BREAK)

    def _reorder(self, chars):
        out, run = [], []
        for c in [*chars, BREAK]:
            if self.ccc.get(c, 0):
                run.append(c)
                continue
            if run:
                out.extend(sorted(run, key=self.ccc.__getitem__))
                run = []
            out.append(c)
        return out[:-1]

    def wordpiece(self, word):
        """Greedy longest-match-first; [UNK] for a word over the length limit
        or one the vocabulary cannot cover."""
        vocabulary, unk = self.vocabulary, [self.ids["unk"]]
        if len(word) > self.max_chars:
            return unk
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocabulary:
                    ids.append(vocabulary[piece])
                    break
                end -= 1
            else:
                return unk
            start = end
        return ids


def _split_keeping(text, delimiters, kept):
    """(piece, start, end) of `text` split at every match of `delimiters`,
    the matches that `kept` matches whole being pieces of their own
    (tensorflow-text's `regex_split_with_offsets`)."""
    out, at = [], 0
    for match in delimiters.finditer(text):
        if match.start() > at:
            out.append((text[at : match.start()], at, match.start()))
        if kept is not None and kept.fullmatch(match.group()):
            out.append((match.group(), match.start(), match.end()))
        at = match.end()
    if at < len(text):
        out.append((text[at:], at, len(text)))
    return out


def truncate_longest_first(len_a, len_b, budget, rule):
    """Pair lengths cut to `budget` tokens (bertzoo.preprocessing)."""
    if len_a + len_b <= budget:
        return len_a, len_b
    half_up = (budget + 1) // 2
    if rule == "hf-fast" and len_a <= len_b:
        half_up = budget // 2
    keep_a = min(len_a, max(half_up, budget - len_b))
    return keep_a, min(len_b, budget - keep_a)


def pack(tokenizer, text, pair=None, sequence_length=128, pair_segment_id=1, max_text_chars=None):
    """One text (and its pair) -> (token_ids, segment_ids), unpadded:
    `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, each text first cut to
    `max_text_chars` characters (bertzoo's cut, 64 per token of
    sequence_length), as bertzoo's `BertPreprocessor` packs."""
    cap = 64 * sequence_length if max_text_chars is None else max_text_chars
    a = tokenizer.tokenize(text[:cap])
    cls, sep = tokenizer.ids["cls"], tokenizer.ids["sep"]
    if pair is None:
        ids = [cls, *a[: sequence_length - 2], sep]
        return ids, [0] * len(ids)
    b = tokenizer.tokenize(pair[:cap])
    rule = "hf-fast" if tokenizer.reference == "hf-fast" else "google"
    keep_a, keep_b = truncate_longest_first(len(a), len(b), sequence_length - 3, rule)
    ids = [cls, *a[:keep_a], sep, *b[:keep_b], sep]
    return ids, [0] * (keep_a + 2) + [pair_segment_id] * (keep_b + 1)
