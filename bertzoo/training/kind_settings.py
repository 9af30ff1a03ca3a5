"""Run configurations composed of the task kinds' settings.

Each task kind (`bertzoo.tasks`) declares its own settings dataclass
(`TaskKind.settings_class`, fields made with `bertzoo.tasks.base.setting`).
A run's configuration is its own fields plus those of every registered
kind's settings class (`compose_config`), so every setting is a flag and is
recorded and compared like the run's own; the run hands a kind only an
instance of the kind's class (`kind_settings`), never the configuration.
"""

import dataclasses

from bertzoo import tasks as task_kinds
from bertzoo.training.runs import flag_name


def compose_config(name, base, settings_classes, module=None):
    """A dataclass called `name`: `base`'s fields, then those of each of
    `settings_classes` that `base` lacks, in order. Two classes declaring one
    name differently are a TypeError."""
    taken = {f.name: f for f in dataclasses.fields(base)}
    added = []
    for cls in settings_classes:
        for f in dataclasses.fields(cls):
            if f.name in taken:
                if (taken[f.name].default, taken[f.name].metadata) != (f.default, f.metadata):
                    raise TypeError(f"{cls.__name__}.{f.name} is declared differently elsewhere")
                continue
            taken[f.name] = f
            field = dataclasses.field(default=f.default, metadata=f.metadata)
            added.append((f.name, f.type, field))
    namespace = {"__doc__": base.__doc__, "__module__": module or base.__module__}
    return dataclasses.make_dataclass(name, added, bases=(base,), namespace=namespace)


def kind_settings(config, kind):
    """The kind's settings object, from the configuration's values."""
    fields = dataclasses.fields(kind.settings_class)
    missing = [f.name for f in fields if not hasattr(config, f.name)]
    if missing:
        raise TypeError(
            f"{type(config).__name__} has no {', '.join(missing)}: task kind {kind.name!r} was "
            "registered after the configuration was composed (compose_config)"
        )
    return kind_settings_of(config, kind.settings_class)


def with_kind_settings(config, settings):
    """`config` with the values of the kind's `settings` object."""
    values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    return dataclasses.replace(config, **values)


def settings_problem(config, kind):
    """The first problem with the kinds' settings in `config`, as a message,
    or None: a value no kind accepts, a kind-only setting given to a kind
    without it (`kind_only`), or the kind's own checks are not met."""
    own = {f.name for f in dataclasses.fields(kind.settings_class)}
    for cls in task_kinds.settings_classes():
        if not all(hasattr(config, f.name) for f in dataclasses.fields(cls)):
            continue  # a kind registered after the configuration was composed
        problem = kind_settings_of(config, cls).problem()
        if problem is not None:
            return problem
        for f in dataclasses.fields(cls):
            given = getattr(config, f.name) != f.default
            if f.metadata.get("kind_only") and f.name not in own and given:
                return f"{flag_name(f)} is for {' or '.join(task_kinds.kinds_taking(f.name))}."
    return None


def kind_settings_of(config, cls):
    """An instance of the settings class `cls` from the configuration."""
    return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})
