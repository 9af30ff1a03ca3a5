"""TinyBERT task distillation (`bertzoo.training.distill`, method
tinybert-task): intermediate layers, then the prediction layer (on the
teacher's logits, computed once for the whole distillation set), each for
whole epochs over the training texts plus augmentations
(`bertzoo.training.distill_task_data`) until the held-out slice of the
training data stops improving (`--patience` epochs), with a checkpoint after
every epoch so a killed run resumes where it stopped, and on SIGTERM or
SIGINT one at the step boundary (mid-epoch), from which a rerun trains the
rest of the epoch on the same batches. The best
prediction-stage epoch is the published student, scored on the validation
split."""

import dataclasses
import json
import logging
import time

import keras

from bertzoo import batching
from bertzoo.distill.distillers import LogitsStudent, teacher_logits
from bertzoo.distill.evaluate import (
    accuracy,
    measure_speedup_on_features,
)
from bertzoo.models.tasks import BertClassifier
from bertzoo.training.checkpoint import CheckpointManager
from bertzoo.training.distill_context import (
    fit_rest,
    running_sums,
    save_student,
    stage_optimizer,
    tinybert_distiller,
)
from bertzoo.training.distill_task_data import task_data, teacher_quality, teacher_record
from bertzoo.training.guards import NonFiniteGuard
from bertzoo.training.preemption import StopAtStep
from bertzoo.training.runs import CHECKPOINTS_DIR

logger = logging.getLogger("bertzoo.training.distill")  # the run's log lines

STAGES = (
    ("intermediate", "Stage 2a: intermediate layers"),
    ("prediction", "Stage 2b: prediction layer"),
)


@dataclasses.dataclass
class _TaskRun:
    """The stages' shared state: the distillation context, its data, the
    student classifier, the two stages' distillers, the checkpoints and the
    epoch loop's state (what a checkpoint holds)."""

    context: object
    data: dict
    student: object
    models: dict
    manager: CheckpointManager
    state: dict
    plan: dict

    @property
    def config(self):
        return self.context.config


def distill_task(context):
    """Runs both stages and scores the published student; returns (the
    report's quality entries, the student classifier)."""
    config = context.config
    record = teacher_record(context.teacher_path)
    data = task_data(context, record)
    plan = _epoch_plan(config, len(data["pool"]), config.batch_size)
    student, models = _build_distillers(context, data, plan)
    manager = CheckpointManager(context.run.output / CHECKPOINTS_DIR, keep=1)
    state = _resume_state(context.run, manager, models)
    # Once resuming is decided: a refused rerun writes nothing.
    context.tensorboard = context.run.tensorboard(every=10)
    task = _TaskRun(context, data, student, models, manager, state, plan)
    for stage, title in STAGES:
        _run_stage(task, stage, title)
    return _score(context, data, record, state["history"])


def _build_distillers(context, data, plan):
    """(student classifier, {stage: its distiller}), compiled and built."""
    config, teacher = context.config, context.teacher
    jit_compile = context.distribution.resolve_jit_compile(None)
    with context.distribution.scope():
        # The teacher's head kind (RoBERTa's dense + tanh on <s>, ELECTRA's,
        # or BERT's pooled one): the student's own backbone carries no family.
        student = BertClassifier(
            context.student,
            teacher.num_classes,
            label_names=teacher.label_names,
            head=teacher.head_style,
        )
        inter = tinybert_distiller(context, teacher, student)
        inter.compile(
            optimizer=stage_optimizer(config, plan["intermediate"][0] * plan["intermediate"][1]),
            jit_compile=jit_compile,
        )
        # The prediction stage trains on the teacher's logits, computed once
        # (`_teacher_logits`): no step runs the teacher.
        pred = LogitsStudent(teacher, student, temperature=config.temperature)
        pred.compile(
            optimizer=stage_optimizer(config, plan["prediction"][0] * plan["prediction"][1]),
            jit_compile=jit_compile,
        )
    models = {"intermediate": inter, "prediction": pred}
    probe = batching.trim_to_bucket(
        {k: v[:2] for k, v in data["pool_features"].items()}, data["sequence_length"]
    )
    for model in models.values():
        model(probe)  # built, so a checkpoint can be restored into it
    return student, models


def _run_stage(task, stage, title):
    """The epochs of one stage, from where the state says, until the
    held-out slice stops improving; records the stage in the report."""
    state, inter = task.state, task.models["intermediate"]
    if stage == "prediction" and state["stage"] == "intermediate":
        state.update(stage="prediction", epoch=0, best=None, bad=0, done=False)
    if state["stage"] != stage or state["done"]:
        if stage == "intermediate":
            inter.release()
        return
    per_epoch, most = task.plan[stage]
    for epoch in range(state["epoch"], most):
        _run_epoch(task, stage, title, epoch)
        if state["done"]:
            break
    task.context.stages[stage] = {
        **(state["history"].get(stage) or [{}])[-1],
        "epochs": len(state["history"].get(stage, [])),
        "best_epoch": state["best_epoch"],
        "steps_per_epoch": per_epoch,
        "stopped_early": state["bad"] >= task.config.patience,
    }
    if stage == "intermediate":
        inter.release()


def _run_epoch(task, stage, title, epoch):
    """Trains one epoch of `stage`, scores it on the held-out slice,
    publishes the student at a better prediction-stage epoch and writes a
    checkpoint."""
    config, data, state, context = task.config, task.data, task.state, task.context
    model, (per_epoch, most) = task.models[stage], task.plan[stage]
    step = state["global_step"]  # at the epoch's start
    # Batches of this epoch trained before a preemption, and the sums of
    # their metrics: the rest of the epoch runs on the same batches.
    first, sums = state.get("batch", 0), dict(state.get("epoch_sums") or {})
    context.tensorboard.start_at(step + first)
    ds = batching.training_dataset(
        data["pool_features"],
        None if stage == "intermediate" else _teacher_logits(task),
        config.batch_size,
        config.seed + epoch + (0 if stage == "intermediate" else 1000),
        data["sequence_length"],
        mode=config.batching,
        epochs=None,
        start_batch=first,
        per_token_targets=False,
    )
    guard = NonFiniteGuard(
        step + first,
        stage=f"{title}, epoch {epoch + 1}",
        kept=f"The last good checkpoint was kept; {context.student_dir} was not updated.",
    )
    callbacks = [guard, context.tensorboard]

    def save(model, at, logs):
        # Keras' logs are the means over this fit's batches so far.
        done = at - step
        partial = running_sums(sums, logs, done - first)
        position = {"batch": done, "epoch_sums": partial}
        path = task.manager.save(model, at, _checkpoint_state({**state, **position}))
        return f"checkpoint {path} written"

    if context.signals is not None:  # a signal: save the step under way and stop
        callbacks.append(
            StopAtStep(
                context.signals,
                step + first,
                _most_steps(task.plan),
                save,
                where=lambda at: f" ({title}, epoch {epoch + 1}, batch {at - step} of {per_epoch})",
            )
        )
    # first == per_epoch: stopped after the epoch's last step, before its
    # held-out score.
    means = fit_rest(model, ds, first, per_epoch, sums, config.verbose, callbacks)
    entry = {"epoch": epoch + 1, **means}
    score = _held_out_score(task, stage, epoch, entry)
    state["history"].setdefault(stage, []).append(entry)
    improved = state["best"] is None or score > state["best"]
    if improved:
        state["best"], state["bad"], state["best_epoch"] = score, 0, epoch + 1
        if stage == "prediction":
            save_student(context, task.student, data["sequence_length"])
    else:
        state["bad"] += 1
    logger.info(
        "%s, epoch %d/%d: %s%s",
        title,
        epoch + 1,
        most,
        ", ".join(f"{k} {v:.4f}" for k, v in entry.items() if k != "epoch"),
        "" if improved else f" (no better for {state['bad']})",
    )
    state["epoch"] = epoch + 1
    state["done"] = state["bad"] >= config.patience or epoch + 1 == most
    state["global_step"] = step + per_epoch
    state["batch"], state["epoch_sums"] = 0, {}
    path = task.manager.save(model, step + per_epoch, _checkpoint_state(state))
    if context.signals is not None:  # a signal during the held-out score or the publication
        context.signals.check(
            lambda: (
                f"after step {step + per_epoch} of {_most_steps(task.plan)} ({title}, end of "
                f"epoch {epoch + 1}): checkpoint {path} written; rerun the same command to "
                "resume there."
            )
        )


def _teacher_logits(task):
    """The teacher's logits for the distillation set, the prediction
    stage's targets: computed at its first epoch (a resumed run computes
    the same ones again; they are not stored) and kept for the others."""
    data = task.data
    if "teacher_logits" not in data:
        started = time.perf_counter()
        data["teacher_logits"] = teacher_logits(task.context.teacher, data["pool_features"])
        logger.info(
            "Teacher logits of the %d distillation texts computed once (%.1f s): the prediction "
            "stage trains the student on them.",
            len(data["teacher_logits"]),
            time.perf_counter() - started,
        )
    return data["teacher_logits"]


def _most_steps(plan):
    """The most global steps the two stages can take (early stopping may
    end them sooner)."""
    return sum(per_epoch * most for per_epoch, most in plan.values())


def _held_out_score(task, stage, epoch, entry):
    """The epoch's score on the held-out slice (higher is better), also
    entered in `entry`; without a slice, the last epoch is the best."""
    held, config = task.data["held_features"], task.config
    if held is None:
        return float(epoch)
    if stage == "intermediate":
        loss = _held_loss(task.models["intermediate"], held, config.batch_size)
        entry["held_out_loss"] = loss
        return -loss
    score = accuracy(task.student, held, task.data["held_targets"], 64)
    entry["held_out_accuracy"] = score
    return score


def _epoch_plan(config, count, batch_size):
    """(steps per epoch, most epochs) of each tinybert-task stage: `--steps`
    / `--prediction-steps` as one fixed epoch each, else whole passes over
    the distillation set, `--epochs` / `--prediction-epochs` at most."""
    per_epoch = max(1, count // batch_size)
    if config.steps is not None:
        return {
            "intermediate": (config.steps, 1),
            "prediction": (config.prediction_steps or config.steps, 1),
        }
    return {
        "intermediate": (per_epoch, config.epochs),
        "prediction": (per_epoch, config.prediction_epochs),
    }


def _held_loss(distiller, features, batch_size):
    """The intermediate-layer distillation loss on the held-out slice (no
    dropout), averaged over its rows."""
    import numpy as np

    total, rows = 0.0, 0
    n = len(features["token_ids"])
    for start in range(0, n, batch_size):
        x = {k: v[start : start + batch_size] for k, v in features.items()}
        out = distiller(x, training=False)
        loss = distiller.compute_loss(x=x, y_pred=out, training=False)
        count = len(x["token_ids"])
        total += float(np.asarray(keras.ops.convert_to_numpy(loss))) * count
        rows += count
    return total / max(rows, 1)


def _checkpoint_state(state):
    return {k: v for k, v in state.items() if k not in ("step", "format_version")}


def _resume_state(run, manager, models):
    """Where the epoch loop starts: fresh, or where the last checkpoint of a
    run with the same settings in the output left off (its stage's model
    restored). Other settings there are an error, as in the other runs."""
    fresh = {
        "stage": "intermediate",
        "epoch": 0,
        "best": None,
        "best_epoch": None,
        "bad": 0,
        "done": False,
        "history": {},
        "global_step": 0,
        "batch": 0,
        "epoch_sums": {},
    }
    if run.resumes(manager.latest()):
        latest = json.loads((manager.latest() / "state.json").read_text(encoding="utf-8"))
        if latest.get("stage") == "prediction":
            models["intermediate"].release()  # the prediction stage trains the whole student
        state = manager.restore(models[latest.get("stage", "intermediate")])
        batch = state.get("batch", 0)
        logger.info(
            "Resumed from %s: %s stage, %d epochs done%s.",
            manager.restored_path,
            state["stage"],
            state["epoch"],
            f", and {batch} batches of epoch {state['epoch'] + 1}" if batch else "",
        )
        return {**fresh, **_checkpoint_state(state)}
    run.start_over(*(() if run.config.resume else (CHECKPOINTS_DIR,)))
    return fresh


def _score(context, data, record, history):
    """The published student (the best prediction-stage epoch) against the
    teacher on the validation split: accuracy and speed. Returns (the
    report's quality entries, the student)."""
    config, teacher = context.config, context.teacher
    student = BertClassifier.from_preset(context.student_dir)
    features = data["validation_features"]
    student_acc = accuracy(student, features, data["validation"].targets, 64)
    teacher_here = accuracy(teacher, features, data["validation"].targets, 64)
    own = teacher_quality(context, data, record)
    # Speed on the held-out texts themselves, at their own lengths.
    on_texts = measure_speedup_on_features(teacher, student, features, config.benchmark_batch_size)
    logger.info(
        "speed-up on the %d validation texts (mean %.1f tokens): %.2fx (%.0f vs %.0f texts/s)",
        on_texts["texts"],
        on_texts["mean_tokens"],
        on_texts["speedup"],
        on_texts["student_texts_per_second"],
        on_texts["teacher_texts_per_second"],
    )
    logger.info(
        "validation accuracy: teacher %.4f (at its own sequence length %d; %.4f at %d), "
        "student %.4f",
        own["accuracy"],
        own["sequence_length"],
        teacher_here,
        data["sequence_length"],
        student_acc,
    )
    return {
        "quality_retained": round(student_acc / own["accuracy"], 4) if own["accuracy"] else None,
        "metric": "accuracy",
        "teacher_metric": own["accuracy"],
        "student_metric": student_acc,
        "teacher": own,
        "teacher_at_distillation_length": teacher_here,
        "speedup_on_validation": on_texts["speedup"],
        "inference_on_validation": on_texts,
        "sequence_length": data["sequence_length"],
        "sequence_length_chosen": data["chosen_by"],
        "truncated": data["truncated"],
        "held_out": {
            "file": str(data["validation_path"]),
            "examples": len(data["validation"].examples),
        },
        "early_stopping": {
            "held_out_training_texts": data["held_count"],
            "patience": config.patience,
        },
        "augmentation": data["augmentation"],
        "distillation_examples": len(data["pool"]),
        "history": history,
    }, student
