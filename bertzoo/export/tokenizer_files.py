"""The tokenizer files an ONNX or LiteRT export ships for its runner
(`bertzoo/export/runner.py`): the vocabulary, the settings, and for
WordPiece the character tables bertzoo's own tokenizer uses, so that the
runner's plain-Python tokenizer (`bertzoo.tokenizers.python_wordpiece`,
shipped beside it) gives bertzoo's ids and offsets."""

from bertzoo.tokenizers.unicode import class_ranges

TABLES_FILE = "tokenizer_tables.json"
RUNNER_KINDS = ("wordpiece",)


def tokenizer_section(tokenizer):
    """export.json's `tokenizer`: kind, vocabulary file and settings."""
    if tokenizer.kind in RUNNER_KINDS:
        return tokenizer.python_settings()[0]
    section = {"kind": tokenizer.kind, "vocabulary_file": tokenizer.vocabulary_file}
    for role in ("cls", "sep", "pad", "unk", "mask"):
        section[f"{role}_token"] = getattr(tokenizer, f"{role}_token")
    return section


def tokenizer_tables(tokenizer):
    """The character tables of a WordPiece tokenizer's reference, as code
    point ranges (None for other kinds; `BertTokenizer.python_settings`),
    with the classes `tokenize_with_offsets` splits a text at
    (`offset_space`, dropped, and `offset_kept`, pieces of their own)."""
    if tokenizer.kind not in RUNNER_KINDS:
        return None
    space, kept = tokenizer.offset_classes()
    offsets = {
        "offset_space": class_ranges(space),
        "offset_kept": sorted(r for c in kept for r in class_ranges(c)),
    }
    return {**tokenizer.python_settings()[1], **offsets}
