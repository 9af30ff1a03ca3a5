"""Training vocabularies from text files: WordPiece (`vocab.txt`, for
`BertTokenizer`) and SentencePiece (`spiece.model`, for
`SentencePieceTokenizer`).

Both trainers see the text exactly as the matching tokenizer will: WordPiece
counts the words of `basic.BasicTokenizer` (the tokenizer's specification),
SentencePiece trains on the output of the tokenizer's own preprocessing ops.
So a vocabulary trained with `lowercase=False, strip_accents=False` keeps
Hangul syllables whole, while the uncased defaults (which strip accents
through NFD) make WordPiece see Korean as jamo.

Input files are read as UTF-8, one sentence or paragraph per line; bytes that
are not UTF-8 are replaced by U+FFFD (with a warning saying how many lines).

`include_hangul` ("common" or "all") puts every syllable of a Hangul set in
the vocabulary whether or not the corpus has it (`hangul_syllables`), so a
vocabulary trained on a small domain corpus does not turn the syllables of
other domains into [UNK] / <unk>.
"""

import io
import logging
import re
import unicodedata
from pathlib import Path

import sentencepiece as spm
import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from bertzoo.io.publish import atomic_path
from bertzoo.tokenizers import basic, corpus_stream, morphemes, wordpiece_learner
from bertzoo.tokenizers.base import TokenizerError
from bertzoo.tokenizers.corpus_stream import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_SENTENCES,
    DEFAULT_MAX_WORDS,
    CorpusStats,
    check_limit,
    read_lines,
    sample_lines,
)
from bertzoo.tokenizers.sentencepiece import AlbertPreprocessor, model_pieces
from bertzoo.tokenizers.wordpiece import write_vocabulary

logger = logging.getLogger(__name__)

BERT_RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# ALBERT's spm_train flags (google-research/albert README): <pad>=0, <unk>=1,
# [CLS]=2, [SEP]=3, [MASK]=4 as control symbols (never produced from text),
# then these user-defined symbols (always their own piece).
ALBERT_CONTROL_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")
ALBERT_USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")
JOINER = "##"
HANGUL_SETS = ("none", "common", "all")
# Conjoining jamo: what NFD (accent stripping) makes of a Hangul syllable,
# and their extended blocks. Terminals draw a run of them as the syllable.
CONJOINING_JAMO = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
HANGUL_SYLLABLE_RANGE = (0xAC00, 0xD7A3)
# With accent stripping by default, a corpus whose words are at least this
# share Hangul (in its first HANGUL_SCAN_LINES non-empty lines) keeps it off.
HANGUL_SHARE = 0.01
HANGUL_SCAN_LINES = 10_000
FAIRSEQ_MODEL_FILE = "sentencepiece.bpe.model"


def is_conjoining_jamo(char):
    return any(lo <= ord(char) <= hi for lo, hi in CONJOINING_JAMO)


def is_hangul(char):
    """A precomposed syllable, a conjoining jamo or a compatibility jamo (ㅋ)."""
    lo, hi = HANGUL_SYLLABLE_RANGE
    return lo <= ord(char) <= hi or 0x3131 <= ord(char) <= 0x318E or is_conjoining_jamo(char)


def hangul_word_share(files, max_line_bytes=DEFAULT_MAX_LINE_BYTES, lines=HANGUL_SCAN_LINES):
    """(words holding Hangul, words) in the first `lines` non-empty lines of
    the files (words split on whitespace)."""
    hangul = words = 0
    for line in corpus_stream.head_lines(files, lines, max_line_bytes):
        for word in line.split():
            words += 1
            hangul += any(is_hangul(c) for c in word)
    return hangul, words


def jamo_tokens(vocabulary):
    """The tokens (WordPiece tokens, SentencePiece pieces) that hold a
    conjoining jamo."""
    return [t for t in vocabulary if any(is_conjoining_jamo(c) for c in t)]


def visible(piece):
    """`piece` with conjoining jamo and combining marks (what NFD makes of a
    syllable or an accented letter) written as \\uXXXX, so a decomposed piece
    does not look like the composed one on a terminal."""
    return "".join(
        f"\\u{ord(c):04x}" if is_conjoining_jamo(c) or unicodedata.category(c) == "Mn" else c
        for c in piece
    )


def _warn_jamo(vocabulary, strip_accents):
    """One warning when accent stripping filled the vocabulary with jamo (at
    least HANGUL_SHARE of its tokens: an English vocabulary with a few
    jamo from quoted Korean stays quiet)."""
    jamo = len(jamo_tokens(vocabulary))
    if strip_accents and jamo and jamo >= HANGUL_SHARE * len(vocabulary):
        logger.warning(
            "Accent stripping decomposed Hangul into jamo: %s of the %s tokens (%.0f%%) hold "
            "jamo. Train with strip_accents=False (--no-strip-accents) to keep syllables whole, "
            "unless you mean to reproduce multilingual uncased BERT.",
            f"{jamo:,}",
            f"{len(vocabulary):,}",
            100 * jamo / len(vocabulary),
        )


def keep_syllables(files, lowercase, strip_accents, max_line_bytes=DEFAULT_MAX_LINE_BYTES):
    """The accent stripping to train with when the caller left it to the
    default: `strip_accents` (None follows `lowercase`), except that a
    corpus whose first lines' words are at least HANGUL_SHARE Hangul keeps
    it off (accent stripping would turn every syllable into jamo), with a
    one-line warning. Returns the setting (a bool)."""
    strip = basic.resolve_strip_accents(lowercase, strip_accents)
    if not strip:
        return False
    hangul, words = hangul_word_share(files, max_line_bytes)
    if words and hangul >= HANGUL_SHARE * words:
        logger.warning(
            "Keeping Hangul syllables whole: %s of the first %s words hold Hangul, which accent "
            "stripping would decompose into jamo, so the vocabulary is trained with "
            "strip_accents=False (--strip-accents, strip_accents=True, strips anyway, as "
            "multilingual uncased BERT does).",
            f"{hangul:,}",
            f"{words:,}",
        )
        return False
    return True


def _hangul_set(which):
    """`include_hangul` as one of HANGUL_SETS (None is "none")."""
    if which is None:
        return "none"
    if isinstance(which, str) and which in HANGUL_SETS:
        return which
    raise TokenizerError(
        f"include_hangul must be one of {', '.join(HANGUL_SETS)} (or None); got {which!r}."
    )


def hangul_syllables(which):
    """The precomposed Hangul syllables of a set, in code point order.

    "all": the 11,172 syllables U+AC00..U+D7A3. "common": the 2,350 of
    KS X 1001 (the EUC-KR Hangul block, rows 0xB0-0xC8 x columns
    0xA1-0xFE, decoded with Python's euc_kr codec; trying to encode a
    syllable is no test, since the codec writes the other 8,822 as 8-byte
    jamo composition sequences). "none" or None: no syllables.
    """
    which = _hangul_set(which)
    if which == "all":
        return [chr(cp) for cp in range(0xAC00, 0xD7A4)]
    if which == "common":
        return [
            bytes((row, col)).decode("euc_kr")
            for row in range(0xB0, 0xC9)
            for col in range(0xA1, 0xFF)
        ]
    return []


def _hangul_characters(which, tokenizer):
    """The characters `tokenizer` (a `BasicTokenizer`) makes of the set's
    syllables: the syllables themselves, or their jamo when it strips
    accents (NFD decomposes every syllable)."""
    syllables = hangul_syllables(which)
    if not syllables:
        return []
    return sorted({char for word in tokenizer.tokenize(" ".join(syllables)) for char in word})


def _check_vocab_size(vocab_size):
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise TokenizerError(f"vocab_size must be a positive integer, got {vocab_size!r}.")


def count_words(
    files,
    tokenizer=None,
    max_words=DEFAULT_MAX_WORDS,
    max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    stats=None,
    workers=1,
):
    """Word counts of the files, words as `tokenizer` (a `BasicTokenizer`,
    the default one if None) produces them, streamed line by line: a
    `BoundedWordCounter` (exact up to `max_words` distinct words, the
    Misra-Gries summary beyond; see `corpus_stream`), counted in `workers`
    processes (None: the CPU count, at most one per 8 MB of text) whose
    summaries are merged in corpus order (`corpus_stream.count_words`:
    exact, and the same whatever `workers`, up to `max_words` distinct
    words)."""
    tokenizer = basic.BasicTokenizer() if tokenizer is None else tokenizer
    return corpus_stream.count_words(files, tokenizer, max_words, max_line_bytes, stats, workers)


def train_wordpiece(
    files,
    vocab_size,
    lowercase=True,
    strip_accents=None,
    output=None,
    reserved_tokens=BERT_RESERVED_TOKENS,
    min_frequency=2,
    reference="google",
    control_chars=None,
    max_token_length=50,
    num_iterations=4,
    include_hangul=None,
    max_words=DEFAULT_MAX_WORDS,
    max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    stats=None,
    workers=1,
    keep_hangul_syllables=False,
    max_characters=None,
    pre_tokenize="words",
):
    """Learns a WordPiece vocabulary (BERT's `vocab.txt`) from text files.

    Words are counted with `BasicTokenizer(lowercase, strip_accents)`, so the
    vocabulary is learnt on exactly what `BertTokenizer` with the same
    settings will look up; the pieces are then learnt with tensorflow-text's
    WordPiece learner (a binary search on the frequency threshold that gives
    at most `vocab_size` tokens).

    The corpus is streamed, never held in memory: lines are read one at a
    time (longer ones cut at `max_line_bytes`, counted) and words counted
    in a table of at most `max_words` distinct words. A corpus with no more
    distinct words is counted exactly, and the vocabulary is the same as
    from counting everything in memory. Beyond, the counts are the batched
    Misra-Gries summary (`corpus_stream.BoundedWordCounter`): a word's
    count is at most about 1.1 N/max_words below its true count (N: the corpus's
    word occurrences; the exact bound met is logged), every word more
    frequent than that is kept, and rare words are dropped; the corpus's
    characters are all kept. Memory is bounded by `max_words` and
    `max_line_bytes`, not by the corpus's size: the counts take about 120
    bytes a word and tensorflow-text's learner about 800 more while it
    runs (measured: 31 MB for 269,940 words; +22 MB learning from 26,580),
    so about 4 GB at the default 4 million.

    With `workers` > 1 the words are counted in that many processes, each
    with a table of its own (`count_words`): about `workers` + 2 tables at
    the peak, before the learner's working memory (which comes after). Up
    to `max_words` distinct words the counts, and so the vocabulary, are
    the same as with one; beyond, they differ within the bound reported.

    The vocabulary is: the reserved tokens (the first one, [PAD], gets id 0,
    which the backbone treats as padding), every character of the corpus
    both as a word start and as a "##" continuation (so nothing in the
    training text becomes [UNK]), then the learnt pieces by frequency. It
    has at most `vocab_size` tokens (fewer when the corpus has no more
    pieces at `min_frequency`).

    A corpus with more distinct characters than the vocabulary can hold (a
    web crawl's rare CJK characters, emoji and stray symbols) keeps its most
    frequent ones, as many as fill half of the vocabulary, as the character
    coverage of SentencePiece or the alphabet limit of other WordPiece
    trainers do; a warning gives how many were left out and their share of
    the character occurrences. Words that hold one become [UNK], and no
    piece is learnt from them. `max_characters` sets that cap yourself (a
    crawl whose characters fit, but crowd out the learnt pieces: KoELECTRA's
    vocabulary kept 6,000 of 32,200), and a warning says when the characters
    take more than half of the vocabulary.

    With `include_hangul`, every syllable of the set (`hangul_syllables`)
    that the corpus lacks is added too, after the corpus's characters and
    before the learnt pieces: first all of them as word starts, then all as
    "##" continuations, so no word of the set's syllables is [UNK]. They
    count against `vocab_size`: the learner is given `vocab_size` minus the
    number added, so fewer pieces are learnt and the total stays at most
    `vocab_size` ("common" adds up to 2 x 2,350 = 4,700 tokens, "all" up to
    2 x 11,172 = 22,344; a `vocab_size` that cannot hold them and the
    corpus's characters is an error saying the minimum). A word that mixes
    Hangul with a character missing from the vocabulary (an emoji, a letter
    the corpus lacks) is still [UNK] as a whole, as WordPiece does. With
    accent stripping (the uncased default), `BertTokenizer` decomposes
    syllables into jamo, so their jamo are added instead (the 67 modern
    jamo, both ways, for either set: every syllable is covered).

    Args:
        files: a text file, a glob pattern or a list of them (UTF-8, one
            text per line; `.gz` files are decompressed as they are read).
        vocab_size: the maximum vocabulary size.
        lowercase, strip_accents, reference, control_chars: the
            `BertTokenizer` settings the vocabulary is for (strip_accents
            None follows lowercase, which decomposes Hangul into jamo: pass
            False for Korean; reference "google", the default, is what a
            preset built on this vocabulary records).
        output: if given, `vocab.txt` is written there (atomically).
        reserved_tokens: the special tokens, in id order; the first is the
            padding token.
        min_frequency: pieces seen fewer times are not learnt (single
            characters are always in).
        max_token_length: longer words are left out of the piece counts.
        num_iterations: the learner's refinement passes.
        include_hangul: None or "none" (the default), "common" (the 2,350
            KS X 1001 syllables) or "all" (all 11,172): always in the
            vocabulary, as above.
        max_words: distinct words counted exactly (at least 2); above, the
            Misra-Gries approximation, as above.
        max_line_bytes: longer lines are cut there (and counted).
        stats: a `CorpusStats` to fill in (lines, bytes, cut lines, lines
            with invalid UTF-8), or None.
        workers: the processes that count the words (1: this one; None:
            the CPU count, at most one per 8 MB of text).
        max_characters: the most distinct characters kept (the most
            frequent ones; each takes two tokens, a word start and a "##"
            continuation). None: all of them when they fit in `vocab_size`
            with the reserved tokens, else (`vocab_size` - reserved) // 4,
            half of the vocabulary.
        keep_hangul_syllables: the caller left `strip_accents` to its
            default: a corpus whose words are at least 1% Hangul is then
            trained with strip_accents=False, with a warning
            (`keep_syllables`); `stats.strip_accents` says which was used.
        pre_tokenize: "words" (the default: words as `BertTokenizer` makes
            them) or "morphemes": each word cut at its Korean morpheme
            boundaries first (kiwipiepy; `bertzoo.tokenizers.morphemes`),
            the units after the first counted as continuations, so no
            piece spans two morphemes (KLUE's recipe); the pieces are then
            learnt by `wordpiece_learner`, tensorflow-text's algorithm over
            units. The vocabulary is for a plain `BertTokenizer` all the
            same.
            Without it, a vocabulary trained with accent stripping that
            holds jamo is trained as asked, with a warning giving their
            share.

    Returns:
        The vocabulary, a list of tokens (index = id).
    """
    _check_vocab_size(vocab_size)
    reserved = [str(t) for t in reserved_tokens]
    if not reserved or len(set(reserved)) != len(reserved) or "" in reserved:
        raise TokenizerError(
            f"reserved_tokens must be distinct non-empty tokens, padding first; got {reserved}."
        )
    include_hangul = _hangul_set(include_hangul)
    by_morphemes = morphemes.check_pre_tokenize(pre_tokenize) == "morphemes"
    if by_morphemes:
        morphemes.analyzer()  # a missing analyser fails before any reading
    if keep_hangul_syllables:
        strip_accents = keep_syllables(files, lowercase, strip_accents, max_line_bytes)
    basic_tokenizer = basic.BasicTokenizer(lowercase, strip_accents, reference, control_chars)
    stats = CorpusStats() if stats is None else stats
    stats.strip_accents = basic_tokenizer.strip_accents
    words = morphemes.MorphemeWords(basic_tokenizer) if by_morphemes else basic_tokenizer
    counter = count_words(files, words, max_words, max_line_bytes, stats, workers)
    counter.characters.discard(morphemes.CONTINUATION)
    counts = counter.counts
    if not counts:
        raise TokenizerError("The training files hold no words.")
    processes = f"{stats.workers} process" + ("es" if stats.workers > 1 else "")
    stats.word_counts = f"{counter.summary()}, in {processes}"
    logger.info("WordPiece word counts: %s.", stats.word_counts)
    alphabet = _alphabet(
        counter, _character_limit(max_characters, vocab_size, reserved, len(counter.characters))
    )
    if len(alphabet) < len(counter.characters):
        allowed = set(alphabet)
        counts = {
            w: n for w, n in counts.items() if allowed.issuperset(w.lstrip(morphemes.CONTINUATION))
        }
    required = reserved + [c for c in alphabet if c not in reserved]
    required += [JOINER + c for c in alphabet if JOINER + c not in reserved]
    if vocab_size < len(required):
        raise TokenizerError(
            f"vocab_size={vocab_size} is too small: the {len(reserved)} reserved tokens "
            f"and the corpus's {len(alphabet)} characters (each as a word start and as a "
            f"'{JOINER}' continuation) need at least {len(required)}."
        )
    # The Hangul pieces as BertTokenizer will look them up (jamo after NFD).
    hangul = _hangul_characters(include_hangul, basic_tokenizer)
    have = set(required)
    added = [c for c in hangul if c not in have]
    added += [JOINER + c for c in hangul if JOINER + c not in have]
    if vocab_size < len(required) + len(added):
        what = "jamo" if basic_tokenizer.strip_accents else "syllables"
        raise TokenizerError(
            f"vocab_size={vocab_size} is too small for include_hangul={include_hangul!r}: "
            f"the {len(reserved)} reserved tokens, the corpus's {len(alphabet)} characters "
            f"and the set's {len(hangul):,} {what} (each as a word start and as a "
            f"'{JOINER}' continuation) need at least {len(required) + len(added)}."
        )
    learn = wordpiece_learner.learn if by_morphemes else learner.learn
    learnt = learn(
        list(counts.items()),
        vocab_size - len(added),  # the learnt pieces make room for the Hangul ones
        reserved,
        lower_thresh=max(1, int(min_frequency)),
        num_iterations=num_iterations,
        max_input_tokens=-1,
        max_token_length=max_token_length,
        max_unique_chars=len(alphabet),
        include_joiner_token=True,
        joiner=JOINER,
    )
    vocabulary = required + added
    seen = set(vocabulary)
    for token in learnt:
        if len(vocabulary) >= vocab_size:
            break
        if token not in seen:
            seen.add(token)
            vocabulary.append(token)
    if len(vocabulary) < vocab_size:
        logger.info(
            "WordPiece vocabulary has %d tokens (asked for at most %d): the corpus has "
            "no more pieces seen at least %d times.",
            len(vocabulary),
            vocab_size,
            min_frequency,
        )
    _warn_jamo(vocabulary, basic_tokenizer.strip_accents)
    if output is not None:
        write_vocabulary(output, vocabulary)
    return vocabulary


def _character_limit(max_characters, vocab_size, reserved, characters):
    """The most distinct characters a vocabulary keeps (see
    `train_wordpiece`)."""
    if max_characters is None:
        if len(reserved) + 2 * characters <= vocab_size:
            if 4 * characters > vocab_size:
                logger.warning(
                    "The corpus's %s distinct characters take %s of the %s tokens (a word start "
                    "and a '##' continuation each), leaving little room for learnt pieces; "
                    "max_characters keeps only the most frequent ones.",
                    f"{characters:,}",
                    f"{2 * characters:,}",
                    f"{vocab_size:,}",
                )
            return characters
        return max(1, (vocab_size - len(reserved)) // 4)
    if isinstance(max_characters, bool) or not isinstance(max_characters, int):
        raise TokenizerError(
            f"max_characters must be None or an integer >= 1, got {max_characters!r}."
        )
    if max_characters < 1:
        raise TokenizerError(
            f"max_characters must be None or an integer >= 1, got {max_characters}."
        )
    return max_characters


def _alphabet(counter, limit):
    """The corpus's characters, sorted: all of them, or the `limit` most
    frequent (by their occurrences in the counted words; ties by code
    point), with a warning saying what was left out."""
    characters = counter.characters
    if len(characters) <= limit:
        return sorted(characters)
    frequency = dict.fromkeys(characters, 0)
    for word, n in counter.counts.items():
        for c in word:
            if c in frequency:  # (not a morpheme unit's continuation mark)
                frequency[c] += n
    ranked = sorted(characters, key=lambda c: (-frequency[c], c))
    kept, left = ranked[:limit], ranked[limit:]
    total = sum(frequency.values())
    share = sum(frequency[c] for c in left) / total if total else 0.0
    logger.warning(
        "Keeping the %s most frequent of the corpus's %s distinct characters (max_characters; "
        "by default, when they do not all fit, half of the vocabulary: each takes a word "
        "start and a '##' token): the %s left out are %.4f%% of the character occurrences, "
        "and words that hold one become [UNK].",
        f"{limit:,}",
        f"{len(characters):,}",
        f"{len(left):,}",
        100 * share,
    )
    return sorted(kept)


def _model_path(output, name="spiece.model"):
    """A directory (existing, or a path not ending in .model) gets the model
    file `name` inside it; anything else is the model file's path."""
    path = Path(output)
    if path.is_dir() or path.suffix != ".model":
        return path / name
    return path


def _preprocessed_lines(lines, preprocessor, batch_size=4096):
    """`lines` through the tokenizer's preprocessing ops."""
    batch = []

    def flush():
        out = preprocessor(tf.constant(batch, dtype=tf.string)).numpy()
        batch.clear()
        return [s.decode("utf-8") for s in out]

    for line in lines:
        batch.append(line.encode("utf-8"))
        if len(batch) == batch_size:
            yield from flush()
    if batch:
        yield from flush()


def _sentencepiece_sample(files, preprocessor, sampling, stats):
    """The preprocessed non-empty lines sentencepiece trains on: a
    seeded uniform sample of at most `max_sentences` non-empty lines
    (`sampling`: max_sentences, seed, max_line_bytes), in corpus order."""
    max_sentences, seed, max_line_bytes = sampling
    check_limit("max_sentences", max_sentences)
    stats = CorpusStats() if stats is None else stats
    lines = (line for line in read_lines(files, max_line_bytes, stats) if line)
    sample, seen = sample_lines(lines, max_sentences, seed)
    if seen > len(sample):
        stats.sampled = (
            f"a uniform sample of {len(sample):,} of the corpus's {seen:,} non-empty lines "
            f"(reservoir sampling, seed {seed})"
        )
        logger.info("SentencePiece trains on %s.", stats.sampled)
    if preprocessor is None:
        return [s for s in sample if s.strip()]
    return [s for s in _preprocessed_lines(sample, preprocessor) if s]


def train_sentencepiece(
    files,
    vocab_size,
    output,
    lowercase=True,
    strip_accents=True,
    model_type="unigram",
    character_coverage=1.0,
    control_symbols=ALBERT_CONTROL_SYMBOLS,
    user_defined_symbols=ALBERT_USER_DEFINED_SYMBOLS,
    pad_piece="<pad>",
    unk_piece="<unk>",
    seed=0,
    num_threads=1,
    max_sentence_length=4192,
    include_hangul=None,
    max_sentences=DEFAULT_MAX_SENTENCES,
    max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    stats=None,
    **trainer_options,
):
    """Trains an ALBERT-compatible SentencePiece model (`spiece.model`).

    The model has ALBERT's layout: <pad>=0, <unk>=1, then the control
    symbols ([CLS]=2, [SEP]=3, [MASK]=4), then the user-defined symbols, then
    the learnt pieces; `vocab_size` pieces in all. The corpus goes through
    the same preprocessing ops as `SentencePieceTokenizer(lowercase=...,
    strip_accents=...)` applies before encoding, then through the trainer
    (which, like the encoder, also applies the model's nmt_nfkc normaliser).

    The corpus is streamed, never loaded whole: the trainer gets a uniform
    sample of at most `max_sentences` non-empty lines, drawn while the files
    are read line by line (reservoir sampling with a generator seeded by
    `seed`, `corpus_stream.sample_lines`) and kept in corpus order; only the
    sample is preprocessed and handed to sentencepiece (whose own sampling,
    `input_sentence_size`, is off). A corpus of at most `max_sentences`
    non-empty lines is used whole, so the model is the same as from all of
    it. Memory is bounded by `max_sentences` x `max_line_bytes` (in
    practice the sample's size, and sentencepiece's own working memory,
    roughly 10-20 times the sample's bytes for unigram), not by the corpus.

    Training is deterministic for a given corpus, settings and sentencepiece
    version: the sample depends only on the corpus and `seed`, the random
    seed is fixed, and one thread by default (more threads are faster but
    may change the result's scores in the last digits).

    Args:
        files: a text file, a glob pattern or a list of them (UTF-8, one
            text per line; `.gz` files are decompressed as they are read).
        vocab_size: the number of pieces; a corpus that cannot fill it
            gives as many as sentencepiece can make of it (it names the
            most; logged), as `train_wordpiece` stops where the corpus has
            no more pieces.
        output: the model file (ending in .model) or a directory to write
            spiece.model into; written atomically.
        lowercase, strip_accents: the `SentencePieceTokenizer` settings the
            model is for.
        model_type: "unigram" (ALBERT), "bpe", "char" or "word".
        character_coverage: the share of the corpus's characters the
            vocabulary must cover; 1.0 keeps every character (ALBERT used
            0.99995 on its far larger corpus).
        control_symbols, user_defined_symbols, pad_piece, unk_piece: the
            special pieces (ALBERT's by default).
        seed: sentencepiece's random seed, and the line sample's.
        num_threads: trainer threads.
        max_sentence_length: longer lines (in bytes, after preprocessing)
            are skipped by sentencepiece; a warning counts them.
        include_hangul: None or "none" (the default), "common" (the 2,350
            KS X 1001 syllables) or "all" (all 11,172): the set's syllables
            are passed as sentencepiece's `required_chars` (added to any
            given), so each is a piece of the model whether or not the
            corpus has it, and no text of those syllables becomes <unk>.
            They count against `vocab_size` (fewer pieces are learnt); a
            `vocab_size` below the special pieces plus the corpus's and the
            set's characters is an error saying the minimum. This holds
            with accent stripping too: the model's nmt_nfkc normaliser
            composes the jamo back into syllables.
        max_sentences: at most this many lines are sampled for training.
        max_line_bytes: longer lines are cut there when read (counted).
        stats: a `CorpusStats` to fill in, or None.
        **trainer_options: any other `spm_train` flag.

    Returns:
        The path of the written model.
    """
    _check_vocab_size(vocab_size)
    options = dict(
        model_type=model_type,
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        pad_piece=pad_piece,
        unk_piece=unk_piece,
        control_symbols=list(control_symbols),
        user_defined_symbols=list(user_defined_symbols),
        character_coverage=character_coverage,
        num_threads=num_threads,
        max_sentence_length=max_sentence_length,
    )
    options.update(trainer_options)
    return _train_sentencepiece_model(
        files,
        vocab_size,
        _model_path(output),
        AlbertPreprocessor(lowercase, strip_accents),
        options,
        expected=[pad_piece, unk_piece, *control_symbols],
        include_hangul=include_hangul,
        sampling=(max_sentences, seed, max_line_bytes),
        stats=stats,
        strip_accents=strip_accents,
    )


# XLM-R's sentencepiece.bpe.model: <unk> 0, <s> 1, </s> 2, no <pad> (fairseq
# adds <pad> and <mask> around the pieces: `fairseq.XLMRobertaTokenizer`).
XLMR_FIRST_PIECES = ("<unk>", "<s>", "</s>")
FAIRSEQ_EXTRA_IDS = 2  # fairseq's <pad> and <mask>, beside the model's pieces


def train_fairseq_sentencepiece(
    files,
    vocab_size,
    output,
    character_coverage=1.0,
    seed=0,
    num_threads=1,
    max_sentence_length=4192,
    include_hangul=None,
    max_sentences=DEFAULT_MAX_SENTENCES,
    max_line_bytes=DEFAULT_MAX_LINE_BYTES,
    stats=None,
    **trainer_options,
):
    """Trains an XLM-R-style SentencePiece unigram model
    (`sentencepiece.bpe.model`, for `XLMRobertaTokenizer`, kind
    fairseq_sentencepiece).

    The model has XLM-R's layout: <unk> 0, <s> 1, </s> 2 (no <pad>, no
    control or user-defined symbols), the learnt pieces after them, and
    the trainer's default nmt_nfkc normaliser, which the tokenizer applies
    as Hugging Face's does. `vocab_size` counts the ids the tokenizer
    gives, fairseq's <pad> and <mask> included: the model has
    `vocab_size` - 2 pieces (XLM-R's 250,002 ids are 250,000 pieces).

    The lines reach sentencepiece as they are in the files (the tokenizer
    has no preprocessing of its own beyond the model's normaliser, which
    the trainer applies too). Sampling, determinism, memory and the other
    arguments are `train_sentencepiece`'s.

    Returns:
        The path of the written model (`output`, or
        `output`/sentencepiece.bpe.model for a directory).
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 8:
        raise TokenizerError(
            f"vocab_size must be an integer >= 8 for an XLM-R vocabulary (<s>, <pad>, </s>, "
            f"<unk>, <mask> and pieces), got {vocab_size!r}."
        )
    options = dict(
        model_type="unigram",
        pad_id=-1,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        character_coverage=character_coverage,
        num_threads=num_threads,
        max_sentence_length=max_sentence_length,
    )
    options.update(trainer_options)
    return _train_sentencepiece_model(
        files,
        vocab_size - FAIRSEQ_EXTRA_IDS,
        _model_path(output, FAIRSEQ_MODEL_FILE),
        None,
        options,
        expected=list(XLMR_FIRST_PIECES),
        include_hangul=include_hangul,
        sampling=(max_sentences, seed, max_line_bytes),
        stats=stats,
        extra_ids=FAIRSEQ_EXTRA_IDS,
    )


def _train_sentencepiece_model(
    files,
    vocab_size,
    path,
    preprocessor,
    options,
    expected,
    include_hangul,
    sampling,
    stats,
    strip_accents=False,
    extra_ids=0,
):
    """The SentencePiece training both layouts share: the sample (through
    `preprocessor`, None: as read), sentencepiece with `options` for
    `vocab_size` pieces, the checks of the result (its first pieces must be
    `expected`), the model written to `path`. `extra_ids`: the ids the
    tokenizer adds to the pieces, which the messages' sizes include."""
    include_hangul = _hangul_set(include_hangul)
    sentences = _sentencepiece_sample(files, preprocessor, sampling, stats)
    if not sentences:
        raise TokenizerError("The training files hold no text.")
    max_sentence_length = options["max_sentence_length"]
    too_long = sum(len(s.encode("utf-8")) > max_sentence_length for s in sentences)
    if too_long:
        logger.warning(
            "%d line(s) are longer than max_sentence_length=%d bytes; sentencepiece skips them.",
            too_long,
            max_sentence_length,
        )
    character_coverage = options["character_coverage"]
    # The sample is the input: sentencepiece's own sampling stays off
    # (unless a trainer option says otherwise).
    options = {
        "vocab_size": vocab_size,
        "input_sentence_size": 0,
        "shuffle_input_sentence": False,
        "minloglevel": 2,
        **options,
    }
    seed = sampling[1]
    asked = vocab_size + extra_ids
    hangul = hangul_syllables(include_hangul)
    if hangul:
        given = str(options.get("required_chars", ""))
        options["required_chars"] = "".join(dict.fromkeys(given + "".join(hangul)))
    try:
        proto = _train_model(sentences, options, seed)
    except RuntimeError as e:
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(e))
        if hangul and needed:
            raise TokenizerError(
                f"vocab_size={asked} is too small for include_hangul={include_hangul!r}: "
                f"the special pieces, the set's {len(hangul):,} syllables and the corpus's other "
                f"characters need at least {int(needed.group(1)) + extra_ids}."
            ) from None
        if needed:  # as WordPiece says when its characters do not fit
            raise TokenizerError(
                f"vocab_size={asked} is too small: the special pieces and the corpus's "
                f"characters (character_coverage={character_coverage}) need at least "
                f"{int(needed.group(1)) + extra_ids}."
            ) from None
        most = re.search(
            r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", str(e)
        )
        if not most:
            raise TokenizerError(f"SentencePiece training failed: {e}") from None
        # As WordPiece does: a corpus that cannot fill vocab_size gives the
        # vocabulary it can (sentencepiece names the most), with a notice.
        options["vocab_size"] = int(most.group(1))
        logger.info(
            "SentencePiece vocabulary has %d %s (asked for %d): the corpus has no more.",
            options["vocab_size"] + extra_ids,
            "ids, fairseq's included," if extra_ids else "pieces",
            asked,
        )
        try:
            proto = _train_model(sentences, options, seed)
        except RuntimeError as again:
            raise TokenizerError(f"SentencePiece training failed: {again}") from None
    pieces = model_pieces(proto)
    if pieces[: len(expected)] != expected:  # would break the kind's ids
        raise TokenizerError(
            f"The trained model starts with {pieces[: len(expected)]}, not {expected}."
        )
    if stats is not None:
        stats.strip_accents = bool(strip_accents)
    _warn_jamo(pieces, strip_accents)
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(proto)
    return path


def _train_model(sentences, options, seed):
    """The serialized model sentencepiece trains on `sentences`."""
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **options)
    return model.getvalue()


def vocabulary_overlap(reference, other):
    """The share of `reference`'s tokens that `other` has too (1.0: all)."""
    reference = list(reference)
    return len(set(reference) & set(other)) / len(reference)


def wordpiece_fit(vocabulary, lines, tokenizer):
    """How a WordPiece vocabulary fits texts, words as `tokenizer` (a
    `BasicTokenizer`) makes them: {"words", "tokens_per_word", "unk_rate"
    (the share of tokens that are [UNK])}."""
    known = set(vocabulary)
    limit = basic.MAX_CHARS_PER_WORD[tokenizer.reference]
    words = tokens = unknown = 0
    for line in lines:
        for word in tokenizer.tokenize(line):
            pieces = basic.wordpiece(word, known, "[UNK]", limit)
            words += 1
            tokens += len(pieces)
            unknown += pieces.count("[UNK]")
    return {
        "words": words,
        "tokens_per_word": tokens / max(words, 1),
        "unk_rate": unknown / max(tokens, 1),
    }
