"""The teacher and the student of a distillation run: which teacher (a
given one, the fine-tune recipe's classifier, or one fine-tuned here), the
student's architecture or preset, and how the student starts (from the
teacher's embeddings and layers, or at random)."""

import logging
from pathlib import Path

from bertzoo.convert.loader import resolve_preset
from bertzoo.distill.init import init_embeddings_from_teacher
from bertzoo.distill.layer_map import DistillationError
from bertzoo.io.jsonfile import load_json
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.tasks import read_task_section
from bertzoo.training.finetune import FinetuneConfig, default_init, run_finetuning

logger = logging.getLogger(__name__)

# Where the fine-tune recipe leaves its best classifier: the default
# tinybert-task teacher.
DEFAULT_TASK_TEACHER = Path("runs/finetune/best")


def check(condition, message):
    """A `DistillationError` with `message` unless `condition` holds."""
    if not condition:
        raise DistillationError(message)


def run_dtype(config):
    """Model keyword for the run's precision (float32 is the default)."""
    return {"dtype": config.precision} if config.precision != "float32" else {}


def needs_own_teacher(config):
    """Whether `resolve_teacher` fine-tunes a teacher into output/teacher."""
    return (
        config.teacher is None
        and config.method == "tinybert-task"
        and config.train is None
        and read_task_section(DEFAULT_TASK_TEACHER).get("kind") != "classification"
    )


def resolve_teacher(config):
    """The teacher directory/preset. tinybert-task: `--teacher`, else the
    fine-tune recipe's classifier (runs/finetune/best), else a classifier
    fine-tuned here on the built-in sentiment set (printed). Other methods:
    `--teacher`, else the MiniLM checkpoint (or the pre-training recipe's
    output)."""
    if config.teacher is not None:
        return str(config.teacher)
    if config.method != "tinybert-task":
        return default_init()
    if (
        read_task_section(DEFAULT_TASK_TEACHER).get("kind") == "classification"
        and config.train is None
    ):
        logger.info("Teacher: the fine-tune recipe's classifier %s.", DEFAULT_TASK_TEACHER)
        return str(DEFAULT_TASK_TEACHER)
    check(
        config.train is None,
        "--method tinybert-task with your own --train files needs --teacher: a "
        "classifier fine-tuned on that task (recipes/finetune.py --output DIR; pass DIR/best).",
    )
    out = Path(config.output) / "teacher"
    logger.warning(
        "No fine-tuned teacher found at %s; fine-tuning one on the built-in sentiment "
        "set into %s first.",
        DEFAULT_TASK_TEACHER,
        out,
    )
    run_finetuning(
        FinetuneConfig(
            task="classification", output=str(out), seed=config.seed, verbose=config.verbose
        )
    )
    return str(out / "best")


def default_student_config(teacher):
    """A TinyBERT-4-style student for any teacher: 4 layers (fewer when the
    teacher has fewer), the teacher's heads, width 5/16 of the teacher's
    rounded down to a multiple of the heads (of twice the heads with rotary
    positions, which rotate pairs of features), feed-forward 4x the width
    (a gated one: the teacher's ratio, ModernBERT's 1.5x); the teacher's
    segment rows (one for RoBERTa-family teachers), positions and
    `position_padding_id`, and its architecture switches (ModernBERT's
    pre-norm, biases, gating, rotary bases, local window and global-layer
    period)."""
    heads = teacher.num_heads
    step = 2 * heads if teacher.rope_theta is not None else heads
    width = max(step, int(teacher.hidden_dim * 5 / 16) // step * step)
    intermediate = 4 * width
    if teacher.gated_feedforward:
        intermediate = max(1, round(width * teacher.intermediate_dim / teacher.hidden_dim))
    return {
        "vocabulary_size": teacher.vocabulary_size,
        "num_layers": min(4, teacher.num_layers),
        "num_heads": heads,
        "hidden_dim": width,
        "intermediate_dim": intermediate,
        "num_segments": teacher.num_segments,
        # RoBERTa's positions count from after the padding id: the student's
        # position rows mean what the teacher's do.
        "position_padding_id": teacher.position_padding_id,
        "use_pooler": teacher.use_pooler,
        "activation": teacher.activation,
        "max_sequence_length": teacher.max_sequence_length,
        "layer_norm_epsilon": teacher.layer_norm_epsilon,
        **{name: getattr(teacher, name) for name in STUDENT_SWITCHES},
    }


# The architecture switches a default student keeps from its teacher.
STUDENT_SWITCHES = (
    "norm_first",
    "use_bias",
    "gated_feedforward",
    "rope_theta",
    "local_rope_theta",
    "local_attention_window",
    "global_attention_every",
)


def build_student(config, teacher):
    """The student backbone and whether it came with weights. `--student`
    is a preset name or a JSON file (architectures: they take the teacher's
    vocabulary size), or a preset directory with weights (its vocabulary must
    be the teacher's)."""
    dtype = run_dtype(config)
    spec = config.student
    if spec is None:
        if config.method == "distilbert":
            arch = {
                **teacher.get_config(),
                "num_layers": max(1, teacher.num_layers // 2),
                "num_groups": None,
            }
            arch = {k: arch[k] for k in BertBackbone.architecture_keys() if k in arch}
        else:
            arch = default_student_config(teacher)
        return BertBackbone(**arch, **dtype), False
    path = Path(spec)
    if path.suffix == ".json" and path.is_file():
        try:
            document = load_json(path)
        except ValueError as e:
            raise DistillationError(f"{path}: not valid JSON: {e}") from e
        arch = document.get("backbone", document) if isinstance(document, dict) else None
        check(isinstance(arch, dict), f"{path}: expected a JSON object of backbone settings.")
        arch = {**arch, "vocabulary_size": teacher.vocabulary_size}
        try:
            return BertBackbone(**arch, **dtype), False
        except (TypeError, ValueError) as e:
            raise DistillationError(f"{path}: invalid student config: {e}") from e
    data, directory, _ = resolve_preset(spec)
    if directory is None:  # a built-in architecture preset
        arch = {**data["backbone"], "vocabulary_size": teacher.vocabulary_size}
        if data["backbone"]["vocabulary_size"] != teacher.vocabulary_size:
            logger.info(
                "Student %s: vocabulary size set to the teacher's %d.",
                spec,
                teacher.vocabulary_size,
            )
        return BertBackbone(**arch, **dtype), False
    student = BertBackbone.from_preset(spec, **dtype)
    if student.vocabulary_size != teacher.vocabulary_size:
        raise DistillationError(
            f"The student {spec} has a {student.vocabulary_size}-token vocabulary and the teacher "
            f"{teacher.vocabulary_size}: distillation needs one vocabulary. Use an architecture "
            "preset or JSON config (it takes the teacher's vocabulary), or a student made with "
            "the teacher's tokenizer."
        )
    return student, True


COPY_LAYERS = "teacher embeddings and layers (DistilBERT)"


def init_student(config, teacher, student, has_weights):
    """Starts a student without weights from the teacher (unless
    `--no-init-from-teacher`) and says how, for the report. distilbert with a
    student of the teacher's width: embeddings and every other layer (copied
    in `bertzoo.training.distill_corpus`, with the MLM head). Otherwise: the embeddings projected
    onto the teacher's principal directions (`init_embeddings_from_teacher`):
    without them, tokens absent from the distillation data keep random
    embeddings, and a task student fails on words first met at test time.
    Where the teacher's embeddings do not fit (a wider student, more
    positions), the student starts at random and a notice says why."""
    if has_weights:
        return "the student preset's weights"
    if not config.init_from_teacher:
        return "random"
    if config.method == "distilbert" and student.hidden_dim == teacher.hidden_dim:
        return COPY_LAYERS
    try:
        basis = init_embeddings_from_teacher(student, teacher)
    except (
        DistillationError
    ) as e:  # e.g. a student wider than an ALBERT teacher's 128-wide embeddings
        logger.warning("The student starts from random embeddings. %s", e)
        return "random (the teacher's embeddings do not fit)"
    how = (
        "copied"
        if basis.shape[0] == basis.shape[1]
        else f"projected {basis.shape[0]} -> {basis.shape[1]} (PCA)"
    )
    logger.info("Student embeddings initialised from the teacher's, %s.", how)
    return f"teacher embeddings, {how}"
