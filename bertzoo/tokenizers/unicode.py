"""Character classes and lowercasing shared by the tokenizers, in forms that
TensorFlow string ops use.

The reference tokenizers are Python code over Python's `unicodedata`, so the
classes here are computed from exactly that: each predicate is evaluated on
every code point and compiled into an RE2 character class. Lowercasing uses
ICU (`tf.strings.lower`, which like `str.lower` handles final sigma and
dotted capital I), corrected one to one on the few code points where ICU's
and Python's Unicode versions disagree.

Computing the tables takes seconds, so the package ships them
(`unicode_tables.json`) for its Python's Unicode version and TensorFlow
release, and recomputes them for any other.
"""

import functools
import json
import re
import unicodedata
from pathlib import Path

import tensorflow as tf

from bertzoo.io.publish import atomic_write_text
from bertzoo.tokenizers import basic

TABLES_FILE = Path(__file__).with_name("unicode_tables.json")
_ALL_CODEPOINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def ranges_class(ranges):
    """An RE2 character class of inclusive code point ranges [(lo, hi)]
    (one that matches nothing if there are none)."""
    if not ranges:
        return "[^\\x00-\\x{10ffff}]"
    parts = [f"\\x{{{lo:x}}}" if lo == hi else f"\\x{{{lo:x}}}-\\x{{{hi:x}}}" for lo, hi in ranges]
    return "[" + "".join(parts) + "]"


_RE2_RANGE = re.compile(r"\\x\{([0-9a-f]+)\}(?:-\\x\{([0-9a-f]+)\})?")


def class_ranges(pattern):
    """[(lo, hi)] of a class written by `ranges_class`
    (`[\\x{a}-\\x{d}\\x{20}]`; the class that matches nothing: [])."""
    if pattern.startswith("[^"):
        return []
    return [(int(lo, 16), int(hi or lo, 16)) for lo, hi in _RE2_RANGE.findall(pattern.strip("[]"))]


def code_point_class(code_points):
    """An RE2 character class matching exactly these code points."""
    ranges = []
    for cp in sorted(set(code_points)):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return ranges_class(ranges)


def char_class(predicate):
    """An RE2 character class matching exactly the code points for which
    `predicate(chr(cp))` holds."""
    return code_point_class(cp for cp in _ALL_CODEPOINTS if predicate(chr(cp)))


def _compute_wordpiece_patterns(control_chars):
    drop = char_class(lambda c: c == "\x00" or c == "\ufffd" or basic.is_control(c, control_chars))
    # Whitespace as the reference cleans it, plus what str.split() also splits
    # on (U+2028, U+2029) once cleaning is done.
    space = char_class(
        lambda c: basic.is_whitespace(c) or (c.isspace() and not basic.is_control(c, control_chars))
    )
    return {
        "drop": drop,
        "space": space,
        "cjk": char_class(basic.is_cjk),
        "punct": char_class(basic.is_punctuation),
        "mark": char_class(lambda c: unicodedata.category(c) == "Mn"),
    }


def _compute_albert_patterns():
    return {
        "space": char_class(str.isspace),
        "combining": char_class(lambda c: unicodedata.combining(c) != 0),
        "digit": char_class(str.isdigit),
        # Code points this Python's unicodedata does not know (category Cn).
        "unassigned": char_class(lambda c: unicodedata.category(c) == "Cn"),
    }


def _compute_lowercase_fixes():
    """Code points where ICU's lowercasing and Python's `str.lower` (the
    reference) disagree, one to one: {code point: Python's lowercase}."""
    chars = [chr(c) for c in _ALL_CODEPOINTS if c != 0]
    lowered = tf.strings.lower(tf.constant([c.encode() for c in chars]), encoding="utf-8")
    fixes = {}
    for char, icu in zip(chars, lowered.numpy()):
        py = char.lower()
        if icu.decode("utf-8") != py:
            if len(py) != 1:
                raise AssertionError(f"no one-to-one fix for U+{ord(char):04X}")
            fixes[ord(char)] = ord(py)
    return fixes


def _compute_sigma_classes():
    """What `str.lower`'s final-sigma rule sees, probed from Python itself:
    code points it skips as case-ignorable, and the cased ones (a code point
    both cased and case-ignorable counts as case-ignorable, as in the rule's
    scans). Sorted lists."""
    ignorable, cased = [], []
    for cp in _ALL_CODEPOINTS:
        char = chr(cp)
        final_alone = (char + "\u03a3").lower()[-1] == "\u03c2"
        final_after_cased = ("A" + char + "\u03a3").lower()[-1] == "\u03c2"
        if final_after_cased and not final_alone:
            ignorable.append(cp)
        elif final_alone:
            cased.append(cp)
    return {"ignorable": ignorable, "cased": cased}


def _tf_minor():
    return ".".join(tf.__version__.split(".")[:2])


def compute_tables():
    """The character classes (from this Python's unicodedata) and lowercase
    corrections (this TensorFlow's ICU vs Python) the tokenizer uses."""
    return {
        "unidata_version": unicodedata.unidata_version,
        "tensorflow": _tf_minor(),
        "patterns": {mode: _compute_wordpiece_patterns(mode) for mode in basic.CONTROL_CATEGORIES},
        "albert_patterns": _compute_albert_patterns(),
        "lowercase_fixes": {str(k): v for k, v in _compute_lowercase_fixes().items()},
        "sigma_classes": _compute_sigma_classes(),
    }


def write_tables(path=TABLES_FILE):
    """Regenerates the shipped tables (run after a Python/TensorFlow upgrade)."""
    atomic_write_text(path, json.dumps(compute_tables(), sort_keys=True) + "\n")


@functools.cache
def _shipped_tables():
    try:
        return json.loads(TABLES_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@functools.cache
def wordpiece_patterns(control_chars):
    """RE2 classes for the BERT BasicTokenizer steps: drop, space, cjk,
    punct, mark (nonspacing marks)."""
    shipped = _shipped_tables()
    if shipped.get("unidata_version") == unicodedata.unidata_version:
        return shipped["patterns"][control_chars]
    return _compute_wordpiece_patterns(control_chars)


@functools.cache
def albert_patterns():
    """RE2 classes for the ALBERT preprocessing: `str.isspace`,
    `unicodedata.combining(c) != 0`, `str.isdigit` and the code points
    unassigned in this Python's Unicode version (`unassigned`)."""
    shipped = _shipped_tables()
    if shipped.get("unidata_version") == unicodedata.unidata_version:
        return shipped["albert_patterns"]
    return _compute_albert_patterns()


@functools.cache
def lowercase_fixes():
    shipped = _shipped_tables()
    if (
        shipped.get("unidata_version") == unicodedata.unidata_version
        and shipped.get("tensorflow") == _tf_minor()
    ):
        return {int(k): v for k, v in shipped["lowercase_fixes"].items()}
    return _compute_lowercase_fixes()


@functools.cache
def sigma_classes():
    shipped = _shipped_tables()
    if shipped.get("unidata_version") == unicodedata.unidata_version and "sigma_classes" in shipped:
        return shipped["sigma_classes"]
    return _compute_sigma_classes()


def _lookup(keys, flat, values, default):
    """values[i] where flat == keys[i] (sorted int keys), else default."""
    size = len(keys)
    keys = tf.constant(keys, tf.int32)
    at = tf.minimum(tf.searchsorted(keys, flat), size - 1)
    return tf.where(tf.equal(tf.gather(keys, at), flat), tf.gather(values, at), default)


def _lower_capital_sigmas(text):
    """Each Greek capital sigma lowercased as `str.lower` does, by its
    context: final "ς" when a cased letter precedes it and none follows
    (case-ignorable code points skipped both ways, by this Python's Unicode
    tables), else "σ". ICU's own rule would use its Unicode version."""
    rows = tf.where(tf.strings.regex_full_match(text, "(?s).*\u03a3.*"))[:, 0]
    chosen = tf.gather(text, rows)
    chars = tf.strings.unicode_decode(chosen, "UTF-8", errors="replace")
    flat = chars.flat_values
    classes = sigma_classes()
    keys = sorted([(c, 1) for c in classes["ignorable"]] + [(c, 2) for c in classes["cased"]])
    kind = _lookup([k for k, _ in keys], flat, tf.constant([v for _, v in keys], tf.int32), 0)
    row = tf.searchsorted(
        chars.row_splits[1:], tf.range(tf.size(flat, out_type=tf.int64)), side="right"
    )
    n = tf.size(flat, out_type=tf.int64)
    counted = tf.not_equal(kind, 1)  # what the scans stop at
    stops = tf.concat([tf.where(counted)[:, 0], [n]], 0)  # + a sentinel
    kind_at = tf.concat([kind, [0]], 0)
    row_at = tf.concat([row, [-1]], 0)
    before = tf.cumsum(tf.cast(counted, tf.int64), exclusive=True)
    prev = tf.gather(stops, tf.maximum(before - 1, 0))
    prev_cased = (
        (before > 0)
        & tf.equal(tf.gather(row_at, prev), row)
        & tf.equal(tf.gather(kind_at, prev), 2)
    )
    nxt = tf.gather(stops, tf.cumsum(tf.cast(counted, tf.int64)))
    next_cased = tf.equal(tf.gather(row_at, nxt), row) & tf.equal(tf.gather(kind_at, nxt), 2)
    sigma = tf.equal(flat, 0x3A3)
    lowered = tf.where(prev_cased & ~next_cased, 0x3C2, 0x3C3)
    flat = tf.where(sigma, lowered, flat)
    fixed = tf.strings.unicode_encode(chars.with_flat_values(flat), "UTF-8")
    return tf.tensor_scatter_nd_update(text, rows[:, None], fixed)


def python_lower(text):
    """`str.lower` on a tf.string tensor (1-D, valid UTF-8), in graph ops:
    ICU's lowercasing, corrected to Python's on the code points where their
    Unicode versions disagree, with capital sigma decided by Python's rule.
    The corrections are constants (sorted code points + searchsorted), not
    a lookup table, so a graph that uses them needs no resource tracked to
    be exported."""
    text = tf.strings.lower(_lower_capital_sigmas(text), encoding="utf-8")
    fixes = sorted(lowercase_fixes().items())
    if not fixes:
        return text
    keys = tf.constant([k for k, _ in fixes], tf.int32)
    values = tf.constant([v for _, v in fixes], tf.int32)
    chars = tf.strings.unicode_decode(text, "UTF-8")
    flat = chars.flat_values
    at = tf.minimum(tf.searchsorted(keys, flat), len(fixes) - 1)
    flat = tf.where(tf.equal(tf.gather(keys, at), flat), tf.gather(values, at), flat)
    return tf.strings.unicode_encode(chars.with_flat_values(flat), "UTF-8")
