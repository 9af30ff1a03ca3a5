"""The train-vocab command: a WordPiece or SentencePiece vocabulary from a
corpus, streamed."""

import argparse
import sys
from pathlib import Path


def add_train_vocab(sub):
    t = sub.add_parser(
        "train-vocab",
        help="train a WordPiece (vocab.txt) or SentencePiece (spiece.model) vocabulary",
        description=(
            "Trains a vocabulary on text files (UTF-8, one sentence or document per "
            "line) with the same normalisation the tokenizer applies. For Korean and "
            "other scripts whose characters decompose, pass --no-strip-accents: "
            "accent stripping (NFD + dropping combining marks, the uncased default) "
            "splits Hangul syllables into jamo. The corpus is streamed (files, glob "
            "patterns, .gz), never held in memory: memory is bounded by --max-words "
            "(WordPiece, times --workers) or --max-sentences (SentencePiece) and "
            "--max-line-bytes."
        ),
    )
    t.add_argument("files", nargs="+", metavar="FILE", help="text files or glob patterns (.gz too)")
    t.add_argument("--output", required=True, help="the vocab.txt / spiece.model to write")
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing file at --output (without it, one is an error)",
    )
    t.add_argument("--kind", choices=("wordpiece", "sentencepiece"), default="wordpiece")
    t.add_argument("--vocab-size", type=int, default=30000)
    t.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=True)
    t.add_argument(
        "--strip-accents",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="default: follows --lowercase, except that WordPiece keeps it off, with a notice, "
        "for a corpus whose words are 1%% or more Hangul (stripping turns syllables into jamo)",
    )
    t.add_argument(
        "--include-hangul",
        choices=("none", "common", "all"),
        default="none",
        help="always include every syllable of a Hangul set (WordPiece: bare and as a '##' "
        "continuation; SentencePiece: as required characters), so Korean the corpus lacks is "
        "not unknown: common = the 2,350 KS X 1001 syllables (4,700 WordPiece tokens), all = "
        "all 11,172 (22,344); they count against --vocab-size. Use with --no-strip-accents "
        "(WordPiece with accent stripping gets the 67 jamo instead). Default: none",
    )
    limits = (
        (
            "--max-words",
            4_000_000,
            "WordPiece: words are counted exactly while the corpus has at most N distinct "
            "words; beyond, the Misra-Gries summary keeps at most N (each kept count at most "
            "about 1.1 x words / N below the truth, the bound met is printed; rare words are "
            "dropped, every character kept). About 0.9 KB a word with the learner (default "
            "4,000,000: ~4 GB)",
        ),
        (
            "--max-sentences",
            2_000_000,
            "SentencePiece: trains on a uniform sample of at most N non-empty lines, drawn "
            "while streaming (reservoir sampling, seed 0), in corpus order; a corpus with at "
            "most N lines is used whole (default 2,000,000)",
        ),
        ("--max-line-bytes", 1 << 20, "longer lines are cut there, and counted (default 1 MiB)"),
    )
    for flag, default, text in limits:
        t.add_argument(flag, type=int, default=default, metavar="N", help=text)
    t.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="WordPiece: count the words in N processes, each with its own table of up to "
        "--max-words words (about 0.13 KB a word: N + 2 tables at the peak), merged in corpus "
        "order. Up to --max-words distinct words the counts, and the vocabulary, are the same "
        "for every N; beyond, they are within the bound printed, and depend on N (give N to "
        "repeat a result on another machine). Default: the CPU count, at most one per 8 MB "
        "of text",
    )
    t.add_argument(
        "--show",
        type=int,
        default=3,
        metavar="N",
        help="print the tokenization of the first N lines (default 3); conjoining jamo and "
        "combining marks (what accent stripping's NFD leaves) are written as \\uXXXX",
    )


def train_vocab(args):
    """`train-vocab`: returns the exit status (2: bad input, one line)."""

    from bertzoo.errors import BertzooError
    from bertzoo.tokenizers import BertTokenizer, SentencePieceTokenizer
    from bertzoo.tokenizers.corpus_stream import CorpusStats
    from bertzoo.tokenizers.train import (
        read_lines,
        train_sentencepiece,
        train_wordpiece,
        visible,
    )

    if Path(args.output).is_dir():
        name = "vocab.txt" if args.kind == "wordpiece" else "spiece.model"
        print(
            f"error: --output {args.output} is a directory; it must name the file to write "
            f"(e.g. {Path(args.output) / name}).",
            file=sys.stderr,
        )
        return 2
    if Path(args.output).exists() and not args.overwrite:
        print(
            f"error: --output {args.output} exists; pass --overwrite to replace it, or name "
            "a new file.",
            file=sys.stderr,
        )
        return 2
    # BERT's rule: accents are stripped exactly when lowercasing, unless told.
    strip = args.lowercase if args.strip_accents is None else args.strip_accents
    stats = CorpusStats()
    limits = dict(max_line_bytes=args.max_line_bytes, stats=stats)
    try:
        if args.kind == "wordpiece":
            train_wordpiece(
                args.files,
                args.vocab_size,
                lowercase=args.lowercase,
                strip_accents=strip,
                output=args.output,
                include_hangul=args.include_hangul,
                max_words=args.max_words,
                workers=args.workers,
                keep_hangul_syllables=args.strip_accents is None,
                **limits,
            )
            strip = stats.strip_accents
            tokenizer = BertTokenizer(args.output, lowercase=args.lowercase, strip_accents=strip)
        else:
            train_sentencepiece(
                args.files,
                args.vocab_size,
                args.output,
                lowercase=args.lowercase,
                strip_accents=strip,
                include_hangul=args.include_hangul,
                max_sentences=args.max_sentences,
                **limits,
            )
            tokenizer = SentencePieceTokenizer(
                args.output, lowercase=args.lowercase, strip_accents=strip
            )
    except (
        BertzooError,
        ValueError,
        OSError,
    ) as e:  # OSError: a missing file, an unwritable --output
        print(f"error: {e}", file=sys.stderr)
        return 2
    capped = (
        f", not the {args.vocab_size} asked for: the corpus has no more pieces"
        if tokenizer.vocabulary_size < args.vocab_size
        else ""
    )
    print(
        f"Wrote {args.output}: {tokenizer.vocabulary_size} tokens{capped} "
        f"(lowercase={tokenizer.lowercase}, strip_accents={tokenizer.strip_accents})."
    )
    reports = [("Read", stats.summary()), ("Word counts:", stats.word_counts)]
    for label, text in reports + [("Sample:", stats.sampled)]:
        if text:
            print(f"{label} {text}.")
    shown, decomposed = 0, False
    for line in read_lines(args.files, args.max_line_bytes):
        if shown >= args.show:
            break
        if line.strip():
            pieces = " ".join(visible(p) for p in tokenizer.detokenize(tokenizer(line)))
            print(f"  {line.strip()}\n    -> {pieces}")
            shown += 1
            decomposed = decomposed or "\\u" in pieces
    if decomposed:
        print(
            "  (\\uXXXX: a conjoining jamo or combining mark, a piece of a decomposed (NFD) "
            "syllable or accented letter; composed (NFC) ones print as themselves)"
        )
    return 0
