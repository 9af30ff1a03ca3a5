"""Words of the small built-in fine-tuning datasets, which are generated
from templates so they need no download (the fine-tune recipe's defaults
and the tests' learnable tasks): names, places and facts, each list split
in two so that the validation split uses words the training split never
shows, and a good score needs what the pre-trained encoder already knows
about those words, not memorised templates. The datasets themselves are
their task kinds' (`bertzoo.tasks.<kind>.builtin`)."""

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


def name(word):
    """A word as a name: capitalised."""
    return word.capitalize()
