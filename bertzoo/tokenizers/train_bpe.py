"""Training a byte-level BPE vocabulary (RoBERTa's `vocab.json` and
`merges.txt`, for `ByteLevelBPETokenizer`) from text files.

The words are counted as the tokenizer will see them: the corpus goes
through the tokenizer's own pre-tokenization (`byte_bpe.split_pieces`, the
same TensorFlow ops: RoBERTa's special-token strings cut out, then GPT-2's
pattern), `BATCH_LINES` lines at a time, and the pieces are counted in a
`corpus_stream.BoundedWordCounter` (exact up to `max_words` distinct pieces,
the Misra-Gries summary beyond), so memory is bounded by `max_words` and
`max_line_bytes`, not by the corpus. Each piece's UTF-8 bytes become GPT-2's
byte characters, and BPE merges are learnt over the counts (`learn_bpe`):
the most frequent adjacent pair (ties: the smaller pair of strings) is
merged everywhere, leftmost occurrences first, until the vocabulary is full
or no pair is seen `min_frequency` times.

A pair whose merged string is already a token (reachable by other merges,
e.g. "ab" + "c" after "a" + "bc") is never merged. With every merge making
a new token, the tokenizer, which applies the lowest-ranked pair of a word
first, splits every counted word exactly as training left it
(`learn_bpe` returns those splits; the tests compare them).

The vocabulary is RoBERTa's layout: <s> 0, <pad> 1, </s> 2, <unk> 3, the
256 byte characters (in byte order), the merged tokens in merge order, and
<mask> last. Nothing is ever <unk>: every byte has its token. Other special
tokens (ModernBERT's [CLS], [PAD], [SEP], [UNK], [MASK]) take the same
places (`special_tokens`).

With `pre_tokenize="morphemes"` the pieces are cut at Korean morpheme
boundaries first (`bertzoo.tokenizers.morphemes`), so no merge joins two
morphemes; the tokenizer itself stays plain byte-level BPE.
"""

import collections
import heapq
import json
import logging
from pathlib import Path

import tensorflow as tf

from bertzoo.io.publish import atomic_path
from bertzoo.tokenizers import morphemes as morphemes_lib
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.byte_bpe import (
    MERGES_FILE,
    ROBERTA_SPECIAL_PATTERNS,
    ByteLevelBPETokenizer,
    bytes_to_unicode,
    split_pieces,
)
from bertzoo.tokenizers.corpus_stream import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_WORDS,
    CorpusStats,
    count_words,
)

logger = logging.getLogger(__name__)

# RoBERTa's vocab.json: these four first (fairseq's ids), <mask> last.
FIRST_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")
MASK_TOKEN = "<mask>"
BATCH_LINES = 1024  # lines pre-tokenized per TensorFlow call


class ByteLevelWords:
    """The pieces byte-level BPE training counts: `tokenize_lines(lines)`
    runs the tokenizer's pre-tokenization over a batch of lines (special
    tokens dropped), cutting them at morpheme boundaries first with
    `morphemes`. Picklable, for counting in processes."""

    batch_lines = BATCH_LINES

    def __init__(self, add_prefix_space=False, morphemes=False):
        self.add_prefix_space = bool(add_prefix_space)
        self.morphemes = bool(morphemes)

    def tokenize_lines(self, lines):
        if self.morphemes:
            # Each segment is pre-tokenized on its own: a cut between two
            # letters ends one piece and starts the next.
            lines = [s for segments in morphemes_lib.segment_lines(lines) for s in segments]
        if not lines:
            return []
        units = split_pieces(
            tf.constant(lines, tf.string), ROBERTA_SPECIAL_PATTERNS, self.add_prefix_space
        )
        pieces = tf.boolean_mask(units["text"], ~units["added"]).numpy()
        return [p.decode("utf-8") for p in pieces]

    def tokenize(self, line):
        return self.tokenize_lines([line])


def learn_bpe(word_counts, max_merges, min_frequency=2, taken=(), keep_splits=True):
    """BPE merges learnt over `word_counts` ({word: count}, words as
    strings of GPT-2 byte characters), as the module docstring says.

    Returns (merges, splits): the merges as (left, right) in rank order (at
    most `max_merges`), and each word's tokens after them ({word: list};
    None without `keep_splits`). `taken`: token strings that are not to be
    made by a merge (the special tokens)."""
    symbols = []  # symbol id -> string
    index = {}

    def intern(token):
        if token not in index:
            index[token] = len(symbols)
            symbols.append(token)
        return index[token]

    byte_chars = bytes_to_unicode()
    for b in range(256):
        intern(byte_chars[b])
    existing = set(symbols) | set(taken)
    items = sorted(word_counts.items(), key=lambda item: (-item[1], item[0]))
    words = [[intern(c) for c in word] for word, _ in items]
    counts = [n for _, n in items]
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    banned = set()  # pairs whose merged string is already a token

    def fresh_heap():
        # Every pair with a count, once: stale entries (below) are dropped.
        heap = [
            (-n, symbols[a], symbols[b], a, b)
            for (a, b), n in pair_counts.items()
            if n > 0 and (a, b) not in banned
        ]
        heapq.heapify(heap)
        return heap

    heap = fresh_heap()
    merges = []
    while heap and len(merges) < max_merges:
        negative, _, _, a, b = heapq.heappop(heap)
        n = pair_counts.get((a, b), 0)
        if n != -negative or (a, b) in banned:
            continue  # a stale entry: a pair whose count changed has a newer one
        if n < min_frequency:
            break
        merged = symbols[a] + symbols[b]
        if merged in existing:
            banned.add((a, b))  # never merged (module docstring)
            continue
        existing.add(merged)
        new = intern(merged)
        merges.append((symbols[a], symbols[b]))
        changed = set()
        for i in where.pop((a, b), ()):  # (the updates commute: any order)
            word = words[i]
            out, k, size = [], 0, len(word)
            while k < size:
                if word[k] == a and k + 1 < size and word[k + 1] == b:
                    out.append(new)
                    k += 2
                else:
                    out.append(word[k])
                    k += 1
            if len(out) == size:
                continue  # the pair had left this word
            n = counts[i]
            before = collections.Counter(zip(word, word[1:]))
            after = collections.Counter(zip(out, out[1:]))
            for pair, m in after.items():
                old = before.get(pair, 0)
                if m != old:
                    pair_counts[pair] += (m - old) * n
                    changed.add(pair)
                if not old:
                    where[pair].add(i)
            for pair, m in before.items():
                if pair not in after:
                    pair_counts[pair] -= m * n
                    changed.add(pair)
            words[i] = out
        for pair in changed:
            n = pair_counts.get(pair, 0)
            if n <= 0:
                pair_counts.pop(pair, None)
            elif pair not in banned:
                heapq.heappush(heap, (-n, symbols[pair[0]], symbols[pair[1]], *pair))
        if len(heap) > 2 * len(pair_counts) + 1024:
            heap = fresh_heap()  # bounds the heap by the pairs there are
    if not keep_splits:
        return merges, None
    splits = {word: [symbols[s] for s in words[i]] for i, (word, _) in enumerate(items)}
    return merges, splits


_BYTE_CHARACTERS = bytes_to_unicode()


def to_byte_characters(text):
    """`text`'s UTF-8 bytes as GPT-2's byte characters."""
    table = _BYTE_CHARACTERS
    return "".join([table[b] for b in text.encode("utf-8")])


def _special_tokens(special_tokens):
    """(the first four tokens, the mask token): RoBERTa's, or the strings of
    `special_tokens` (a dict of role -> token: cls, pad, sep, unk, mask)."""
    if special_tokens is None:
        return FIRST_TOKENS, MASK_TOKEN
    roles = ("cls", "pad", "sep", "unk", "mask")
    tokens = (
        [special_tokens.get(role) for role in roles] if isinstance(special_tokens, dict) else []
    )
    if len(set(tokens)) != 5 or not all(isinstance(t, str) and t for t in tokens):
        raise TokenizerError(
            f"special_tokens must map cls, pad, sep, unk and mask to 5 distinct non-empty "
            f"strings, got {special_tokens!r}."
        )
    return tuple(tokens[:4]), tokens[4]


def byte_level_vocabulary(merges, special_tokens=None):
    """vocab.json's tokens (index = id) for `merges`, in RoBERTa's layout
    (with `special_tokens`' strings in the special tokens' places)."""
    first, mask = _special_tokens(special_tokens)
    byte_chars = bytes_to_unicode()
    return [
        *first,
        *(byte_chars[b] for b in range(256)),
        *(a + b for a, b in merges),
        mask,
    ]


def _vocabulary_path(output):
    """A directory (existing, or a path not ending in .json) gets vocab.json
    inside it; anything else is vocab.json's path. merges.txt goes beside."""
    path = Path(output)
    if path.is_dir() or path.suffix != ".json":
        return path / ByteLevelBPETokenizer.vocabulary_file
    return path


def write_byte_level_bpe(path, vocabulary, merges):
    """Writes merges.txt, then vocab.json (the file whose presence says the
    pair is complete), each atomically. Returns vocab.json's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path.parent / MERGES_FILE) as tmp:
        Path(tmp).write_text(
            "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8"
        )
    index = {token: i for i, token in enumerate(vocabulary)}
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(index, ensure_ascii=False), encoding="utf-8")
    return path


def train_byte_level_bpe(
    files,
    vocab_size,
    output,
    min_frequency=2,
    add_prefix_space=False,
    pre_tokenize="words",
    max_words=DEFAULT_MAX_WORDS,
    max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    stats=None,
    workers=1,
    special_tokens=None,
):
    """Learns a byte-level BPE vocabulary (RoBERTa's `vocab.json` and
    `merges.txt`) from text files; see the module docstring.

    Args:
        files: a text file, a glob pattern or a list of them (UTF-8, one
            text per line; `.gz` files are decompressed as they are read;
            bytes that are not UTF-8 become U+FFFD).
        vocab_size: the most tokens: the 4 + 256 + 1 fixed ones and at most
            `vocab_size` - 261 merges (fewer when the corpus has no more
            pairs seen `min_frequency` times).
        output: vocab.json's path, or a directory to write it into;
            merges.txt is written beside it. Both atomically.
        min_frequency: pairs seen fewer times are not merged.
        add_prefix_space: the `ByteLevelBPETokenizer` setting the
            vocabulary is for (RoBERTa's: False).
        pre_tokenize: "words" (the tokenizer's pieces) or "morphemes" (the
            pieces cut at Korean morpheme boundaries; needs kiwipiepy).
        max_words: distinct pieces counted exactly (at least 2); beyond,
            the Misra-Gries summary (`corpus_stream`). The counts take
            about 120 bytes a piece and the learner under 2 KB more per
            distinct piece while it runs (measured: 51 MB for 29,627
            pieces and 16,000 merges), so memory is bounded by
            `max_words`, not by the corpus.
        max_line_bytes: longer lines are cut there (and counted).
        stats: a `CorpusStats` to fill in, or None.
        workers: the processes that count the pieces (1: this one; None:
            the CPU count, at most one per 8 MB of text); each imports
            TensorFlow.
        special_tokens: None (RoBERTa's <s>, <pad>, </s>, <unk>, <mask>), or
            a dict of role (cls, pad, sep, unk, mask) -> token, e.g.
            ModernBERT's [CLS], [PAD], [SEP], [UNK], [MASK]: the same ids.

    Returns:
        The path of the written vocab.json.
    """
    _check_size(vocab_size)
    first, mask = _special_tokens(special_tokens)
    morphemes = morphemes_lib.check_pre_tokenize(pre_tokenize) == "morphemes"
    if morphemes:
        morphemes_lib.analyzer()  # a missing analyser fails before any reading
    path = _vocabulary_path(output)
    stats = CorpusStats() if stats is None else stats
    words = ByteLevelWords(add_prefix_space, morphemes)
    counter = count_words(files, words, max_words, max_line_bytes, stats, workers)
    if not counter.counts:
        raise TokenizerError("The training files hold no text.")
    processes = f"{stats.workers} process" + ("es" if stats.workers > 1 else "")
    stats.word_counts = f"{counter.summary()}, in {processes}"
    logger.info("Byte-level BPE piece counts: %s.", stats.word_counts)
    counts = collections.Counter()
    for piece, n in counter.counts.items():
        counts[to_byte_characters(piece)] += n
    fixed = len(FIRST_TOKENS) + 256 + 1
    del counter  # the learner's copy of the counts is all it needs
    merges, _ = learn_bpe(
        counts,
        vocab_size - fixed,
        min_frequency,
        taken=(*first, mask),
        keep_splits=False,
    )
    vocabulary = byte_level_vocabulary(merges, special_tokens)
    if len(vocabulary) < vocab_size:
        logger.info(
            "Byte-level BPE vocabulary has %d tokens (asked for at most %d): the corpus has "
            "no more pairs seen at least %d times.",
            len(vocabulary),
            vocab_size,
            min_frequency,
        )
    return write_byte_level_bpe(path, vocabulary, merges)


def _check_size(vocab_size):
    fixed = len(FIRST_TOKENS) + 256 + 1
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < fixed:
        raise TokenizerError(
            f"vocab_size must be an integer >= {fixed} for a byte-level BPE (RoBERTa's 5 "
            f"special tokens and the 256 byte characters), got {vocab_size!r}."
        )


def readable(token):
    """A byte-level token as text, for people: its bytes decoded (a partial
    character as \\xNN), the space a token starts with shown as "Ġ"."""
    table = {c: b for b, c in bytes_to_unicode().items()}
    if any(c not in table for c in token):
        return token  # a special token
    text = bytes(table[c] for c in token).decode("utf-8", "backslashreplace")
    return text.replace(" ", "Ġ")
