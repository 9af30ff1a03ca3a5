"""A small English corpus that needs no download: the help topics of the
Python reference manual that every CPython installation ships
(`pydoc_data.topics`, the text `help("if")` prints), about 460k characters.

The text is turned into the pre-training layout: one document per manual
section (a topic is split at its underlined headings), one sentence per line.
Code samples and grammar rules (indented blocks) are left out. It is what
`recipes/pretrain.py` trains on when no `--corpus` is given, so the recipe
runs offline on any machine with Python.
"""

import re

from bertzoo.data.corpus import CorpusError

_HEADING_RULE = re.compile(r"[*=\-~^\"+]{3,}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def _sections(text):
    """A topic's text -> list of sections, each a list of paragraphs."""
    lines = text.splitlines()
    sections, paragraphs, current = [], [], []

    def end_paragraph():
        if current:
            paragraphs.append(" ".join(part.strip() for part in current))
            current.clear()

    for line in lines:
        if _HEADING_RULE.fullmatch(line.strip()):
            # The line before the rule is the heading: it starts a section.
            if current:
                current.pop()
            end_paragraph()
            if paragraphs:
                sections.append(list(paragraphs))
                paragraphs.clear()
            continue
        if not line.strip() or line.startswith(" "):  # blank or code/grammar
            end_paragraph()
            continue
        current.append(line)
    end_paragraph()
    if paragraphs:
        sections.append(list(paragraphs))
    return sections


def python_docs_corpus(min_sentences=2):
    """The Python help topics as documents (lists of sentences).

    Args:
        min_sentences: sections with fewer sentences are left out.

    Returns:
        list of documents, each a list of str sentences, in a fixed order
        (topics sorted by name).

    Raises:
        CorpusError: this Python has no `pydoc_data` (some minimal
            distributions leave it out); pass a corpus file instead.
    """
    try:
        from pydoc_data.topics import topics
    except ImportError as e:  # pragma: no cover - CPython ships it
        raise CorpusError(
            "This Python installation has no pydoc_data (the help topics the "
            "built-in corpus is made from); pass corpus files instead."
        ) from e
    documents = []
    for name in sorted(topics):
        for section in _sections(topics[name]):
            sentences = [
                s.strip()
                for paragraph in section
                for s in _SENTENCE_END.split(paragraph)
                if s.strip()
            ]
            if len(sentences) >= min_sentences:
                documents.append(sentences)
    if not documents:
        raise CorpusError("pydoc_data.topics holds no usable text.")
    return documents


def write_corpus(documents, path):
    """Writes documents in the sentences layout that `read_corpus` reads:
    one sentence per line, a blank line between documents (atomically)."""
    from bertzoo.io.publish import atomic_write_text

    text = "\n\n".join("\n".join(doc) for doc in documents) + "\n"
    atomic_write_text(path, text)
    return path
