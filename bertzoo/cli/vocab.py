"""The train-vocab command: a WordPiece, SentencePiece, byte-level BPE or
XLM-R SentencePiece vocabulary from a corpus, streamed."""

import argparse
import sys
from pathlib import Path

KINDS = ("wordpiece", "sentencepiece", "byte_level_bpe", "fairseq_sentencepiece")
# The file each kind writes (--output names it).
FILES = {
    "wordpiece": "vocab.txt",
    "sentencepiece": "spiece.model",
    "byte_level_bpe": "vocab.json",
    "fairseq_sentencepiece": "sentencepiece.bpe.model",
}
CASED_KINDS = ("byte_level_bpe", "fairseq_sentencepiece")
MORPHEME_KINDS = ("wordpiece", "byte_level_bpe")


def add_train_vocab(sub):
    t = sub.add_parser(
        "train-vocab",
        help="train a WordPiece (vocab.txt), SentencePiece (spiece.model), byte-level BPE "
        "(vocab.json + merges.txt) or XLM-R SentencePiece (sentencepiece.bpe.model) vocabulary",
        description=(
            "Trains a vocabulary on text files (UTF-8, one sentence or document per "
            "line) with the same normalisation the tokenizer applies. For Korean and "
            "other scripts whose characters decompose, pass --no-strip-accents: "
            "accent stripping (NFD + dropping combining marks, the uncased default) "
            "splits Hangul syllables into jamo. The corpus is streamed (files, glob "
            "patterns, .gz), never held in memory: memory is bounded by --max-words "
            "(WordPiece and byte-level BPE, times --workers) or --max-sentences "
            "(SentencePiece) and --max-line-bytes. --kind names the tokenizer kind a "
            "preset records: wordpiece (BERT), sentencepiece (ALBERT), byte_level_bpe "
            "(RoBERTa: --output names vocab.json, merges.txt is written beside it) or "
            "fairseq_sentencepiece (XLM-R: a unigram model whose --vocab-size counts "
            "fairseq's <pad> and <mask> too)."
        ),
    )
    t.add_argument("files", nargs="+", metavar="FILE", help="text files or glob patterns (.gz too)")
    t.add_argument(
        "--output",
        required=True,
        help="the vocab.txt / spiece.model / vocab.json / sentencepiece.bpe.model to write",
    )
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing file at --output (without it, one is an error)",
    )
    t.add_argument("--kind", choices=KINDS, default="wordpiece")
    t.add_argument("--vocab-size", type=int, default=30000)
    t.add_argument(
        "--pre-tokenize",
        choices=("words", "morphemes"),
        default="words",
        help="morphemes (wordpiece, byte_level_bpe): cut every word at its Korean morpheme "
        'boundaries (kiwipiepy: pip install "kiwipiepy>=0.20") and learn the pieces within '
        "morphemes, KLUE's recipe; the tokenizer stays plain WordPiece / BPE. Default: words",
    )
    t.add_argument(
        "--lowercase",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="wordpiece and sentencepiece: default on; the byte-level BPE and XLM-R kinds are "
        "cased",
    )
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
            "WordPiece and byte-level BPE: words are counted exactly while the corpus has at most N distinct "
            "words; beyond, the Misra-Gries summary keeps at most N (each kept count at most "
            "about 1.1 x words / N below the truth, the bound met is printed; rare words are "
            "dropped, every character kept). About 0.9 KB a word with the learner (default "
            "4,000,000: ~4 GB)",
        ),
        (
            "--max-sentences",
            2_000_000,
            "SentencePiece kinds: train on a uniform sample of at most N non-empty lines, drawn "
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
        help="WordPiece and byte-level BPE: count the words in N processes, each with its own table of up to "
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


def _setting_error(args):
    """The one-line error for settings `--kind` does not take, or None."""
    kind = args.kind
    output = Path(args.output)
    if kind in CASED_KINDS and (args.lowercase or args.strip_accents):
        return (
            f"--kind {kind} is cased and keeps accents, as RoBERTa's and XLM-R's tokenizers "
            "do: drop --lowercase / --strip-accents."
        )
    if args.pre_tokenize == "morphemes" and kind not in MORPHEME_KINDS:
        return (
            f"--pre-tokenize morphemes is supported for --kind {' and '.join(MORPHEME_KINDS)} "
            f"(pieces learnt within morphemes, looked up inside words at run time), not {kind}."
        )
    if kind == "byte_level_bpe" and args.include_hangul != "none":
        return (
            "--include-hangul does not apply to --kind byte_level_bpe: every byte has a "
            "token, so no Hangul is ever unknown."
        )
    if output.is_dir():
        return (
            f"--output {args.output} is a directory; it must name the file to write "
            f"(e.g. {output / FILES[kind]})."
        )
    if kind == "byte_level_bpe" and output.suffix != ".json":
        return (
            f"--output {args.output} must name the vocab.json to write (merges.txt is written "
            f"beside it), e.g. {output.parent / FILES[kind]}."
        )
    written = [output]
    if kind == "byte_level_bpe":
        written.append(output.parent / "merges.txt")
    existing = [str(p) for p in written if p.exists()]
    if existing and not args.overwrite:
        if len(existing) == 1:
            return (
                f"--output {existing[0]} exists; pass --overwrite to replace it, or name a "
                "new file."
            )
        return (
            f"--output {existing[0]} and {existing[1]} exist; pass --overwrite to replace "
            "them, or name a new file."
        )
    return None


def _train(args, stats):
    """Trains the vocabulary `args` asks for; returns its tokenizer."""
    from bertzoo.tokenizers import (
        BertTokenizer,
        ByteLevelBPETokenizer,
        SentencePieceTokenizer,
        XLMRobertaTokenizer,
    )
    from bertzoo.tokenizers.train import (
        train_fairseq_sentencepiece,
        train_sentencepiece,
        train_wordpiece,
    )
    from bertzoo.tokenizers.train_bpe import train_byte_level_bpe

    limits = dict(max_line_bytes=args.max_line_bytes, stats=stats)
    kind = args.kind
    if kind == "byte_level_bpe":
        path = train_byte_level_bpe(
            args.files,
            args.vocab_size,
            args.output,
            pre_tokenize=args.pre_tokenize,
            max_words=args.max_words,
            workers=args.workers,
            **limits,
        )
        return ByteLevelBPETokenizer(path)
    if kind == "fairseq_sentencepiece":
        path = train_fairseq_sentencepiece(
            args.files,
            args.vocab_size,
            args.output,
            include_hangul=args.include_hangul,
            max_sentences=args.max_sentences,
            **limits,
        )
        return XLMRobertaTokenizer(path)
    lowercase = True if args.lowercase is None else args.lowercase
    # BERT's rule: accents are stripped exactly when lowercasing, unless told.
    strip = lowercase if args.strip_accents is None else args.strip_accents
    if kind == "wordpiece":
        train_wordpiece(
            args.files,
            args.vocab_size,
            lowercase=lowercase,
            strip_accents=strip,
            output=args.output,
            include_hangul=args.include_hangul,
            max_words=args.max_words,
            workers=args.workers,
            keep_hangul_syllables=args.strip_accents is None,
            pre_tokenize=args.pre_tokenize,
            **limits,
        )
        return BertTokenizer(args.output, lowercase=lowercase, strip_accents=stats.strip_accents)
    train_sentencepiece(
        args.files,
        args.vocab_size,
        args.output,
        lowercase=lowercase,
        strip_accents=strip,
        include_hangul=args.include_hangul,
        max_sentences=args.max_sentences,
        **limits,
    )
    return SentencePieceTokenizer(args.output, lowercase=lowercase, strip_accents=strip)


def train_vocab(args):
    """`train-vocab`: returns the exit status (2: bad input, one line)."""

    from bertzoo.errors import BertzooError
    from bertzoo.tokenizers.corpus_stream import CorpusStats
    from bertzoo.tokenizers.train import read_lines, visible
    from bertzoo.tokenizers.train_bpe import readable

    problem = _setting_error(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    stats = CorpusStats()
    try:
        tokenizer = _train(args, stats)
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
    settings = f"lowercase={tokenizer.lowercase}, strip_accents={tokenizer.strip_accents}"
    if args.pre_tokenize != "words":
        settings += f", learnt on {args.pre_tokenize}"
    print(f"Wrote {args.output}: {tokenizer.vocabulary_size} tokens{capped} ({settings}).")
    reports = [("Read", stats.summary()), ("Word counts:", stats.word_counts)]
    for label, text in reports + [("Sample:", stats.sampled)]:
        if text:
            print(f"{label} {text}.")
    show = readable if args.kind == "byte_level_bpe" else visible
    shown, decomposed = 0, False
    for line in read_lines(args.files, args.max_line_bytes):
        if shown >= args.show:
            break
        if line.strip():
            pieces = " ".join(show(p) for p in tokenizer.detokenize(tokenizer(line)))
            print(f"  {line.strip()}\n    -> {pieces}")
            shown += 1
            decomposed = decomposed or "\\u" in pieces
    if decomposed:
        print(
            "  (\\uXXXX: a conjoining jamo or combining mark, a piece of a decomposed (NFD) "
            "syllable or accented letter; composed (NFC) ones print as themselves)"
        )
    if args.kind == "byte_level_bpe" and args.show:
        print("  (byte-level tokens shown as text: Ġ is the space a token starts with)")
    return 0
