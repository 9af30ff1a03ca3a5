"""Pre-training's model stage (`bertzoo.training.pretrain`): the backbone
(a preset's architecture or checkpoint), the objective, the pre-training
model (BERT's heads or ELECTRA's generator and discriminator), compiled
with its optimizer; evaluation and the preset published at the end."""

import logging
from pathlib import Path

from bertzoo import presets as preset_lib
from bertzoo.io.publish import publish_directory
from bertzoo.models.backbone import BertBackbone
from bertzoo.models.electra import ElectraPretrainer
from bertzoo.models.pretrainer import MLM_ONLY_FAMILIES, BertPretrainer
from bertzoo.training.optimizers import make_optimizer
from bertzoo.training.pretrain_config import (
    PretrainError,
    check_positions,
    is_electra,
    preset_document,
)

logger = logging.getLogger("bertzoo.training.pretrain")  # the run's log lines


def build_backbone(config, vocabulary_size, preset=None):
    """The architecture of `preset` (default: the run's; its weights when it
    is a directory that has them) with the vocabulary's size and the run's
    precision. For objective electra a built-in architecture is built
    without its pooler (ELECTRA has none)."""
    preset = config.preset if preset is None else preset
    document, directory, kind = preset_document(preset)
    overrides = {"dtype": config.precision}
    if config.dropout is not None:
        overrides["dropout"] = config.dropout
    # The run's preset decides the checks (it is `preset` unless this builds the generator).
    run_document = document if preset == config.preset else preset_document(config.preset)[0]
    check_positions(config, run_document)
    electra = is_electra(config, run_document)
    if directory is not None and not (
        kind == "bertzoo" and not (Path(directory) / preset_lib.WEIGHTS_FILE).exists()
    ):
        # Continued pre-training of a checkpoint (a config.json without
        # weights is an architecture, like a built-in preset).
        backbone = BertBackbone.from_preset(preset, **overrides)
        if backbone.vocabulary_size != vocabulary_size:
            raise PretrainError(
                f"The vocabulary has {vocabulary_size} tokens but {preset} has "
                f"{backbone.vocabulary_size} token embeddings; continue pre-training a checkpoint "
                "with its own vocabulary."
            )
        if electra and backbone.use_pooler:
            raise PretrainError(
                f"{preset} has a pooler; objective electra trains a discriminator without one. "
                "Start from an ELECTRA checkpoint or a built-in architecture."
            )
        return backbone
    arch = {**document["backbone"], **overrides, "vocabulary_size": vocabulary_size}
    if electra:
        arch["use_pooler"] = False
    backbone = BertBackbone(**arch)
    backbone.preset_info = {
        k: document[k] for k in ("description", "tokenizer", "metadata") if k in document
    }
    if electra:
        metadata = backbone.preset_info.setdefault("metadata", {})
        backbone.preset_info["metadata"] = {**metadata, "model_type": "electra"}
    return backbone


def build_generator(config, discriminator):
    """ELECTRA's generator: `--generator` (a preset or directory), else the
    preset directory's `generator/`, else the discriminator scaled by
    `--generator-size`."""
    preset = config.generator
    if preset is None:
        directory = preset_document(config.preset)[1]
        if (
            directory is not None
            and (Path(directory) / preset_lib.GENERATOR_DIR / preset_lib.CONFIG_FILE).is_file()
        ):
            preset = str(Path(directory) / preset_lib.GENERATOR_DIR)
    if preset is None:
        return ElectraPretrainer.generator_for(discriminator, config.generator_size)
    generator = build_backbone(config, discriminator.vocabulary_size, preset=preset)
    generator.preset_info.setdefault("metadata", {})["model_type"] = "electra"
    return generator


def resolve_objective(config, backbone):
    if config.objective != "auto":
        return config.objective
    model_type = backbone.preset_info.get("metadata", {}).get("model_type")
    if model_type == "electra":
        return "electra"
    # RoBERTa-family and ModernBERT-shaped models (and those without a pooler
    # or a second segment row, which a sentence pair's B needs) train masked LM only.
    shape = {
        "backbone": {
            "rope_theta": backbone.rope_theta,
            "gated_feedforward": backbone.gated_feedforward,
        },
        "metadata": {"model_type": model_type},
    }
    if (
        model_type in MLM_ONLY_FAMILIES
        or preset_lib.modernbert_shaped(shape)
        or not backbone.use_pooler
        or backbone.num_segments < 2
    ):
        return "none"
    kind = backbone.preset_info.get("tokenizer", {}).get("kind", "wordpiece")
    # ALBERT-shaped models (factorised or shared) train with SOP.
    if (
        kind == "sentencepiece"
        or backbone.embedding_dim != backbone.hidden_dim
        or backbone.num_groups != backbone.num_layers
    ):
        return "sop"
    return "nsp"


def build_pretrainer(config, backbone, objective):
    """The pre-training model: `ElectraPretrainer` (a generator + the
    backbone as discriminator) for objective electra, else `BertPretrainer`."""
    if objective == "electra":
        generator = build_generator(config, backbone)
        return ElectraPretrainer(
            generator, backbone, rtd_weight=config.rtd_weight, seed=config.seed
        )
    return BertPretrainer(backbone, objective=objective)


def evaluate(model, eval_set):
    result = model.evaluate(eval_set, return_dict=True, verbose=0)
    return {k: float(v) for k, v in result.items()}


def save_preset(config, model, backbone, tokenizer, objective, directory):
    """The trained backbone with its pre-training heads + vocabulary,
    published as one bertzoo preset directory (`bertzoo.io.publish`); for
    ELECTRA the discriminator, with the generator in `generator/`."""
    with publish_directory(directory, "preset") as staging:
        _write_preset(config, model, backbone, tokenizer, objective, staging)
    return directory


def _write_preset(config, model, backbone, tokenizer, objective, directory):
    tokenizer.save_to_preset(directory)
    preset_info = {
        "description": (
            f"Pre-trained by bertzoo's recipe from {config.preset} ({objective} objective, "
            f"{sum(config.steps)} steps, seq_len {'/'.join(map(str, config.seq_len))})."
        ),
        "tokenizer": tokenizer.preset_section(),
        "metadata": {
            k: v
            for k, v in backbone.preset_info.get("metadata", {}).items()
            if k in ("paper", "license", "model_type")
        },
    }
    # Presets record no dtype policy (precision is a setting of each run);
    # mixed-precision variables are float32 anyway.
    if objective == "electra":
        model.save_to_preset(directory, tokenizer=tokenizer, preset_info=preset_info)
    else:
        backbone.save_to_preset(
            directory, preset_info=preset_info, head_tensors=model.head_tensors()
        )


def compile_pretrainer(config, vocabulary_size, distribution):
    """(backbone, objective, model): the pre-training model for a vocabulary
    of `vocabulary_size`, compiled with its optimizer in the distribution's
    scope. Steps count batches; the schedule counts weight updates (one per
    `gradient_accumulation_steps` batches)."""
    with distribution.scope():
        backbone = build_backbone(config, vocabulary_size)
        objective = resolve_objective(config, backbone)
        model = build_pretrainer(config, backbone, objective)
        accumulate = config.gradient_accumulation_steps
        total = sum(config.steps)
        warmup = config.warmup_steps if config.warmup_steps is not None else int(0.1 * total)
        optimizer = make_optimizer(
            config.optimizer,
            config.learning_rate,
            total_steps=total // accumulate,
            warmup_steps=warmup // accumulate,
            weight_decay=config.weight_decay,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            loss_scaling=config.precision == "mixed_float16",
        )
        model.compile(
            optimizer=optimizer,
            jit_compile=distribution.resolve_jit_compile(config.jit_compile),
            steps_per_execution=config.steps_per_execution,
        )
    return backbone, objective, model
