"""Distillation on a text corpus (`bertzoo.training.distill`, methods
distilbert and tinybert-general): masked examples from the corpus's
documents, one stage of `--steps` steps, and the student's quality on the
held-out documents (masked-LM accuracy against the teacher's for distilbert;
the cosine of the last hidden states for tinybert-general). SIGTERM or SIGINT
saves a checkpoint of the step under way, which a rerun resumes on the same
batches; it is removed once the student is published."""

import logging
from pathlib import Path

from bertzoo import batching
from bertzoo.data.corpus import read_corpus, tokenize_documents
from bertzoo.data.examples import create_examples
from bertzoo.data.masking import MaskedLMMasker
from bertzoo.data.pipeline import make_pretraining_dataset
from bertzoo.distill.distillers import (
    DistilBertDistiller,
    as_pretrainer,
)
from bertzoo.distill.evaluate import hidden_cosine
from bertzoo.distill.init import init_student_from_teacher
from bertzoo.io.jsonfile import load_json
from bertzoo.models.pretrainer import BertPretrainer
from bertzoo.training.checkpoint import CheckpointManager
from bertzoo.training.distill_context import (
    STUDENT_DIR,
    fit_rest,
    running_sums,
    stage_optimizer,
    tinybert_distiller,
)
from bertzoo.training.guards import NonFiniteGuard
from bertzoo.training.preemption import StopAtStep
from bertzoo.training.runs import (
    CHECKPOINTS_DIR,
    CORPUS_FILE,
    DATA_DIR,
    split_documents,
    write_builtin_corpus,
)
from bertzoo.training.students import (
    COPY_LAYERS,
    check,
)

logger = logging.getLogger("bertzoo.training.distill")  # the run's log lines


def _corpus_documents(config, tokenizer):
    if config.corpus:
        files = list(config.corpus)
    else:
        files = [str(write_builtin_corpus(Path(config.output) / DATA_DIR / CORPUS_FILE))]
    documents = tokenize_documents(read_corpus(files), tokenizer)
    train, held = split_documents(documents, config.eval_fraction, config.seed)
    check(
        held, "The corpus needs at least 2 documents (separated by blank lines) to hold some out."
    )
    return train, held


def _corpus_examples(config, tokenizer, teacher):
    check(
        config.sequence_length <= teacher.max_sequence_length,
        f"sequence_length={config.sequence_length} is longer than the teacher's "
        f"{teacher.max_sequence_length} positions.",
    )
    train_docs, held_docs = _corpus_documents(config, tokenizer)
    make = lambda docs, seed: create_examples(
        docs, tokenizer, seq_len=config.sequence_length, objective="none", seed=seed
    )  # noqa: E731
    masker = MaskedLMMasker(
        tokenizer, config.sequence_length, max(1, round(0.15 * config.sequence_length))
    )
    return make(train_docs, config.seed), make(held_docs, config.seed + 7), masker


def _inputs_only(ds, keep_positions=False):
    """The model inputs of the pre-training pipeline's (x, y, w) batches,
    without `mask_positions` unless asked."""
    return ds.map(
        lambda x, y, w: {k: v for k, v in x.items() if keep_positions or k != "mask_positions"}
    )


def distill_corpus(context):
    """Trains the student's one stage on the corpus and measures it on the
    held-out documents; returns (the report's quality entries, the
    student's backbone)."""
    config = context.config
    manager = CheckpointManager(context.run.output / CHECKPOINTS_DIR, keep=1)
    start, sums = _resume_position(context, manager)
    # Once resuming is decided: a refused rerun writes nothing.
    context.tensorboard = context.run.tensorboard(every=10)
    train, held, held_count = _corpus_batches(context, start)
    distiller, models = _build_distiller(context)
    data = train if config.method == "distilbert" else _inputs_only(train)
    if start:
        _restore(context, manager, distiller, data, start)
    context.stages[config.method] = _fit(context, distiller, data, manager, start, sums)
    if config.method == "distilbert":
        quality = _masked_lm_quality(context, distiller, models, held)
    else:
        cosine = hidden_cosine(distiller, _inputs_only(held), project=True)
        logger.info(
            "held-out cosine between teacher and (projected) student last hidden states: %.4f",
            cosine,
        )
        quality = {
            "quality_retained": round(cosine, 4),
            "metric": "hidden_cosine",
            "teacher_metric": 1.0,
            "student_metric": cosine,
        }
    return {**quality, "held_out": {"examples": held_count}}, context.student


def _resume_position(context, manager):
    """(the step to start at, the sums of the stage's metrics over the steps
    before it): where the checkpoint a signal left in the output stopped,
    when the run resumes it (same settings and corpus), else (0, {})."""
    run = context.run
    latest = manager.latest()
    if run.resumes(latest):
        state = load_json(latest / "state.json")
        return int(state["step"]), dict(state.get("metric_sums") or {})
    run.start_over(*(() if run.config.resume else (CHECKPOINTS_DIR,)))
    return 0, {}


def _restore(context, manager, distiller, data, start):
    """The distiller (student, teacher, optimizer, RNG) as the checkpoint of
    step `start` holds it."""
    batch = next(iter(data.take(1)))
    distiller(batch[0] if isinstance(batch, tuple) else batch)  # built, to restore into
    manager.restore(distiller)
    logger.info(
        "Resumed from %s at step %d of %d.", manager.restored_path, start, context.config.steps
    )


def _corpus_batches(context, start=0):
    """(training batches from step `start` on, held-out batches, held-out
    example count)."""
    config = context.config
    train_examples, held_examples, masker = _corpus_examples(
        config, context.tokenizer, context.teacher
    )
    ds = make_pretraining_dataset(
        train_examples,
        config.batch_size,
        masker,
        seed=config.seed,
        repeat=True,
        start_batch=start,
    )
    held = make_pretraining_dataset(
        held_examples,
        min(config.batch_size, len(held_examples)),
        masker,
        seed=config.seed + 11,
        shuffle=False,
        drop_remainder=False,
    )
    if config.batching != "fixed":  # each batch padded to its longest sequence's bucket
        ds = batching.trim_dataset(ds, config.sequence_length)
        held = batching.trim_dataset(held, config.sequence_length)
    return ds, held, len(held_examples)


def _build_distiller(context):
    """(the compiled distiller, (teacher, student) pre-training models for
    distilbert, else None)."""
    config, teacher, s_backbone = context.config, context.teacher, context.student
    models = None
    with context.distribution.scope():
        if config.method == "distilbert":
            t_model = as_pretrainer(teacher, "teacher", need_head=config.kl_weight > 0)
            s_model = BertPretrainer(s_backbone, objective="none")
            if context.student_init == COPY_LAYERS:
                used = init_student_from_teacher(s_model, t_model, context.layer_map)
                logger.info(
                    "Student initialised from teacher layers %s (1-based).", [i + 1 for i in used]
                )
            distiller = DistilBertDistiller(
                t_model,
                s_model,
                temperature=config.temperature,
                kl_weight=config.kl_weight,
                mlm_weight=config.mlm_weight,
                cosine_weight=config.cosine_weight,
            )
            models = (t_model, s_model)
        else:
            distiller = tinybert_distiller(context, teacher, s_backbone)
        distiller.compile(
            optimizer=stage_optimizer(config, config.steps),
            jit_compile=context.distribution.resolve_jit_compile(None),
        )
    return distiller, models


def _fit(context, model, dataset, manager, start, sums):
    """Trains the stage from step `start` to `--steps`; on a signal, saves
    the step under way (with `sums`, the metrics' sums before `start`) and
    stops the run. Returns the stage's metrics, means over all its steps."""
    config, stage, steps = context.config, context.config.method, context.config.steps
    context.tensorboard.start_at(start)
    logger.info("%s: %d steps", stage, steps)
    # A NaN loss stops the run: the student is not published.
    guard = NonFiniteGuard(
        start,
        stage=stage,
        kept=(f"The checkpoint of step {start} was kept; " if start else "")
        + f"{Path(config.output) / STUDENT_DIR} was not updated.",
    )

    def save(model, step, logs):
        # Keras' logs are the means over this fit's steps so far.
        partial = running_sums(sums, logs, step - start)
        path = manager.save(model, step, {"metric_sums": partial})
        return f"checkpoint {path} written"

    callbacks = [guard, context.tensorboard]
    if context.signals is not None:  # a signal: save the step under way and stop
        callbacks.append(StopAtStep(context.signals, start, steps, save))
    return fit_rest(model, dataset, start, steps, sums, config.verbose, callbacks)


def _masked_lm_quality(context, distiller, models, held):
    """DistilBERT: the student's held-out masked-LM accuracy over the
    teacher's, and the hidden states' cosine."""
    t_model, s_model = models
    jit = context.distribution.resolve_jit_compile(None)
    t_model.compile(optimizer="adam", jit_compile=jit)
    s_model.compile(optimizer="adam", jit_compile=jit)
    teacher_acc = float(t_model.evaluate(held, verbose=0, return_dict=True)["masked_lm_accuracy"])
    student_acc = float(s_model.evaluate(held, verbose=0, return_dict=True)["masked_lm_accuracy"])
    cosine = hidden_cosine(distiller, _inputs_only(held, keep_positions=True), project=False)
    logger.info("held-out masked-LM accuracy: teacher %.4f, student %.4f", teacher_acc, student_acc)
    return {
        "quality_retained": round(student_acc / teacher_acc, 4) if teacher_acc else None,
        "metric": "masked_lm_accuracy",
        "teacher_metric": teacher_acc,
        "student_metric": student_acc,
        "hidden_cosine": round(cosine, 4),
    }
