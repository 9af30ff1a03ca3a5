"""What the stages of a distillation run (`bertzoo.training.distill`) share:
the run context handed from stage to stage, the stages' optimizer and the
publication of the student."""

import dataclasses
import logging

from bertzoo.distill.distillers import TinyBertDistiller
from bertzoo.io.publish import atomic_directory
from bertzoo.models.tasks import BertClassifier
from bertzoo.training.optimizers import make_optimizer

logger = logging.getLogger("bertzoo.training.distill")  # the run's log lines

REPORT_FILE = "report.json"
STUDENT_DIR = "student"


@dataclasses.dataclass
class Distillation:
    """A distillation run in progress: its lifecycle (`run`, a
    `bertzoo.training.lifecycle.Run`), the teacher, the student's backbone
    and where its layers learn from, and what the stages report."""

    run: object
    distribution: object
    teacher: object  # a BertClassifier (tinybert-task), else a backbone
    teacher_path: str
    student: object  # the student's backbone
    layer_map: object
    tokenizer: object
    student_init: str = None  # how the student started (bertzoo.training.students)
    tensorboard: object = None
    signals: object = None  # the run's StopSignals while it trains (bertzoo.training.preemption)
    stages: dict = dataclasses.field(default_factory=dict)  # per stage: its last metrics

    @property
    def config(self):
        return self.run.config

    @property
    def student_dir(self):
        return self.run.output / STUDENT_DIR


def tinybert_distiller(context, teacher, student):
    """TinyBERT's layer-to-layer distiller of `student` (a backbone or a task
    model) from `teacher`, with the run's layer map and loss weights."""
    config = context.config
    return TinyBertDistiller(
        teacher,
        student,
        layer_map=context.layer_map,
        attention_weight=config.attention_weight,
        hidden_weight=config.hidden_weight,
        embedding_weight=config.embedding_weight,
    )


def stage_optimizer(config, steps):
    return make_optimizer(
        "adamw",
        config.learning_rate,
        total_steps=steps,
        warmup_steps=int(config.warmup_proportion * steps),
    )


def save_student(context, model, sequence_length=None):
    """The student alone (`model`: a classifier for task distillation, else
    the student's backbone), as a preset directory swapped in complete; a
    classifier records `sequence_length`, the length it was distilled at,
    for its preprocessor."""
    config, tokenizer, teacher_path = context.config, context.tokenizer, context.teacher_path
    preset_info = {
        "description": f"Distilled ({config.method}) from {teacher_path} by bertzoo's recipe.",
        "tokenizer": tokenizer.preset_section(),
        "metadata": {"source_checkpoint": f"distilled from {teacher_path}"},
    }
    with atomic_directory(context.student_dir) as staging:
        if isinstance(model, BertClassifier):
            model.save_to_preset(
                staging,
                tokenizer=tokenizer,
                preset_info=preset_info,
                sequence_length=sequence_length,
            )
        else:
            tokenizer.save_to_preset(staging)
            context.student.save_to_preset(staging, preset_info=preset_info)


def running_sums(sums, logs, done):
    """The metrics' sums over a pass so far: `sums` (the steps before this
    fit) plus Keras' `logs`, which are means over this fit's `done` steps."""
    return {k: sums.get(k, 0.0) + float(v) * done for k, v in logs.items()}


def fit_rest(model, dataset, first, total, sums, verbose, callbacks):
    """Trains steps `first` .. `total` of a pass (one Keras epoch; a resumed
    pass starts past 0) and returns the pass's metrics: means over all
    `total` steps, with `sums` those of the steps before `first`."""
    history = {}
    if first < total:
        fit = model.fit(
            dataset,
            epochs=1,
            steps_per_epoch=total - first,
            verbose=verbose,
            callbacks=callbacks,
            shuffle=False,  # the dataset is shuffled (Keras warns at shuffle=True)
        )
        history = {k: float(v[-1]) for k, v in fit.history.items()}
    keys = sorted(set(history) | set(sums))
    return {k: (sums.get(k, 0.0) + history.get(k, 0.0) * (total - first)) / total for k in keys}
