"""The task-kind declaration and its registry.

A task kind (classification, regression, tagging, QA, ...) is one
`TaskKind` subclass in one module of `bertzoo.tasks`, registered with
`register`. It declares everything the fine-tune run, the distillation run
and the serving export need to know about the kind:

- `name`, `description`, `main_metric` (the metric that picks the best
  epoch), `file_formats` (what its reader takes), `builtin_files` (the
  file names of its built-in dataset, empty when there is none),
  `builtin_description` and `builtin_training` (what the built-in dataset
  is, and the training settings it is trained with),
  `labelled` (it predicts named classes or tags);
- `model_class`: the Keras task model (`bertzoo.models.tasks`); the
  built-in kinds name it with `bertzoo.lazy.LazyAttribute`, so that
  importing a kind (for its settings: a recipe's --help) imports no Keras;
- `settings_class`: the kind's own settings, a dataclass of `setting`
  fields (a flag each); the runs compose the kinds' settings classes into
  their configurations and hand each kind only an instance of its own;
- `settings_error`: the kind's checks of its settings;
- `builtin_settings` and `write_builtin`: the built-in dataset's settings
  and files;
- `load`: reader + feature builder, file -> `TaskData`;
- `packed_lengths`: each example's untruncated length (the default
  sequence length and the truncation report come from it);
- `evaluate`: postprocessing + metric function, predictions -> scores;
- `build_model`, `serving_settings`, `serving_inputs` and `serve`: the
  model from a preset, and the serving signature (string inputs in, answers
  out, in TensorFlow ops).

The run code only calls `get(name)`; `names()` lists the valid kinds.

`settings` below is an instance of the kind's `settings_class`; a kind
never sees a run's configuration.
"""

import dataclasses
from pathlib import Path

from bertzoo import settings as settings_lib
from bertzoo.errors import BertzooError
from bertzoo.io.publish import atomic_write_text


class UnknownTaskKindError(BertzooError, ValueError):
    """A task kind name that is not registered."""


def setting(default, help, *, group="data", **more):
    """A field of a kind's settings dataclass, with its command-line flag
    (`bertzoo.settings.setting`; a kind's flags go to the "data" group
    unless it says otherwise)."""
    return settings_lib.setting(default, help, group=group, **more)


@dataclasses.dataclass
class TaskSettings:
    """Base of the kinds' settings dataclasses (fields made with `setting`);
    a kind without settings of its own uses it as it is."""

    def problem(self):
        """What is wrong with these values on their own, as a message for
        the user, or None; checked for every kind's settings in a run."""
        return None


@dataclasses.dataclass
class TaskData:
    """Model inputs and targets for one split, plus what evaluation needs.

    features: dict of numpy model inputs; targets: numpy array or dict of
    them (one row per model input row); examples: what the reader returned;
    extra: kind-specific data for evaluation (e.g. the label set).
    """

    features: dict
    targets: object
    examples: list
    extra: dict

    @property
    def num_rows(self):
        """The number of model input rows (QA: windows, not questions)."""
        targets = self.targets
        if isinstance(targets, dict):
            targets = next(iter(targets.values()))
        return len(targets)


class TaskKind:
    """One task kind's declaration; subclass it, set the class attributes,
    implement the methods and `register` an instance."""

    name = ""
    description = ""
    model_class = None
    settings_class = TaskSettings
    main_metric = ""
    file_formats = ()
    builtin_files = ()
    # The built-in dataset: what it is, and the training settings (the
    # runs' names) it is trained with where the user sets none.
    builtin_description = ""
    builtin_training = {}
    # False for kinds that never cut text (QA slides windows over it): their
    # runs neither pick a sequence length from the data nor report truncation.
    cuts_text = True
    # True when the model predicts named labels (classes, tags): serving then
    # outputs label names (the model's, else "0", "1", ...).
    labelled = False

    def load(self, settings, path, tokenizer, sequence_length, segments, label_set=None):
        """Reads `path` and builds model inputs and targets for a backbone
        with `segments` segment rows (its `num_segments`): pack with
        `bertzoo.preprocessing.segment_inputs(segments)`, so that a
        one-segment model (RoBERTa, XLM-R) never sees segment id 1 and a
        model without segments gets no segment_ids. Returns `(TaskData,
        label_set)`: the training split defines the label set (None for
        kinds without one) and later splits are given it."""
        raise NotImplementedError

    def packed_lengths(self, data, tokenizer):
        """Each example's length packed without truncation (numpy ints), from
        which a run picks its default sequence length and reports how many
        examples it cuts; None for kinds that never cut text (QA slides
        windows over a long context)."""
        return None

    def settings_error(self, settings, sequence_length=None, own_files=True, separators=1):
        """What is wrong with `settings` for a run at `sequence_length`
        (None: from the data), on the user's files (`own_files`) or the
        built-in dataset, as a message for the user, or None. `separators`:
        the tokenizer's `pair_separators` between a pair's texts (1 until
        the tokenizer is known; 2 for RoBERTa's and XLM-R's `<s> A </s></s>
        B </s>`), which the minimum lengths of pairs count. Here: an
        example needs `[CLS] text [SEP]`."""
        if sequence_length is not None and sequence_length < 3:
            return (
                f"--sequence-length {sequence_length} is too short: a text needs at least 3 "
                "tokens ([CLS] text [SEP]; 5 for pairs, 6 with RoBERTa's two separators "
                "between them)."
            )
        return None

    def builtin_settings(self, settings):
        """`settings` as the built-in dataset needs them (e.g. its columns)."""
        return settings

    def builtin_splits(self, seed):
        """The built-in dataset's (train, validation) rows, drawn with `seed`."""
        raise NotImplementedError(f"task kind {self.name!r} has no built-in dataset")

    def builtin_text(self, rows):
        """One split's rows as the text of its file (in the kind's format)."""
        raise NotImplementedError(f"task kind {self.name!r} has no built-in dataset")

    def write_builtin(self, directory, seed=0):
        """Writes the built-in dataset (`builtin_splits`, as `builtin_text`)
        into `directory` as `builtin_files`, atomically; returns the
        (train, validation) paths."""
        paths = []
        for file_name, rows in zip(self.builtin_files, self.builtin_splits(seed), strict=True):
            path = Path(directory) / file_name
            atomic_write_text(path, self.builtin_text(rows))
            paths.append(path)
        return tuple(paths)

    def evaluate(self, settings, predictions, data):
        """Scores (name -> float, `main_metric` among them) of the model's
        `predictions` on `data` (a `TaskData` from `load`)."""
        raise NotImplementedError

    def build_model(self, settings, preset, label_set, **kwargs):
        """The task model from a backbone (or task) preset; `kwargs` go to
        `model_class.from_preset` (dropout, dtype, load_weights)."""
        raise NotImplementedError

    def serving_settings(self, settings, train):
        """The serving settings (beyond `sequence_length`) a run records for
        the export, from its settings and training `TaskData`."""
        return {}

    def serving_inputs(self, pairs):
        """Names of the serving signature's string inputs."""
        return ("text",)

    def serve(self, serving_model, texts):
        """The serving graph: `texts` (input name -> string batch) -> a dict
        of output tensors, run with the `ServingModel`'s task model,
        tokenizer and settings (TensorFlow ops)."""
        raise NotImplementedError

    def __repr__(self):
        return f"<task kind {self.name!r}>"


_REGISTRY = {}


def register(kind):
    """Adds a `TaskKind` instance under `kind.name`; returns it. A second
    kind with the same name is an error."""
    if not isinstance(kind, TaskKind) or not kind.name:
        raise TypeError(f"register() takes a TaskKind instance with a name, got {kind!r}")
    if kind.name in _REGISTRY:
        raise ValueError(f"task kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def unregister(name):
    """Removes a registered kind (for tests that register a toy kind)."""
    _REGISTRY.pop(name, None)


def get(name):
    """The registered `TaskKind` called `name`; an unknown name is an
    `UnknownTaskKindError` listing the valid kinds."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownTaskKindError(
            f"unknown task kind {name!r}; valid kinds: {', '.join(names())}"
        ) from None


def names():
    """The registered kinds' names, in registration order."""
    return tuple(_REGISTRY)


class _RegisteredNames:
    """The registered kinds' names as they are when asked: a flag's
    `choices` that also takes kinds registered after the flag was made."""

    def __contains__(self, name):
        return name in _REGISTRY

    def __iter__(self):
        return iter(names())

    def __len__(self):
        return len(_REGISTRY)

    def __repr__(self):
        return repr(names())


REGISTERED = _RegisteredNames()


def settings_classes():
    """The registered kinds' settings classes, each once, in registration
    order (kinds may share one)."""
    return tuple(dict.fromkeys(kind.settings_class for kind in _REGISTRY.values()))


def kinds_taking(field_name):
    """Names of the registered kinds whose settings have `field_name`."""
    return tuple(
        name
        for name, kind in _REGISTRY.items()
        if field_name in {f.name for f in dataclasses.fields(kind.settings_class)}
    )
