"""Hugging Face names of the task and pre-training head tensors, and their
mapping to the roles of bertzoo's head weights.

Checkpoints keep head tensors in Hugging Face names and layouts (a
backbone's `head_tensors`, `heads.safetensors`); the models hand their head
variables, keyed by role, to the functions here (through the preset loader,
`bertzoo.loader_registry`), and the task models their head layers.
"""

import logging

import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.common import assign_tensors, read_json_object
from bertzoo.io.snapshot import shown_path

logger = logging.getLogger(__name__)

# Hugging Face task-head tensor names per model family (as kept in
# a backbone's `head_tensors` by the converters): the MLM head, the sentence
# head with the objective it was trained for, and tensors that are tied to the
# word embeddings (or duplicate the MLM bias) and so are not loaded.
PRETRAINING_HEADS = {
    "bert": {
        "mlm": {
            "cls.predictions.transform.dense.weight": ("dense_kernel", True),
            "cls.predictions.transform.dense.bias": ("dense_bias", False),
            "cls.predictions.transform.LayerNorm.weight": ("ln_gamma", False),
            "cls.predictions.transform.LayerNorm.bias": ("ln_beta", False),
            "cls.predictions.bias": ("mlm_bias", False),
        },
        "sentence": (
            "nsp",
            {
                "cls.seq_relationship.weight": ("sentence_kernel", True),
                "cls.seq_relationship.bias": ("sentence_bias", False),
            },
        ),
        "tied": ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias"),
    },
    "albert": {
        "mlm": {
            "predictions.dense.weight": ("dense_kernel", True),
            "predictions.dense.bias": ("dense_bias", False),
            "predictions.LayerNorm.weight": ("ln_gamma", False),
            "predictions.LayerNorm.bias": ("ln_beta", False),
            "predictions.bias": ("mlm_bias", False),
        },
        "sentence": (
            "sop",
            {
                "sop_classifier.classifier.weight": ("sentence_kernel", True),
                "sop_classifier.classifier.bias": ("sentence_bias", False),
            },
        ),
        "tied": ("predictions.decoder.weight", "predictions.decoder.bias"),
    },
    "distilbert": {
        "mlm": {
            "vocab_transform.weight": ("dense_kernel", True),
            "vocab_transform.bias": ("dense_bias", False),
            "vocab_layer_norm.weight": ("ln_gamma", False),
            "vocab_layer_norm.bias": ("ln_beta", False),
            "vocab_projector.bias": ("mlm_bias", False),
        },
        "sentence": None,
        "tied": ("vocab_projector.weight",),
    },
    # ELECTRA's generator (ElectraForMaskedLM): Dense(H -> E, gelu) -> LN ->
    # logits tied to the E-wide word table, as BERT's MLM head.
    "electra": {
        "mlm": {
            "generator_predictions.dense.weight": ("dense_kernel", True),
            "generator_predictions.dense.bias": ("dense_bias", False),
            "generator_predictions.LayerNorm.weight": ("ln_gamma", False),
            "generator_predictions.LayerNorm.bias": ("ln_beta", False),
            "generator_lm_head.bias": ("mlm_bias", False),
        },
        "sentence": None,
        "tied": ("generator_lm_head.weight",),
    },
    # RoBERTa, XLM-R and KLUE-RoBERTa (RobertaLMHead): Dense(H -> H, gelu) ->
    # LayerNorm -> logits tied to the word table, plus a bias; no sentence
    # head (no NSP).
    "roberta": {
        "mlm": {
            "lm_head.dense.weight": ("dense_kernel", True),
            "lm_head.dense.bias": ("dense_bias", False),
            "lm_head.layer_norm.weight": ("ln_gamma", False),
            "lm_head.layer_norm.bias": ("ln_beta", False),
            "lm_head.bias": ("mlm_bias", False),
        },
        "sentence": None,
        "tied": ("lm_head.decoder.weight", "lm_head.decoder.bias"),
    },
    # ModernBERT (ModernBertForMaskedLM): Dense(H -> H, no bias) -> GELU ->
    # LayerNorm (no bias) -> logits tied to the token table, plus the
    # decoder's bias. Its task models name their transform "head." too:
    # the head is a masked-LM head only with "decoder.bias" beside it.
    "modernbert": {
        "mlm": {
            "head.dense.weight": ("dense_kernel", True),
            "head.norm.weight": ("ln_gamma", False),
            "decoder.bias": ("mlm_bias", False),
        },
        "sentence": None,
        "tied": ("decoder.weight",),
        "marker": "decoder.bias",
    },
}

# ELECTRA's discriminator head (ElectraForPreTraining): Dense(H -> H,
# hidden_act) then Dense(H -> 1), one replaced/original logit per token.
DISCRIMINATOR_HEAD = {
    "discriminator_predictions.dense.weight": ("dense_kernel", True),
    "discriminator_predictions.dense.bias": ("dense_bias", False),
    "discriminator_predictions.dense_prediction.weight": ("output_kernel", True),
    "discriminator_predictions.dense_prediction.bias": ("output_bias", False),
}


def load_pretraining_heads(tensors, variables, objective, source):
    """Assigns the pre-training head tensors of `tensors` (Hugging Face
    names) to `variables` (role -> Keras variable: dense_kernel, dense_bias,
    ln_gamma, ln_beta, mlm_bias, and with a sentence head sentence_kernel and
    sentence_bias), with name, dtype and shape checks. The sentence head is
    loaded only when the checkpoint's head was trained for `objective`.
    Returns the names loaded."""
    loaded = []
    for spec in PRETRAINING_HEADS.values():
        groups = [spec["mlm"]]
        sentence = spec["sentence"]
        if sentence is not None:
            head_objective, names = sentence
            if head_objective == objective:
                groups.append(names)
            elif any(k in tensors for k in names):
                logger.info(
                    "Not loading the checkpoint's %s head into a %r pretrainer.",
                    head_objective,
                    objective,
                )
        if spec.get("marker") is not None and spec["marker"] not in tensors:
            continue  # e.g. a ModernBERT classifier's "head."
        for group in groups:
            present = [k for k in group if k in tensors]
            if not present:
                continue
            mapping = {k: (variables[v], t) for k, (v, t) in group.items()}
            # Strict within a head: a half-present head is an error.
            assign_tensors(mapping, {k: tensors[k] for k in present}, source)
            loaded.extend(sorted(group))
    if loaded:
        logger.info(
            "Initialised pre-training heads from %s: %s", shown_path(source), ", ".join(loaded)
        )
    return tuple(loaded)


def head_tensors_of(values, groups):
    """`values` (role -> array) as Hugging Face-named float32 arrays, for
    the name -> (role, transposed?) mappings `groups`."""
    tensors = {}
    for group in groups:
        for name, (role, transpose) in group.items():
            value = np.asarray(values[role], "float32")
            tensors[name] = np.ascontiguousarray(value.T) if transpose else value
    return tensors


def pretraining_head_tensors(values, objective, family="bert"):
    """The inverse of `load_pretraining_heads`: `values` (role -> array) as
    Hugging Face-named float32 arrays, `family`'s names for the MLM head
    (BERT's by default; "electra" for a generator), BERT's for NSP,
    ALBERT's for SOP."""
    groups = [PRETRAINING_HEADS[family]["mlm"]]
    if objective != "none":
        groups.append(PRETRAINING_HEADS["bert" if objective == "nsp" else "albert"]["sentence"][1])
    return head_tensors_of(values, groups)


# The Hugging Face prefix of each task kind's head (a Dense layer): BERT
# sequence and token classifiers both name theirs "classifier".
_TASK_HEAD_PREFIXES = {
    "classification": "classifier",
    "tagging": "classifier",
    "qa": "qa_outputs",
}


def _dense_mapping(prefix, dense):
    return {f"{prefix}.weight": (dense.kernel, True), f"{prefix}.bias": (dense.bias, False)}


def _norm_mapping(prefix, norm):
    mapping = {f"{prefix}.weight": (norm.gamma, False)}
    if norm.beta is not None:
        mapping[f"{prefix}.bias"] = (norm.beta, False)
    return mapping


def task_head_mapping(kind, tensors, dense, hidden=None, norm=None):
    """Hugging Face tensor name -> (Keras variable, transposed?) for the task
    head of `kind` ("classification", "tagging" or "qa"), whose output layer
    is the Dense layer `dense`; empty when `tensors` holds no such head.
    `hidden`: the Dense layer before it in ELECTRA's and RoBERTa's
    classification head (`classifier.dense` -> `classifier.out_proj`), or
    with `norm` (a LayerNormalization) ModernBERT's transform, for every
    kind (`head.dense` -> `head.norm` -> `classifier`)."""
    if norm is not None:
        if "classifier.weight" not in tensors or "head.norm.weight" not in tensors:
            return {}
        mapping = _dense_mapping("head.dense", hidden)
        if hidden.bias is None:
            del mapping["head.dense.bias"]
        return {
            **mapping,
            **_norm_mapping("head.norm", norm),
            **_dense_mapping("classifier", dense),
        }
    prefix = _TASK_HEAD_PREFIXES[kind]
    if hidden is not None:
        if f"{prefix}.out_proj.weight" not in tensors:
            return {}
        return {
            **_dense_mapping(f"{prefix}.dense", hidden),
            **_dense_mapping(f"{prefix}.out_proj", dense),
        }
    if f"{prefix}.weight" not in tensors:
        return {}
    return _dense_mapping(prefix, dense)


# The masked-LM head tensors of every family (BERT, ALBERT, DistilBERT,
# ELECTRA generators).
_MLM_NAMES = frozenset(name for spec in PRETRAINING_HEADS.values() for name in spec["mlm"])


def mlm_head_names():
    """The names of the masked-LM head tensors of every family."""
    return _MLM_NAMES


def load_discriminator_head(tensors, variables, source):
    """Assigns ELECTRA's discriminator head (`discriminator_predictions.*`)
    from `tensors` to `variables` (role -> Keras variable: dense_kernel,
    dense_bias, output_kernel, output_bias), with name, dtype and shape
    checks; returns the names loaded (none when `tensors` holds no such
    head)."""
    present = [k for k in DISCRIMINATOR_HEAD if k in tensors]
    if not present:
        return ()
    mapping = {k: (variables[role], t) for k, (role, t) in DISCRIMINATOR_HEAD.items()}
    assign_tensors(mapping, {k: tensors[k] for k in present}, source)
    return tuple(sorted(DISCRIMINATOR_HEAD))


def discriminator_head_tensors(values):
    """ELECTRA's discriminator head `values` (role -> array) as Hugging
    Face-named float32 arrays."""
    return head_tensors_of(values, [DISCRIMINATOR_HEAD])


# === Task heads of Hugging Face checkpoints ===

# The Hugging Face architecture suffix of each task kind's model class.
_TASK_ARCHITECTURES = {
    "classification": "ForSequenceClassification",
    "tagging": "ForTokenClassification",
    "qa": "ForQuestionAnswering",
}


def hf_checkpoint_config(preset):
    """The `config.json` of a Hugging Face checkpoint directory, else None."""
    try:
        kind, directory = preset_lib.classify(preset)
    except preset_lib.PresetError:
        return None
    if kind != "hf":
        return None
    return read_json_object(directory / preset_lib.CONFIG_FILE)


def hf_num_classes(preset):
    """The class count of an HF sequence-classification checkpoint, if any."""
    config = hf_checkpoint_config(preset) or {}
    architectures = config.get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        return None
    if "id2label" in config:
        return len(config["id2label"])
    return config.get("num_labels")


def load_hf_task_head(model, tensors, source):
    """Loads the task head of the Hugging Face checkpoint `source` (its
    head `tensors`) into the task model `model`, when the checkpoint's
    recorded architecture is `model`'s task and the shapes fit; returns
    whether it did. `model.hf_head_layers()` names the head's layers:
    `(kind, output Dense, hidden Dense or None, LayerNorm or None)`, or
    None for a head with no Hugging Face counterpart."""
    layers = model.hf_head_layers()
    if layers is None:
        return False
    kind, dense, hidden, norm = layers
    # BERT sequence and token classifiers both name their head
    # "classifier.": the recorded architecture says which it is.
    architectures = (hf_checkpoint_config(source) or {}).get("architectures") or []
    wanted = _TASK_ARCHITECTURES[kind]
    if architectures and not any(a.endswith(wanted) for a in architectures):
        logger.info(
            "%s is a %s checkpoint: its task head is not loaded into a %s.",
            shown_path(source),
            ", ".join(architectures),
            type(model).__name__,
        )
        return False
    mapping = task_head_mapping(kind, tensors, dense, hidden=hidden, norm=norm)
    if not mapping:
        return False
    shapes_fit = all(
        tuple(np.shape(tensors[name])[::-1] if t else np.shape(tensors[name])) == tuple(v.shape)
        for name, (v, t) in mapping.items()
    )
    if not shapes_fit:
        logger.warning(
            "Not loading the task head of %s: its shape does not fit this %s; the "
            "head starts from the initialiser.",
            shown_path(source),
            type(model).__name__,
        )
        return False
    assign_tensors(mapping, {k: tensors[k] for k in mapping}, source)
    logger.info("Loaded the task head of %s: %s", shown_path(source), ", ".join(sorted(mapping)))
    return True
