"""The tagging kind's built-in dataset: person and location names in BIO
tags, written as CoNLL files so the run reads them with the same reader as
user files. The validation split uses names and places the training split
never shows."""

import random

from bertzoo.data.builtin_words import PEOPLE, PLACES, VERBS, name

DESCRIPTION = "person and location names in BIO tags (unseen names in validation)"


def entities(seed=0, train_size=300, validation_size=100):
    """Person/location tagging in BIO: rows (words, tags)."""
    rng = random.Random(seed)
    templates = (
        ("{p} {v} {l} .",),
        ("yesterday {p} said that {p2} {v} {l} .",),
        ("we know {p} {v} {l} and likes it .",),
        ("{l} is where {p} {v2} .",),
    )

    def rows(split, n):
        out = []
        for _ in range(n):
            (template,) = rng.choice(templates)
            person, person2 = rng.sample(PEOPLE[split], 2)
            surname = rng.choice(PEOPLE[split]) + "son"
            place = rng.choice(PLACES[split])
            verb = rng.choice(VERBS)
            words, tags = [], []
            for token in template.split():
                if token in ("{p}", "{p2}"):
                    first = person if token == "{p}" else person2
                    full = [first] if rng.random() < 0.5 else [first, surname]
                    words += [name(w) for w in full]
                    tags += ["B-PER"] + ["I-PER"] * (len(full) - 1)
                elif token == "{l}":
                    words.append(name(place))
                    tags.append("B-LOC")
                elif token in ("{v}", "{v2}"):
                    words += verb.split()
                    tags += ["O"] * len(verb.split())
                else:
                    words.append(token)
                    tags.append("O")
            words[0] = words[0][0].upper() + words[0][1:]
            out.append((words, tags))
        return out

    return rows(0, train_size), rows(1, validation_size)


def text(rows):
    """One split in CoNLL form: a word and its tag per line, a blank line
    after each sentence."""
    return "\n".join("".join(f"{w} {t}\n" for w, t in zip(words, tags)) for words, tags in rows)
