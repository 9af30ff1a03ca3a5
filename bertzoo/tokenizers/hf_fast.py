"""Hugging Face's Rust BERT normaliser and pre-tokeniser (the `tokenizers`
library's BertNormalizer and BertPreTokenizer, named by the `tokenizer.json`
of most BERT checkpoints on the Hub), as tables, in plain Python and in
TensorFlow ops.

The Rust normaliser works one code point at a time, in this order:
1. clean: delete U+0000, U+FFFD and what its `is_control` calls "other"
   (Cc, Cf, Co and an older Unicode version's Cs -- not unassigned code
   points such as U+0381, which stay inside their word); the Unicode
   `White_Space` characters become " ";
2. pad CJK ideographs with spaces (its ranges; one of them starts at
   U+2B920, not U+2B820 as in google-research/bert);
3. strip accents (if set): NFD, then delete category Mn of the library's
   Unicode version;
4. lowercase (if set): Rust's `char::to_lowercase`, without context (Greek
   capital sigma is always "σ", never final "ς").
The pre-tokeniser splits on whitespace and isolates each punctuation
character (ASCII punctuation and the library's category P).

So a table per step describes it exactly, except for one effect of NFD that
spans characters: canonical reordering of the marks the accent filter keeps
(Mc, and Mn newer than the library's tables), within each run between
starters. `hf_fast_tables.json` holds the tables, measured on every code
point by running the library (tests/fixtures/make_hf_fast_tables.py, which
also proves that they compose back to the library's output).
"""

import bisect
import functools
import json
from pathlib import Path

import tensorflow as tf

TABLES_FILE = Path(__file__).with_name("hf_fast_tables.json")

# Template values: a code point (>= 0), the input code point itself, or a
# removed starter that still ends a reordering run (dropped afterwards).
SELF = -1
BREAK = -2


@functools.cache
def tables():
    try:
        data = json.loads(TABLES_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RuntimeError(f"bertzoo's tokenizer tables {TABLES_FILE} cannot be read: {e}") from e
    data["strip"] = {int(k): [ord(c) for c in v] for k, v in data["strip"].items()}
    data["lower"] = {int(k): [ord(c) for c in v] for k, v in data["lower"].items()}
    data["ccc"] = {int(k): v for k, v in data["ccc"].items()}
    return data


def _members(ranges):
    return {c for lo, hi in ranges for c in range(lo, hi + 1)}


def _in_ranges(ranges):
    starts = [lo for lo, _ in ranges]

    def contains(cp):
        i = bisect.bisect_right(starts, cp) - 1
        return i >= 0 and cp <= ranges[i][1]

    return contains


@functools.cache
def code_point_map(lowercase, strip_accents):
    """The normaliser of one mode as {code point: template} for every code
    point it changes (a template is a tuple of code points, SELF or BREAK)."""
    t = tables()
    breaks = _members(t["breaks"]) if strip_accents else set()
    is_cjk = _in_ranges(t["cjk"])
    out = {}
    for lo, hi in t["drop"]:
        for cp in range(lo, hi + 1):
            out[cp] = ()
    for lo, hi in t["space"]:
        for cp in range(lo, hi + 1):
            out[cp] = (32,)
    changed = set(t["lower"]) if lowercase else set()
    if strip_accents:
        changed |= set(t["strip"]) | breaks
    for lo, hi in t["cjk"]:
        for cp in range(lo, hi + 1):
            if cp not in changed:
                out[cp] = (32, SELF, 32)
    for cp in changed:
        if cp in out:  # dropped or whitespace: cleaning comes first
            continue
        chars = [cp]
        if strip_accents:
            chars = [x for c in chars for x in ([BREAK] if c in breaks else t["strip"].get(c, [c]))]
        if lowercase:
            chars = [x for c in chars for x in (t["lower"].get(c, [c]) if c >= 0 else [c])]
        template = tuple(chars)
        if is_cjk(cp):
            template = (32, *template, 32)
        if template != (cp,):
            out[cp] = template
    return out


def normalize(text, lowercase, strip_accents):
    """The Rust BertNormalizer (clean_text and handle_chinese_chars on) on a
    Python str: the plain-Python specification of `normalize_ops`."""
    mapping = code_point_map(lowercase, strip_accents)
    chars = []
    for char in text:
        template = mapping.get(ord(char))
        if template is None:
            chars.append(ord(char))
        else:
            chars.extend(ord(char) if x == SELF else x for x in template)
    if strip_accents:
        chars = _reorder(chars, tables()["ccc"])
    return "".join(chr(c) for c in chars if c != BREAK)


def _reorder(chars, ccc):
    """Canonical reordering: a stable sort by combining class within each run
    of code points with a nonzero class."""
    out, run = [], []
    for c in [*chars, BREAK]:
        if ccc.get(c, 0):
            run.append(c)
            continue
        out.extend(sorted(run, key=ccc.__getitem__))
        run = []
        out.append(c)
    return out[:-1]


def is_punctuation(char):
    return _in_ranges(tables()["punct"])(ord(char))


def is_whitespace(char):
    return _in_ranges(tables()["whitespace"])(ord(char))


@functools.cache
def _tf_tables(lowercase, strip_accents):
    """The map as sorted ranges of equal templates, ready for searchsorted:
    (starts, ends, template index per range, templates (values, splits))."""
    mapping = code_point_map(lowercase, strip_accents)
    templates, index = [(SELF,)], {(SELF,): 0}
    starts, ends, which = [0], [-1], [0]  # a sentinel range before everything
    for cp in sorted(mapping):
        template = mapping[cp]
        t = index.setdefault(template, len(templates))
        if t == len(templates):
            templates.append(template)
        if ends[-1] == cp - 1 and which[-1] == t:
            ends[-1] = cp
        else:
            starts.append(cp)
            ends.append(cp)
            which.append(t)
    values = [x for t in templates for x in t]
    splits = [0]
    for t in templates:
        splits.append(splits[-1] + len(t))
    ccc = sorted(tables()["ccc"].items()) if strip_accents else []
    return starts, ends, which, values, splits, ccc


def normalize_ops(text, lowercase, strip_accents):
    """`normalize` in TensorFlow ops on a 1-D tf.string batch of valid UTF-8.
    The tables are graph constants (nothing to track when exporting)."""
    starts, ends, which, values, splits, ccc = _tf_tables(lowercase, strip_accents)
    chars = tf.strings.unicode_decode(text, "UTF-8")
    flat = chars.flat_values
    at = tf.searchsorted(tf.constant(starts, tf.int32), flat, side="right") - 1
    hit = flat <= tf.gather(tf.constant(ends, tf.int32), at)
    template = tf.where(hit, tf.gather(tf.constant(which, tf.int32), at), 0)
    rows = tf.gather(
        tf.RaggedTensor.from_row_splits(
            tf.constant(values, tf.int32), tf.constant(splits, tf.int64), validate=False
        ),
        template,
    )
    out = tf.where(
        tf.equal(rows.flat_values, SELF),
        tf.repeat(flat, tf.cast(rows.row_lengths(), tf.int32)),
        rows.flat_values,
    )
    mapped = chars.with_flat_values(rows.with_flat_values(out)).merge_dims(1, 2)
    if ccc:
        mapped = _reorder_ops(mapped, ccc)
    return tf.strings.unicode_encode(mapped, "UTF-8")


def _reorder_ops(chars, ccc):
    """Canonical reordering of a ragged batch of code points (then BREAKs
    removed): one stable sort of the whole batch by (run, class), where a
    run starts at every class-0 code point and at every row start."""
    keys = tf.constant([k for k, _ in ccc], tf.int32)
    classes = tf.constant([v for _, v in ccc], tf.int64)
    flat = chars.flat_values
    at = tf.minimum(tf.searchsorted(keys, flat), len(ccc) - 1)
    cls = tf.where(tf.equal(tf.gather(keys, at), flat), tf.gather(classes, at), 0)
    n = tf.size(flat, out_type=tf.int64)
    row_start = tf.scatter_nd(
        chars.row_splits[:-1, None], tf.ones_like(chars.row_splits[:-1], tf.bool), [n + 1]
    )[:n]
    run = tf.cumsum(tf.cast(tf.equal(cls, 0) | row_start, tf.int64))
    order = tf.argsort(run * 256 + cls, stable=True)
    flat = tf.gather(flat, order)
    chars = chars.with_flat_values(flat)
    return tf.ragged.boolean_mask(chars, tf.not_equal(chars, BREAK))
