"""The convert-google command: Google TF1 checkpoints into presets."""

import logging
import sys


def add_convert_google(sub):
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
