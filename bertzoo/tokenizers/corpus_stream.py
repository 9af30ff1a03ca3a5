"""Streaming a vocabulary's training corpus in memory bounded by settings.

Reading (`read_lines`, through `bertzoo.io.textfiles`): paths and glob
patterns, `.gz` files decompressed on the fly, one line at a time. A line
longer than `max_line_bytes` is cut there (at a character boundary; the
rest is skipped without being held in memory) and counted; bytes that are
not UTF-8 are replaced by U+FFFD and the line is counted. The counts are
kept in a `CorpusStats`.

Word counting (`BoundedWordCounter`): exact while the corpus has at most
`max_words` distinct words; beyond, the Misra-Gries frequent-items summary,
batched: when the table exceeds `max_words` entries, with `keep` = 90% of
`max_words`, the (`keep + 1`)-th largest count `t` is subtracted from every
count and the words left at zero or below are dropped. Each such step
removes at least `(keep + 1) * t` occurrences, so the sum of the `t`s
(`undercount_bound`, reported) is at most `N / (keep + 1)`, about
1.1 N / max_words, for a corpus of `N` words: every kept count is at most
that much below the true count (never above it), and every word seen more
often than that is kept. The table never holds more than `max_words`
words plus the words of one line (it is reduced in place, not copied);
beside it, the set of the corpus's characters (at most Unicode's size, and
a few thousand in practice) is kept whole, so no character is lost. Measured against the alternatives on a
small corpus (benchmarks/vocab_sampling.py): at the same table size, a
uniform line sample gives vocabularies further from the full one and more
[UNK]; pruning rare words without subtracting is closer on a shuffled
corpus, but starves words that first appear late (a corpus ordered by
domain), which the subtraction keeps fair; keeping 90% rather than half
of the table at each step brings the result closer.

Line sampling (`sample_lines`): a uniform sample of at most `max_lines`
lines (reservoir sampling, Algorithm R, with a seeded generator, so the same
corpus and seed give the same sample), returned in corpus order; a corpus
with at most `max_lines` lines is returned whole, in order.
"""

import collections
import dataclasses
import logging
import random

import numpy as np

from bertzoo.io import textfiles
from bertzoo.tokenizers.base import TokenizerError

logger = logging.getLogger(__name__)

DEFAULT_MAX_LINE_BYTES = 1 << 20  # 1 MiB: a paragraph is far shorter
DEFAULT_MAX_WORDS = 4_000_000  # distinct words counted exactly (~0.5 GB; ~4 GB learning)
DEFAULT_MAX_SENTENCES = 2_000_000  # lines SentencePiece trains on


class TrainingFilesError(TokenizerError, textfiles.InputFilesError):
    """A vocabulary's training files cannot be used (none, a directory, a
    damaged `.gz`, a file with no text)."""


class TrainingFileNotFoundError(TrainingFilesError, textfiles.InputFileNotFoundError):
    """A training file does not exist, or a pattern matches no file."""


_FILES = dict(what="training file", error=TrainingFilesError)


@dataclasses.dataclass
class CorpusStats(textfiles.LineCounts):
    """What reading the corpus met (`textfiles.LineCounts`: lines, bytes,
    lines cut, lines with invalid UTF-8), and the trainers' reports; filled
    in as the lines are read."""

    files: int = 0
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    word_counts: str = ""  # WordPiece: how the words were counted
    sampled: str = ""  # SentencePiece: the line sample, when not all lines

    @property
    def cut_lines(self):
        return self.too_long

    @property
    def invalid_utf8_lines(self):
        return self.invalid_utf8

    def summary(self):
        return (
            f"{self.lines:,} lines ({self.bytes:,} bytes) in {self.files} file(s); "
            f"{self.cut_lines:,} cut at {self.max_line_bytes:,} bytes, "
            f"{self.invalid_utf8_lines:,} with invalid UTF-8 (replaced by U+FFFD)"
        )


def expand_paths(files):
    """A path, a glob pattern or a list of them -> the files, in the given
    order (each pattern's matches sorted, each file once). Fails, before
    any is read, on a missing file, a pattern that matches no file, or a
    directory (`bertzoo.io.textfiles.expand_inputs`)."""
    return textfiles.expand_inputs(files, **_FILES, not_found=TrainingFileNotFoundError)


def _file_lines(path, max_line_bytes, stats):
    invalid_before, has_text = stats.invalid_utf8, False
    for line in textfiles.read_lines(path, max_line_bytes, stats, long_lines="cut", **_FILES):
        has_text = has_text or bool(line.strip())
        yield line
    stats.files += 1
    if not has_text:
        raise TrainingFilesError(f"Training file {path} is empty.")
    if bad := stats.invalid_utf8 - invalid_before:
        logger.warning(
            "%s: %d line(s) are not valid UTF-8; their undecodable bytes were replaced by U+FFFD.",
            path,
            bad,
        )


def read_lines(files, max_line_bytes=DEFAULT_MAX_LINE_BYTES, stats=None):
    """Yields the lines (without line ends) of UTF-8 text files, streaming
    (see the module's docstring); fails on a missing file (before reading
    any) or one with no text. `stats`, a `CorpusStats`, is filled in."""
    textfiles.check_max_line_bytes(max_line_bytes, TrainingFilesError)
    paths = expand_paths(files)
    stats = CorpusStats() if stats is None else stats
    stats.max_line_bytes = max_line_bytes
    for path in paths:
        yield from _file_lines(path, max_line_bytes, stats)
    if stats.cut_lines:
        logger.warning(
            "%d line(s) are longer than max_line_bytes=%d and were cut there.",
            stats.cut_lines,
            max_line_bytes,
        )


def check_limit(name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TokenizerError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return value


class BoundedWordCounter:
    """Word counts in a table of at most `max_words` words (plus one line's):
    exact while the corpus has no more distinct words, the batched
    Misra-Gries summary beyond (see the module's docstring)."""

    keep_share = 0.9  # of max_words, kept at each Misra-Gries step

    def __init__(self, max_words=DEFAULT_MAX_WORDS):
        self.max_words = check_limit("max_words", max_words, minimum=2)
        self.keep = min(max_words - 1, max(1, int(max_words * self.keep_share)))
        self.counts = collections.Counter()
        self.characters = set()  # of every word seen, kept or not
        self.total = 0  # word occurrences seen
        self.shrinks = 0  # Misra-Gries steps taken (0: the counts are exact)
        self.undercount_bound = 0  # no kept count is further below the truth

    def update(self, words):
        self.counts.update(words)  # Counter.update counts a list in C
        self.characters.update("".join(words))
        self.total += len(words)
        if len(self.counts) > self.max_words:
            self._shrink()

    def _shrink(self):
        keep = self.keep
        values = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
        # t: the (keep + 1)-th largest count; at most `keep` counts exceed it.
        t = int(np.partition(values, len(values) - keep - 1)[len(values) - keep - 1])
        # In place (a copy would double the peak): drop, then subtract.
        counts = self.counts
        for word in [w for w, c in counts.items() if c <= t]:
            del counts[word]
        for word in counts:
            counts[word] -= t
        self.shrinks += 1
        self.undercount_bound += t

    @property
    def exact(self):
        return self.shrinks == 0

    def summary(self):
        if self.exact:
            return f"{len(self.counts):,} distinct words, counted exactly"
        return (
            f"{len(self.counts):,} distinct words kept of more than max_words="
            f"{self.max_words:,} (Misra-Gries: {self.shrinks} reductions; every kept count "
            f"is at most {self.undercount_bound:,} below the truth, of {self.total:,} words)"
        )


def sample_lines(lines, max_lines, seed=0):
    """A uniform sample of at most `max_lines` of `lines` (an iterable),
    in their order: reservoir sampling with `random.Random(seed)`. Returns
    (the sample, the number of lines seen)."""
    check_limit("max_lines", max_lines)
    rng = random.Random(seed)
    reservoir = []  # (index, line)
    seen = 0
    for line in lines:
        if seen < max_lines:
            reservoir.append((seen, line))
        else:
            slot = rng.randrange(seen + 1)
            if slot < max_lines:
                reservoir[slot] = (seen, line)
        seen += 1
    reservoir.sort(key=lambda item: item[0])
    return [line for _, line in reservoir], seen
