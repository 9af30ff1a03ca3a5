"""The classification kind's built-in dataset: sentence sentiment
("negative"/"positive"), written as a TSV file with a header (`sentence`,
`label`) so the run reads it with the same reader as user files. The
validation split uses adjectives the training split never shows."""

import random

DESCRIPTION = "sentiment (positive/negative sentences; unseen adjectives in validation)"
TEXT_COLUMNS, LABEL_COLUMN = ("sentence",), "label"

_SUBJECTS = (
    "the movie",
    "this film",
    "the acting",
    "the plot",
    "the soundtrack",
    "the ending",
    "the cast",
    "the script",
    "the dialogue",
    "the story",
    "the camera work",
    "the sequel",
    "the show",
    "the performance",
    "the book",
    "the restaurant",
    "the meal",
    "the service",
)
_TEMPLATES = (
    "{s} was {a}.",
    "i thought {s} was {a}.",
    "honestly, {s} felt {a}.",
    "{s} is {a}.",
    "in the end {s} turned out {a}.",
    "my friends said {s} was {a}.",
    "overall, {s} was really {a}.",
    "{s} seemed {a} to me.",
)
_ADJECTIVES = {
    # (train, validation) per sentiment; the two lists share no word.
    "positive": (
        (
            "good",
            "great",
            "wonderful",
            "excellent",
            "enjoyable",
            "delightful",
            "brilliant",
            "charming",
            "beautiful",
            "impressive",
            "amazing",
            "pleasant",
        ),
        (
            "superb",
            "fantastic",
            "terrific",
            "lovely",
            "outstanding",
            "marvelous",
            "perfect",
            "awesome",
        ),
    ),
    "negative": (
        (
            "bad",
            "terrible",
            "awful",
            "boring",
            "dull",
            "weak",
            "poor",
            "disappointing",
            "annoying",
            "painful",
            "ugly",
            "tedious",
        ),
        (
            "dreadful",
            "horrible",
            "lousy",
            "mediocre",
            "bland",
            "pathetic",
            "miserable",
            "unpleasant",
        ),
    ),
}


def sentiment(seed=0, train_size=400, validation_size=200):
    """Sentence sentiment, labels "negative"/"positive": rows (text, label)."""
    rng = random.Random(seed)

    def rows(split, n):
        out = []
        for i in range(n):
            label = ("negative", "positive")[i % 2]
            adjective = rng.choice(_ADJECTIVES[label][split])
            text = rng.choice(_TEMPLATES).format(s=rng.choice(_SUBJECTS), a=adjective)
            out.append((text[0].upper() + text[1:], label))
        return out

    return rows(0, train_size), rows(1, validation_size)


def text(rows):
    """One split as TSV: a header, then sentence and label per line."""
    return "sentence\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows)
