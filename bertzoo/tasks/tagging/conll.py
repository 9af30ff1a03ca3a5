"""CoNLL-style BIO token tagging files (`read_conll`)."""

from __future__ import annotations

from pathlib import Path

from bertzoo.data.readers.common import (
    TaggedSentence,
    data_error,
    no_examples_error,
    numbered_lines,
    read_text,
)
from bertzoo.tasks.tagging.metrics import parse_bio_tag


def _columns_needed(*indexes):
    return max(2, *(i + 1 if i >= 0 else -i for i in indexes))


def _conll_token(path, line, fields, token_column, tag_column):
    """(word, tag) of a tagged token line."""
    width = len(fields)
    in_range = all(-width <= i < width for i in (token_column, tag_column))
    if not in_range or token_column % width == tag_column % width:
        needed = _columns_needed(token_column, tag_column)
        raise data_error(
            path,
            line,
            f"expected at least {needed} whitespace-separated columns (token in "
            f"column {token_column}, tag in column {tag_column}), found {width}: "
            f"{' '.join(fields)!r}",
        )
    tag = fields[tag_column]
    try:
        parse_bio_tag(tag)
    except ValueError:
        raise data_error(
            path,
            line,
            f"tag {tag!r} is not a BIO tag; valid tags are 'O', 'B-<type>' and "
            "'I-<type>' with a non-empty type, e.g. 'B-PER'",
        ) from None
    return fields[token_column], tag


def _conll_tokens(path, text, token_column, tag_column):
    """(line, word, tag or None) per token; None marks a sentence break.
    The first token line decides: one column = untagged file."""
    tagged = None
    for line, raw in numbered_lines(text):
        fields = raw.split()
        if not fields or fields[0].startswith("-DOCSTART-"):
            yield line, None, None
            continue
        if tagged is None:
            tagged, first = len(fields) > 1, line
        if tagged:
            yield line, *_conll_token(path, line, fields, token_column, tag_column)
        elif len(fields) == 1:
            yield line, fields[0], None
        else:
            raise data_error(
                path,
                line,
                f"the line has {len(fields)} columns but the file's first token line "
                f"(line {first}) has one (untagged input); use one column on every "
                "line, or token and tag columns on every line",
            )


def read_conll(path, token_column=0, tag_column=-1):
    """Reads a CoNLL-style BIO tagging file -> list[TaggedSentence].

    One token per line, whitespace-separated columns, a blank line between
    sentences; "-DOCSTART-" lines are skipped. Tags must be "O", "B-<type>"
    or "I-<type>" (IOB1, as in CoNLL-2003, and IOB2 are both accepted). A
    file with one column per line is untagged input: tags are None (the
    one column is the token, whatever token_column says).

        -DOCSTART- -X- -X- O

        EU NNP B-NP B-ORG
        rejects VBZ B-VP O
        German JJ B-NP B-MISC

        Peter NNP B-NP B-PER
        Blackburn NNP I-NP I-PER

    Args:
        token_column / tag_column: column indexes (negative from the end);
            the defaults take the first and the last column.
    """
    path = Path(path)
    text = read_text(path)
    sentences, current = [], None
    for line, word, tag in _conll_tokens(path, text, token_column, tag_column):
        if word is None:
            current = None
            continue
        if current is None:
            current = TaggedSentence([], None if tag is None else [], line)
            sentences.append(current)
        current.words.append(word)
        if tag is not None:
            current.tags.append(tag)
    if not sentences:
        raise no_examples_error(path, text, "no token lines, only blank or -DOCSTART- lines")
    return sentences
