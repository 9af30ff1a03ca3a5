"""Command line: `python -m bertzoo presets | demo`."""

import argparse
import time


def presets_table():
    """The built-in presets as a Markdown table (also used in the README)."""
    from bertzoo import presets as preset_lib
    import json

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

    import bertzoo

    backbone = bertzoo.BertBackbone.from_preset(preset)
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
    args = parser.parse_args(argv)
    if args.command == "presets":
        print(presets_table())
    else:
        demo(args.preset, args.batch, args.seq)
    return 0
