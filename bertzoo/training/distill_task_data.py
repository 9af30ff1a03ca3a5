"""The data of TinyBERT task distillation (`bertzoo.training.distill`): the
teacher's fine-tuning record, the task files read at a sequence length from
the data, a held-out slice for early stopping, TinyBERT's augmentation, and
the teacher's own quality on the validation split."""

import dataclasses
import logging
from pathlib import Path

import keras

from bertzoo import tasks as task_kinds
from bertzoo.data.readers import LabelSet
from bertzoo.distill.augment import WORD, augment_texts, mlm_candidates, neighbour_table
from bertzoo.distill.evaluate import accuracy
from bertzoo.distill.layer_map import DistillationError
from bertzoo.errors import BertzooError
from bertzoo.io.jsonfile import load_json
from bertzoo.io.manifest import sha256_file
from bertzoo.preprocessing import BertPreprocessor, packed_lengths, segment_inputs
from bertzoo.tasks.sentences import text_features
from bertzoo.training.finetune import (
    FinetuneConfig,
    load_split,
)
from bertzoo.training.kind_settings import kind_settings, with_kind_settings
from bertzoo.training.runs import (
    COVERAGE,
    METRICS_FILE,
    covering_length,
    log_truncation,
    truncation,
)
from bertzoo.training.students import check

logger = logging.getLogger("bertzoo.training.distill")  # the run's log lines


def teacher_record(teacher_path):
    """What the teacher's own fine-tuning run recorded, when the teacher is
    a fine-tune recipe output (DIR/best): its sequence length, its
    validation file and its score there (DIR/metrics.json). None otherwise."""
    directory = Path(teacher_path)
    settings_file = directory / "finetune.json"
    if not settings_file.is_file():
        return None
    try:
        settings = load_json(settings_file)
        run = settings.get("config", {})
        length = settings.get("serving", {}).get("sequence_length") or run["sequence_length"]
        record = {
            "sequence_length": int(length),
            "init": settings.get("init"),
            "epoch": settings.get("epoch"),
        }
    except (ValueError, KeyError, TypeError) as e:
        raise DistillationError(f"{settings_file} cannot be read: {e}") from None
    metrics_file = directory.parent / METRICS_FILE
    if metrics_file.is_file():
        try:
            metrics = load_json(metrics_file)
            same = Path(metrics.get("preset", "")).resolve() == directory.resolve()
            dataset = metrics.get("dataset")
            if same and isinstance(metrics.get("validation"), dict):
                record["metric"] = metrics["main_metric"]
                record["value"] = float(metrics["validation"][metrics["main_metric"]])
                record["metrics_file"] = str(metrics_file)
                if isinstance(dataset, dict):
                    record["validation"] = dataset.get("validation")
        except (ValueError, KeyError, TypeError) as e:
            logger.warning(
                "%s cannot be read (%s); the teacher is measured here only.", metrics_file, e
            )
    return record


def _same_file(a, b):
    """Whether two paths name files with the same bytes."""
    try:
        a, b = Path(a), Path(b)
        return (
            a.is_file()
            and b.is_file()
            and (
                a.resolve() == b.resolve()
                # Compared as streams (files of any size in bounded memory).
                or (a.stat().st_size == b.stat().st_size and sha256_file(a) == sha256_file(b))
            )
        )
    except OSError:
        return False


def _holdout(n, fraction, seed):
    """Indices of the training texts kept out of distillation for early
    stopping: a seeded `fraction` of them (none below 10 texts)."""
    import numpy as np

    count = int(round(n * fraction))
    if count < 1 or n - count < 10:
        return np.zeros(0, "int64")
    return np.sort(np.random.default_rng(seed + 101).permutation(n)[:count])


def _mlm_source(teacher_path, record):
    """A preset with a trained masked-LM head for augmentation: the model
    the teacher was fine-tuned from (its encoder is the one its head was
    trained with, as TinyBERT augments with the pre-trained BERT), else the
    teacher itself; None when neither has one."""
    from bertzoo.models.fill_mask import NoMaskedLMHead, masked_lm_model

    for candidate in ((record or {}).get("init"), teacher_path):
        if not candidate:
            continue
        try:
            return masked_lm_model(candidate), candidate
        except (NoMaskedLMHead, BertzooError, OSError, ValueError):
            continue
    return None, None


def _augment(context, record, texts, exclude):
    """TinyBERT's augmentation of `texts` (`config.augment` variants each):
    replacements from a masked-LM head (the teacher's, or its fine-tuning
    start's) where `augment_method` allows and one exists, else nearest
    neighbours in the teacher's token-embedding table. Returns (variants,
    dropped, {"method", "source"})."""
    config, teacher, teacher_path = context.config, context.teacher, context.teacher_path
    method = config.augment_method
    mlm, source = (None, None)
    if method in ("auto", "mlm"):
        mlm, source = _mlm_source(teacher_path, record)
        check(
            mlm is not None or method == "auto",
            f"--augment-method mlm needs a masked-LM head: neither {teacher_path} nor the model "
            "it was fine-tuned from has one. Use --augment-method embedding (or auto).",
        )
    if mlm is not None:
        candidates = mlm_candidates(mlm[0], mlm[1], texts)
        used = {"method": "mlm", "source": str(source)}
    else:
        words = {w for t in texts for w in WORD.findall(t.lower())}
        neighbours = neighbour_table(
            context.tokenizer,
            keras.ops.convert_to_numpy(teacher.backbone.token_embedding.embeddings),
            words,
        )
        candidates = [[neighbours.get(w) for w in WORD.findall(t.lower())] for t in texts]
        used = {"method": "embedding", "source": "the teacher's token embeddings"}
    extra, dropped = augment_texts(
        texts, candidates, config.augment, exclude=exclude, seed=config.seed
    )
    return extra, dropped, used


def task_data(context, record):
    """Reads the task files; picks the sequence length (given, or from the
    data: 99% of the training texts whole, at most the teacher's training
    length or positions); holds out a slice of the training texts for early
    stopping; augments the rest. Returns a dict of what the run needs."""
    config, tokenizer = context.config, context.tokenizer
    data = _read_task(context, record)
    train, validation, length = data["train"], data["validation"], data["sequence_length"]
    texts = [e.texts[0] for e in train.examples]
    held = _holdout(len(texts), config.holdout_fraction, config.seed)
    held_set = set(int(i) for i in held)
    kept = [t for i, t in enumerate(texts) if i not in held_set]
    pool, dropped, augmentation = list(kept), 0, {"method": "none", "source": None}
    if config.augment:
        extra, dropped, augmentation = _augment(
            context,
            record,
            kept,
            exclude=[e.texts[0] for e in validation.examples] + [texts[i] for i in held],
        )
        pool += extra
    preprocessor = BertPreprocessor(tokenizer, length, **segment_inputs(data["segments"]))
    lengths = data["lengths"]
    lengths["distillation"] = packed_lengths(tokenizer, [(t,) for t in pool])
    shares = truncation(lengths, length)
    log_truncation(shares, length, data["chosen_by"])
    features = lambda rows: text_features(preprocessor, rows)  # noqa: E731
    logger.info(
        "Distillation set: %d training texts (%d more held out for early stopping) + %d "
        "augmented (%s; %d variants equal to held-out texts dropped).",
        len(kept),
        len(held),
        len(pool) - len(kept),
        augmentation["method"],
        dropped,
    )
    val_features = features([e.texts for e in validation.examples])
    held_features = features([(texts[i],) for i in held]) if len(held) else None
    return {
        **{k: data[k] for k in ("train_path", "validation_path", "ft", "segments", "chosen_by")},
        "sequence_length": length,
        "truncated": shares,
        "pool": pool,
        "pool_features": features([(t,) for t in pool]),
        "validation": validation,
        "validation_features": val_features,
        "held_features": held_features,
        "held_targets": train.targets[held] if len(held) else None,
        "held_count": int(len(held)),
        "original_count": len(kept),
        "augmentation": {**augmentation, "variants": len(pool) - len(kept), "dropped": dropped},
    }


def _read_task(context, record):
    """The task files read at the teacher's length cap, with the sequence
    length of the run (given, or from the data) and how it was chosen."""
    config, teacher, tokenizer = context.config, context.teacher, context.tokenizer
    ft = FinetuneConfig(
        task="classification",
        text_columns=config.text_columns,
        label_column=config.label_column,
        train=config.train,
        validation=config.validation,
    )
    train_path, validation_path = config.train, config.validation
    if train_path is None:
        kind = task_kinds.get("classification")
        data_dir = Path(config.output) / "data"
        train_path, validation_path = kind.write_builtin(data_dir, config.seed)
        ft = dataclasses.replace(ft, train=str(train_path), validation=str(validation_path))
        ft = with_kind_settings(ft, kind.builtin_settings(kind_settings(ft, kind)))
    segments = teacher.backbone.num_segments  # packed by bertzoo.preprocessing.segment_inputs
    label_set = LabelSet(teacher.label_names) if teacher.label_names else None
    positions = teacher.backbone.max_sequence_length
    cap = min(positions, record["sequence_length"]) if record else positions
    train, label_set = load_split(ft, train_path, tokenizer, cap, segments, label_set)
    check(
        len(label_set) == teacher.num_classes,
        f"{train_path} has {len(label_set)} labels; the teacher classifies into {teacher.num_classes}.",
    )
    check(
        all(len(e.texts) == 1 for e in train.examples),
        "tinybert-task augmentation handles single texts, not pairs.",
    )
    validation, _ = load_split(ft, validation_path, tokenizer, cap, segments, label_set)
    kind = task_kinds.get("classification")
    lengths = {
        "train": kind.packed_lengths(train, tokenizer),
        "validation": kind.packed_lengths(validation, tokenizer),
    }
    if config.sequence_length is not None:
        length, chosen_by = config.sequence_length, "--sequence-length"
    else:
        length = covering_length(lengths["train"], cap)
        limit = "the teacher's training length" if record and cap < positions else "its positions"
        chosen_by = f"from the data: keeps {COVERAGE:.0%} of the training texts whole, at most {limit} ({cap})"
    return {
        "train_path": train_path,
        "validation_path": validation_path,
        "ft": ft,
        "segments": segments,
        "train": train,
        "validation": validation,
        "lengths": lengths,
        "sequence_length": length,
        "chosen_by": chosen_by,
    }


def teacher_quality(context, data, record):
    """The teacher's accuracy on --validation at its own settings (its
    fine-tuning run's sequence length), and what that run recorded. When
    the run's validation file is this one, the two must agree."""
    teacher, tokenizer = context.teacher, context.tokenizer
    own_length = record["sequence_length"] if record else data["sequence_length"]
    own_length = min(own_length, teacher.backbone.max_sequence_length)
    validation, _ = load_split(
        data["ft"],
        data["validation_path"],
        tokenizer,
        own_length,
        data["segments"],
        LabelSet(teacher.label_names) if teacher.label_names else None,
    )
    measured = accuracy(teacher, validation.features, validation.targets, 64)
    out = {
        "accuracy": measured,
        "sequence_length": own_length,
        "settings": "its fine-tuning run's sequence length"
        if record
        else "the distillation's sequence length (no fine-tuning record found)",
    }
    if record and "value" in record:
        out["recorded"] = {
            "accuracy": record["value"],
            "file": record["metrics_file"],
            "validation": record.get("validation"),
        }
        if record.get("validation") and _same_file(record["validation"], data["validation_path"]):
            out["recorded"]["same_validation_file"] = True
            if abs(measured - record["value"]) > 1e-9:
                logger.warning(
                    "The teacher scores %.4f here but %.4f in %s on the same file: the teacher "
                    "preset changed since that run.",
                    measured,
                    record["value"],
                    record["metrics_file"],
                )
        else:
            out["recorded"]["same_validation_file"] = False
    return out
