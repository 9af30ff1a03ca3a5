"""Checked assignment of named checkpoint tensors to Keras variables, shared
by every checkpoint format bertzoo reads."""

import logging

import numpy as np

from bertzoo.errors import PresetError
from bertzoo.io import jsonfile as io_json
from bertzoo.layers.common import group_of_layer

logger = logging.getLogger(__name__)


class CheckpointError(PresetError):
    """A checkpoint cannot be loaded as asked."""


def check_group_map(num_layers, num_groups, reference, source, implementation):
    """Refuses an ALBERT layer -> group map that bertzoo cannot reproduce.

    bertzoo maps layer i to group `i * G // L` exactly (`group_of_layer`);
    `reference(i)` is the group `implementation` (e.g. "transformers")
    computes in floats, which for a few (L, G) pairs (e.g. L=18, G=14, layer
    9) rounds down to the previous group. Such checkpoints would compute something else in bertzoo,
    so they are a `CheckpointError` naming `source`. Values that are not valid
    layer and group counts are left to `BertBackbone` to report.
    """
    if not isinstance(num_layers, int) or not isinstance(num_groups, int):
        return
    if num_groups < 1 or num_groups > num_layers:
        return
    for i in range(num_layers):
        theirs, ours = reference(i), group_of_layer(i, num_layers, num_groups)
        if theirs != ours:
            raise CheckpointError(
                f"{source}: with num_hidden_layers={num_layers} and num_hidden_groups="
                f"{num_groups}, {implementation} applies group {theirs} at layer {i} "
                f"(float rounding) but bertzoo group {ours}; this combination is not "
                "supported."
            )


def read_json_object(path):
    """A JSON file that must hold an object (a checkpoint's config files);
    anything else is a `CheckpointError`."""
    return io_json.read_json_object(path, CheckpointError)


def _require_float(name, value, source, target="it"):
    if not np.issubdtype(value.dtype, np.floating):
        raise CheckpointError(
            f"{source}: tensor {name!r} has dtype {value.dtype}, but {target} is a "
            "float weight (float16, bfloat16, float32 or float64 expected)."
        )


def check_float_tensors(tensors, source):
    """Every array of `tensors` (`{name: array}`, weights read for later, such
    as task heads) must hold floats: an integer, bool or other one is a
    `CheckpointError` naming `source`, the tensor and its dtype."""
    for name, value in tensors.items():
        _require_float(name, np.asarray(value), source)


def assign_tensors(mapping, tensors, source, allow_partial=False, ignored=()):
    """Fills Keras variables from named arrays.

    Args:
        mapping: checkpoint tensor name -> (keras variable, transpose?).
        tensors: checkpoint tensor name -> numpy array, with every name that
            is not a backbone tensor (task heads, buffers, optimizer slots)
            already removed or listed in `ignored`.
        source: what to name in errors (a file or directory).
        allow_partial: load what matches; otherwise missing or unused
            tensors are an error that lists them.
        ignored: names that may be present without being used.

    Every name, dtype (weights are floats: an integer or bool tensor is an
    error, never cast) and shape is checked before any variable is assigned,
    so a failed load leaves the model untouched. Every checkpoint weight
    bertzoo loads into a model passes through here.
    """
    missing = sorted(set(mapping) - set(tensors))
    unused = sorted(k for k in tensors if k not in mapping and k not in ignored)
    if (missing or unused) and not allow_partial:
        parts = []
        if missing:
            parts.append(f"missing tensors: {', '.join(missing)}")
        if unused:
            parts.append(f"unused tensors: {', '.join(unused)}")
        raise CheckpointError(
            f"{source} does not match the backbone ({'; '.join(parts)}). Pass "
            "allow_partial=True to load what matches and keep the rest randomly "
            "initialised."
        )
    assignments = []
    for name, (variable, transpose) in mapping.items():
        if name not in tensors:
            continue
        value = np.asarray(tensors[name])
        _require_float(name, value, source, variable.path)
        value = value.T if transpose else value
        if tuple(value.shape) != tuple(variable.shape):
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(np.shape(tensors[name]))}, "
                f"which does not fit {variable.path} of shape {tuple(variable.shape)}"
                f"{' (after transposing)' if transpose else ''}."
            )
        assignments.append((variable, value))
    for variable, value in assignments:
        variable.assign(np.asarray(value, dtype="float32"))
    if missing:
        logger.warning("Left randomly initialised (not in %s): %s", source, ", ".join(missing))
    if unused:
        logger.warning("Not used (from %s): %s", source, ", ".join(unused))
