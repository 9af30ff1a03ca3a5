"""SQuAD 1.1 / 2.0 question answering JSON files (`read_squad`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bertzoo.data.readers.common import QAExample, data_error, json_type, read_text


class _IdLines:
    """Line numbers of the `"id": "<id>"` strings of a raw JSON text, found
    in one pass; the n-th occurrence of an id is asked for with nth=n."""

    _PATTERN = re.compile(r'"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)')

    def __init__(self, text):
        self._text = text
        self._lines = {}
        line, pos = 1, 0
        for match in self._PATTERN.finditer(text):
            line += text.count("\n", pos, match.start())
            pos = match.start()
            raw = match.group(1)
            if raw[0] == '"' and "\\" not in raw:
                key = raw[1:-1]  # fast path: no escapes to decode
            else:
                try:
                    key = str(json.loads(raw))
                except ValueError:
                    continue
            self._lines.setdefault(key, []).append(line)

    def line(self, qid, nth=0):
        lines = self._lines.get(str(qid), [])
        if nth < len(lines):
            return lines[nth]
        position = self._text.find(json.dumps(qid))
        return 1 if position < 0 else self._text.count("\n", 0, position) + 1


class _SquadReader:
    """Walks a parsed SQuAD file; `line` is the line of the last question
    seen, used for errors about keys above the question level."""

    def __init__(self, path, text):
        self.path, self.lines, self.line = path, _IdLines(text), 1
        self.seen = {}

    def fail(self, message, line=None):
        return data_error(self.path, self.line if line is None else line, message)

    def get(self, obj, key, kind, where, default=...):
        if not isinstance(obj, dict):
            raise self.fail(f"{where} must be a JSON object, got a JSON {json_type(obj)}")
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(f"{where} has no {key!r} key")
        value = obj[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            names = {str: "string", list: "array", int: "integer", bool: "boolean"}
            expected = names.get(kind, "string or integer")
            raise self.fail(f"{where}: {key!r} must be a JSON {expected}, got {value!r}")
        return value

    def examples(self, root):
        articles = self.get(root, "data", list, "the top-level object (SQuAD format)")
        for a, article in enumerate(articles):
            title = article.get("title") if isinstance(article, dict) else None
            where = f"article {a} ({title!r})"
            for p, paragraph in enumerate(self.get(article, "paragraphs", list, where)):
                yield from self.paragraph(paragraph, f"paragraph {p} of {where}")

    def paragraph(self, paragraph, where):
        qas = self.get(paragraph, "qas", list, where)
        self.locate(qas)
        context = self.get(paragraph, "context", str, where)
        for qa in qas:
            yield self.question(qa, context, where)

    def locate(self, qas):
        """Moves `line` to the first question of a paragraph, if it has an id."""
        if qas and isinstance(qas[0], dict) and isinstance(qas[0].get("id"), str | int):
            self.line = self.lines.line(qas[0]["id"], self.seen.get(str(qas[0]["id"]), 0))

    def question(self, qa, context, where):
        qid = self.get(qa, "id", str | int, f"a question in {where}")
        qid = str(qid)
        self.line = self.lines.line(qa["id"], self.seen.get(qid, 0))
        self.check_unique(qid)
        name = f"question {qid!r}"
        question = self.get(qa, "question", str, name)
        if not question.strip():
            raise self.fail(f"{name} has an empty 'question' text")
        impossible = self.get(qa, "is_impossible", bool, name, default=False)
        answers = self.answers(qa, context, name, impossible)
        return QAExample(qid, question, context, answers, impossible, self.line)

    def check_unique(self, qid):
        if qid in self.seen:
            raise self.fail(
                f"question id {qid!r} is used more than once (first at line "
                f"{self.lines.line(qid)}); every question needs a unique id"
            )
        self.seen[qid] = 1

    def answers(self, qa, context, name, impossible):
        if impossible:
            answers = self.get(qa, "answers", list, name, default=[])
            if answers:
                raise self.fail(
                    f"{name} is marked is_impossible but lists {len(answers)} answer(s); "
                    'impossible questions have "answers": [] (plausible answers go in '
                    '"plausible_answers")'
                )
            return []
        answers = self.get(qa, "answers", list, name)
        if not answers:
            raise self.fail(
                f'{name} has no answers but is not marked "is_impossible": true; '
                "answerable questions need at least one answer"
            )
        return [self.answer(a, context, name) for a in answers]

    def answer(self, answer, context, name):
        text = self.get(answer, "text", str, f"an answer of {name}")
        start = self.get(answer, "answer_start", int, f"an answer of {name}")
        if not text:
            raise self.fail(f"{name} has an answer with an empty 'text'")
        if start < 0 or context[start : start + len(text)] != text:
            found = context[max(start, 0) : max(start, 0) + len(text)]
            raise self.fail(
                f"{name}: answer {text!r} is not in its context at character {start} "
                f"(the context there reads {found!r}); answer_start must be the "
                "character offset of the answer text in the context"
            )
        return text, start


def read_squad(path):
    """Reads a SQuAD 1.1 or 2.0 JSON file -> list[QAExample].

        {"version": "v2.0", "data": [{"title": "Normans", "paragraphs": [
          {"context": "The Normans were ...",
           "qas": [{"id": "56ddde6b9a695914005b9628",
                    "question": "Who were the Normans?",
                    "answers": [{"text": "The Normans", "answer_start": 0}],
                    "is_impossible": false}]}]}]}

    "is_impossible" (SQuAD 2.0) is optional and defaults to false; an
    impossible question has answers [] ("plausible_answers" are ignored).
    Every answer must be found at context[answer_start:answer_start +
    len(text)]. QAExample.line (and error lines) is the line of the
    question's "id"; official SQuAD files are one long line, so there all
    lines are 1. Duplicate ids, missing keys and answerable questions
    without answers are TaskDataErrors.
    """
    path = Path(path)
    text = read_text(path)
    try:
        root = json.loads(text)
    except json.JSONDecodeError as e:
        raise data_error(path, e.lineno, f"malformed JSON ({e.msg} at column {e.colno})") from None
    examples = list(_SquadReader(path, text).examples(root))
    if not examples:
        raise data_error(path, 1, "the file has no examples (no questions in 'data')")
    return examples
