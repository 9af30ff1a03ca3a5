"""The pre-training run behind `recipes/pretrain.py`: corpus -> vocabulary ->
examples -> masked LM (+ NSP/SOP) with checkpoints, resume, TensorBoard and a
preset directory at the end.

    config = PretrainConfig(preset="bert_tiny", seq_len=(64, 128), steps=(600, 100))
    metrics = run_pretraining(config)

Everything the run writes goes under `config.output`:

    .bertzoo.lock          held for the whole run: one run per output at a time
    .bertzoo-run.json      what bertzoo wrote here (bertzoo.io.rundir): a run
                           claims these paths first (a user's file at one is
                           an error), and removes only what it lists
    run_config.json        the settings (a resumed run must match them)
    corpus.txt             the built-in corpus, when no corpus files are given
    prepared/              the corpus as tokenized document shards, prepared
                           once (bertzoo.data.prepare) and reused on every
                           start and resume (not with --prepared DIR)
    vocab.txt|spiece.model the vocabulary (given, the preset's, or trained)
    data/seq{L}/           static mode: masked TFRecords per sequence length,
                           written once from the shards
    checkpoints/ckpt-*/    model + optimizer + step + data position (the
                           stream's shard and example: atomic)
    positions/reader-W/    multi-worker runs streaming on the fly: worker W's
                           own stream position at each checkpoint step
                           (step-N.json), as its shards are its own
    logs/                  TensorBoard: loss, accuracies, learning rate
    preset/                the trained backbone + vocabulary (from_preset)
    metrics.json           initial/final held-out metrics, steps, speed

Rerunning the same command resumes from the newest checkpoint, at the same
place in the (deterministic) data stream; at most `checkpoint_every` steps are
repeated. Other settings are refused while there is a checkpoint; before the
first one (a run that failed early), the files derived from the earlier
settings (vocabulary, data, initial evaluation) are discarded and the run
starts over, as with `resume=False`. A NaN or infinite loss stops the run
with `NonFiniteError` (bertzoo.training.guards): no checkpoint of that state,
no preset. Phases (`seq_len=(128, 512)`, `steps=(900, 100)`) run one after the
other on one learning-rate schedule, as in the BERT paper.
"""

import dataclasses
import logging
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from bertzoo.data.corpus import expand_files
from bertzoo.tokenizers.base import VOCABULARY_FILES
from bertzoo.tokenizers.byte_bpe import MERGES_FILE
from bertzoo.training import pretrain_memory
from bertzoo.training.callbacks import Throughput
from bertzoo.training.checkpoint import CheckpointManager, PeriodicCheckpoint
from bertzoo.training.distribute import make_distribution
from bertzoo.training.guards import NonFiniteGuard
from bertzoo.training.lifecycle import Run
from bertzoo.training.preemption import StopAtStep
from bertzoo.training.pretrain_config import (
    CORPUS_LAYOUTS,
    DATA_MODES,
    INITIAL_EVAL_FILE,
    MASKING_CHOICES,
    OBJECTIVE_CHOICES,
    PRESET_DIR,
    PretrainConfig,
    PretrainError,
    check_inputs,
    check_positions,
    is_electra,
    max_predictions,
    preset_document,
    resolve_defaults,
    validate_config,
)
from bertzoo.training.pretrain_data import (
    INPUT_VERSION,
    PREPARED_DIR,
    PreparedData,
    check_prepared_settings,
    check_vocabulary_training,
    checkpoint_input_version,
    example_objective,
    model_batches,
    prepare_run_corpus,
    prepare_tokenizer,
    vocabulary_plan,
)
from bertzoo.training.pretrain_model import (
    build_backbone,
    build_generator,
    build_pretrainer,
    compile_pretrainer,
    evaluate,
    resolve_objective,
    save_preset,
)
from bertzoo.training.runs import (
    AUTO,
    CHECKPOINTS_DIR,
    CORPUS_FILE,
    DATA_DIR,
    LOGS,
    METRICS_FILE,
    RUN_SETTINGS_FILE,
    resolve_batch_size,
)
from bertzoo.training.workers import POSITIONS_DIR

logger = logging.getLogger(__name__)

# Defined in the stage modules (settings, data, model), named here as before.
__all__ = [
    "CORPUS_LAYOUTS",
    "DATA_MODES",
    "INITIAL_EVAL_FILE",
    "MASKING_CHOICES",
    "OBJECTIVE_CHOICES",
    "PRESET_DIR",
    "PretrainConfig",
    "PretrainError",
    "build_backbone",
    "build_generator",
    "build_pretrainer",
    "check_positions",
    "example_objective",
    "max_predictions",
    "prepare_tokenizer",
    "resolve_objective",
    "run_pretraining",
    "validate_config",
]

# What `--no-resume` deletes in the output, said when resuming is refused.
START_OVER = (
    "this deletes the checkpoints, logs, trained vocabulary and data files bertzoo wrote there"
)


# === The run ===


def _written(config):
    """The paths (under `output`) this run writes, claimed at its start."""
    names = [RUN_SETTINGS_FILE, CHECKPOINTS_DIR, LOGS, INITIAL_EVAL_FILE, PRESET_DIR, METRICS_FILE]
    if not config.prepared:
        names.append(PREPARED_DIR)
        if not config.corpus:
            names.append(CORPUS_FILE)
        cls, _, _, vocabulary = vocabulary_plan(config)
        if vocabulary is None:
            names += [cls.vocabulary_file, *cls.companion_files]
    if config.data_mode == "static" and not config.data:
        names += sorted({f"{DATA_DIR}/seq{s}" for s in config.seq_len})
    if config.data_mode != "static" and not config.data:
        names.append(POSITIONS_DIR)  # (written by multi-worker runs)
    return names


def _discard_derived(config, run):
    """Starting over: what earlier runs here derived from their settings
    goes (checkpoints and readers' positions, logs, trained vocabulary, data
    files, metrics), if bertzoo wrote it and it is not an input of this
    run. The built-in corpus and the last preset/ stay until rewritten; the
    prepared corpus stays and is reused where its inputs, settings and
    tokenizer match."""
    derived = [CHECKPOINTS_DIR, POSITIONS_DIR, LOGS, *VOCABULARY_FILES]
    derived += [INITIAL_EVAL_FILE, METRICS_FILE]
    derived += [name for name in run.recorded if name.startswith(f"{DATA_DIR}/")]
    inputs = [Path(p).resolve() for p in (config.vocab, config.prepared, *config.data) if p]
    if config.vocab:  # a given vocab.json's merges.txt is an input too
        inputs.append((Path(config.vocab).parent / MERGES_FILE).resolve())
    if config.corpus:
        inputs += [p.resolve() for p in expand_files(list(config.corpus))]
    for name in derived:
        path = (run.output / name).resolve()
        if not any(p == path or path in p.parents for p in inputs):
            run.remove(name)


def _auto_batch_size(config, distribution):
    """`--batch-size auto`: planned at the longest phase, for the run's
    architecture with the vocabulary size it will have (a trained one's
    --vocab-size, or the checkpoint's)."""
    if config.batch_size != AUTO:
        return config
    document, directory, _ = preset_document(config.preset)
    if is_electra(config, document):
        raise PretrainError(
            "--batch-size auto plans BERT-style masked-LM steps; objective electra also runs "
            "a generator, which the planner does not model. Pass --batch-size N."
        )
    architecture = dict(document["backbone"])
    if config.dropout is not None:
        architecture["dropout"] = config.dropout
    if directory is None and not config.vocab:
        architecture["vocabulary_size"] = config.vocab_size
    return resolve_batch_size(
        config,
        architecture,
        max(config.seq_len),
        "pretrain",
        PretrainError,
        replicas=distribution.num_replicas,
        optimizer=config.optimizer,
        accumulation=config.gradient_accumulation_steps,
    )


def run_pretraining(config):
    """Runs (or resumes) pre-training as `config` says; returns the metrics
    written to `metrics.json`."""
    validate_config(config)
    check_prepared_settings(config)
    check_vocabulary_training(config)
    check_positions(config)  # before any data work
    check_inputs(config)
    config = resolve_defaults(config)  # the preset's mask rate, recorded by the run
    distribution = make_distribution(config.strategy, tpu=config.tpu)
    config = _auto_batch_size(config, distribution)
    distribution.check_batch_size(config.batch_size)
    chief = distribution.is_chief
    with Run(config, PretrainError, chief=chief, start_over=START_OVER) as run:
        run.lock()  # one run at a time
        return _pretrain(run, distribution)


@dataclasses.dataclass
class _Pretraining:
    """The run's state, handed from stage to stage."""

    run: Run
    distribution: object
    manager: CheckpointManager
    data: object  # pretrain_data.PreparedData (or the in-memory path's)
    backbone: object
    objective: str
    model: object
    step: int = 0
    restored: dict = dataclasses.field(default_factory=dict)  # the checkpoint's state
    meters: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def _pretrain(run, distribution):
    """The stages: open the output, data, model, resume, phases, results."""
    config = run.config
    manager = CheckpointManager(run.output / CHECKPOINTS_DIR, keep=config.keep_checkpoints)
    resuming = _open_output(run) and manager.latest() is not None
    keras.utils.set_random_seed(config.seed)
    if resuming and checkpoint_input_version(manager.latest()) < INPUT_VERSION:
        logger.warning(
            "%s was written by a run on the in-memory data path (bertzoo 0.1); it resumes on "
            "that path, reading its whole corpus. New runs stream from prepared shards.",
            manager.latest(),
        )
        return _pretrain_in_memory(run, distribution, manager)
    prepared, tokenizer = prepare_run_corpus(run, resuming)
    backbone, objective, model = compile_pretrainer(config, tokenizer.vocabulary_size, distribution)
    workers = (1, 0)
    if distribution.backend == "tensorflow" and distribution.num_workers > 1:
        workers = (distribution.num_workers, distribution.worker_index)  # a reader each
    data = PreparedData(run, prepared, tokenizer, objective, workers=workers, checkpoints=manager)
    state = _Pretraining(run, distribution, manager, data, backbone, objective, model)
    return _train_and_report(state, data.eval_set())


def _pretrain_in_memory(run, distribution, manager):
    """A run started before prepared shards, resumed on its own data."""
    config = run.config
    corpus = pretrain_memory.read_documents(run)
    backbone, objective, model = compile_pretrainer(
        config, corpus.tokenizer.vocabulary_size, distribution
    )
    data = pretrain_memory.MemoryData(run, corpus, objective)
    state = _Pretraining(run, distribution, manager, data, backbone, objective, model)
    return _train_and_report(state, pretrain_memory.eval_data(config, corpus, objective))


def _train_and_report(state, eval_set):
    """Resume, the initial evaluation, the phases, the final evaluation,
    the preset and the metrics."""
    run, config, model, manager = state.run, state.run.config, state.model, state.manager
    if config.resume and manager.latest() is not None:
        state.restored = manager.restore(model)
        state.step = int(state.restored["step"])
        logger.info("Resumed from %s at step %d.", manager.restored_path, state.step)
    if state.data.positions is not None:
        # Positions of steps past the restored one are written again.
        state.data.positions.prune(newest=state.step, after=state.step)
    initial = run.read(INITIAL_EVAL_FILE)
    if initial is None:
        initial = evaluate(model, eval_set.batches)
        if run.chief:
            run.publish(INITIAL_EVAL_FILE, initial)
    resumed_from = state.step
    tensorboard = _train_phases(state)
    final = evaluate(model, eval_set.batches)
    tensorboard.write({f"eval/{k}": v for k, v in final.items()}, state.step)
    metrics = _metrics(state, initial, final, resumed_from, eval_set)
    if run.chief:
        # The heads are saved beside the backbone: a teacher for distillation.
        tokenizer = state.data.tokenizer
        save_preset(
            config, model, state.backbone, tokenizer, state.objective, run.output / PRESET_DIR
        )
        run.publish(METRICS_FILE, metrics)
    return metrics


def _open_output(run):
    """Resume or start over: a checkpoint here must come from a run with
    these settings; the run claims what it writes (a user's file in the way
    is an error, before anything is written); starting over (or no
    checkpoint yet, and files made with other settings: an earlier run
    failed early) discards what earlier runs derived; the settings are
    recorded. Returns whether the run resumes."""
    config = run.config
    resuming = run.resumes(run.any_checkpoint(), unrecorded_resumes=True)
    run.open(_written(config))
    if not resuming and (not config.resume or config.changed_settings(run.output)):
        _discard_derived(config, run)
    run.record()
    return resuming


def _train_phases(state):
    """Trains the phases from `state.step` on; returns the TensorBoard
    writer. SIGTERM or SIGINT during training: the step under way is
    finished, checkpointed (with its data position) and the run stops with
    `Preempted` (`bertzoo.training.preemption`)."""
    run, config = state.run, state.run.config
    tensorboard = run.tensorboard(config.log_every, enabled=run.chief)
    progress = run.progress(config.log_every, sum(config.steps), logger=logger)
    bounds = np.cumsum([0, *config.steps])
    run.start_clock()
    with run.preemptible() as signals:
        for phase in range(len(config.seq_len)):
            if state.step >= bounds[phase + 1]:
                continue
            signals.check(lambda: _stopped_between_steps(state))
            dataset = _phase_dataset(state, phase, state.step - int(bounds[phase]))
            callbacks = _phase_callbacks(state, phase, bounds, tensorboard)
            if config.verbose:
                steps = f"{state.step + 1}-{bounds[phase + 1]}"
                logger.info(
                    "Phase %d/%d: seq_len %d, steps %s, %s, global batch %d.",
                    phase + 1,
                    len(config.seq_len),
                    config.seq_len[phase],
                    steps,
                    state.data.describe(phase),
                    config.batch_size,
                )
            if config.verbose == 2:  # not a terminal: a line per logging interval, not per phase
                progress.start_at(state.step)
                callbacks.append(progress)
            callbacks.append(_stop_at_step(state, signals, callbacks[1]))  # last
            state.model.fit(
                dataset,
                epochs=1,
                steps_per_epoch=int(bounds[phase + 1] - state.step),
                callbacks=callbacks,
                verbose=1 if config.verbose == 1 else 0,
                shuffle=False,
            )  # the dataset shuffles itself
            state.step = int(bounds[phase + 1])
            state.meters.append(callbacks[3])
        signals.check(lambda: _stopped_between_steps(state))
    state.seconds = run.seconds()
    return tensorboard


def _stop_at_step(state, signals, periodic):
    """The callback that saves the step under way at a signal (the
    periodic checkpoint's `save_now`: its data position included)."""

    def save(model, step, logs):
        return f"checkpoint {periodic.save_now()} written"

    return StopAtStep(signals, state.step, sum(state.run.config.steps), save)


def _stopped_between_steps(state):
    """What the stop message says between phases (a signal after a
    phase's last step, or before the first)."""
    latest = state.manager.latest()
    total = sum(state.run.config.steps)
    if latest is None:
        return f"before step 1 of {total}: nothing trained yet; rerun the same command to start."
    return (
        f"after step {state.step} of {total}: checkpoint {latest} kept; rerun the same command "
        "to resume there."
    )


def _phase_dataset(state, phase, start_batch):
    """The model's batches of one phase, from batch `start_batch` on (at
    the stream position the restored checkpoint recorded, when it is of
    this phase)."""
    data, distribution = state.data, state.distribution
    position = data.restored_position(
        state.restored, phase, start_batch, state.step, state.manager.restored_path
    )
    dataset = model_batches(data.phase_dataset(phase, start_batch, position), state.objective)
    if data.readers > 1:
        return _per_worker(distribution, dataset, state.run.config.batch_size)
    if distribution.num_workers > 1 and not state.run.config.data_service:
        # (A served dataset is already each trainer's own: docs/scale-out.md.)
        # Every worker reads the same records and keeps its share of each
        # global batch: the run (and its data position on resume) is that of
        # a single process. (AUTO would give workers different files.)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        dataset = dataset.with_options(options)
    return dataset


def _per_worker(distribution, dataset, global_batch):
    """This worker's stream (its share of every global batch) as its input
    pipeline: `distribute_datasets_from_function` feeds each worker its own
    dataset, batched per replica. (A dataset given to `fit` with
    auto-sharding OFF is rebatched to global_batch / num_replicas instead:
    each step would train on half of a worker's batch.)"""

    def dataset_fn(context):
        pipelines = (context.num_input_pipelines, context.input_pipeline_id)
        if pipelines != (distribution.num_workers, distribution.worker_index):
            raise PretrainError(
                f"TensorFlow made this worker input pipeline {pipelines[1]} of {pipelines[0]}; "
                f"it reads the shards of worker {distribution.worker_index} of "
                f"{distribution.num_workers}."
            )
        per_replica = context.get_per_replica_batch_size(global_batch)
        if per_replica == global_batch // distribution.num_workers:
            return dataset
        return dataset.rebatch(per_replica)  # several replicas on this worker

    return distribution.strategy.distribute_datasets_from_function(dataset_fn)


def _phase_callbacks(state, phase, bounds, tensorboard):
    """[NaN guard, checkpoints, TensorBoard, throughput] of one phase."""
    run, config, step = state.run, state.run.config, state.step
    phase_start = int(bounds[phase])

    def state_fn(global_step):
        return {
            "phase": phase,
            "seq_len": config.seq_len[phase],
            "data_position": global_step - phase_start,
            **state.data.position(phase, global_step - phase_start),
        }

    on_save = None
    if state.data.readers > 1:

        def on_save(global_step):
            state.data.record_position(phase, global_step - phase_start, global_step)

    tensorboard.start_at(step)
    return [
        # Before the checkpoint callback: a NaN loss raises before a
        # checkpoint of that state is written.
        NonFiniteGuard(
            step,
            kept=f"The last good checkpoint in {state.manager.directory} was kept; "
            f"{run.output / 'preset'} was not updated.",
        ),
        PeriodicCheckpoint(
            state.manager,
            config.checkpoint_every,
            start_step=step,
            state_fn=state_fn,
            enabled=run.chief,
            on_save=on_save,
        ),
        tensorboard,
        Throughput(config.batch_size),
    ]


def _metrics(state, initial, final, resumed_from, eval_set):
    """The run's results (`METRICS_FILE`)."""
    config, data = state.run.config, state.data
    measured = [m for m in state.meters if m.seconds > 0]
    examples_per_second = (
        sum(m.steps for m in measured) * config.batch_size / sum(m.seconds for m in measured)
        if measured
        else None
    )
    return {
        **{f"initial_{k}": v for k, v in initial.items()},
        **{f"final_{k}": v for k, v in final.items()},
        "steps": state.step,
        "resumed_from_step": resumed_from,
        "examples_per_second": examples_per_second,
        "train_seconds": state.seconds,
        "seq_len": list(config.seq_len),
        "batch_size": config.batch_size,
        "objective": state.objective,
        "mask_rate": config.mask_rate,
        "vocabulary_size": data.tokenizer.vocabulary_size,
        "parameters": int(state.backbone.count_params()),
        **data.facts(),
        "eval_examples": len(eval_set.examples),
        "truncated": {"eval": eval_set.truncated},
        "num_replicas": state.distribution.num_replicas,
        "backend": keras.backend.backend(),
    }
