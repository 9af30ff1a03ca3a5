"""Command line: `python -m bertzoo presets | demo | train-vocab | convert-google | export |
verify | fill-mask | attention`."""

import argparse
import json
import logging
import sys
import time
from pathlib import Path


def presets_table():
    """The built-in presets as a Markdown table (also used in the README)."""
    import json

    from bertzoo import presets as preset_lib

    rows = [
        "| preset | layers (groups) | hidden | heads | intermediate | embedding | vocab | params |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, path in preset_lib.builtin_presets().items():
        doc = json.loads(path.read_text(encoding="utf-8"))
        b = doc["backbone"]
        layers = str(b["num_layers"])
        if b.get("num_groups", b["num_layers"]) != b["num_layers"]:
            layers += f" ({b['num_groups']} shared)"
        extras = []
        if not b.get("num_segments", 2):
            extras.append("no segments")
        if not b.get("use_pooler", True):
            extras.append("no pooler")
        embedding = str(b.get("embedding_dim", b["hidden_dim"]))
        params = f"{doc['metadata']['params']:,}"
        if extras:
            params += f" ({', '.join(extras)})"
        rows.append(
            f"| `{name}` | {layers} | {b['hidden_dim']} | {b['num_heads']} | "
            f"{b['intermediate_dim']} | {embedding} | {b['vocabulary_size']} | {params} |"
        )
    return "\n".join(rows)


def demo(preset, batch, seq, seed=0):
    """Builds `preset` (random weights) and runs one forward pass."""
    import numpy as np

    from bertzoo.models.backbone import BertBackbone

    backbone = BertBackbone.from_preset(preset)
    rng = np.random.default_rng(seed)
    vocab = backbone.vocabulary_size
    ids = rng.integers(5, vocab, size=(batch, seq)).astype("int32")
    lengths = np.linspace(seq, max(2, seq // 2), batch).astype(int)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
    inputs = {"token_ids": ids * mask, "padding_mask": mask}
    if backbone.num_segments:
        inputs["segment_ids"] = np.zeros_like(ids)
    start = time.perf_counter()
    outputs = backbone(inputs)
    seconds = time.perf_counter() - start
    print(f"preset: {preset}")
    print(f"parameters: {backbone.count_params():,}")
    for key, value in outputs.items():
        print(f"{key}: shape {tuple(value.shape)}")
    print(f"forward pass on {batch} x {seq} tokens: {seconds:.2f} s (eager, first call)")
    return outputs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bertzoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="print the built-in presets")
    d = sub.add_parser("demo", help="build a preset and run one forward pass")
    d.add_argument("--preset", default="bert_base", help="built-in name or preset directory")
    d.add_argument("--batch", type=int, default=2)
    d.add_argument("--seq", type=int, default=16)
    _add_train_vocab(sub)
    _add_convert_google(sub)
    _add_export(sub)
    v = sub.add_parser(
        "verify",
        help="check a directory bertzoo wrote (preset, checkpoint, export) against its manifest",
    )
    v.add_argument("directory", metavar="DIR")
    f = sub.add_parser(
        "fill-mask",
        help="the most probable tokens at each [MASK] of a text (a preset with an MLM head)",
        description=(
            "Prints, for each mask token in each TEXT, the TOP_K most probable tokens of the "
            "preset's masked-LM head with their probabilities. PRESET: the pre-training "
            "recipe's preset/, a Hugging Face *ForMaskedLM or *ForPreTraining directory, a "
            "converted Google checkpoint, or an ELECTRA generator (or ELECTRA preset with "
            "its generator/)."
        ),
    )
    f.add_argument("preset", metavar="PRESET")
    f.add_argument("texts", metavar="TEXT", nargs="+")
    f.add_argument("--top-k", type=int, default=5, help="tokens per mask (default %(default)s)")
    f.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = sub.add_parser(
        "attention",
        help="draw a preset's attention maps for a text as a PNG (needs matplotlib)",
        description=(
            "Draws the attention of every layer x head (or of --layer, or of --layer and "
            "--head, large) on TEXT (and --pair), tokens on both axes, with a summary "
            "panel of each layer's average attention to [CLS], [SEP] and the token itself. "
            "Layers and heads count from 1. Needs matplotlib: pip install 'bertzoo[plot]'."
        ),
    )
    a.add_argument("preset", metavar="PRESET")
    a.add_argument("text", metavar="TEXT")
    a.add_argument("--pair", default=None, help="a second segment")
    a.add_argument("--out", required=True, help="the PNG file to write")
    a.add_argument("--layer", type=int, default=None)
    a.add_argument("--head", type=int, default=None)
    a.add_argument("--scores", action="store_true", help="pre-softmax scores, not probabilities")
    _add_plan(sub)
    _add_prepare(sub)
    _add_prepare_records(sub)
    args = parser.parse_args(argv)
    if args.command == "presets":
        print(presets_table())
    elif args.command == "convert-google":
        return convert_google(args)
    elif args.command == "train-vocab":
        return train_vocab(args)
    elif args.command == "export":
        return export(args)
    elif args.command == "verify":
        return verify(args.directory)
    elif args.command == "fill-mask":
        return fill_mask_command(args)
    elif args.command == "attention":
        return attention_command(args)
    elif args.command == "plan":
        return plan_command(args)
    elif args.command == "prepare":
        return prepare_command(args)
    elif args.command == "prepare-records":
        return prepare_records_command(args)
    else:
        demo(args.preset, args.batch, args.seq)
    return 0


def _add_convert_google(sub):
    c = sub.add_parser(
        "convert-google",
        help="convert a Google TF1 BERT/ALBERT/ELECTRA checkpoint into a preset directory",
        description=(
            "Converts an original google-research/bert, google-research/albert or "
            "google-research/electra checkpoint (<prefix>.index + <prefix>.data-*, "
            "bert_config.json or albert_config.json (ELECTRA: none needed), vocab.txt or "
            "a SentencePiece *.model) into a bertzoo preset directory that "
            "BertBackbone.from_preset(OUTPUT) loads. BERT, ALBERT or ELECTRA is detected "
            "from the variable names; optimizer slots and global_step are dropped, the "
            "pre-training heads are kept in heads.safetensors. An ELECTRA checkpoint's "
            "generator is written as a preset of its own in OUTPUT/generator "
            "(ElectraPretrainer.from_preset(OUTPUT) loads both)."
        ),
    )
    c.add_argument(
        "source",
        metavar="SOURCE",
        help="the checkpoint directory (or a checkpoint prefix); with --download, "
        "the cache directory the archive is downloaded and extracted into",
    )
    c.add_argument("output", metavar="OUTPUT", help="the preset directory to write")
    case = c.add_mutually_exclusive_group()
    case.add_argument(
        "--lowercase",
        dest="lowercase",
        action="store_const",
        const=True,
        default=None,
        help="the model is uncased (default: from the directory name; ALBERT: lowercase; "
        "Google's ELECTRA models are uncased)",
    )
    case.add_argument(
        "--cased",
        dest="lowercase",
        action="store_const",
        const=False,
        help="the model is cased",
    )
    c.add_argument(
        "--model-type",
        # bertzoo.convert.google.MODEL_TYPES (not imported here: it loads Keras).
        choices=("bert", "albert", "electra"),
        default=None,
        help="default: detected from the variable names",
    )
    c.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="the model config JSON (default: found beside the checkpoint; ELECTRA, whose "
        "archives ship none: sizes from the tensor shapes, max(1, hidden // 64) heads); "
        "bert_config.json keys, a Hugging Face config.json or ELECTRA's pre-training "
        "hparams JSON",
    )
    c.add_argument(
        "--allow-partial",
        action="store_true",
        help="convert what matches instead of failing on missing or unused tensors "
        "(e.g. a fine-tuned checkpoint's classifier)",
    )
    c.add_argument(
        "--download",
        metavar="NAME",
        default=None,
        help="first download the official archive of a built-in preset (e.g. "
        "bert_base, albert_base) or an https:// URL into SOURCE",
    )
    c.add_argument(
        "--sha256",
        default=None,
        help="with --download: the archive's expected SHA-256 (Google publishes "
        "none; the computed one is printed)",
    )


def convert_google(args):
    """`convert-google`: returns the exit status."""
    from bertzoo.convert.common import CheckpointError
    from bertzoo.convert.loader import convert_google_checkpoint, download_google_checkpoint

    try:
        if args.download:
            # The archive's SHA-256 (Google publishes none) is for the user.
            logging.basicConfig(format="%(message)s")
            logging.getLogger("bertzoo.convert.download").setLevel(logging.INFO)
            if args.model_type or args.allow_partial or args.config:
                raise CheckpointError(
                    "--model-type, --config and --allow-partial do not apply to --download."
                )
            out = download_google_checkpoint(
                args.download,
                args.source,
                output_dir=args.output,
                sha256=args.sha256,
                lowercase=args.lowercase,
            )
        else:
            if args.sha256:
                raise CheckpointError("--sha256 applies to --download only.")
            out = convert_google_checkpoint(
                args.source,
                args.output,
                model_type=args.model_type,
                lowercase=args.lowercase,
                config_file=args.config,
                allow_partial=args.allow_partial,
            )
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"Wrote the preset directory {out}")
    return 0


def _add_train_vocab(sub):
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
            "(WordPiece) or --max-sentences (SentencePiece) and --max-line-bytes."
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
        help="default: follows --lowercase",
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
        "--show",
        type=int,
        default=3,
        metavar="N",
        help="print the tokenization of the first N lines (default 3)",
    )


def train_vocab(args):
    """`train-vocab`: returns the exit status (2: bad input, one line)."""
    from pathlib import Path

    from bertzoo.errors import BertzooError
    from bertzoo.tokenizers import BertTokenizer, SentencePieceTokenizer
    from bertzoo.tokenizers.corpus_stream import CorpusStats
    from bertzoo.tokenizers.train import read_lines, train_sentencepiece, train_wordpiece

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
                **limits,
            )
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
    print(
        f"Wrote {args.output}: {tokenizer.vocabulary_size} tokens "
        f"(lowercase={tokenizer.lowercase}, strip_accents={tokenizer.strip_accents})."
    )
    reports = [("Read", stats.summary()), ("Word counts:", stats.word_counts)]
    for label, text in reports + [("Sample:", stats.sampled)]:
        if text:
            print(f"{label} {text}.")
    shown = 0
    for line in read_lines(args.files, args.max_line_bytes):
        if shown >= args.show:
            break
        if line.strip():
            print(f"  {line.strip()}\n    -> {' '.join(tokenizer.detokenize(tokenizer(line)))}")
            shown += 1
    return 0


def fill_mask_command(args):
    """`fill-mask`: returns the exit status (2: bad input, one line)."""
    import json

    from bertzoo.errors import BertzooError
    from bertzoo.models.fill_mask import fill_mask

    if args.top_k < 1:
        print(f"error: --top-k must be >= 1, got {args.top_k}.", file=sys.stderr)
        return 2
    try:
        results = fill_mask(args.preset, args.texts, top_k=args.top_k)
    except (BertzooError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(dict(zip(args.texts, results)), ensure_ascii=False, indent=1))
        return 0
    for text, masks in zip(args.texts, results):
        print(text)
        for number, candidates in enumerate(masks, 1):
            shown = "  ".join(f"{c['token']} {c['score']:.4f}" for c in candidates)
            print(f"  mask {number}: {shown}")
    return 0


def attention_command(args):
    """`attention`: returns the exit status (2: bad input, one line)."""
    from bertzoo.attention_maps import attention_maps, plot_attention
    from bertzoo.errors import BertzooError

    out = Path(args.out)
    if out.exists():
        print(
            f"error: {out} exists; bertzoo does not replace files. Pick another --out.",
            file=sys.stderr,
        )
        return 2
    try:
        maps = attention_maps(args.preset, args.text, pair=args.pair)
        plot_attention(maps, out, layer=args.layer, head=args.head, scores=args.scores)
    except (BertzooError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{out}: {maps.num_layers} layers x {maps.num_heads} heads, {len(maps.tokens)} tokens")
    return 0


def _add_plan(sub):
    from bertzoo import planner

    p = sub.add_parser(
        "plan",
        help="memory, largest batch and FLOPs of a preset's training or inference step",
        description=(
            "Plans one step of PRESET (a built-in name, a preset or Hugging Face directory) "
            "from its architecture: weights, gradients, optimizer state, activations per "
            "sequence, the largest batch that fits --memory, FLOPs per step and, with "
            "--tflops, the time per step. Calibrated on the XLA-compiled step "
            "(benchmarks/plan_calibration.py)."
        ),
    )
    p.add_argument("preset", metavar="PRESET")
    p.add_argument(
        "--seq-len", type=int, default=512, help="tokens per sequence (default %(default)s)"
    )
    p.add_argument(
        "--memory", default="12GiB", help="device memory, e.g. 12GiB or 80GB (default %(default)s)"
    )
    p.add_argument("--precision", default="float32", choices=planner.PRECISIONS)
    p.add_argument("--optimizer", default="adamw", choices=planner.OPTIMIZERS)
    p.add_argument("--mode", default="finetune", choices=planner.MODES)
    p.add_argument("--gradient-accumulation", type=int, default=1, metavar="N")
    p.add_argument(
        "--attention",
        default="auto",
        choices=planner.ATTENTION_PATHS,
        help="auto: bertzoo's attention (keeps the S x S probabilities); flash: a kernel that keeps none",
    )
    p.add_argument(
        "--tflops", type=float, default=None, help="device peak TFLOP/s, for the time per step"
    )
    p.add_argument(
        "--utilisation",
        type=float,
        default=0.4,
        help="share of --tflops reached (default %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def plan_command(args):
    """`plan`: returns the exit status (2: bad input, one line)."""
    import json

    from bertzoo.errors import BertzooError
    from bertzoo.planner import plan

    try:
        result = plan(
            args.preset,
            seq_len=args.seq_len,
            memory=args.memory,
            precision=args.precision,
            optimizer=args.optimizer,
            mode=args.mode,
            gradient_accumulation=args.gradient_accumulation,
            attention=args.attention,
            tflops=args.tflops,
            utilisation=args.utilisation,
        )
    except (BertzooError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.as_dict(), indent=1) if args.json else result.table())
    return 0


def verify(directory):
    """`verify`: checks every file a bertzoo manifest lists (even with
    BERTZOO_VERIFY=0); returns the exit status."""
    from bertzoo.errors import BertzooError
    from bertzoo.io import manifest as manifest_lib

    try:
        found = manifest_lib.verify_directory(directory, force=True)
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if found is None:
        print(
            f"error: {directory} has no {manifest_lib.MANIFEST_FILE}: bertzoo did not write it, "
            "so there is nothing to verify.",
            file=sys.stderr,
        )
        return 2
    print(f"{directory}: {len(found['files'])} files match the manifest ({found['kind']}).")
    return 0


def _add_export(sub):
    e = sub.add_parser(
        "export",
        help="export a fine-tuned task preset as a serving model (SavedModel + .keras)",
        description=(
            "Writes OUTPUT/saved_model (TF SavedModel, signature serving_default over "
            "string inputs), OUTPUT/model.keras and OUTPUT/serving.json for a task preset "
            "directory written by recipes/finetune.py. Settings default to those the "
            "recipe recorded."
        ),
    )
    e.add_argument("preset", metavar="PRESET_DIR", help="the fine-tuned task preset directory")
    e.add_argument(
        "output",
        metavar="OUTPUT",
        help="the export directory to write: new, empty, or an earlier export with --overwrite",
    )
    e.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier bertzoo export in OUTPUT (nothing else is ever replaced)",
    )
    # Values are JSON (numbers, true/false), so settings pass through unchanged.
    for name in (
        "sequence-length",
        "doc-stride",
        "max-query-length",
        "max-answer-length",
        "null-score-diff-threshold",
    ):
        e.add_argument(f"--{name}", type=json.loads, default=None)


def export(args):
    """`export`: returns the exit status."""
    from bertzoo.errors import BertzooError
    from bertzoo.serving import export_serving

    settings = {
        k: getattr(args, k)
        for k in (
            "sequence_length",
            "doc_stride",
            "max_query_length",
            "max_answer_length",
            "null_score_diff_threshold",
        )
    }
    try:
        out = export_serving(args.preset, args.output, overwrite=args.overwrite, **settings)
    except (BertzooError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote the serving model {out}")
    return 0


def _add_prepare(sub):
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
    p.add_argument("--shard-mb", type=float, default=64.0, help="raw text per shard (default 64)")
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


def prepare_command(args):
    """`prepare`: returns the exit status (2: bad input, one line)."""
    import logging

    from bertzoo.data.prepare import PrepareSettings, prepare_corpus
    from bertzoo.errors import BertzooError

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        tokenizer = load_tokenizer(args.vocabulary, args.lowercase, args.strip_accents)
        settings = PrepareSettings(
            layout=args.layout,
            shard_bytes=max(1, int(args.shard_mb * 2**20)),
            workers=args.workers,
            max_line_bytes=max(1, int(args.max_line_mb * 2**20)),
            seed=args.seed,
        )
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


def _add_prepare_records(sub):
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
