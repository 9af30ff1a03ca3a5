"""The corpus commands: prepare (text into tokenized shards) and
prepare-records (masked TFRecords from shards)."""

import argparse
import logging
import math
import sys
from pathlib import Path


def add_prepare(sub):
    p = sub.add_parser(
        "prepare",
        help="tokenize a text corpus once into document shards (parallel, resumable)",
        description=(
            "Turns text files (paths and globs, .gz too; one sentence per line and a blank "
            "line between documents, or --layout documents: one document per line) into "
            "tokenized document shards in OUTPUT, in parallel and in memory bounded by "
            "--shard-mb x --workers. Rerun the same command to continue an interrupted "
            "preparation: finished shards are kept."
        ),
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="text files or glob patterns")
    p.add_argument(
        "--vocabulary",
        required=True,
        help="a vocab.txt, a SentencePiece .model, or a preset directory with a vocabulary",
    )
    p.add_argument("--output", required=True, help="the directory of shards to write")
    p.add_argument("--layout", choices=("sentences", "documents"), default="sentences")
    p.add_argument(
        "--shard-mb",
        type=float,
        default=16.0,
        help="raw text per shard (default 16; a training stream holds one shard's examples)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="this process and N-1 spawned ones (default: the CPU count, at most one per 64 MB)",
    )
    p.add_argument(
        "--seed", type=int, default=12345, help="recorded: the default seed of the examples"
    )
    p.add_argument(
        "--max-line-mb", type=float, default=1.0, help="longer lines are skipped (default 1)"
    )
    p.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--strip-accents", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--engine",
        choices=("local", "beam"),
        default="local",
        help="local: this machine's process pool (default); beam: an Apache Beam pipeline "
        '(pip install apache-beam, or pip install ".[beam]" in the bertzoo checkout), DirectRunner unless --beam-option runner=... says',
    )
    p.add_argument(
        "--beam-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Beam pipeline option, repeatable (runner=DataflowRunner, project=P, "
        "direct_num_workers=2; KEY alone for a flag); only with --engine beam",
    )


def load_tokenizer(vocabulary, lowercase=None, strip_accents=None):
    """A vocab.txt, a SentencePiece .model, or a preset -> the tokenizer.
    lowercase/strip_accents (None: the file kind's or preset's default)."""
    from bertzoo import tokenizers

    options = {
        k: v
        for k, v in (("lowercase", lowercase), ("strip_accents", strip_accents))
        if v is not None
    }
    path = Path(vocabulary)
    if path.is_file() and path.suffix == ".model":
        return tokenizers.SentencePieceTokenizer(str(path), **options)
    if path.is_file():
        return tokenizers.BertTokenizer(str(path), **options)
    return tokenizers.from_preset(vocabulary, check_model=False, **options)


def _bytes(flag, megabytes):
    """A size flag in MiB as bytes; 0, negative, NaN and infinite sizes are
    refused (they used to become one byte: a shard per sentence)."""
    if not math.isfinite(megabytes) or megabytes <= 0:
        raise ValueError(f"{flag} must be a number of MiB > 0, got {megabytes:g}.")
    return max(1, int(megabytes * 2**20))


def prepare_command(args):
    """`prepare`: returns the exit status (2: bad input, one line)."""

    from bertzoo.data.prepare import PrepareSettings, prepare_corpus
    from bertzoo.errors import BertzooError

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.engine != "beam" and args.beam_option:
        print("error: --beam-option needs --engine beam.", file=sys.stderr)
        return 2
    if args.engine == "beam" and args.workers is not None:
        print(
            "error: --workers is the local pool's; with --engine beam the runner decides "
            "(e.g. --beam-option direct_num_workers=2).",
            file=sys.stderr,
        )
        return 2
    try:
        settings = PrepareSettings(
            layout=args.layout,
            shard_bytes=_bytes("--shard-mb", args.shard_mb),
            workers=args.workers,
            max_line_bytes=_bytes("--max-line-mb", args.max_line_mb),
            seed=args.seed,
        )
        settings.check()  # before the tokenizer is read or anything written
        tokenizer = load_tokenizer(args.vocabulary, args.lowercase, args.strip_accents)
        if args.engine == "beam":
            from bertzoo.data.beam_prepare import prepare_corpus_beam

            options = [f"--{option}" for option in args.beam_option]
            document = prepare_corpus_beam(args.inputs, tokenizer, args.output, settings, options)
        else:
            document = prepare_corpus(args.inputs, tokenizer, args.output, settings)
    except (BertzooError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    s = document["summary"]
    print(
        f"Wrote {args.output}: {s['shards']} shards, {s['documents']:,} documents, "
        f"{s['sentences']:,} sentences, {s['tokens']:,} tokens ({s['unk_share']:.3%} [UNK])."
    )
    return 0


def add_prepare_records(sub):
    r = sub.add_parser(
        "prepare-records",
        help="write masked TFRecords (one file per shard) from a prepared corpus",
        description=(
            "Writes masked pre-training TFRecords from PREPARED (written by `prepare`), one "
            "file per shard, with --dupe-factor masked passes, for TPUs reading a bucket; "
            "read them with read_pretraining_dataset or recipes/pretrain.py --data."
        ),
    )
    r.add_argument("prepared", metavar="PREPARED")
    r.add_argument("--output", required=True)
    r.add_argument("--sequence-length", type=int, default=128)
    r.add_argument("--objective", choices=("nsp", "sop", "none"), default="nsp")
    r.add_argument("--dupe-factor", type=int, default=1)
    r.add_argument("--max-predictions", type=int, default=20)
    r.add_argument("--masking", choices=("token", "whole_word", "ngram"), default="token")
    r.add_argument("--short-seq-prob", type=float, default=0.1)
    r.add_argument("--seed", type=int, default=12345)


def prepare_records_command(args):
    """`prepare-records`: returns the exit status (2: bad input, one line)."""
    from bertzoo.data.masking import MaskedLMMasker
    from bertzoo.data.prepared_records import RecordSettings, write_prepared_records
    from bertzoo.data.shards import open_prepared
    from bertzoo.errors import BertzooError

    try:
        prepared = open_prepared(args.prepared, check_inputs=False)
        tokenizer = prepared.tokenizer()
        masker = MaskedLMMasker(
            tokenizer, args.sequence_length, args.max_predictions, kind=args.masking
        )
        settings = RecordSettings(
            seq_len=args.sequence_length,
            objective=args.objective,
            dupe_factor=args.dupe_factor,
            seed=args.seed,
            short_seq_prob=args.short_seq_prob,
        )
        meta = write_prepared_records(prepared, args.output, tokenizer, masker, settings)
    except (BertzooError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote {args.output}: {len(meta['shards'])} files, {meta['num_examples']:,} examples.")
    return 0
