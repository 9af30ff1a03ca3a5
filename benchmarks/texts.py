"""Short real texts for the benchmarks, offline and deterministic.

Sentences of the Python documentation that ships with Python itself: the
language reference (`pydoc_data.topics`) and the docstrings of 50 standard
modules (the library reference). The classification task is which of the
two a sentence comes from: real prose with code fragments, learnable by a
MiniLM well above chance in one epoch, and not solvable by length alone.
One text in ten gets some real-world mess, deterministically: an emoji, a
URL, curly quotes, a Hangul or CJK word.

`length_summary` states the length distribution in the checkpoint's own
tokens (WordPiece, [CLS]/[SEP] included); the benchmarks record it.
"""

import importlib
import random
import re

import numpy as np

_MODULES = (
    "os re json collections itertools functools pathlib subprocess argparse logging typing "
    "datetime random string textwrap shutil socket threading asyncio email http.client "
    "urllib.request csv sqlite3 decimal fractions statistics inspect dataclasses enum heapq "
    "bisect contextlib tempfile glob zipfile tarfile hashlib base64 pickle copy pprint "
    "unittest doctest difflib calendar locale gettext codecs io time"
).split()
_MESS = (
    " 😂",
    " 🙏🏽🔥",
    " see https://docs.python.org/3/ for more",
    " “quoted” — dash",
    " 정말 좋아요",
    " 東京",
    " Ã©tÃ©",
    "!!!",
)


def _sentences(text):
    text = " ".join(text.split())
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 25 < len(s.strip()) < 400]


def _reference_sentences():
    """The sentences of the language reference (`pydoc_data.topics`)."""
    import pydoc_data.topics

    return {s for v in pydoc_data.topics.topics.values() for s in _sentences(v)}


def _sources():
    reference = _reference_sentences()
    library = _docstring_sentences(_MODULES)
    return sorted(reference), sorted(library - reference)


def _messy(text, rng):
    if rng.random() < 0.1:
        return text + rng.choice(_MESS)
    return text


def labelled_texts(n, seed=0):
    """`n` (text, label) pairs, balanced: 0 the language reference, 1 the
    library reference. Raises if Python ships fewer sentences."""
    reference, library = _sources()
    rng = random.Random(seed)
    rng.shuffle(reference)
    rng.shuffle(library)
    half = min(len(reference), len(library))
    rows = [(t, 0) for t in reference[:half]] + [(t, 1) for t in library[:half]]
    rng.shuffle(rows)
    if n > len(rows):
        raise ValueError(f"asked for {n} texts; this Python ships {len(rows)}")
    return [(_messy(t, rng), label) for t, label in rows[:n]]


# Three sources for a 3-class task: the language reference, and the
# docstrings of two groups of standard modules (text and data handling;
# the operating system, files, networking and concurrency). A sentence that
# occurs in more than one source is dropped.
_TEXT_AND_DATA = (
    "re json csv string textwrap difflib codecs decimal fractions statistics datetime "
    "calendar locale gettext base64 hashlib pickle copy pprint collections itertools "
    "functools heapq bisect enum dataclasses typing inspect random"
).split()
_SYSTEM = (
    "os pathlib subprocess shutil socket threading asyncio email http.client urllib.request "
    "sqlite3 tempfile glob zipfile tarfile io time logging argparse unittest doctest contextlib"
).split()
TOPICS = ("language reference", "text and data modules", "system and network modules")


def _docstring_sentences(modules):
    found = set()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attribute in dir(module):
            doc = getattr(getattr(module, attribute, None), "__doc__", None)
            if isinstance(doc, str):
                found.update(_sentences(doc))
    return found


def topic_texts(n, seed=0):
    """`n` (text, label) pairs of a 3-class task, balanced: 0 the language
    reference, 1 docstrings of text and data modules, 2 docstrings of
    system and network modules (`TOPICS`). The labels are where Python's
    own documentation puts each sentence; one text in ten gets some
    real-world mess. Raises if Python ships too few sentences."""
    reference = _reference_sentences()
    data, system = _docstring_sentences(_TEXT_AND_DATA), _docstring_sentences(_SYSTEM)
    sources = [reference - data - system, data - reference - system, system - reference - data]
    rng = random.Random(seed)
    per_class = -(-n // 3)
    rows = []
    for label, source in enumerate(sources):
        source = sorted(source)
        if len(source) < per_class:
            raise ValueError(f"asked for {per_class} texts of class {label}; found {len(source)}")
        rng.shuffle(source)
        rows += [(t, label) for t in source[:per_class]]
    rng.shuffle(rows)
    return [(_messy(t, rng), label) for t, label in rows[:n]]


def short_texts(n, seed=0):
    """`n` texts (both sources, shuffled)."""
    return [t for t, _ in labelled_texts(n, seed)]


def length_summary(texts, tokenizer):
    """Mean / median / 90th percentile / max length in tokens (special
    tokens included) of `texts` under `tokenizer` (a bertzoo tokenizer)."""
    ids = tokenizer.tokenize_ids(texts)
    lengths = np.asarray(ids.row_lengths()) + 2
    return {
        "texts": len(texts),
        "mean_tokens": round(float(lengths.mean()), 1),
        "median_tokens": int(np.median(lengths)),
        "p90_tokens": int(np.percentile(lengths, 90)),
        "max_tokens": int(lengths.max()),
        "over_128": int((lengths > 128).sum()),
    }
