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

Downloads of the official archives: `bertzoo.convert.download`.
"""

import dataclasses
import logging
import re
import shutil
from pathlib import Path

import numpy as np

from bertzoo import presets as preset_lib
from bertzoo.convert.common import (
    CheckpointError,
    assign_tensors,
    check_group_map,
    read_json_object,
)
from bertzoo.io.publish import publish_directory
from bertzoo.tokenizers import tokenizer_class

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
        for k in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
        )
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
        "num_segments": from_shape("type_vocab_size", "bert/embeddings/token_type_embeddings", 2),
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
        # The reference code's float form: int(i / num_layers * num_groups).
        check_group_map(
            num_layers,
            num_groups,
            lambda i: int(i / num_layers * num_groups),
            source,
            "the reference code",
        )
    return backbone


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
            names = (
                f"{p}/LayerNorm",
                f"{p}/ffn_1/intermediate/dense",
                f"{p}/ffn_1/intermediate/output/dense",
                f"{p}/LayerNorm_1",
            )
        else:
            p = f"bert/encoder/layer_{g}"
            attention = f"{p}/attention"
            names = (
                f"{p}/attention/output/LayerNorm",
                f"{p}/intermediate/dense",
                f"{p}/output/dense",
                f"{p}/output/LayerNorm",
            )
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
        "cls/predictions/transform/LayerNorm/gamma": (
            f"{transform}.LayerNorm.weight",
            False,
            (width,),
        ),
        "cls/predictions/transform/LayerNorm/beta": (
            f"{transform}.LayerNorm.bias",
            False,
            (width,),
        ),
        "cls/predictions/output_bias": (f"{mlm}.bias", False, (V,)),
        "cls/seq_relationship/output_weights": (f"{order}.weight", False, (2, H)),
        "cls/seq_relationship/output_bias": (f"{order}.bias", False, (2,)),
    }


def detect_model_type(names, source="checkpoint"):
    """ "albert" when the names have ALBERT's `group_*/inner_group_*` scopes,
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
                "package is not installed.",
                vocab,
                Path(vocab).with_suffix(".vocab").name,
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


@dataclasses.dataclass(frozen=True)
class GoogleCheckpoint:
    """A Google TF1 checkpoint read and checked by `read_google_checkpoint`,
    ready to be loaded into a backbone built from `backbone_config`.

    Attributes:
        prefix: the checkpoint prefix (`<prefix>.index`, `<prefix>.data-*`).
        model_type: "bert" or "albert".
        config_path: the model config file read.
        backbone_config: `BertBackbone` constructor arguments.
        tensors: checkpoint name -> array, the backbone's tensors.
        head_shapes: checkpoint name -> shape, the pre-training heads.
        vocabulary: the vocabulary file (`vocab.txt` or a SentencePiece model).
        preset_info: the preset's description, tokenizer and metadata sections.
    """

    prefix: str
    model_type: str
    config_path: Path
    backbone_config: dict
    tensors: dict
    head_shapes: dict
    vocabulary: Path
    preset_info: dict
    reader: object = dataclasses.field(repr=False)


def read_google_checkpoint(
    source,
    model_type=None,
    lowercase=None,
    *,
    checkpoint=None,
    config_file=None,
    vocab_file=None,
    metadata=None,
):
    """Reads and checks a Google TF1 BERT or ALBERT checkpoint, its config and
    vocabulary (arguments as for `bertzoo.models.loading.convert_google_checkpoint`).
    Returns a `GoogleCheckpoint`; `load_google_weights` fills a backbone from
    it and `save_google_preset` writes the preset directory."""
    import tensorflow as tf

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
    preset_lib.validate_preset({"backbone": {}, "metadata": info_metadata}, "metadata")

    config_path = (
        Path(config_file)
        if config_file
        else _pick_file(
            ckpt_dir, (_CONFIG_FILES[model_type], "*config*.json"), "model config", "config_file"
        )
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
        vocab = _pick_file(
            ckpt_dir, ("vocab.txt", "*vocab*.txt"), "WordPiece vocabulary", "vocab_file"
        )

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

    tensors, head_shapes = {}, {}
    for name, shape in shapes.items():
        if _is_ignored(name):
            continue
        if name.startswith("cls/"):
            head_shapes[name] = shape
        else:
            tensors[name] = reader.get_tensor(name)
    preset_info = {
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
            # google-research/bert's own tokenization.py, as the checkpoint
            # was trained with.
            **({"reference": "google"} if kind == "wordpiece" else {}),
        },
        "metadata": info_metadata,
    }
    return GoogleCheckpoint(
        prefix=str(prefix),
        model_type=model_type,
        config_path=config_path,
        backbone_config=backbone_config,
        tensors=tensors,
        head_shapes=head_shapes,
        vocabulary=Path(vocab),
        preset_info=preset_info,
        reader=reader,
    )


def load_google_weights(backbone, checkpoint, allow_partial=False):
    """Fills `backbone` (a `BertBackbone` built from
    `checkpoint.backbone_config`) from a `GoogleCheckpoint`, every tensor
    checked first. Returns the pre-training head tensors, checked against
    the config and translated to Hugging Face names and layouts."""
    heads = {}
    tensors = dict(checkpoint.tensors)
    head_map = _head_map(
        checkpoint.model_type, backbone.hidden_dim, backbone.embedding_dim, backbone.vocabulary_size
    )
    for name, shape in checkpoint.head_shapes.items():
        if name not in head_map:
            tensors[name] = checkpoint.reader.get_tensor(name)  # reported as unused
            continue
        hf_name, transpose, expected = head_map[name]
        if shape != expected:
            raise CheckpointError(
                f"{checkpoint.prefix}: head tensor {name!r} has shape {shape}, but the config "
                f"({checkpoint.config_path.name}) implies {expected}."
            )
        value = np.asarray(checkpoint.reader.get_tensor(name), dtype="float32")
        heads[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    assign_tensors(
        _variable_map(backbone, checkpoint.model_type),
        tensors,
        checkpoint.prefix,
        allow_partial=allow_partial,
    )
    return heads


def save_google_preset(backbone, checkpoint, heads, output_dir):
    """Writes the preset directory of a converted checkpoint: the vocabulary
    and the backbone's files (`backbone.save_to_preset`) with `heads`,
    published as one directory with its manifest (an earlier conversion's
    files are replaced). Returns `output_dir` as a `Path`."""
    output_dir = Path(output_dir)
    kind = checkpoint.preset_info["tokenizer"]["kind"]
    with publish_directory(output_dir, "preset") as staging:
        shutil.copyfile(checkpoint.vocabulary, staging / tokenizer_class(kind).vocabulary_file)
        backbone.save_to_preset(staging, preset_info=checkpoint.preset_info, head_tensors=heads)
    logger.info("Converted %s (%s) to %s.", checkpoint.prefix, checkpoint.model_type, output_dir)
    return output_dir
