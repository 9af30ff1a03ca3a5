"""Training checkpoints that survive a kill at any moment, and resume.

    manager = CheckpointManager("run/checkpoints", keep=2)
    model.compile(optimizer=make_optimizer(...))
    step = manager.restore(model)["step"] if manager.latest() else 0
    train = make_pretraining_dataset(examples, 32, masker, repeat=True, start_batch=step)
    model.fit(train, epochs=1, steps_per_epoch=total_steps - step, callbacks=[
        PeriodicCheckpoint(manager, every_steps=1000, start_step=step)])

A checkpoint is a directory `ckpt-{step:09d}/` holding

    model.weights.h5   model weights and the optimizer's variables (moments,
                       iteration count, so the learning-rate schedule goes
                       on; gradient-accumulation sums; loss-scale state)
    lora.npz           with LoRA enabled (`bertzoo.models.lora`): each LoRA
                       layer's frozen kernel and its A and B factors, which
                       `save_weights` merges into one kernel and drops
    rng_state.json     the models' random-generator states (dropout), which
                       `save_weights` leaves out, so a resumed run draws the
                       same dropout masks as an uninterrupted one
    state.json         {"step", "format_version", ...caller's state, e.g.
                       the data position}
    bertzoo-manifest.json  the SHA-256 of each file, written last; restore()
                       verifies it and falls back past a damaged checkpoint

It is written into a hidden temporary sibling directory, each file and the
directory are fsynced, and one `os.replace` moves it into place: a reader
(or a run restarted after `kill -9`) sees the previous checkpoints or the
new complete one, never a partial one. Leftover temporary directories of a
killed run are removed at the next save.
"""

import collections
import contextlib
import json
import os
import re
import shutil
import types
import uuid
import warnings
from pathlib import Path

import keras
import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.loader import check_weights_file
from bertzoo.errors import BertzooError, IntegrityError, NonFiniteError
from bertzoo.io import manifest as manifest_lib
from bertzoo.io.diskfull import disk_full_guard
from bertzoo.io.jsonfile import load_json
from bertzoo.io.publish import fsync_path
from bertzoo.models import lora

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.weights.h5"
RNG_FILE = "rng_state.json"
LORA_FILE = "lora.npz"
STATE_FILE = "state.json"
PREFIX = "ckpt-"
_NAME = re.compile(r"^ckpt-(\d+)$")
_RESERVED = ("step", "format_version")


class TrainingCheckpointError(BertzooError, ValueError):
    """No usable checkpoint: none readable, or one that does not fit the
    model (another architecture or optimizer set-up)."""


class _Unreadable(Exception):
    """A checkpoint that cannot be read (damaged): fall back to an older one."""


def _rng_variables(model):
    """The model's variables that `save_weights` leaves out: the states of
    its `keras.random.SeedGenerator`s (dropout), in a stable order."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _saved_optimizer_variables(optimizer):
    """The optimizer variables `save_weights` writes: the optimizer's own,
    and again those of a wrapped optimizer (`LossScaleOptimizer`, whose
    `variables` include the inner ones, stores both)."""
    found = list(optimizer.variables)
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        found += _saved_optimizer_variables(inner)
    return found


def _build_optimizer(model):
    """Creates the optimizer's variables (moments, accumulators, loss-scale
    state) if it has none yet, as the first training step would."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or optimizer.built:
        return
    # TensorFlow: under the model's distribution strategy, as Keras does.
    strategy = getattr(model, "distribute_strategy", None)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        optimizer.build(model.trainable_variables)


def _file_shapes(path):
    """{top-level group: [tensor shapes]} of a weights file ("layers" holds
    the model, "optimizer" the optimizer)."""
    import h5py

    groups = collections.defaultdict(list)

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            groups[name.split("/", 1)[0]].append(tuple(obj.shape))

    try:
        with h5py.File(path, "r") as f:
            f.visititems(visit)
    except OSError as e:
        raise _Unreadable(f"{path.name} is not a readable weights file ({e})") from e
    return groups


def _shape_difference(found, expected):
    """'only in the checkpoint: (99, 10); only in the model: (61, 10)', from
    the two multisets of tensor shapes."""
    extra = collections.Counter(found) - collections.Counter(expected)
    missing = collections.Counter(expected) - collections.Counter(found)

    def listing(counter):
        items = [f"{shape}" + (f" x{n}" if n > 1 else "") for shape, n in sorted(counter.items())]
        if not items:
            return "none"
        return ", ".join(items[:6]) + (f", ... ({len(items)} shapes)" if len(items) > 6 else "")

    return f"only in the checkpoint: {listing(extra)}; only in the model: {listing(missing)}"


def _check_finite(model, step):
    """A model whose weights hold NaN or Inf (a diverged step) is not
    checkpointed: the last good checkpoint stays the newest."""
    for variable in model.weights:
        value = keras.ops.convert_to_numpy(variable.value)
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            raise NonFiniteError(
                f"Not checkpointing step {step}: weight {variable.path} holds NaN or Inf "
                "(training diverged); the last good checkpoint is kept."
            )


class CheckpointManager:
    """Atomic, pruned training checkpoints in one directory.

    Args:
        directory: where the `ckpt-{step:09d}/` directories go (created at
            the first save, so non-chief workers may construct a manager).
        keep: how many of the newest checkpoints to keep.

    `restored_path` is the checkpoint the last `restore` loaded.
    """

    def __init__(self, directory, keep=2):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r}.")
        self.directory = Path(directory)
        self.keep = keep
        self.restored_path = None

    # === Listing ===

    def checkpoints(self):
        """The complete checkpoints (both files present), oldest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match and (entry / WEIGHTS_FILE).is_file() and (entry / STATE_FILE).is_file():
                found.append((int(match.group(1)), entry))
        return [path for _, path in sorted(found)]

    def latest(self):
        """The newest complete checkpoint, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    # === Saving ===

    def save(self, model, step, state=None):
        """Writes `ckpt-{step:09d}/` (see the module docstring) and prunes to
        the newest `keep`. `state`: extra JSON-serialisable entries for
        `state.json` (e.g. the data position). With JAX, pass a model whose
        state is synced (a callback's `self.model`, or after `fit`).
        Returns the checkpoint's path."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}.")
        step = int(step)
        state = dict(state or {})
        clash = [k for k in _RESERVED if k in state]
        if clash:
            raise ValueError(f"state may not set {clash}: the manager writes them.")
        # Serialise first: a bad state fails before anything is written.
        text = (
            json.dumps({"step": step, "format_version": FORMAT_VERSION, **state}, indent=2) + "\n"
        )
        _check_finite(model, step)
        _build_optimizer(model)  # so that every checkpoint holds the full optimizer state
        rng = [{"path": v.path, "value": np.asarray(v).tolist()} for v in _rng_variables(model)]

        name = f"{PREFIX}{step:09d}"
        final = self.directory / name
        tmp = self.directory / f".{name}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with disk_full_guard(tmp, lambda free: self._disk_full(final, free)):
                self.directory.mkdir(parents=True, exist_ok=True)
                self._remove_leftovers()
                tmp.mkdir()
                self._write(model, tmp, final, rng, text)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        self._prune()
        return final

    def _disk_full(self, final, free):
        """The one-line `DiskFullError` message of a save that filled the disk."""
        kept = [p.name for p in self.checkpoints() if p != final]
        kept = f"the earlier checkpoint {kept[-1]} is kept" if kept else "no earlier checkpoint"
        return (
            f"No space left on the device while writing checkpoint {final} ({free} free "
            f"there): {kept}, and the partial copy was removed. Free some space and rerun the "
            "same command to resume."
        )

    def _write(self, model, tmp, final, rng, text):
        """Writes the checkpoint's files into `tmp` and moves it to `final`."""
        model.save_weights(tmp / WEIGHTS_FILE)
        if lora.lora_layers(model):
            with open(tmp / LORA_FILE, "wb") as f:
                np.savez(f, **lora.checkpoint_arrays(model))
        (tmp / RNG_FILE).write_text(json.dumps({"seed_generators": rng}) + "\n", encoding="utf-8")
        (tmp / STATE_FILE).write_text(text, encoding="utf-8")
        # Last: the checksums that restore() verifies.
        entries = manifest_lib.describe_files(tmp, manifest_lib.list_files(tmp))
        (tmp / manifest_lib.MANIFEST_FILE).write_text(
            manifest_lib.manifest_text("checkpoint", entries), encoding="utf-8"
        )
        for f in tmp.iterdir():
            fsync_path(f)
        fsync_path(tmp, directory=True)
        if final.exists():
            # A directory cannot be renamed onto a non-empty one: move the
            # old one aside first (only this step's copy is at risk).
            aside = self.directory / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(final, aside)
            os.replace(tmp, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_path(self.directory, directory=True)

    def _remove_leftovers(self):
        """Temporary and half-deleted directories of a killed run."""
        for entry in self.directory.iterdir():
            if entry.name.startswith(f".{PREFIX}") and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)

    def _prune(self):
        for old in self.checkpoints()[: -self.keep]:
            # Renamed first, so a kill mid-delete leaves no damaged ckpt-*.
            doomed = self.directory / f".{old.name}.del-{uuid.uuid4().hex[:8]}"
            os.replace(old, doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    # === Restoring ===

    def restore(self, model, path=None):
        """Loads the newest (or the given) checkpoint into a compiled model:
        weights, optimizer variables (the optimizer is built first if it is
        not yet) and random-generator states. Returns the state dict (with
        "step").

        A newest checkpoint that cannot be read (e.g. truncated) is skipped
        with a warning, for the one before it. Raises `FileNotFoundError`
        when there is no checkpoint and `TrainingCheckpointError` when none
        is readable or a checkpoint does not fit the model."""
        if getattr(model, "optimizer", None) is None:
            raise ValueError(
                "Compile the model (with the optimizer of the run) before restore(): "
                "checkpoints hold the optimizer's state."
            )
        if not model.built:
            raise ValueError("Build the model (call it on a batch) before restore().")
        if path is not None:
            candidates = [Path(path)]
        else:
            candidates = self.checkpoints()[::-1]
            if not candidates:
                raise FileNotFoundError(f"No checkpoint in {self.directory}.")
        _build_optimizer(model)
        problems = []
        for candidate in candidates:
            try:
                state = self._load(model, candidate)
            except _Unreadable as e:
                problems.append(f"{candidate.name}: {e}")
                if path is None and candidate is not candidates[-1]:
                    warnings.warn(
                        f"Checkpoint {candidate} cannot be read ({e}); falling back to the one before it.",
                        stacklevel=2,
                    )
                continue
            self.restored_path = candidate
            return state
        where = candidates[0] if path is not None else self.directory
        raise TrainingCheckpointError(f"No readable checkpoint in {where}: " + "; ".join(problems))

    def _load(self, model, path):
        try:
            manifest_lib.verify_directory(path)
        except IntegrityError as e:
            raise _Unreadable(str(e)) from e
        try:
            state = load_json(path / STATE_FILE)
        except (OSError, ValueError) as e:  # JSON, UTF-8 or the bounded read
            raise _Unreadable(f"{STATE_FILE} cannot be read ({e})") from e
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            raise _Unreadable(f"{STATE_FILE} has no step")
        if state.get("format_version", 0) > FORMAT_VERSION:
            raise TrainingCheckpointError(
                f"{path} was written in checkpoint format {state['format_version']} by a newer "
                f"bertzoo; this one reads format {FORMAT_VERSION}."
            )
        weights = path / WEIGHTS_FILE
        shapes = _file_shapes(weights)
        # LoRA factors are not in the weights file (lora.npz holds them).
        adapters = {id(v) for v in lora.lora_variables(model)}
        model_vars = [v for v in model.weights if id(v) not in adapters]
        optimizer_vars = _saved_optimizer_variables(model.optimizer)
        try:
            check_weights_file(weights, types.SimpleNamespace(weights=model_vars + optimizer_vars))
        except preset_lib.PresetError as e:
            parts = []
            found_model = [s for g, ss in shapes.items() if g != "optimizer" for s in ss]
            expected_model = [tuple(v.shape) for v in model_vars]
            if sorted(found_model) != sorted(expected_model):
                parts.append(
                    f"model: {len(found_model)} tensors in the checkpoint, {len(expected_model)} "
                    f"weights in the model (another architecture?); shapes "
                    f"{_shape_difference(found_model, expected_model)}"
                )
            found_opt = shapes.get("optimizer", [])
            expected_opt = [tuple(v.shape) for v in optimizer_vars]
            if sorted(found_opt) != sorted(expected_opt):
                parts.append(
                    f"optimizer: {len(found_opt)} tensors in the checkpoint, {len(expected_opt)} "
                    "in the model's optimizer (another optimizer, gradient accumulation or loss "
                    f"scaling set-up?); shapes {_shape_difference(found_opt, expected_opt)}"
                )
            raise TrainingCheckpointError(
                f"Checkpoint {path} does not fit this model: " + "; ".join(parts or [str(e)])
            ) from e
        try:
            model.load_weights(weights)
        except Exception as e:  # shapes matched: damaged data
            raise _Unreadable(f"{WEIGHTS_FILE} cannot be loaded ({e})") from e
        if adapters:
            self._load_lora(model, path)
        self._load_rng(model, path)
        return state

    @staticmethod
    def _load_lora(model, path):
        """The LoRA layers' frozen kernels and factors (`load_weights` put
        their merged kernels in and zeroed the factors)."""
        try:
            with np.load(path / LORA_FILE, allow_pickle=False) as saved:
                arrays = {name: saved[name] for name in saved.files}
        except FileNotFoundError:
            raise TrainingCheckpointError(
                f"Checkpoint {path} has no {LORA_FILE}: it was written without LoRA, and this "
                "model has LoRA enabled; resume it with the settings it was started with."
            ) from None
        except (OSError, ValueError) as e:
            raise _Unreadable(f"{LORA_FILE} cannot be read ({e})") from e
        if not lora.restore_checkpoint_arrays(model, arrays):
            raise TrainingCheckpointError(
                f"Checkpoint {path} holds LoRA factors of another rank or other layers than "
                "this model's; resume with the --lora-rank it was started with."
            )

    @staticmethod
    def _load_rng(model, path):
        rng_path = path / RNG_FILE
        if not rng_path.is_file():
            return
        try:
            saved = load_json(rng_path)["seed_generators"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            warnings.warn(
                f"{rng_path} cannot be read ({e}); dropout will draw other masks.", stacklevel=3
            )
            return
        variables = _rng_variables(model)
        shapes_match = len(saved) == len(variables) and all(
            np.shape(s["value"]) == tuple(v.shape) for s, v in zip(saved, variables)
        )
        if not shapes_match:
            warnings.warn(
                f"{rng_path} holds {len(saved)} random-generator states, the model has "
                f"{len(variables)}; not restoring them (dropout will draw other masks).",
                stacklevel=3,
            )
            return
        for s, v in zip(saved, variables):
            v.assign(np.asarray(s["value"], dtype=v.dtype))


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Saves a checkpoint every `every_steps` global steps and at the end of
    training.

    The global step is `start_step` plus the batches trained by this
    callback's `fit` calls (epochs included). With `steps_per_execution` > 1
    Keras reports once per execution, so a save happens at the first report
    at or past each multiple of `every_steps` (and is named by the step it
    is taken at).

    Args:
        manager: a `CheckpointManager`.
        every_steps: save interval in global steps (None: only at the end).
        start_step: the global step training starts at (the restored step).
        state_fn: `state_fn(step) -> dict` of extra JSON state to save (e.g.
            the data position, the phase).
        enabled: False on non-chief workers: nothing is written.
        on_save: `on_save(step)`, called at every checkpoint step on every
            worker (enabled or not), before the checkpoint is written: e.g.
            each worker of a multi-worker run records its own data position.

    `step` is the current global step, `last_saved_step` the step of the
    last checkpoint written (None before the first).
    """

    def __init__(
        self, manager, every_steps, start_step=0, state_fn=None, enabled=True, on_save=None
    ):
        super().__init__()
        if every_steps is not None and (
            isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1
        ):
            raise ValueError(f"every_steps must be an int >= 1 or None, got {every_steps!r}.")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be an int >= 0, got {start_step!r}.")
        self.manager = manager
        self.every_steps = every_steps
        self.start_step = start_step
        self.state_fn = state_fn
        self.enabled = enabled
        self.on_save = on_save
        self.step = start_step
        self.last_saved_step = None
        self._last_save_step = None  # the schedule's, on every worker
        self._epoch_start = start_step

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.step

    def on_train_batch_end(self, batch, logs=None):
        previous, self.step = self.step, self._epoch_start + batch + 1
        if self.every_steps and self.step // self.every_steps > previous // self.every_steps:
            self._save()

    def on_train_end(self, logs=None):
        if self.step not in (self.start_step, self._last_save_step):
            self._save()

    def save_now(self):
        """Saves the current step now (a preemption), unless it was just
        saved; returns the checkpoint's path (on non-chief workers, the
        path the chief writes)."""
        if self.step != self.last_saved_step:
            self._save()
        return self.manager.directory / f"{PREFIX}{self.step:09d}"

    def _save(self):
        self._last_save_step = self.step
        if self.on_save is not None:
            self.on_save(self.step)
        if not self.enabled:
            return
        state = self.state_fn(self.step) if self.state_fn is not None else None
        # `self.model` syncs JAX's training state back into the variables.
        self.manager.save(self.model, self.step, state)
        self.last_saved_step = self.step
