"""google-research/electra checkpoints (a checkpoint + `vocab.txt`, no
model config; the same layout in KoELECTRA's and Chinese-ELECTRA's TF1
checkpoints). The discriminator is BERT's encoder under `electra/`, without
pooler; the generator, a narrower one under `generator/`, reads the
discriminator's embedding tables and their LayerNorm (`electra/embeddings`)
through its own projection, unless it was trained with
`untied_generator_embeddings` (then it has `generator/embeddings/...`,
H_gen wide, and no projection).

    electra/embeddings/{word,position,token_type}_embeddings, LayerNorm/...
    electra/embeddings_project/{kernel,bias}      (E -> H, when E != H)
    electra/encoder/layer_{i}/...                 (BERT's block names)
    generator/embeddings_project/{kernel,bias}    (E -> H_gen, when E != H_gen)
    generator/encoder/layer_{i}/...
    discriminator_predictions/dense/{kernel,bias}     (H -> H, hidden_act)
    discriminator_predictions/dense_1/{kernel,bias}   (H -> 1)
    generator_predictions/dense/{kernel,bias}         (H_gen -> E, hidden_act)
    generator_predictions/LayerNorm/{gamma,beta}
    generator_predictions/output_bias                 (V; logits tied to
                                                       the word embeddings)

A checkpoint of a generator tied to the discriminator (`untied_generator`
off) has `generator_predictions/...` on `electra/` alone.

The archives ship no model config: the sizes are read from the tensor
shapes and the heads follow the reference rule max(1, H // 64)
(util/training_utils.py `get_bert_config`, run_pretraining.py
`get_generator_config`), unless a config file says otherwise (a
`bert_config.json`-style or Hugging Face `config.json`, or the pre-training
`--hparams` JSON with its `model_hparam_overrides` and `do_lower_case`; a
`*generator*config*.json` beside the checkpoint describes the generator).
ELECTRA's "gelu" is the exact erf form (bertzoo "gelu").
"""

import re
from pathlib import Path

from bertzoo.convert.common import CheckpointError, read_json_object
from bertzoo.convert.google.files import pick_file
from bertzoo.convert.google.spec import (
    GoogleCheckpoint,
    GoogleFamily,
    backbone_arguments,
    bert_block_names,
)

SCOPE = "electra"
# The generator's encoder scope and its head's.
GENERATOR_SCOPE = "generator"
GENERATOR_HEAD_SCOPES = ("generator_predictions/",)
_GENERATOR_CONFIG_FILES = ("*generator*config*.json",)
# Keys of ELECTRA's pre-training hparams JSON (configure_pretraining.py)
# that a model config never has.
_HPARAMS_KEYS = ("model_size", "model_hparam_overrides", "generator_hidden_size")
# A BERT-style encoder's layers, under any scope.
_LAYER_NAME = re.compile(r"^(?P<scope>[^/]+)/encoder/layer_(?P<index>\d+)/")


# What the reference code's generator takes from the discriminator's
# BertConfig (run_pretraining.py get_generator_config copies it and sets
# these from its own sizes).
_GENERATOR_SIZE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "embedding_size",
)


def electra_model_keys(config, source="config"):
    """The `BertConfig` keys of an ELECTRA config file: a `bert_config.json`-
    style or Hugging Face `config.json` as it is; ELECTRA's pre-training
    hparams JSON (configure_pretraining.py: `model_size`,
    `model_hparam_overrides`, ...) as its `model_hparam_overrides` with its
    `vocab_size` and `embedding_size`. Null values are left out."""
    if any(k in config for k in _HPARAMS_KEYS):
        overrides = config.get("model_hparam_overrides") or {}
        if not isinstance(overrides, dict):
            raise CheckpointError(f"{source}: model_hparam_overrides must be a JSON object.")
        keys = {k: config[k] for k in ("vocab_size", "embedding_size") if k in config}
        keys.update(overrides)
    else:
        keys = dict(config)
    return {k: v for k, v in keys.items() if v is not None}


def electra_config(shapes, scope="electra", embeddings_scope=None, keys=None, source="checkpoint"):
    """The `BertConfig` keys of the ELECTRA encoder under `scope` ("electra",
    the discriminator, or "generator") for `google_config_to_backbone`.

    The released checkpoints come without a model config, so the sizes are
    read from the tensor shapes: vocabulary and embedding width from
    `<embeddings_scope>/embeddings/word_embeddings`, positions and segments
    from their tables, hidden and feed-forward widths from layer 0, the
    layers counted. Heads leave no trace in the shapes: the reference rule
    max(1, H // 64) (training_utils.get_bert_config,
    run_pretraining.get_generator_config). `keys` (`electra_model_keys` of
    a config file) override all of these.
    """
    embeddings_scope = embeddings_scope or scope

    def shape(name):
        if name not in shapes:
            raise CheckpointError(
                f"{source} has no {name!r}: not a complete ELECTRA checkpoint (the sizes "
                f"of its {scope!r} encoder are read from the tensor shapes)."
            )
        return tuple(int(d) for d in shapes[name])

    layers = sorted(
        {int(m["index"]) for m in map(_LAYER_NAME.match, shapes) if m and m["scope"] == scope}
    )
    if layers != list(range(len(layers))):
        raise CheckpointError(
            f"{source}: the layers under {scope}/encoder/ are numbered "
            f"{', '.join(map(str, layers))}, not 0 to {len(layers) - 1}."
        )
    vocab, embedding = shape(f"{embeddings_scope}/embeddings/word_embeddings")
    hidden = shape(f"{scope}/encoder/layer_0/attention/self/query/kernel")[-1]
    inferred = {
        "vocab_size": vocab,
        "embedding_size": embedding,
        "hidden_size": hidden,
        "num_hidden_layers": len(layers),
        "num_attention_heads": max(1, hidden // 64),
        "intermediate_size": shape(f"{scope}/encoder/layer_0/intermediate/dense/kernel")[-1],
    }
    for key, table, default in (
        ("max_position_embeddings", "position_embeddings", 512),
        ("type_vocab_size", "token_type_embeddings", 2),
    ):
        name = f"{embeddings_scope}/embeddings/{table}"
        inferred[key] = int(shapes[name][0]) if name in shapes else default
    return {**inferred, **(keys or {})}


def _head_map(hidden, embedding, vocabulary):
    """ElectraForPreTraining (`discriminator_predictions.*`) and
    ElectraForMaskedLM (`generator_predictions.*`, `generator_lm_head.bias`);
    torch Linear weights are (out, in). ELECTRA's heads are
    `tf.layers.dense` layers: the second one of the discriminator's scope is
    `dense_1`."""
    H, E, V = hidden, embedding, vocabulary
    disc, gen = "discriminator_predictions", "generator_predictions"
    return {
        f"{disc}/dense/kernel": (f"{disc}.dense.weight", True, (H, H)),
        f"{disc}/dense/bias": (f"{disc}.dense.bias", False, (H,)),
        f"{disc}/dense_1/kernel": (f"{disc}.dense_prediction.weight", True, (H, 1)),
        f"{disc}/dense_1/bias": (f"{disc}.dense_prediction.bias", False, (1,)),
        f"{gen}/dense/kernel": (f"{gen}.dense.weight", True, (H, E)),
        f"{gen}/dense/bias": (f"{gen}.dense.bias", False, (E,)),
        f"{gen}/LayerNorm/gamma": (f"{gen}.LayerNorm.weight", False, (E,)),
        f"{gen}/LayerNorm/beta": (f"{gen}.LayerNorm.bias", False, (E,)),
        f"{gen}/output_bias": ("generator_lm_head.bias", False, (V,)),
    }


def _backbone_extras(config, source):
    return {"embedding_dim": config.get("embedding_size") or config["hidden_size"]}


def _read_sizes(reading):
    keys = electra_model_keys(reading.config, reading.config_path)
    sizes = electra_config(reading.shapes, keys=keys, source=reading.prefix)
    return backbone_arguments(sizes, SPEC, reading.size_source, reading.shapes)


def generator_scopes(shapes):
    """(encoder scope, embeddings scope) of an ELECTRA checkpoint's
    generator, or None when it has none: `generator/` reading
    `electra/embeddings` (or its own `generator/embeddings`, trained with
    `untied_generator_embeddings`); a generator tied to the discriminator
    (`untied_generator` off) is `electra/` itself with the generator's head."""
    if any(n.startswith(f"{GENERATOR_SCOPE}/") for n in shapes):
        own = f"{GENERATOR_SCOPE}/embeddings/word_embeddings" in shapes
        return GENERATOR_SCOPE, (GENERATOR_SCOPE if own else SCOPE)
    if any(n.startswith(GENERATOR_HEAD_SCOPES) for n in shapes):
        return SCOPE, SCOPE
    return None


def _generator_parts(shapes):
    """The tensors the generator reads: its own scope, its head and the
    embedding tables it shares with the discriminator; names only it reads
    are not the discriminator's."""
    scopes = generator_scopes(shapes)
    if scopes is None:
        return None
    scope, tables = scopes
    reads = (*GENERATOR_HEAD_SCOPES, f"{scope}/", f"{tables}/embeddings/")
    only = (*GENERATOR_HEAD_SCOPES, f"{GENERATOR_SCOPE}/")
    return reads, only, GENERATOR_HEAD_SCOPES


def _generator_keys(reading, scope):
    """(config file, config keys) of the generator: the discriminator's,
    or for a `generator/` encoder its own sizes (from its shapes, or a
    generator config beside the checkpoint) and the rest of the
    discriminator's config, as the reference code copies it."""
    keys = electra_model_keys(reading.config, reading.config_path)
    if scope != GENERATOR_SCOPE:
        return reading.config_path, keys
    keys = {k: v for k, v in keys.items() if k not in _GENERATOR_SIZE_KEYS}
    path = pick_file(
        reading.directory, _GENERATOR_CONFIG_FILES, "generator config", None, required=False
    )
    if path is not None:
        keys.update(electra_model_keys(read_json_object(path), path))
    return path, keys


def _read_generator(reading, tensors, head_shapes):
    scope, tables = generator_scopes(reading.shapes)
    config_path, keys = _generator_keys(reading, scope)
    sizes = electra_config(reading.shapes, scope, tables, keys, reading.prefix)
    source = config_path if config_path is not None else reading.size_source
    return GoogleCheckpoint(
        prefix=str(reading.prefix),
        model_type=SPEC.model_type,
        config_path=config_path,
        backbone_config=backbone_arguments(sizes, SPEC, source, reading.shapes, scope=tables),
        tensors=tensors,
        head_shapes=head_shapes,
        vocabulary=Path(reading.vocabulary),
        preset_info=reading.preset_info("ELECTRA generator"),
        reader=reading.reader,
        scope=scope,
        embeddings_scope=tables,
    )


SPEC = GoogleFamily(
    model_type="electra",
    scope=SCOPE,
    head_scopes=("discriminator_predictions/",),
    names=re.compile(r"^(electra|generator)/encoder/layer_\d+/"),
    # ELECTRA's archives ship none (it is optional here); a config naming
    # the generator describes the generator, never the discriminator.
    config_files=(
        "*discriminator*config*.json",
        "electra_config.json",
        "bert_config.json",
        "config.json",
        "*config*.json",
    ),
    config_required=False,
    config_exclude=re.compile("generator", re.IGNORECASE),
    activations={"gelu": "gelu", "relu": "relu", "tanh": "tanh"},
    gelu_note="ELECTRA's 'gelu' is the exact erf form, bertzoo 'gelu'",
    default_dropout=0.1,  # BertConfig's
    # ELECTRA's BertModel has no pooler variables (its pooled output is the
    # [CLS] vector itself).
    has_pooler=False,
    vocabulary=("wordpiece", ("vocab.txt", "*vocab*.txt"), "WordPiece vocabulary"),
    projection="{scope}/embeddings_project",
    block_names=bert_block_names,
    head_map=_head_map,
    backbone_extras=_backbone_extras,
    read_sizes=_read_sizes,
    generator_parts=_generator_parts,
    read_generator=_read_generator,
)
