"""Commands on presets and models: presets, demo, verify, fill-mask,
attention, export."""

import json
import sys
import time
from pathlib import Path

from bertzoo.io.jsonfile import load_json


def add_model_commands(sub):
    """presets, demo, verify, fill-mask, attention."""
    sub.add_parser("presets", help="print the built-in presets")
    d = sub.add_parser("demo", help="build a preset and run one forward pass")
    d.add_argument("--preset", default="bert_base", help="built-in name or preset directory")
    d.add_argument(
        "--batch", type=int, default=2, help="sequences in the batch (default %(default)s)"
    )
    d.add_argument("--seq", type=int, default=16, help="tokens per sequence (default %(default)s)")
    v = sub.add_parser(
        "verify",
        help="check a directory bertzoo wrote (preset, checkpoint, export) against its manifest",
    )
    v.add_argument(
        "directory",
        metavar="DIR",
        help="a directory bertzoo wrote with its manifest: a preset, checkpoint or export",
    )
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
    f.add_argument("preset", metavar="PRESET", help="a preset directory with a masked-LM head")
    f.add_argument(
        "texts",
        metavar="TEXT",
        nargs="+",
        help="one or more texts, each with at least one mask token (e.g. [MASK])",
    )
    f.add_argument("--top-k", type=int, default=5, help="tokens per mask (default %(default)s)")
    f.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = sub.add_parser(
        "attention",
        help="draw a preset's attention maps for a text as a PNG (needs matplotlib)",
        description=(
            "Draws the attention of every layer x head (or of --layer, or of --layer and "
            "--head, large) on TEXT (and --pair), tokens on both axes, with a summary "
            "panel of each layer's average attention to [CLS], [SEP] and the token itself. "
            "Layers and heads count from 1. Needs matplotlib: pip install matplotlib, or pip install '.[plot]' in the bertzoo checkout."
        ),
    )
    a.add_argument("preset", metavar="PRESET", help="a built-in name or a preset directory")
    a.add_argument("text", metavar="TEXT", help="the text whose attention is drawn")
    a.add_argument("--pair", default=None, help="a second segment")
    a.add_argument("--out", required=True, help="the PNG file to write")
    a.add_argument("--layer", type=int, default=None, help="draw only this layer (from 1)")
    a.add_argument(
        "--head", type=int, default=None, help="with --layer: draw only this head (from 1), large"
    )
    a.add_argument("--scores", action="store_true", help="pre-softmax scores, not probabilities")


def presets_table():
    """The built-in presets as a Markdown table (also used in docs/presets.md)."""

    from bertzoo import presets as preset_lib

    rows = [
        "| preset | layers (groups) | hidden | heads | intermediate | embedding | vocab | params |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, path in preset_lib.builtin_presets().items():
        doc = load_json(path)
        b = doc["backbone"]
        layers = str(b["num_layers"])
        if b.get("num_groups", b["num_layers"]) != b["num_layers"]:
            layers += f" ({b['num_groups']} shared)"
        extras = []
        if not b.get("num_segments", 2):
            extras.append("no segments")
        if not b.get("use_pooler", True):
            extras.append("no pooler")
        if b.get("num_segments", 2) == 1:
            extras.append("1 segment")
        padding_id = b.get("position_padding_id")
        if padding_id is not None:  # RoBERTa: the first rows serve padding
            extras.append(f"{b.get('max_sequence_length', 512) - padding_id - 1} tokens")
        if b.get("rope_theta") is not None:  # ModernBERT
            extras.append(f"rotary positions, {b.get('max_sequence_length', 512)} tokens")
        if b.get("local_attention_window") is not None:
            extras.append(
                f"{b['local_attention_window']}-token window, global every "
                f"{b.get('global_attention_every', 1)}"
            )
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


def _check_preset(preset):
    """None if `preset` names something (a built-in name or a directory),
    else prints the one-line error and returns 2: before TensorFlow loads, so
    a mistyped name is refused at once."""
    from bertzoo import presets as preset_lib
    from bertzoo.errors import BertzooError

    if Path(preset).is_dir():
        return None  # the loader verifies and reads it (once)
    try:
        preset_lib.classify(preset)
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return None


def demo_command(args):
    """`demo`: builds the preset and prints one forward pass."""
    from bertzoo.errors import BertzooError

    for name, value in (("--batch", args.batch), ("--seq", args.seq)):
        if value < 1:
            print(f"error: {name} must be >= 1, got {value}.", file=sys.stderr)
            return 2
    status = _check_preset(args.preset)
    if status is not None:
        return status
    try:
        demo(args.preset, args.batch, args.seq)
    except BertzooError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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


def fill_mask_command(args):
    """`fill-mask`: returns the exit status (2: bad input, one line)."""
    import json

    if args.top_k < 1:
        print(f"error: --top-k must be >= 1, got {args.top_k}.", file=sys.stderr)
        return 2
    status = _check_preset(args.preset)
    if status is not None:
        return status
    from bertzoo.errors import BertzooError
    from bertzoo.models.fill_mask import fill_mask

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
            shown = "  ".join(f"{_reads(c['text'])} {c['score']:.4f}" for c in candidates)
            print(f"  mask {number}: {shown}")
    return 0


def _reads(text):
    """How a candidate token reads, quoted where it has a space at either
    end ("Ġcat" reads " cat") or is empty."""
    import json

    return text if text and text == text.strip() else json.dumps(text, ensure_ascii=False)


def attention_command(args):
    """`attention`: returns the exit status (2: bad input, one line)."""
    out = Path(args.out)
    if out.exists():
        print(
            f"error: {out} exists; bertzoo does not replace files. Pick another --out.",
            file=sys.stderr,
        )
        return 2
    status = _check_preset(args.preset)
    if status is not None:
        return status
    from bertzoo.attention_maps import attention_maps, plot_attention
    from bertzoo.errors import BertzooError

    try:
        maps = attention_maps(args.preset, args.text, pair=args.pair)
        plot_attention(maps, out, layer=args.layer, head=args.head, scores=args.scores)
    except (BertzooError, ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{out}: {drawn_summary(maps.num_layers, maps.num_heads, args.layer, args.head)}, "
        f"{len(maps.tokens)} tokens"
    )
    return 0


def drawn_summary(num_layers, num_heads, layer=None, head=None):
    """What `attention` drew, in words (the model's size in parentheses)."""
    size = f"of {num_layers} layers x {num_heads} heads"
    if layer is None:
        return f"all {num_layers} layers x {num_heads} heads"
    if head is None:
        return f"layer {layer}, all {num_heads} heads ({size})"
    return f"layer {layer} head {head} ({size})"


def add_export(sub):
    e = sub.add_parser(
        "export",
        help="export a fine-tuned task model or a text embedder: SavedModel, ONNX or LiteRT",
        description=(
            "Writes OUTPUT for MODEL: a fine-tuned task preset (recipes/finetune.py; a "
            "distilled student too), or any other model directory (sentence-transformers, "
            "Hugging Face, bertzoo backbone preset) as a text embedder. --format saved_model "
            "(the default): OUTPUT/saved_model, a TF SavedModel over string inputs (task "
            "models also OUTPUT/model.keras), and OUTPUT/serving.json. --format onnx or "
            "litert: OUTPUT/model.onnx or model.tflite over token ids (heads, softmax, pooling "
            "and normalisation inside), the tokenizer's files, export.json and run.py, which "
            "runs it on strings with numpy and onnxruntime or ai-edge-litert only (QA models: "
            "questions and contexts in, answers out, windowed as the SavedModel windows "
            "them). --int8: int8 weights (onnx, litert). Task settings default to those the "
            "recipe recorded."
        ),
    )
    e.add_argument(
        "preset",
        metavar="MODEL",
        help="a fine-tuned task preset directory, or a model directory to export as an embedder",
    )
    e.add_argument(
        "output",
        metavar="OUTPUT",
        help="the export directory to write: new, empty, or an earlier export with --overwrite",
    )
    e.add_argument(
        "--format",
        default="saved_model",
        choices=("saved_model", "onnx", "litert"),
        help="saved_model (strings in), onnx or litert (token ids in, with run.py) "
        "(default %(default)s)",
    )
    e.add_argument(
        "--int8",
        action="store_true",
        help="int8 weights, activations quantized per call (onnx and litert)",
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


EXPORT_SETTINGS = (
    "sequence_length",
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "null_score_diff_threshold",
)


def export(args):
    """`export`: returns the exit status."""
    from bertzoo.errors import BertzooError
    from bertzoo.export import check_request, export_model

    settings = {k: getattr(args, k) for k in EXPORT_SETTINGS}
    try:
        # Refused at once, before TensorFlow loads: bad combinations, missing packages.
        check_request(args.preset, args.format, args.int8, **settings)
        out = export_model(
            args.preset,
            args.output,
            format=args.format,
            int8=args.int8,
            overwrite=args.overwrite,
            **settings,
        )
    except (BertzooError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.format == "saved_model":
        print(f"Wrote the serving model {out}")
    else:
        int8 = " int8" if args.int8 else ""
        print(f"Wrote the{int8} {args.format} export {out} (run it: python {out}/run.py TEXT)")
    return 0
