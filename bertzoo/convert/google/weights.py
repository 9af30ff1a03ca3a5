"""Filling a backbone from a Google TF1 checkpoint read by
`read_google_checkpoint`, and writing the preset directory. The tensor names
come from the checkpoint's family (`GoogleFamily.block_names`,
`projection`, `head_map`); TF1 Dense kernels are stored `(in, out)`, as in
Keras."""

import logging
import shutil
from pathlib import Path

import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.common import CheckpointError, assign_tensors
from bertzoo.convert.google.families import FAMILIES
from bertzoo.io.publish import publish_directory
from bertzoo.tokenizers import tokenizer_class

logger = logging.getLogger(__name__)


def variable_map(backbone, model_type, scope=None, embeddings_scope=None):
    """Google tensor name -> (keras variable, transpose?) for `backbone`, the
    encoder under `scope` (default: the model type's; ELECTRA's generator:
    "generator") with the embedding tables of `embeddings_scope` (default:
    `scope`; the generator reads "electra"'s)."""
    spec = FAMILIES[model_type]
    scope = scope or spec.scope
    tables = f"{embeddings_scope or scope}/embeddings"
    emb = backbone.embeddings_layer
    out = {
        f"{tables}/word_embeddings": emb.token_embedding.embeddings,
        f"{tables}/position_embeddings": emb.position_embeddings,
        f"{tables}/LayerNorm/gamma": emb.layer_norm.gamma,
        f"{tables}/LayerNorm/beta": emb.layer_norm.beta,
    }
    if emb.segment_embedding is not None:
        out[f"{tables}/token_type_embeddings"] = emb.segment_embedding.embeddings

    def dense(prefix, layer):
        out[f"{prefix}/kernel"] = layer.kernel  # (in, out) in both
        out[f"{prefix}/bias"] = layer.bias

    def norm(prefix, layer):
        out[f"{prefix}/gamma"] = layer.gamma
        out[f"{prefix}/beta"] = layer.beta

    if emb.projection is not None:
        dense(spec.projection.format(scope=scope), emb.projection)
    for g, block in enumerate(backbone.transformer_layers):
        attention, attention_norm, intermediate, output, output_norm = spec.block_names(scope, g)
        attn = block.self_attention
        dense(f"{attention}/self/query", attn.query)
        dense(f"{attention}/self/key", attn.key)
        dense(f"{attention}/self/value", attn.value)
        dense(f"{attention}/output/dense", attn.attention_output)
        norm(attention_norm, block.attention_layer_norm)
        dense(intermediate, block.intermediate_dense)
        dense(output, block.output_dense)
        norm(output_norm, block.output_layer_norm)
    if backbone.pooler_dense is not None:
        dense(f"{scope}/pooler/dense", backbone.pooler_dense)
    return {name: (variable, False) for name, variable in out.items()}


def load_google_weights(backbone, checkpoint, allow_partial=False):
    """Fills `backbone` (a `BertBackbone` built from
    `checkpoint.backbone_config`) from a `GoogleCheckpoint`, every tensor
    checked first. Returns the pre-training head tensors, checked against
    the config and translated to Hugging Face names and layouts. (An
    ELECTRA checkpoint's generator is a second call, with
    `checkpoint.generator` and a backbone built from its config.)"""
    heads = {}
    tensors = dict(checkpoint.tensors)
    head_map = FAMILIES[checkpoint.model_type].head_map(
        backbone.hidden_dim, backbone.embedding_dim, backbone.vocabulary_size
    )
    sizes = (
        f"the config ({checkpoint.config_path.name})"
        if checkpoint.config_path is not None
        else "the encoder's tensor shapes"
    )
    for name, shape in checkpoint.head_shapes.items():
        if name not in head_map:
            tensors[name] = checkpoint.reader.get_tensor(name)  # reported as unused
            continue
        hf_name, transpose, expected = head_map[name]
        if shape != expected:
            raise CheckpointError(
                f"{checkpoint.prefix}: head tensor {name!r} has shape {shape}, but {sizes} "
                f"implies {expected}."
            )
        value = np.asarray(checkpoint.reader.get_tensor(name), dtype="float32")
        heads[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    assign_tensors(
        variable_map(
            backbone, checkpoint.model_type, checkpoint.scope, checkpoint.embeddings_scope
        ),
        tensors,
        checkpoint.prefix,
        allow_partial=allow_partial,
    )
    return heads


def _write_preset(directory, backbone, checkpoint, heads):
    kind = checkpoint.preset_info["tokenizer"]["kind"]
    shutil.copyfile(checkpoint.vocabulary, directory / tokenizer_class(kind).vocabulary_file)
    backbone.save_to_preset(directory, preset_info=checkpoint.preset_info, head_tensors=heads)


def save_google_preset(backbone, checkpoint, heads, output_dir, generator=None):
    """Writes the preset directory of a converted checkpoint: the vocabulary
    and the backbone's files (`backbone.save_to_preset`) with `heads`,
    published as one directory with its manifest (an earlier conversion's
    files are replaced). `generator`: `(backbone, heads)` of an ELECTRA
    checkpoint's generator (`checkpoint.generator`), written as a complete
    preset of its own in `output_dir/generator`, published with the rest.
    Returns `output_dir` as a `Path`."""
    output_dir = Path(output_dir)
    with publish_directory(output_dir, "preset") as staging:
        _write_preset(staging, backbone, checkpoint, heads)
        if generator is not None:
            # A publication inside the discriminator's: the generator
            # directory gets its own manifest, and appears with the rest.
            with publish_directory(staging / preset_lib.GENERATOR_DIR, "preset") as inner:
                _write_preset(inner, generator[0], checkpoint.generator, generator[1])
    logger.info("Converted %s (%s) to %s.", checkpoint.prefix, checkpoint.model_type, output_dir)
    return output_dir
