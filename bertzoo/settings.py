"""Settings dataclass fields that carry their command-line flag: the one
metadata format that the runs' flag builder (`bertzoo.training.runs`) reads,
for a run's own settings and for a task kind's (`bertzoo.tasks.base`)."""

import dataclasses


def setting(
    default,
    help,
    *,
    flag=None,
    choices=None,
    parse=None,
    group=None,
    compared=True,
    piped_default=None,
    kind_only=False,
):
    """A settings dataclass field with its command-line flag.

    `help` and `choices` go to the flag; `flag` names it when it is not
    `--` plus the field name with dashes; `parse` turns the flag's text into
    the value (default: from the field's type; tuple fields need one);
    `group` is the help section. `compared=False` marks a setting that may
    differ between a run and its resumption (it does not change what is
    trained, or on what data). `piped_default`, when given, is the flag's
    default when stdout is not a terminal (`config_from_args`).
    `kind_only=True` marks a task kind's setting that is an error, when
    given, under a kind whose settings lack it."""
    metadata = {
        "help": help,
        "flag": flag,
        "choices": choices,
        "parse": parse,
        "group": group,
        "compared": compared,
        "piped_default": piped_default,
        "kind_only": kind_only,
    }
    return dataclasses.field(default=default, metadata=metadata)
