"""The tokenizer files an ONNX or LiteRT export ships for its runner
(`bertzoo/export/runner.py`): the vocabulary, the settings, and for
WordPiece the character tables bertzoo's own tokenizer uses, so that the
runner's plain-Python tokenizer gives bertzoo's ids."""

import re

from bertzoo.tokenizers import basic, hf_fast

TABLES_FILE = "tokenizer_tables.json"
RUNNER_KINDS = ("wordpiece",)

_RE2_RANGE = re.compile(r"\\x\{([0-9a-f]+)\}(?:-\\x\{([0-9a-f]+)\})?")


def re2_class_ranges(pattern):
    """[(lo, hi)] of an RE2 class written by `bertzoo.tokenizers.unicode`
    (`[\\x{a}-\\x{d}\\x{20}]`; `[^\\x00-\\x{10ffff}]` matches nothing)."""
    if pattern.startswith("[^"):
        return []
    return [(int(lo, 16), int(hi or lo, 16)) for lo, hi in _RE2_RANGE.findall(pattern.strip("[]"))]


def tokenizer_section(tokenizer):
    """export.json's `tokenizer`: kind, vocabulary file and settings."""
    section = {"kind": tokenizer.kind, "vocabulary_file": tokenizer.vocabulary_file}
    for role in ("cls", "sep", "pad", "unk", "mask"):
        section[f"{role}_token"] = getattr(tokenizer, f"{role}_token")
    if tokenizer.kind in RUNNER_KINDS:
        section.update(
            lowercase=tokenizer.lowercase,
            strip_accents=tokenizer.strip_accents,
            reference=tokenizer.reference,
            added_tokens=list(tokenizer.added_tokens),
            max_chars_per_word=basic.MAX_CHARS_PER_WORD[tokenizer.reference],
        )
    return section


def tokenizer_tables(tokenizer):
    """The character tables of a WordPiece tokenizer's reference, as code
    point ranges (None for other kinds): "hf-fast" the Rust normaliser's
    per-code-point templates and its pre-tokenizer classes; the Python
    references the classes of the cleaning, CJK, punctuation and accent
    steps. Both add the classes `tokenize_with_offsets` splits a text at
    (`offset_space`, dropped, and `offset_kept`, pieces of their own)."""
    if tokenizer.kind not in RUNNER_KINDS:
        return None
    space, kept = tokenizer.offset_classes()
    offsets = {
        "offset_space": re2_class_ranges(space),
        "offset_kept": sorted(r for c in kept for r in re2_class_ranges(c)),
    }
    return {**_reference_tables(tokenizer), **offsets}


def _reference_tables(tokenizer):
    if tokenizer.reference == "hf-fast":
        starts, ends, which, values, splits, ccc = hf_fast._tf_tables(
            tokenizer.lowercase, tokenizer.strip_accents
        )
        tables = hf_fast.tables()
        return {
            "starts": starts,
            "ends": ends,
            "which": which,
            "values": values,
            "splits": splits,
            "ccc": [list(pair) for pair in ccc],
            "punct": tables["punct"],
            "whitespace": tables["whitespace"],
        }
    return {name: re2_class_ranges(pattern) for name, pattern in tokenizer._patterns.items()}
