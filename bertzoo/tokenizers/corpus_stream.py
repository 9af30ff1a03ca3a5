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
words plus the words of one line (one batch of lines, for a word splitter
that works on batches) (it is reduced in place, not copied);
beside it, the set of the corpus's characters (at most Unicode's size, and
a few thousand in practice) is kept whole, so no character is lost. Measured against the alternatives on a
small corpus (benchmarks/vocab_sampling.py): at the same table size, a
uniform line sample gives vocabularies further from the full one and more
[UNK]; pruning rare words without subtracting is closer on a shuffled
corpus, but starves words that first appear late (a corpus ordered by
domain), which the subtraction keeps fair; keeping 90% rather than half
of the table at each step brings the result closer.

Counting in processes (`count_words` with `workers` > 1): plain files are
cut into byte ranges at line starts, a `.gz` file is one range; each range
is counted in a process of the `spawn` context (TensorFlow is not
fork-safe, and the processes import none: this module and the pure-Python
`basic` tokenizer only) with a counter of its own, and the summaries are
merged in range order (`BoundedWordCounter.merge`, the mergeable-summaries
merge of Misra-Gries). Up to `max_words` distinct words the merged counts
are exact and in the same order as one process's, so the vocabulary is the
same; beyond, a kept count is at most the reported bound below the truth
(the ranges' bounds plus each merge's subtraction, at most N / (keep + 1)
in all, as in one process). Each process holds one range's table, this one
the merged table and the ranges waiting to be merged: about `workers` + 2
tables at the peak.

Line sampling (`sample_lines`): a uniform sample of at most `max_lines`
lines (reservoir sampling, Algorithm R, with a seeded generator, so the same
corpus and seed give the same sample), returned in corpus order; a corpus
with at most `max_lines` lines is returned whole, in order.
"""

import collections
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import random

import numpy as np

from bertzoo.io import textfiles
from bertzoo.io.children import die_with_parent
from bertzoo.tokenizers.kinds import TokenizerError

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
    workers: int = 1  # WordPiece: the processes that counted the words
    word_counts: str = ""  # WordPiece: how the words were counted
    sampled: str = ""  # SentencePiece: the line sample, when not all lines
    # The accent stripping the vocabulary was trained with (None: not yet
    # trained); it differs from the one asked for when Hangul kept it off.
    strip_accents: object = None

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


def _file_read(path, has_text, invalid_lines, stats):
    """Checks and reports one file once all its lines are read."""
    stats.files += 1
    if not has_text:
        raise TrainingFilesError(f"Training file {path} is empty.")
    if invalid_lines:
        logger.warning(
            "%s: %d line(s) are not valid UTF-8; their undecodable bytes were replaced by U+FFFD.",
            path,
            invalid_lines,
        )


def _corpus_read(stats):
    if stats.cut_lines:
        logger.warning(
            "%d line(s) are longer than max_line_bytes=%d and were cut there.",
            stats.cut_lines,
            stats.max_line_bytes,
        )


def _range_lines(path, max_line_bytes, counts, start=0, end=None):
    """The decoded lines of bytes [start, end) of `path` (end None: to the
    end; a `.gz` file is read whole)."""
    stream = None
    if end is not None and not textfiles.is_gzip(path):
        stream = textfiles.open_range(path, start, end)
    return textfiles.read_lines(
        path, max_line_bytes, counts, long_lines="cut", stream=stream, **_FILES
    )


def _file_lines(path, max_line_bytes, stats):
    invalid_before, has_text = stats.invalid_utf8, False
    for line in _range_lines(path, max_line_bytes, stats):
        has_text = has_text or bool(line.strip())
        yield line
    _file_read(path, has_text, stats.invalid_utf8 - invalid_before, stats)


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
    _corpus_read(stats)


def head_lines(files, lines, max_line_bytes=DEFAULT_MAX_LINE_BYTES):
    """The first `lines` non-empty lines of the files, read as `read_lines`
    reads them but silently: a look at the corpus before it is read and
    reported on."""
    textfiles.check_max_line_bytes(max_line_bytes, TrainingFilesError)
    seen = 0
    for path in expand_paths(files):
        for line in _range_lines(path, max_line_bytes, CorpusStats()):
            if line.strip():
                yield line
                seen += 1
                if seen >= lines:
                    return


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

    def merge(self, other):
        """Adds `other`, the summary of text that follows this one's (the
        mergeable-summaries merge of Misra-Gries): the counts are summed,
        then, if more than `max_words` words remain, the (`max_words` +
        1)-th largest count `t` is subtracted from every count and the words
        left at zero or below are dropped. The merged undercount bound is
        the two summaries' bounds plus `t`: a kept count is at most that
        much below the truth (never above it), a dropped word was seen at
        most that often. Each step (a reduction while counting, or one
        here) removes at least (`keep` + 1) x its `t` occurrences, so the
        bound stays at most N / (`keep` + 1) for N words, however the
        corpus was cut. While both summaries are exact and together hold
        at most `max_words` words, the result is exact, in the order the
        words first appear (this summary's words, then `other`'s new ones):
        the same counts, in the same order, as counting all the text in
        one counter."""
        self.counts.update(other.counts)
        self.characters |= other.characters
        self.total += other.total
        self.shrinks += other.shrinks
        self.undercount_bound += other.undercount_bound
        if len(self.counts) > self.max_words:
            self._shrink(self.max_words)

    def _shrink(self, keep=None):
        keep = self.keep if keep is None else keep
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


# ------------------------------------------------- counting in processes

RANGE_BYTES = 64 << 20  # the most text one process counts before handing its summary back
MIN_RANGE_BYTES = 1 << 20
# The default number of processes: the CPU count, but no more than one per
# this much text. A counting process starts in under a second (0.7 s on a
# loaded 2-core machine: it imports no TensorFlow) and counts about 1 MB/s,
# so from this size on it pays for itself many times over; a small corpus
# is counted in this process.
BYTES_PER_WORKER = 8 << 20


@dataclasses.dataclass(frozen=True)
class CountRange:
    """Bytes [start, end) of the input file `file_index` (end None: all of
    it, a `.gz` file); `last`: the file's last range."""

    file_index: int
    path: str
    start: int
    end: int | None
    last: bool

    def describe(self):
        if self.end is None:
            return self.path
        return f"{self.path} (bytes {self.start:,} to {self.end:,})"


def cpu_count():
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def default_workers(paths):
    """The CPU count, at most one per `BYTES_PER_WORKER` of the files."""
    size = sum(os.path.getsize(p) for p in paths)
    return max(1, min(cpu_count(), size // BYTES_PER_WORKER))


def plan_ranges(paths, workers):
    """The `CountRange`s that cover `paths`, in corpus order: each plain file
    cut at line starts into ranges of about the corpus's size / `workers`
    (between `MIN_RANGE_BYTES` and `RANGE_BYTES`), a `.gz` file whole. The
    plan depends on the files and `workers` only."""
    size = sum(os.path.getsize(p) for p in paths)
    target = max(MIN_RANGE_BYTES, min(RANGE_BYTES, -(-size // workers)))
    ranges = []
    for index, path in enumerate(paths):
        if textfiles.is_gzip(path):
            cuts = [(0, None)]
        else:
            cuts = textfiles.line_ranges(path, target) or [(0, 0)]  # an empty file: checked too
        ranges += [
            CountRange(index, str(path), start, end, k == len(cuts) - 1)
            for k, (start, end) in enumerate(cuts)
        ]
    return ranges


def count_range(part, tokenizer, max_words, max_line_bytes):
    """The words of one `CountRange`, in a `BoundedWordCounter` of its own.
    -> (counter, `textfiles.LineCounts`, whether the range has text)."""
    counter = BoundedWordCounter(max_words)
    counts = textfiles.LineCounts()
    seen = []  # whether the range has text

    def lines():
        for line in _range_lines(part.path, max_line_bytes, counts, part.start, part.end):
            if not seen and line.strip():
                seen.append(True)
            yield line

    count_lines(counter, tokenizer, lines())
    return counter, counts, bool(seen)


def count_lines(counter, tokenizer, lines):
    """Adds the words of `lines` to `counter`: `tokenizer.tokenize(line)`
    line by line, or, for a tokenizer with `tokenize_lines` (one that works
    on batches: the morpheme analyser, TensorFlow ops), the words of
    `tokenizer.batch_lines` lines at a time (the table then holds at most
    `max_words` words plus one batch's)."""
    batch = getattr(tokenizer, "batch_lines", None)
    if not batch:
        for line in lines:
            counter.update(tokenizer.tokenize(line))
        return
    pending = []
    for line in lines:
        pending.append(line)
        if len(pending) >= batch:
            counter.update(tokenizer.tokenize_lines(pending))
            pending = []
    if pending:
        counter.update(tokenizer.tokenize_lines(pending))


def _count_range_process(connection, task):
    """A counting process: sends `count_range(*task)`, or the error it
    raised, back through `connection`. It ends if the parent dies."""
    die_with_parent()
    try:
        result = count_range(*task)
    except BaseException as e:  # noqa: BLE001 (sent to the parent, which raises it)
        result = e
    try:
        connection.send(result)
    except Exception as e:  # an error that cannot be pickled
        connection.send(TokenizerError(f"Counting {task[0].describe()} failed: {result!r} ({e})."))
    finally:
        connection.close()


def _start(context, part, task):
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(
        target=_count_range_process,
        args=(writer, task),
        name=f"bertzoo-count-words-{part.file_index}-{part.start}",
        daemon=True,
    )
    process.start()
    writer.close()  # the child's end: the reader sees EOF if the child dies
    return process, reader


def _receive(part, process, reader):
    try:
        result = reader.recv()
    except EOFError:
        result = None
    finally:
        reader.close()
    process.join()
    if result is None:
        raise TrainingFilesError(
            f"The process counting the words of {part.describe()} ended without a result "
            f"(exit code {process.exitcode}; -9: killed, e.g. out of memory: count with fewer "
            "workers or a smaller max_words)."
        )
    if isinstance(result, BaseException):
        raise result.with_traceback(None)
    return result


def _count_in_processes(ranges, tokenizer, max_words, max_line_bytes, stats, workers):
    """Counts `ranges` in `workers` spawned processes at a time, merging
    their summaries in range order (see `count_words`)."""
    context = multiprocessing.get_context("spawn")  # TensorFlow is not fork-safe
    merged = BoundedWordCounter(max_words)
    running, received = {}, {}  # range index -> (process, reader) / result
    started = merged_up_to = 0
    has_text, invalid = False, 0  # of the file being merged
    try:
        while merged_up_to < len(ranges):
            # At most `workers` ranges between starting and being merged.
            while started < len(ranges) and len(running) + len(received) < workers:
                task = (ranges[started], tokenizer, max_words, max_line_bytes)
                running[started] = _start(context, ranges[started], task)
                started += 1
            ready = multiprocessing.connection.wait([r for _, r in running.values()])
            for index in [i for i, (_, r) in running.items() if r in ready]:
                received[index] = _receive(ranges[index], *running.pop(index))
            while merged_up_to in received:
                part = ranges[merged_up_to]
                counter, counts, text = received.pop(merged_up_to)
                merged.merge(counter)
                for field in dataclasses.fields(textfiles.LineCounts):
                    name = field.name
                    setattr(stats, name, getattr(stats, name) + getattr(counts, name))
                has_text, invalid = has_text or text, invalid + counts.invalid_utf8
                if part.last:
                    _file_read(part.path, has_text, invalid, stats)
                    has_text, invalid = False, 0
                merged_up_to += 1
    finally:
        for process, _ in running.values():
            process.terminate()
        for process, reader in running.values():
            process.join()
            reader.close()
    return merged


def count_words(
    files,
    tokenizer,
    max_words=DEFAULT_MAX_WORDS,
    max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    stats=None,
    workers=1,
):
    """Word counts of the files, words as `tokenizer` (an object whose
    `tokenize(line)` gives a line's words, e.g. a `BasicTokenizer`, or
    whose `tokenize_lines(lines)` gives a batch's: `count_lines`) makes
    them: a `BoundedWordCounter` (exact up to `max_words` distinct words,
    the Misra-Gries summary beyond).

    With `workers` > 1 (None: `default_workers`, the CPU count, at most one
    per `BYTES_PER_WORKER` of text), the files are cut into byte ranges
    (`plan_ranges`: plain files at line starts, a `.gz` file whole), each
    counted in a process of the `spawn` context with its own
    `BoundedWordCounter`, and the summaries are merged in range order
    (`BoundedWordCounter.merge`), so the result is deterministic for the
    same files, settings and `workers`. A corpus of at most `max_words`
    distinct words is counted exactly: the same counts, in the same order,
    whatever `workers`, so the vocabulary learnt from them is the same.
    Beyond, every kept count is at most the reported `undercount_bound`
    below the truth, the ranges' bounds plus the merges' subtractions and
    at most N / (`keep` + 1) in all for N words, as in one process; the
    counts then differ with `workers` (the ranges differ), within that
    bound. The characters and the line counts in `stats` are exact.

    The processes import only this module and the tokenizer's (no
    TensorFlow for `BasicTokenizer`, but for its "hf-fast" reference).
    Memory: each process holds one range's table (at most `max_words`
    words plus one line's, as one counter does) and one line; this process
    holds the merged table (up to 2 x `max_words` words while it merges a
    range in) and the ranges counted but not yet merged; at most `workers`
    ranges are in flight, so about (`workers` + 2) tables at the peak, and
    a process exits (its memory freed) as soon as its range is handed back.
    """
    textfiles.check_max_line_bytes(max_line_bytes, TrainingFilesError)
    check_limit("max_words", max_words, minimum=2)
    if workers is not None:
        check_limit("workers", workers)
    paths = expand_paths(files)
    stats = CorpusStats() if stats is None else stats
    stats.max_line_bytes = max_line_bytes
    workers = default_workers(paths) if workers is None else workers
    ranges = plan_ranges(paths, workers) if workers > 1 else []
    stats.workers = min(workers, len(ranges))
    if stats.workers < 2:
        stats.workers = 1
        counter = BoundedWordCounter(max_words)
        count_lines(counter, tokenizer, read_lines(paths, max_line_bytes, stats))
        return counter
    counter = _count_in_processes(
        ranges, tokenizer, max_words, max_line_bytes, stats, stats.workers
    )
    _corpus_read(stats)
    return counter


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
