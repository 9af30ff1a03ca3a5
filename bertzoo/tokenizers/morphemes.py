"""Morpheme-aware vocabulary training for Korean (KLUE's recipe): the corpus
is segmented into morphemes by a Korean morphological analyser (kiwipiepy's
`Kiwi`), and the subword vocabulary is learnt on the morphemes, so that no
piece spans a morpheme boundary (저는 gives 저 and ##는, never a piece 저는).
At run time the tokenizer stays plain WordPiece or byte-level BPE over raw
text, as KLUE-RoBERTa's is: only the vocabulary differs.

Where a word is cut: at the start of each morpheme the analyser finds, but
only between two letters or digits (Unicode categories L and N, not CJK
ideographs) of which at least one is Hangul, so that a cut never falls
before a combining mark, inside an emoji sequence or where the word
pre-tokenizer splits anyway. Where the analyser's morphemes overlap in the
text (contractions: 했어요 is 하 + 었 + 어요 over the characters 했, 어, 요),
the cut is at the end of the previous morpheme (했 | 어요).

The segments of a line are what the word counter then pre-tokenizes on its
own (`MorphemeWords` for WordPiece, the byte-level BPE trainer's words for
BPE). For WordPiece, a word that continues a segment of the same word is
counted as a continuation unit (its pieces get "##"), so the vocabulary's
pieces are exactly those a plain WordPiece tokenizer looks up inside words.

kiwipiepy is an optional dependency (the checkout's `pip install ".[korean]"`, or
`pip install "kiwipiepy>=0.20"`); without it, asking for morphemes is a
one-line error naming the pip command. The analyser takes about 0.3-0.5 GB
of memory and a few seconds to load and warm up (once per process), and
segments some 70 KB of Korean text a second on one core.
"""

import functools
import importlib.util
import unicodedata

from bertzoo.tokenizers.kinds import TokenizerError

PRE_TOKENIZATIONS = ("words", "morphemes")
KIWI_INSTALL = 'pip install "kiwipiepy>=0.20"'
# Lines handed to the analyser at a time.
BATCH_LINES = 256
# Marks a counted WordPiece unit that continues a word (its pieces are
# "##" pieces). Every BasicTokenizer reference drops U+0000 from text, so no
# counted word starts with it otherwise.
CONTINUATION = "\x00"
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2FA1F),
    (0xF900, 0xFAFF),
)


class MorphemeAnalyzerMissingError(TokenizerError):
    """Morpheme pre-tokenization was asked for without kiwipiepy installed."""


def check_pre_tokenize(pre_tokenize):
    """`pre_tokenize` if it is one of PRE_TOKENIZATIONS, else a one-line
    TokenizerError."""
    if pre_tokenize not in PRE_TOKENIZATIONS:
        raise TokenizerError(
            f"pre_tokenize must be one of {', '.join(PRE_TOKENIZATIONS)}; got {pre_tokenize!r}."
        )
    return pre_tokenize


def _missing():
    return MorphemeAnalyzerMissingError(
        "Morpheme pre-tokenization needs the Korean morphological analyser kiwipiepy, "
        f"which is not installed: {KIWI_INSTALL} (or, in bertzoo's checkout, "
        'pip install ".[korean]").'
    )


def check_available():
    """Raises MorphemeAnalyzerMissingError (one line, naming the pip
    command) unless kiwipiepy can be imported; loads nothing."""
    if importlib.util.find_spec("kiwipiepy") is None:
        raise _missing()


@functools.cache
def analyzer():
    """The process's `kiwipiepy.Kiwi` (loaded once)."""
    try:
        import kiwipiepy
    except ImportError:
        raise _missing() from None
    return kiwipiepy.Kiwi(num_workers=1)


def _is_hangul(char):
    cp = ord(char)
    return 0xAC00 <= cp <= 0xD7A3 or 0x1100 <= cp <= 0x11FF or 0x3131 <= cp <= 0x318E


def _is_cjk(char):
    return any(lo <= ord(char) <= hi for lo, hi in _CJK_RANGES)


def _word_character(char):
    return unicodedata.category(char)[0] in "LN" and not _is_cjk(char)


def cuttable(before, after):
    """Whether a morpheme boundary between these two characters cuts a word
    (see the module docstring)."""
    return (
        _word_character(before)
        and _word_character(after)
        and (_is_hangul(before) or _is_hangul(after))
    )


def cuts(line, morphemes):
    """The positions (character offsets, ascending) where `line` is cut,
    from the analyser's morphemes as (start, length) spans."""
    out = []
    previous_end = None
    for start, length in morphemes:
        end = start + length
        cut = start if previous_end is None else max(start, previous_end)
        if 0 < cut < min(end, len(line)) and cuttable(line[cut - 1], line[cut]):
            if not out or cut > out[-1]:
                out.append(cut)
        previous_end = end if previous_end is None else max(previous_end, end)
    return out


def segment_lines(lines):
    """Each line cut at its morpheme boundaries: a list (one per line) of
    its segments, which join back into the line; every segment after the
    first continues the word the one before it ends."""
    lines = list(lines)
    if not lines:
        return []
    kiwi = analyzer()
    out = []
    for line, tokens in zip(lines, kiwi.tokenize(lines)):
        at = cuts(line, [(t.start, t.len) for t in tokens])
        bounds = [0, *at, len(line)]
        out.append([line[a:b] for a, b in zip(bounds, bounds[1:])])
    return out


class MorphemeWords:
    """The words WordPiece training counts, morpheme by morpheme: each line
    is cut into morpheme segments (`segment_lines`), each segment split
    into words by `tokenizer` (a `BasicTokenizer`, the one the vocabulary is
    for); a segment's first word that continues the word before it is
    counted as a continuation unit, prefixed with CONTINUATION.

    Lines are analysed BATCH_LINES at a time (`tokenize_lines`, which
    `corpus_stream.count_words` calls when a tokenizer has it). Picklable:
    the analyser is loaded in each process that uses it."""

    batch_lines = BATCH_LINES

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def tokenize_lines(self, lines):
        units = []
        for segments in segment_lines(lines):
            for k, segment in enumerate(segments):
                words = self.tokenizer.tokenize(segment)
                if k and words:
                    words[0] = CONTINUATION + words[0]
                units.extend(words)
        return units

    def tokenize(self, line):
        return self.tokenize_lines([line])
