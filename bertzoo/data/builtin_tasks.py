"""Small built-in fine-tuning datasets, generated from templates so they need
no download: the fine-tune recipe's defaults and the tests' learnable tasks.

Each generator returns (train, validation) rows and `write_builtin_task`
writes them in the standard file formats (TSV with a header, CoNLL BIO), so
the recipe reads them with the same readers as user files. The word lists
are shared with the QA kind's built-in dataset (`bertzoo.tasks.qa.builtin`).

The validation split uses words the training split never shows (other
adjectives, names and places), so a good score needs what the pre-trained
encoder already knows about those words, not memorised templates.
"""

import random
from pathlib import Path

from bertzoo.io.publish import atomic_write_text

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

PEOPLE = (
    (
        "alice",
        "bob",
        "maria",
        "john",
        "emma",
        "david",
        "sophia",
        "james",
        "olivia",
        "peter",
        "laura",
        "thomas",
    ),
    ("michael", "sarah", "daniel", "anna", "robert", "julia"),
)
PLACES = (
    (
        "paris",
        "london",
        "berlin",
        "tokyo",
        "madrid",
        "rome",
        "boston",
        "chicago",
        "vienna",
        "dublin",
        "seoul",
        "sydney",
    ),
    ("toronto", "moscow", "cairo", "lisbon", "prague", "athens"),
)
VERBS = ("lives in", "works in", "grew up in", "studied in", "moved to", "was born in")
COLORS = (
    ("red", "blue", "green", "black", "white", "yellow"),
    ("purple", "orange", "gray", "pink"),
)
DAYS = (("monday", "tuesday", "wednesday", "thursday"), ("friday", "saturday", "sunday"))
AGES = (range(20, 50), range(50, 80))


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


def name(word):
    """A word as a name: capitalised."""
    return word.capitalize()


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


BUILTIN_TASKS = {
    "classification": "sentiment (positive/negative sentences; unseen adjectives in validation)",
    "tagging": "person and location names in BIO tags (unseen names in validation)",
}


def write_builtin_task(task, directory, seed=0):
    """Writes the built-in dataset for `task` ("classification" or
    "tagging") as train/validation files in `directory`; returns their paths
    and the reader settings `(train, validation, settings)`."""
    directory = Path(directory)
    if task == "classification":
        train, validation = sentiment(seed)
        paths = []
        for name, rows in (("train.tsv", train), ("validation.tsv", validation)):
            text = "sentence\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows)
            atomic_write_text(directory / name, text)
            paths.append(directory / name)
        return paths[0], paths[1], {"text_columns": ("sentence",), "label_column": "label"}
    if task == "tagging":
        train, validation = entities(seed)
        paths = []
        for name, rows in (("train.conll", train), ("validation.conll", validation)):
            text = "\n".join(
                "".join(f"{w} {t}\n" for w, t in zip(words, tags)) for words, tags in rows
            )
            atomic_write_text(directory / name, text)
            paths.append(directory / name)
        return paths[0], paths[1], {}
    raise ValueError(
        f"There is no built-in dataset for task {task!r}; built-in datasets: "
        + "; ".join(f"{k}: {v}" for k, v in BUILTIN_TASKS.items())
        + ". Pass --train and --validation files."
    )
