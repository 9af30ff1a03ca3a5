"""Google's original TF1 checkpoints -> a bertzoo preset directory.

Reads the checkpoints released with google-research/bert
(`bert_model.ckpt.{index,data-*}` + `bert_config.json` + `vocab.txt`) and
google-research/albert (`model.ckpt-best.*` + `albert_config.json` +
`30k-clean.model`), and writes `config.json`, `model.weights.h5`,
`heads.safetensors` (the pre-training heads, in Hugging Face names and
layouts) and the vocabulary (`vocab.txt` or `spiece.model`).

Variable names, as the reference code creates them (google-research/bert
modeling.py + run_pretraining.py, google-research/albert modeling.py +
run_pretraining.py). TF1 Dense kernels are stored `(in, out)`, as in Keras.

    bert/embeddings/{word,position,token_type}_embeddings, LayerNorm/{gamma,beta}
    BERT:   bert/encoder/layer_{i}/attention/self/{query,key,value}/{kernel,bias}
            bert/encoder/layer_{i}/attention/output/{dense,LayerNorm}/...
            bert/encoder/layer_{i}/{intermediate,output}/dense/...
            bert/encoder/layer_{i}/output/LayerNorm/...
    ALBERT: bert/encoder/embedding_hidden_mapping_in/{kernel,bias}   (E -> H)
            bert/encoder/transformer/group_{g}/inner_group_0/
                attention_1/self/{query,key,value}/...
                attention_1/output/dense/...
                LayerNorm/...          (after attention)
                ffn_1/intermediate/dense/...
                ffn_1/intermediate/output/dense/...
                LayerNorm_1/...        (after the feed-forward block)
    bert/pooler/dense/{kernel,bias}
    cls/predictions/transform/{dense,LayerNorm}/..., cls/predictions/output_bias
    cls/seq_relationship/output_weights (2, H), cls/seq_relationship/output_bias

Numerics of the reference code that the converted preset keeps: Google's
"gelu" is the tanh approximation (bertzoo "gelu_approximate"), LayerNorm
epsilon 1e-12 (tf.contrib.layers.layer_norm), post-LN blocks.

Downloads (`download_google_checkpoint`) fetch the official archives named by
the built-in presets' `metadata.checkpoint_url`; nothing here downloads unless
asked to.
"""

import hashlib
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.common import CheckpointError, assign_tensors, read_json_object
from bertzoo.errors import OutputError
from bertzoo.io.publish import atomic_write_text, publish_directory

logger = logging.getLogger(__name__)

MODEL_TYPES = ("bert", "albert")

# Google's `get_activation` names (lowercased by the reference code) ->
# bertzoo activations. Both modeling.py files define "gelu" as
# 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
_ACTIVATIONS = {"gelu": "gelu_approximate", "relu": "relu", "tanh": "tanh"}

# tf.contrib.layers.layer_norm, which both reference models use.
_LAYER_NORM_EPSILON = 1e-12

# Never part of the model: the step counter, Adam's beta powers, and the
# optimizer slots the reference optimizers create beside each variable:
# "<var>/adam_m", "<var>/adam_v" (BERT's AdamWeightDecayOptimizer, ALBERT's
# LAMBOptimizer) and the slot names of the tf.compat.v1.train optimizers
# (Adam, Momentum, Adagrad, RMSProp, Ftrl, Adadelta).
_IGNORED_NAMES = ("global_step", "beta1_power", "beta2_power")
_SLOT_SUFFIX = re.compile(
    r"/(adam_m|adam_v|Adam|Adam_1|Momentum|Adagrad|RMSProp|RMSProp_1|Ftrl|Ftrl_1"
    r"|Adadelta|Adadelta_1)$"
)

_ALBERT_NAME = re.compile(r"/transformer/group_\d+/inner_group_\d+/")
_BERT_NAME = re.compile(r"^bert/encoder/layer_\d+/")

_CONFIG_FILES = {"bert": "bert_config.json", "albert": "albert_config.json"}
_VOCAB_FILES = {"wordpiece": "vocab.txt", "sentencepiece": "spiece.model"}


def _is_ignored(name):
    return name in _IGNORED_NAMES or _SLOT_SUFFIX.search(name) is not None


# === Locating the files ===


def _checkpoint_prefixes(directory):
    return sorted(str(p)[: -len(".index")] for p in Path(directory).glob("*.index"))


def _search_dirs(source):
    """`source` and, for archives that extract into one folder, its only
    subdirectory."""
    source = Path(source)
    dirs = [source]
    subdirs = [p for p in source.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))]
    if not _checkpoint_prefixes(source) and len(subdirs) == 1:
        dirs.append(subdirs[0])
    return dirs


def _pick_checkpoint(source):
    source = Path(source)
    if not source.is_dir():
        if Path(f"{source}.index").is_file():
            return str(source)  # a checkpoint prefix
        raise CheckpointError(
            f"{source} is neither a directory nor a checkpoint prefix (no {source}.index)."
        )
    for directory in _search_dirs(source):
        prefixes = _checkpoint_prefixes(directory)
        if len(prefixes) == 1:
            return prefixes[0]
        if len(prefixes) > 1:
            import tensorflow as tf

            latest = tf.train.latest_checkpoint(str(directory))
            by_path = {Path(p).resolve(): p for p in prefixes}
            if latest and Path(latest).resolve() in by_path:
                return by_path[Path(latest).resolve()]
            raise CheckpointError(
                f"{directory} holds several checkpoints ({', '.join(Path(p).name for p in prefixes)}) "
                "and no 'checkpoint' file says which is the latest: pass checkpoint=PREFIX."
            )
    raise CheckpointError(
        f"{source} holds no TF1 checkpoint: no '<prefix>.index' file (such as "
        "bert_model.ckpt.index or model.ckpt-best.index) was found in it or in its "
        "only subdirectory."
    )


def _pick_file(directory, patterns, what, keyword):
    found = []
    for pattern in patterns:
        found = sorted(p for p in Path(directory).glob(pattern) if p.is_file())
        if found:
            break
    if len(found) == 1:
        return found[0]
    if not found:
        raise CheckpointError(
            f"{directory} has no {what} ({' or '.join(patterns)}): pass {keyword}=PATH."
        )
    raise CheckpointError(
        f"{directory} has several candidate {what}s ({', '.join(p.name for p in found)}): "
        f"pass {keyword}=PATH."
    )


# === Config ===


def google_config_to_backbone(config, model_type, source="config", shapes=None):
    """Maps a `bert_config.json` / `albert_config.json` dict to `BertBackbone`
    arguments.

    Args:
        config: the parsed JSON.
        model_type: "bert" or "albert".
        source: what to name in errors.
        shapes: the checkpoint's `{name: shape}`; fills `type_vocab_size` and
            `max_position_embeddings` when the config leaves them out, and
            tells whether the checkpoint has a pooler.
    """
    shapes = shapes or {}
    missing = [
        k
        for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size")
        if k not in config
    ]
    if missing:
        raise CheckpointError(f"{source}: missing the required key(s) {', '.join(missing)}.")
    act = config.get("hidden_act", "gelu")
    act_key = act.lower() if isinstance(act, str) else act
    if act_key not in _ACTIVATIONS:
        raise CheckpointError(
            f"{source}: hidden_act {act!r} is not supported. Supported: "
            f"{', '.join(sorted(_ACTIVATIONS))} (Google's 'gelu' is the tanh "
            "approximation, bertzoo 'gelu_approximate')."
        )

    def from_shape(key, tensor, default):
        if key in config:
            return config[key]
        if tensor in shapes:
            return int(shapes[tensor][0])
        return default

    # The reference defaults: dropout 0.1 in BertConfig, 0 in AlbertConfig.
    default_dropout = 0.1 if model_type == "bert" else 0.0
    backbone = {
        "vocabulary_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "hidden_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "num_segments": from_shape(
            "type_vocab_size", "bert/embeddings/token_type_embeddings", 2
        ),
        "use_pooler": not shapes or "bert/pooler/dense/kernel" in shapes,
        "activation": _ACTIVATIONS[act_key],
        "dropout": config.get("hidden_dropout_prob", default_dropout),
        "attention_dropout": config.get("attention_probs_dropout_prob", default_dropout),
        "max_sequence_length": from_shape(
            "max_position_embeddings", "bert/embeddings/position_embeddings", 512
        ),
        "layer_norm_epsilon": _LAYER_NORM_EPSILON,
        "initializer_range": config.get("initializer_range", 0.02),
    }
    if model_type == "albert":
        inner = config.get("inner_group_num", 1)
        if inner != 1:
            raise CheckpointError(
                f"{source}: inner_group_num={inner} is not supported: bertzoo's "
                "BertBackbone runs one attention + feed-forward block per layer "
                "(inner_group_num=1, as in every released ALBERT model)."
            )
        num_layers = config["num_hidden_layers"]
        num_groups = config.get("num_hidden_groups", 1)
        backbone["embedding_dim"] = config.get("embedding_size", 128)
        backbone["num_groups"] = num_groups
        _check_group_map(num_layers, num_groups, source)
    return backbone


def _check_group_map(num_layers, num_groups, source):
    """ALBERT's reference code picks layer i's group as the float
    `int(i / num_layers * num_groups)`; bertzoo uses the exact integer form.
    They agree for every released model; refuse the rare configs where they
    do not, rather than convert to a different network."""
    from bertzoo.models.backbone import group_of_layer

    if not isinstance(num_layers, int) or not isinstance(num_groups, int):
        return  # BertBackbone reports the bad value
    if num_groups < 1 or num_groups > num_layers:
        return
    for i in range(num_layers):
        reference = int(i / num_layers * num_groups)
        if reference != group_of_layer(i, num_layers, num_groups):
            raise CheckpointError(
                f"{source}: with num_hidden_layers={num_layers} and "
                f"num_hidden_groups={num_groups}, the reference code assigns layer "
                f"{i} to group {reference} (a float rounding artefact), which "
                "BertBackbone's layer-to-group map does not reproduce."
            )


# === Tensor names ===


def _variable_map(backbone, model_type):
    """Google tensor name -> (keras variable, transpose?) for `backbone`."""
    emb = backbone.embeddings_layer
    out = {
        "bert/embeddings/word_embeddings": emb.token_embedding.embeddings,
        "bert/embeddings/position_embeddings": emb.position_embeddings,
        "bert/embeddings/LayerNorm/gamma": emb.layer_norm.gamma,
        "bert/embeddings/LayerNorm/beta": emb.layer_norm.beta,
    }
    if emb.segment_embedding is not None:
        out["bert/embeddings/token_type_embeddings"] = emb.segment_embedding.embeddings

    def dense(prefix, layer):
        out[f"{prefix}/kernel"] = layer.kernel  # (in, out) in both
        out[f"{prefix}/bias"] = layer.bias

    def norm(prefix, layer):
        out[f"{prefix}/gamma"] = layer.gamma
        out[f"{prefix}/beta"] = layer.beta

    if emb.projection is not None:
        dense("bert/encoder/embedding_hidden_mapping_in", emb.projection)
    for g, block in enumerate(backbone.transformer_layers):
        if model_type == "albert":
            p = f"bert/encoder/transformer/group_{g}/inner_group_0"
            attention = f"{p}/attention_1"
            names = (f"{p}/LayerNorm", f"{p}/ffn_1/intermediate/dense",
                     f"{p}/ffn_1/intermediate/output/dense", f"{p}/LayerNorm_1")
        else:
            p = f"bert/encoder/layer_{g}"
            attention = f"{p}/attention"
            names = (f"{p}/attention/output/LayerNorm", f"{p}/intermediate/dense",
                     f"{p}/output/dense", f"{p}/output/LayerNorm")
        attn = block.self_attention
        dense(f"{attention}/self/query", attn.query)
        dense(f"{attention}/self/key", attn.key)
        dense(f"{attention}/self/value", attn.value)
        dense(f"{attention}/output/dense", attn.attention_output)
        norm(names[0], block.attention_layer_norm)
        dense(names[1], block.intermediate_dense)
        dense(names[2], block.output_dense)
        norm(names[3], block.output_layer_norm)
    if backbone.pooler_dense is not None:
        dense("bert/pooler/dense", backbone.pooler_dense)
    return {name: (variable, False) for name, variable in out.items()}


def _head_map(model_type, hidden_dim, embedding_dim, vocabulary_size):
    """Google head tensor -> (Hugging Face name, transpose?, TF1 shape).

    HF names: BertForPreTraining (`cls.predictions.*`, `cls.seq_relationship.*`)
    and AlbertForPreTraining (`predictions.*`, `sop_classifier.classifier.*`);
    torch Linear weights are (out, in). `output_weights` of the NSP/SOP head is
    already stored (2, H) by the reference code.
    """
    H, E, V = hidden_dim, embedding_dim, vocabulary_size
    if model_type == "albert":
        mlm, transform, width = "predictions", "predictions", E
        order = "sop_classifier.classifier"
    else:
        mlm, transform, width = "cls.predictions", "cls.predictions.transform", H
        order = "cls.seq_relationship"
    return {
        "cls/predictions/transform/dense/kernel": (f"{transform}.dense.weight", True, (H, width)),
        "cls/predictions/transform/dense/bias": (f"{transform}.dense.bias", False, (width,)),
        "cls/predictions/transform/LayerNorm/gamma": (f"{transform}.LayerNorm.weight", False, (width,)),
        "cls/predictions/transform/LayerNorm/beta": (f"{transform}.LayerNorm.bias", False, (width,)),
        "cls/predictions/output_bias": (f"{mlm}.bias", False, (V,)),
        "cls/seq_relationship/output_weights": (f"{order}.weight", False, (2, H)),
        "cls/seq_relationship/output_bias": (f"{order}.bias", False, (2,)),
    }


def detect_model_type(names, source="checkpoint"):
    """"albert" when the names have ALBERT's `group_*/inner_group_*` scopes,
    "bert" for `bert/encoder/layer_*`, else an error."""
    if any(_ALBERT_NAME.search(n) for n in names):
        return "albert"
    if any(_BERT_NAME.search(n) for n in names):
        return "bert"
    sample = ", ".join(sorted(n for n in names if not _is_ignored(n))[:8])
    raise CheckpointError(
        f"{source} does not look like a Google BERT or ALBERT checkpoint: no "
        "'bert/encoder/layer_N/...' or 'bert/encoder/transformer/group_N/"
        f"inner_group_M/...' variables (first names: {sample or 'none'})."
    )


# === Vocabulary ===


def _count_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return sum(1 for _ in f)
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"Cannot read the vocabulary {path}: {e}") from e


def _sentencepiece_size(path):
    """Pieces in a SentencePiece model: counted from the `.vocab` text file
    the ALBERT archives ship beside it, else with the sentencepiece package
    when it is installed; None when neither is available."""
    listing = Path(path).with_suffix(".vocab")
    if listing.is_file():
        return _count_lines(listing), listing
    try:
        import sentencepiece
    except ImportError:
        return None, None
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    except Exception as e:  # sentencepiece raises OSError/RuntimeError
        raise CheckpointError(f"{path} is not a readable SentencePiece model: {e}") from e
    return processor.get_piece_size(), path


def _check_vocabulary(vocab, kind, vocabulary_size, config_path):
    if kind == "wordpiece":
        size, counted = _count_lines(vocab), vocab
    else:
        size, counted = _sentencepiece_size(vocab)
        if size is None:
            logger.warning(
                "Not checking the size of %s: no %s beside it and the sentencepiece "
                "package is not installed.", vocab, Path(vocab).with_suffix(".vocab").name,
            )
            return
    if size != vocabulary_size:
        raise CheckpointError(
            f"The vocabulary {counted} has {size} entries but {config_path} says "
            f"vocab_size={vocabulary_size}: they come from different models."
        )


_LOWERCASED_NAMES = re.compile(r"(^|[^a-z])(uncased|multilingual_l-|chinese_l-)")
_CASED_NAMES = re.compile(r"(^|[^a-z])cased")


def infer_lowercase(*paths):
    """True for "uncased" directory names, False for "cased", None if no name
    says. The reference code's own check (`validate_case_matches_checkpoint`)
    also counts the original multilingual and Chinese models as lowercased."""
    for path in paths:
        name = Path(path).resolve().name.lower()
        if _LOWERCASED_NAMES.search(name):
            return True
        if _CASED_NAMES.search(name):
            return False
    return None


# === Conversion ===


def convert_google_checkpoint(
    source,
    output_dir,
    model_type=None,
    lowercase=None,
    *,
    checkpoint=None,
    config_file=None,
    vocab_file=None,
    allow_partial=False,
    metadata=None,
):
    """Converts a Google TF1 BERT or ALBERT checkpoint into a preset directory.

    Args:
        source: a directory holding the checkpoint (`<prefix>.index` +
            `<prefix>.data-*`), `bert_config.json` or `albert_config.json` and
            `vocab.txt` or a SentencePiece `*.model` (directly or in its only
            subdirectory, as archives extract); or a checkpoint prefix; or
            None when `checkpoint`, `config_file` and `vocab_file` are all
            given.
        output_dir: the preset directory to write (created if needed).
        model_type: "bert" or "albert"; detected from the tensor names
            (ALBERT's `group_*/inner_group_*` scopes) when None.
        lowercase: whether the tokenizer lowercases. When None: True for
            ALBERT; for BERT read from the directory name ("uncased" or
            "cased"), else an error asks for it.
        checkpoint, config_file, vocab_file: explicit paths, overriding what
            is found in `source`.
        allow_partial: load what matches instead of failing on missing or
            unused tensors (the rest stays randomly initialised).
        metadata: extra preset metadata (e.g. `checkpoint_url`, `license`).

    Returns the output directory; `BertBackbone.from_preset(output_dir)`
    loads it, with the pre-training heads in `backbone.hf_head_weights`.

    Example:
    >>> convert_google_checkpoint("uncased_L-12_H-768_A-12", "bert_base_google")
    >>> backbone = BertBackbone.from_preset("bert_base_google")
    """
    import tensorflow as tf

    from bertzoo.models.backbone import BertBackbone

    if model_type is not None and model_type not in MODEL_TYPES:
        raise CheckpointError(
            f"model_type must be one of {', '.join(MODEL_TYPES)} (or None to detect it), "
            f"got {model_type!r}."
        )
    if source is None and not (checkpoint and config_file and vocab_file):
        raise CheckpointError(
            "Pass a source directory, or all of checkpoint=, config_file= and vocab_file=."
        )
    prefix = str(checkpoint) if checkpoint else _pick_checkpoint(source)
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(f"No TF1 checkpoint at {prefix} (no {prefix}.index).")
    ckpt_dir = Path(prefix).parent
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = {k: tuple(v) for k, v in reader.get_variable_to_shape_map().items()}
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"Cannot read the TF1 checkpoint {prefix}: {e}") from e
    detected = detect_model_type(shapes, prefix)
    if model_type is not None and model_type != detected:
        raise CheckpointError(
            f"model_type={model_type!r} was asked for, but {prefix} holds a "
            f"{detected.upper()} checkpoint (its tensor names)."
        )
    model_type = detected
    info_metadata = {"source_checkpoint": str(prefix), **(metadata or {})}
    preset_lib.validate_preset({"backbone": {}, "metadata": info_metadata}, "metadata", ())

    config_path = (
        Path(config_file)
        if config_file
        else _pick_file(ckpt_dir, (_CONFIG_FILES[model_type], "*config*.json"),
                        "model config", "config_file")
    )
    config = read_json_object(config_path)
    kind = "sentencepiece" if model_type == "albert" else "wordpiece"
    if vocab_file:
        vocab = Path(vocab_file)
        if not vocab.is_file():
            raise CheckpointError(f"The vocabulary {vocab} does not exist.")
        kind = "wordpiece" if vocab.suffix == ".txt" else "sentencepiece"
    elif model_type == "albert":
        vocab = _pick_file(ckpt_dir, ("*.model",), "SentencePiece model", "vocab_file")
    else:
        vocab = _pick_file(ckpt_dir, ("vocab.txt", "*vocab*.txt"), "WordPiece vocabulary",
                           "vocab_file")

    backbone_config = google_config_to_backbone(config, model_type, config_path, shapes)
    _check_vocabulary(vocab, kind, backbone_config["vocabulary_size"], config_path)
    if lowercase is None:
        if model_type == "albert":
            lowercase = True  # every released ALBERT model lowercases
        else:
            # The checkpoint's folder, then its parents up to `source`.
            dirs = [ckpt_dir.resolve()]
            if source is not None and Path(source).is_dir():
                top = Path(source).resolve()
                while dirs[-1] != top and top in dirs[-1].parents:
                    dirs.append(dirs[-1].parent)
            lowercase = infer_lowercase(*dirs)
        if lowercase is None:
            raise CheckpointError(
                f"Cannot tell whether {prefix} is a cased or an uncased model (its "
                "directory name says neither): pass lowercase=True or False "
                "(--lowercase / --cased on the command line)."
            )

    try:
        backbone = BertBackbone(**backbone_config)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{config_path}: invalid model config: {e}") from e

    # Pre-training heads: checked against the config, translated to HF names
    # and layouts, and kept apart from the tensors the backbone must use.
    heads = {}
    tensors = {}
    head_map = _head_map(model_type, backbone.hidden_dim, backbone.embedding_dim,
                         backbone.vocabulary_size)
    for name, shape in shapes.items():
        if _is_ignored(name):
            continue
        if name in head_map:
            hf_name, transpose, expected = head_map[name]
            if shape != expected:
                raise CheckpointError(
                    f"{prefix}: head tensor {name!r} has shape {shape}, but the config "
                    f"({config_path.name}) implies {expected}."
                )
            value = np.asarray(reader.get_tensor(name), dtype="float32")
            heads[hf_name] = np.ascontiguousarray(value.T if transpose else value)
        else:
            tensors[name] = reader.get_tensor(name)
    assign_tensors(_variable_map(backbone, model_type), tensors, prefix,
                   allow_partial=allow_partial)
    backbone.hf_head_weights = heads

    backbone.preset_info = {
        "description": (
            f"{model_type.upper()} converted from the Google TF1 checkpoint "
            f"{Path(prefix).name} in {ckpt_dir}."
        ),
        "tokenizer": {
            "kind": kind,
            "lowercase": bool(lowercase),
            # BERT strips accents exactly when it lowercases; ALBERT's
            # preprocess_text always strips them (NFKD, drop combining marks).
            "strip_accents": bool(lowercase) if kind == "wordpiece" else True,
        },
        "metadata": info_metadata,
    }

    output_dir = Path(output_dir)
    # One directory, published with its manifest: the vocabulary and the
    # backbone files (an earlier conversion's files are replaced).
    with publish_directory(output_dir, "preset") as staging:
        shutil.copyfile(vocab, staging / _VOCAB_FILES[kind])
        backbone.save_to_preset(staging)
    logger.info("Converted %s (%s) to %s.", prefix, model_type, output_dir)
    return output_dir


# === Downloads ===

# Google publishes no checksums for its BERT or ALBERT archives. For the four
# 2018_10_18 English BERT archives, NVIDIA's DeepLearningExamples records the
# SHA-256 of the files inside them (PyTorch/LanguageModeling/BERT/data/
# GooglePretrainedWeightDownloader.py); they are checked after extraction.
# For every other archive no checksum is known to us: the computed SHA-256 is
# printed and recorded, and a checksum the user passes is verified.
_RECORDED_MEMBER_SHA256 = {
    "uncased_L-12_H-768_A-12.zip": {
        "bert_config.json": "7b4e5f53efbd058c67cda0aacfafb340113ea1b5797d9ce6ee411704ba21fcbc",
        "bert_model.ckpt.data-00000-of-00001": "58580dc5e0bf0ae0d2efd51d0e8272b2f808857f0a43a88aaf7549da6d7a8a84",
        "bert_model.ckpt.index": "04c1323086e2f1c5b7c0759d8d3e484afbb0ab45f51793daab9f647113a0117b",
        "bert_model.ckpt.meta": "dd5682170a10c3ea0280c2e9b9a45fee894eb62da649bbdea37b38b0ded5f60e",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    },
    "uncased_L-24_H-1024_A-16.zip": {
        "bert_config.json": "bfa42236d269e2aeb3a6d30412a33d15dbe8ea597e2b01dc9518c63cc6efafcb",
        "bert_model.ckpt.data-00000-of-00001": "bc6b3363e3be458c99ecf64b7f472d2b7c67534fd8f564c0556a678f90f4eea1",
        "bert_model.ckpt.index": "68b52f2205ffc64dc627d1120cf399c1ef1cbc35ea5021d1afc889ffe2ce2093",
        "bert_model.ckpt.meta": "6fcce8ff7628f229a885a593625e3d5ff9687542d5ef128d9beb1b0c05edc4a1",
        "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    },
    "cased_L-12_H-768_A-12.zip": {
        "bert_config.json": "f11dfb757bea16339a33e1bf327b0aade6e57fd9c29dc6b84f7ddb20682f48bc",
        "bert_model.ckpt.data-00000-of-00001": "734d5a1b68bf98d4e9cb6b6692725d00842a1937af73902e51776905d8f760ea",
        "bert_model.ckpt.index": "517d6ef5c41fc2ca1f595276d6fccf5521810d57f5a74e32616151557790f7b1",
        "bert_model.ckpt.meta": "5f8a9771ff25dadd61582abb4e3a748215a10a6b55947cbb66d0f0ba1694be98",
        "vocab.txt": "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02",
    },
    "cased_L-24_H-1024_A-16.zip": {
        "bert_config.json": "7adb2125c8225da495656c982fd1c5f64ba8f20ad020838571a3f8a954c2df57",
        "bert_model.ckpt.data-00000-of-00001": "6ff33640f40d472f7a16af0c17b1179ca9dcc0373155fb05335b6a4dd1657ef0",
        "bert_model.ckpt.index": "ef42a53f577fbe07381f4161b13c7cab4f4fc3b167cec6a9ae382c53d18049cf",
        "bert_model.ckpt.meta": "d2ddff3ed33b80091eac95171e94149736ea74eb645e575d942ec4a5e01a40a1",
        "vocab.txt": "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02",
    },
}

_DOWNLOAD_RECORD = ".bertzoo-download.json"
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
_CHUNK = 1 << 20


def google_checkpoints():
    """Built-in presets that name an official Google archive: preset name ->
    `{"url", "lowercase", "license"}`."""
    out = {}
    for name, path in preset_lib.builtin_presets().items():
        doc = json.loads(path.read_text(encoding="utf-8"))
        url = doc.get("metadata", {}).get("checkpoint_url")
        if url:
            out[name] = {
                "url": url,
                "lowercase": doc.get("tokenizer", {}).get("lowercase"),
                "license": doc.get("metadata", {}).get("license"),
            }
    return out


def _resolve_download(name):
    known = google_checkpoints()
    if name in known:
        return known[name]
    scheme = urllib.parse.urlparse(str(name)).scheme
    if scheme in ("https", "http", "file"):
        return {"url": str(name), "lowercase": None, "license": None}
    if name in preset_lib.builtin_presets():
        raise CheckpointError(
            f"The preset {name!r} has no official Google archive (no "
            f"metadata.checkpoint_url). Presets that have one: {', '.join(sorted(known))}."
        )
    raise CheckpointError(
        f"Unknown Google checkpoint {name!r}: pass a built-in preset name with a "
        f"checkpoint_url ({', '.join(sorted(known))}) or an https:// or file:// URL."
    )


def _archive_name(url):
    filename = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name
    for suffix in _ARCHIVE_SUFFIXES:
        if filename.endswith(suffix) and len(filename) > len(suffix):
            return filename, filename[: -len(suffix)]
    raise CheckpointError(
        f"{url} does not name a .zip, .tar.gz or .tgz archive."
    )


def _sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url, dest):
    """Streams `url` to `dest`; returns its SHA-256."""
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url) as response, open(dest, "wb") as f:
            for block in iter(lambda: response.read(_CHUNK), b""):
                f.write(block)
                digest.update(block)
                size += len(block)
    except OSError as e:  # URLError is an OSError
        raise CheckpointError(f"Cannot download {url}: {e}") from e
    print(f"Downloaded {url}: {size:,} bytes, sha256 {digest.hexdigest()}")
    return digest.hexdigest()


def _safe_extract(archive, dest):
    """Extracts without letting member names escape `dest`."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                parts = Path(member).parts
                if Path(member).is_absolute() or ".." in parts:
                    raise CheckpointError(f"{archive}: unsafe member path {member!r}.")
            zf.extractall(dest)
        return
    try:
        with tarfile.open(archive) as tf_archive:
            if hasattr(tarfile, "data_filter"):
                tf_archive.extractall(dest, filter="data")
            else:  # Python < 3.11.4: check by hand
                for member in tf_archive.getmembers():
                    parts = Path(member.name).parts
                    if (Path(member.name).is_absolute() or ".." in parts
                            or not (member.isfile() or member.isdir())):
                        raise CheckpointError(f"{archive}: unsafe member {member.name!r}.")
                tf_archive.extractall(dest)
    except tarfile.TarError as e:
        raise CheckpointError(f"{archive} is not a readable zip or tar archive: {e}") from e


def _check_recorded_members(archive_name, directory):
    recorded = _RECORDED_MEMBER_SHA256.get(archive_name)
    if not recorded:
        return False
    files = {p.name: p for p in Path(directory).rglob("*") if p.is_file()}
    for member, expected in recorded.items():
        if member not in files:
            raise CheckpointError(f"{archive_name}: the archive has no {member}.")
        actual = _sha256_of(files[member])
        if actual != expected:
            raise CheckpointError(
                f"{archive_name}: {member} has sha256 {actual}, but {expected} is "
                "recorded for it (NVIDIA DeepLearningExamples' "
                "GooglePretrainedWeightDownloader). The download is corrupt or the "
                "archive changed upstream; pass check_recorded=False only if you "
                "have verified it another way."
            )
    return True


def download_google_checkpoint(
    name,
    cache_dir,
    output_dir=None,
    sha256=None,
    lowercase=None,
    check_recorded=True,
):
    """Downloads, verifies and extracts an official Google BERT/ALBERT archive,
    and converts it when `output_dir` is given.

    The archive is streamed to a temporary file in `cache_dir`, its SHA-256
    computed, printed and compared with `sha256` when given, then extracted
    into a temporary folder that is renamed into place (`cache_dir/<archive
    name>`) only when complete. For the four 2018_10_18 English BERT archives
    the extracted files are also checked against SHA-256 values recorded by
    NVIDIA's DeepLearningExamples (Google publishes none); for the others no
    published checksum exists, so pass `sha256` to pin the archive you expect.
    A later call reuses the extracted folder (and checks `sha256` against the
    one recorded at download).

    Args:
        name: a built-in preset name whose metadata has a `checkpoint_url`
            (e.g. "bert_base", "albert_base"), or an https:// or file:// URL.
        cache_dir: where archives are downloaded and extracted.
        output_dir: when given, the extracted checkpoint is converted into
            this preset directory.
        sha256: expected SHA-256 (hex) of the archive.
        lowercase: tokenizer casing; defaults to the preset's, else inferred.
        check_recorded: check the extracted files against recorded checksums
            where some are known.

    Returns `output_dir` if given, else the extracted checkpoint directory.
    """
    info = _resolve_download(name)
    url = info["url"]
    archive_name, stem = _archive_name(url)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / stem
    expected = sha256.lower().strip() if sha256 else None
    record_path = final / _DOWNLOAD_RECORD
    if record_path.is_file():
        record = read_json_object(record_path)
        if expected and record.get("sha256") != expected:
            raise CheckpointError(
                f"{final} was extracted from an archive with sha256 {record.get('sha256')}, "
                f"not the expected {expected}. Delete {final} to download it again."
            )
        logger.info("Using %s, downloaded earlier from %s.", final, record.get("url"))
        actual = record.get("sha256")
    elif final.exists():
        # bertzoo renames a complete extraction (its record inside) into
        # place in one step: this folder is not one of its downloads.
        raise OutputError(
            f"{final} exists but holds no {_DOWNLOAD_RECORD}, so bertzoo did not download it "
            "there and will not replace it; move it or use another cache directory."
        )
    else:
        fd, tmp_archive = tempfile.mkstemp(prefix=f".{archive_name}.", suffix=".part",
                                           dir=cache_dir)
        os.close(fd)
        tmp_dir = None
        try:
            actual = _fetch(url, tmp_archive)
            if expected and actual != expected:
                raise CheckpointError(
                    f"Checksum mismatch for {url}: sha256 {actual}, expected {expected}. "
                    "The download is corrupt or not the archive you meant."
                )
            if not expected:
                print(
                    f"No sha256 was given for {archive_name}, and no published checksum "
                    f"is known for the archive itself; pass sha256={actual} to pin this one."
                )
            tmp_dir = tempfile.mkdtemp(prefix=f".{stem}.", suffix=".extract", dir=cache_dir)
            _safe_extract(tmp_archive, tmp_dir)
            if check_recorded and _check_recorded_members(archive_name, tmp_dir):
                print(f"The files in {archive_name} match their recorded sha256 values.")
            atomic_write_text(
                Path(tmp_dir) / _DOWNLOAD_RECORD,
                json.dumps({"url": url, "sha256": actual}, indent=2) + "\n",
            )
            os.replace(tmp_dir, final)
            tmp_dir = None
        finally:
            if os.path.exists(tmp_archive):
                os.unlink(tmp_archive)
            if tmp_dir is not None:
                shutil.rmtree(tmp_dir, ignore_errors=True)
    if output_dir is None:
        return final
    if lowercase is None:
        lowercase = info["lowercase"]
    metadata = {"checkpoint_url": url, "source_checkpoint": f"{url} (sha256 {actual})"}
    if info["license"]:
        metadata["license"] = info["license"]
    return convert_google_checkpoint(final, output_dir, lowercase=lowercase, metadata=metadata)
