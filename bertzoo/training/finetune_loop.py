"""Fine-tuning's training stages (`bertzoo.training.finetune`), after the
data stage (`bertzoo.training.finetune_data`): the output opened, the model
built and compiled, resumed or started afresh, one epoch at a time with
validation and the best epoch published as a preset, then the metrics and an
optional serving export.

Checkpoints are named by global step (epoch x steps per epoch + batch) and
record the epoch and the batches done in it: one is written after each
epoch, and on SIGTERM or SIGINT one at the step boundary (mid-epoch), from
which a rerun trains the rest of that epoch on the same batches as an
uninterrupted run (`bertzoo.training.preemption`). Checkpoints of earlier
versions, named by epoch, resume at their epoch."""

import dataclasses
import json
import logging
import math
from pathlib import Path

from bertzoo import tasks as task_kinds
from bertzoo.io.publish import atomic_directory, atomic_write_text, check_target
from bertzoo.models.lora import enable_lora, lora_layers
from bertzoo.training.callbacks import Throughput
from bertzoo.training.checkpoint import CheckpointManager
from bertzoo.training.finetune_data import copy_builtin, epoch_dataset, evaluate, read_data
from bertzoo.training.guards import NonFiniteGuard
from bertzoo.training.kind_settings import kind_settings
from bertzoo.training.optimizers import make_optimizer
from bertzoo.training.preemption import StopAtStep
from bertzoo.training.runs import (
    CHECKPOINTS_DIR,
    LOGS,
    METRICS_FILE,
    RUN_SETTINGS_FILE,
)

logger = logging.getLogger("bertzoo.training.finetune")  # the run's log lines

BEST_DIR = "best"
ADAPTER_DIR = "adapter"  # with --lora-rank: the best epoch's LoRA adapter alone


@dataclasses.dataclass
class Training:
    """The state of the epoch loop (what a checkpoint holds, and more)."""

    model: object
    manager: CheckpointManager
    steps_per_epoch: int
    history: list = dataclasses.field(default_factory=list)
    best: dict | None = None
    best_epoch: int | None = None
    start: int = 0  # the epoch the run starts in
    start_batch: int = 0  # the batches of epoch `start` done (a mid-epoch checkpoint)
    loss_sum: float = 0.0  # the sum of their per-batch training losses
    timings: list = dataclasses.field(default_factory=list)

    def state(self, epoch, batch=0, loss_sum=0.0):
        """A checkpoint's state at batch `batch` of epoch `epoch` (0-based;
        batch 0: the epoch has not begun)."""
        return {
            "history": self.history,
            "best": self.best,
            "best_epoch": self.best_epoch,
            "epoch": epoch,
            "batch": batch,
            "epoch_loss_sum": loss_sum,
        }


def finetune(run, init, distribution):
    """The stages of a fine-tuning run in `run` (a `Run`, locked by
    `open_output` once the data is read and checked); returns the metrics
    written to `METRICS_FILE`."""
    data = read_data(run, init, distribution)
    open_output(run)
    copy_builtin(run, data)
    training = _build(run, init, data, distribution)
    _resume(run, training)
    run.start_clock()
    serving = {
        "sequence_length": run.config.sequence_length,
        **_kind_serving_settings(run.config, data.train),
    }
    tensorboard = run.tensorboard(every=max(1, training.steps_per_epoch // 10))
    steps = training.steps_per_epoch
    with run.preemptible() as signals:
        for epoch in range(training.start, run.config.epochs):
            _epoch(run, training, data, tensorboard, epoch, signals)
            if training.best_epoch == epoch + 1:
                published = {"epoch": epoch + 1, "config": run.config.to_json(), "init": init}
                _save_best(
                    training.model,
                    data.tokenizer,
                    run.output / BEST_DIR,
                    {**published, "serving": serving},
                )
                if run.config.lora_rank is not None:
                    training.model.save_lora_adapter(run.output / ADAPTER_DIR)
            # After best/: a resumed run never lacks the best epoch it records.
            training.manager.save(training.model, (epoch + 1) * steps, training.state(epoch + 1))
            # A signal during validation or the publication of best/.
            signals.check(lambda done=epoch + 1: _stopped_after_epoch(run, training, done))
    return _publish(run, init, data, training)


def written(config, output):
    """The paths (under `output`) the run writes, claimed before any is."""
    names = [RUN_SETTINGS_FILE, CHECKPOINTS_DIR, LOGS, BEST_DIR, METRICS_FILE]
    if config.lora_rank is not None:
        names.append(ADAPTER_DIR)
    if config.train is None:
        names += [f"data/{name}" for name in task_kinds.get(config.task).builtin_files]
    return names


def open_output(run):
    """Locks the output (one run at a time) and claims what the run writes:
    a user's file there is an `OutputError`, before anything is written."""
    if run.opened:
        return
    config, names = run.config, written(run.config, run.output)
    if config.export:
        export, root = Path(config.export).resolve(), run.output.resolve()
        if export == root or root in export.parents:
            if export == root:
                raise run.error(
                    f"--export {config.export} is the --output directory; export into a new folder."
                )
            names.append(export.relative_to(root).as_posix())
    run.open(names)
    if config.export:
        # A user's folder, or an earlier export without --overwrite, is
        # refused now, not after training.
        check_target(config.export, "export", config.overwrite)


def _build(run, init, data, distribution):
    """The task model, compiled in the distribution's scope."""
    config = run.config
    steps_per_epoch = max(1, data.train.num_rows // config.batch_size)
    total = steps_per_epoch * config.epochs
    options = {"dropout": config.dropout, "load_weights": True}
    if config.precision != "float32":
        options["dtype"] = config.precision
    with distribution.scope():
        kind = task_kinds.get(config.task)
        model = kind.build_model(kind_settings(config, kind), init, data.label_set, **options)
        if config.lora_rank is not None:
            total_params = model.count_params()
            trainable = enable_lora(model, config.lora_rank, config.lora_alpha, config.lora_targets)
            logger.info(
                "LoRA rank %d on %d layers: %s of %s parameters train (%.2f%%).",
                config.lora_rank,
                len(lora_layers(model)),
                f"{trainable:,}",
                f"{total_params:,}",
                100 * trainable / total_params,
            )
        optimizer = make_optimizer(
            "adamw",
            config.learning_rate,
            total_steps=total,
            warmup_steps=int(config.warmup_proportion * total),
            weight_decay=config.weight_decay,
            loss_scaling=config.precision == "mixed_float16",
        )
        model.compile(
            optimizer=optimizer, jit_compile=distribution.resolve_jit_compile(config.jit_compile)
        )
    if getattr(model, "head_loaded", False):
        logger.info("Task head loaded from %s.", init)
    run.output.mkdir(parents=True, exist_ok=True)
    manager = CheckpointManager(run.output / CHECKPOINTS_DIR, keep=1)
    return Training(model, manager, steps_per_epoch)


def _resume(run, training):
    """Restores the last checkpoint (model, optimizer, RNG state, history;
    the epoch and the batches done in it) when the output holds one from a
    run with the same settings; else starts afresh (`--no-resume`: without
    bertzoo's checkpoints there)."""
    manager = training.manager
    if run.resumes(manager.latest()):
        state = manager.restore(training.model)
        training.history, training.best = state["history"], state["best"]
        training.best_epoch = state["best_epoch"]
        if "epoch" in state:
            training.start, training.start_batch = int(state["epoch"]), int(state["batch"])
            training.loss_sum = float(state.get("epoch_loss_sum", 0.0))
        else:  # an earlier version's checkpoint: its step is the epochs done
            training.start = int(state["step"])
        mid_epoch = (
            f", and {training.start_batch} of {training.steps_per_epoch} batches of epoch "
            f"{training.start + 1}"
            if training.start_batch
            else ""
        )
        logger.info(
            "Resumed from %s: %d of %d epochs done%s.",
            manager.restored_path,
            training.start,
            run.config.epochs,
            mid_epoch,
        )
        return
    run.start_over(*(() if run.config.resume else (CHECKPOINTS_DIR,)))


def _stopped_after_epoch(run, training, epoch):
    """What the stop message says at a signal that came during validation
    or the publication of best/: the epoch's checkpoint is written."""
    return (
        f"after epoch {epoch} of {run.config.epochs}: checkpoint {training.manager.latest()} "
        "written; rerun the same command to resume there."
    )


def _epoch(run, training, data, tensorboard, epoch, signals):
    """Trains one epoch (the rest of it, when a checkpoint of the middle of
    it was restored), validates, and updates the best epoch. A signal
    (`signals`) saves the step it comes in and stops the run."""
    config, steps = run.config, training.steps_per_epoch
    first, loss_sum = (
        (training.start_batch, training.loss_sum) if epoch == training.start else (0, 0.0)
    )
    start_step = epoch * steps + first
    tensorboard.start_step = start_step
    training.timings.append(Throughput(config.batch_size))
    guard = NonFiniteGuard(  # a NaN loss stops the run before best/ or a checkpoint is written
        start_step,
        stage=f"epoch {epoch + 1}",
        kept=(
            f"The last good checkpoint (epoch {epoch}"
            + (f", batch {first} of epoch {epoch + 1}" if first else "")
            + ") was kept; "
            if start_step
            else "No checkpoint was written; "
        )
        + f"{run.output / BEST_DIR} was not updated.",
    )

    def save(model, step, logs):
        # Keras' "loss" is the mean over this fit's batches so far.
        done = step - epoch * steps
        total_loss = loss_sum + float(logs.get("loss", 0.0)) * (done - first)
        path = training.manager.save(model, step, training.state(epoch, done, total_loss))
        return f"checkpoint {path} written"

    stop = StopAtStep(
        signals,
        start_step,
        steps * config.epochs,
        save,
        where=lambda step: f" (epoch {epoch + 1}, batch {step - epoch * steps} of {steps})",
    )
    if first < steps:
        fit = training.model.fit(
            epoch_dataset(config, data.train, epoch, start_batch=first),
            epochs=1,
            steps_per_epoch=steps - first,
            verbose=config.verbose,
            shuffle=False,
            callbacks=[guard, tensorboard, training.timings[-1], stop],
        )
        loss_sum += float(fit.history["loss"][-1]) * (steps - first)
    # else: stopped after the epoch's last step, before its validation
    scores = evaluate(config, training.model, data.validation, config.batch_size)
    scores = {k: float(v) for k, v in scores.items()}
    train_loss = loss_sum / steps  # the epoch's mean batch loss, across a resume too
    training.history.append({"epoch": epoch + 1, "train_loss": train_loss, **scores})
    tensorboard.write({f"validation/{k}": v for k, v in scores.items()}, (epoch + 1) * steps)
    line = ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
    logger.info(
        "epoch %d/%d: train loss %.4f; validation %s", epoch + 1, config.epochs, train_loss, line
    )
    main, best = task_kinds.get(config.task).main_metric, training.best
    value = scores[main]
    if best is None or (not math.isnan(value) and (math.isnan(best[main]) or value > best[main])):
        training.best, training.best_epoch = scores, epoch + 1


def _preset_info(model, settings):
    """The fine-tuned preset's sections: the starting checkpoint's, with a
    description of this run that names the checkpoint by its source (its
    Hugging Face name, or --init as given), never by a path of this machine."""
    info = dict(model.backbone.preset_info)
    source = (info.get("metadata") or {}).get("source_checkpoint") or settings["config"].get("init")
    task = settings["config"].get("task")
    info["description"] = (
        f"Fine-tuned ({task}) from {source or 'the default checkpoint'} by bertzoo's recipe."
    )
    return info


def _save_best(model, tokenizer, directory, settings):
    """Writes the task preset into a fresh folder, then swaps it in, so the
    directory always holds one complete preset."""
    with atomic_directory(directory) as staging:
        # The run's length: from_preset(directory) packs texts as it trained
        # and as its export does.
        length = settings["serving"]["sequence_length"]
        model.save_to_preset(
            staging,
            tokenizer=tokenizer,
            preset_info=_preset_info(model, settings),
            sequence_length=length,
        )
        atomic_write_text(staging / "finetune.json", json.dumps(settings, indent=2) + "\n")


def _publish(run, init, data, training):
    """The metrics (written to `METRICS_FILE`), after the serving export
    when the run makes one."""
    config, seconds = run.config, run.seconds()
    result = {
        "task": config.task,
        "init": init,
        "dataset": data.dataset,
        "train_examples": len(data.train.examples),
        "validation_examples": len(data.validation.examples),
        "sequence_length": config.sequence_length,
        # The share of each split's examples cut at sequence_length (None:
        # the kind never cuts, e.g. QA windows).
        "truncated": data.truncated,
        "main_metric": task_kinds.get(config.task).main_metric,
        "best_epoch": training.best_epoch,
        "validation": training.best,
        "history": training.history,
        "seconds": round(seconds, 1),
        "preset": str(run.output / BEST_DIR),
    }
    timed = sum(t.seconds for t in training.timings)
    if timed > 0:
        steps = sum(t.steps for t in training.timings)
        result["examples_per_second"] = round(steps * config.batch_size / timed, 1)
    if config.export:
        from bertzoo.serving import export_serving

        # The serving settings come from best/finetune.json.
        export_serving(run.output / BEST_DIR, config.export, overwrite=config.overwrite)
        result["export"] = str(config.export)
    run.publish(METRICS_FILE, result)
    return result


def _kind_serving_settings(config, train):
    """What the task kind records for serving (labels, QA windows), from its
    own settings only."""
    kind = task_kinds.get(config.task)
    return kind.serving_settings(kind_settings(config, kind), train)
