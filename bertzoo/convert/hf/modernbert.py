"""ModernBERT in Hugging Face names (`model_type` "modernbert":
ModernBertModel and its `ModernBertFor*` task models): pre-LN blocks
without biases, a fused query/key/value projection, GeGLU feed-forward
layers, rotary positions and local attention in all layers but every n-th,
a final LayerNorm; no segments, no position table, no pooler.

Both config layouts are read: the released checkpoints'
(`global_attn_every_n_layers`, `global_rope_theta`, `local_rope_theta`) and
transformers 5's (`layer_types`, `rope_parameters`); both are written, so
either version of transformers reads an export the same way.
"""

from bertzoo.convert.common import CheckpointError
from bertzoo.convert.hf.spec import REQUIRED, HfSpec

FULL, SLIDING = "full_attention", "sliding_attention"
# transformers' defaults (ModernBertConfig).
GLOBAL_THETA, LOCAL_THETA, EVERY, WINDOW = 160_000.0, 10_000.0, 3, 128
BIAS_KEYS = ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias")


def _global_every(hf, config_path, num_layers):
    """transformers' layer pattern as bertzoo's `global_attention_every`:
    layer i is global when `i % n == 0` (1: every layer)."""
    types = hf.get("layer_types")
    if types is None:
        every = hf.get("global_attn_every_n_layers", EVERY)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise CheckpointError(
                f"{config_path}: global_attn_every_n_layers must be an integer >= 1, got {every!r}."
            )
        return every
    if not isinstance(types, list) or any(t not in (FULL, SLIDING) for t in types):
        raise CheckpointError(
            f"{config_path}: layer_types must be a list of {FULL!r} and {SLIDING!r}, got {types!r}."
        )
    if isinstance(num_layers, int) and len(types) != num_layers:
        raise CheckpointError(
            f"{config_path}: layer_types lists {len(types)} layers, num_hidden_layers is "
            f"{num_layers}."
        )
    full = [i for i, t in enumerate(types) if t == FULL]
    every = full[1] if len(full) > 1 else max(len(types), 1)
    if SLIDING not in types:
        every = 1
    if types != [FULL if i % every == 0 else SLIDING for i in range(len(types))]:
        raise CheckpointError(
            f"{config_path}: layer_types {types!r} is not supported: bertzoo attends "
            "globally in layer 0 and every n-th layer after it, locally in the others "
            "(ModernBERT's pattern)."
        )
    return every


def _rope_thetas(hf, config_path):
    """(global, local) RoPE bases, from `rope_parameters` or the released
    configs' `global_rope_theta` / `local_rope_theta`."""
    if hf.get("rope_scaling"):
        raise CheckpointError(
            f"{config_path}: rope_scaling is not supported (bertzoo's rotary positions "
            "are RoPE's default ones)."
        )
    thetas = {FULL: hf.get("global_rope_theta", GLOBAL_THETA)}
    thetas[SLIDING] = hf.get("local_rope_theta", LOCAL_THETA)
    parameters = hf.get("rope_parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise CheckpointError(
                f"{config_path}: rope_parameters must be an object, got {parameters!r}."
            )
        for layer_type in (FULL, SLIDING):
            entry = parameters.get(layer_type) or {}
            rope_type = entry.get("rope_type", "default")
            if rope_type != "default":
                raise CheckpointError(
                    f"{config_path}: rope_parameters.{layer_type}.rope_type {rope_type!r} is "
                    "not supported (only 'default', RoPE without scaling)."
                )
            thetas[layer_type] = entry.get("rope_theta", thetas[layer_type])
    return thetas[FULL], thetas[SLIDING]


def read_config(hf, config_path):
    """The backbone settings of a ModernBERT config beyond its sizes."""
    biases = {key: hf.get(key, False) for key in BIAS_KEYS}
    if len(set(biases.values())) != 1:
        raise CheckpointError(
            f"{config_path}: {', '.join(f'{k}={v}' for k, v in biases.items())} is not "
            "supported: bertzoo's use_bias sets them all (ModernBERT: all false)."
        )
    if hf.get("decoder_bias", True) is not True:
        raise CheckpointError(
            f"{config_path}: decoder_bias=false is not supported (bertzoo's masked-LM "
            "head has an output bias, as ModernBERT's)."
        )
    head_activation = hf.get("classifier_activation", "gelu")
    if head_activation != "gelu":
        raise CheckpointError(
            f"{config_path}: classifier_activation {head_activation!r} is not supported "
            "(bertzoo's ModernBERT heads use 'gelu', as the released checkpoints)."
        )
    every = _global_every(hf, config_path, hf.get("num_hidden_layers"))
    global_theta, local_theta = _rope_thetas(hf, config_path)
    window = hf.get("local_attention", WINDOW) if every > 1 else None
    return {
        "use_bias": next(iter(biases.values())),
        "rope_theta": global_theta,
        "local_rope_theta": local_theta,
        "local_attention_window": window,
        "global_attention_every": every,
    }


def write_config(backbone):
    """The HF keys of `backbone`'s settings beyond its sizes, in both
    layouts."""
    every = backbone.global_attention_every
    window = backbone.local_attention_window
    local = window is not None
    global_theta = backbone.rope_theta
    local_theta = global_theta if backbone.local_rope_theta is None else backbone.local_rope_theta
    config = {key: backbone.use_bias for key in BIAS_KEYS}
    config.update(
        layer_types=[SLIDING if local and i % every else FULL for i in range(backbone.num_layers)],
        rope_parameters={
            FULL: {"rope_theta": global_theta, "rope_type": "default"},
            SLIDING: {"rope_theta": local_theta, "rope_type": "default"},
        },
        global_attn_every_n_layers=every if local else 1,
        global_rope_theta=global_theta,
        local_rope_theta=local_theta,
        local_attention=window if local else WINDOW,
    )
    return config


MODERNBERT = HfSpec(
    model_type="modernbert",
    prefix="model.",
    config_keys=(
        ("vocabulary_size", "vocab_size", REQUIRED),
        ("num_layers", "num_hidden_layers", REQUIRED),
        ("num_heads", "num_attention_heads", REQUIRED),
        ("hidden_dim", "hidden_size", REQUIRED),
        ("intermediate_dim", "intermediate_size", REQUIRED),
        ("max_sequence_length", "max_position_embeddings", 8192),
        ("layer_norm_epsilon", "norm_eps", 1e-5),
        ("initializer_range", "initializer_range", 0.02),
        # Dropout sits on the residual branches in bertzoo, inside the MLP
        # in transformers; the released checkpoints have none.
        ("dropout", "mlp_dropout", 0.0),
        ("attention_dropout", "attention_dropout", 0.0),
    ),
    activation_key="hidden_activation",
    activation_default="gelu",
    fixed={"num_segments": 0, "use_pooler": False, "norm_first": True, "gated_feedforward": True},
    block="layers.{}",
    block_tensors=(
        "attn.Wqkv.query",
        "attn.Wqkv.key",
        "attn.Wqkv.value",
        "attn.Wo",
        "attn_norm",  # none in layer 0
        "mlp.Wi",
        "mlp.Wo",
        "mlp_norm",
    ),
    pooler=None,
    projection=None,
    # The MLM head (head + decoder) and the task heads (head + classifier).
    heads=("head.", "decoder.", "classifier."),
    buffers=(),
    # The task models share "head." and "classifier."; an export names the
    # architecture recorded from the checkpoint it was read from.
    architectures=(
        ("decoder.", None, "ModernBertForMaskedLM"),
        ("classifier.", None, "ModernBertForSequenceClassification"),
        ("classifier.", None, "ModernBertForTokenClassification"),
        ("classifier.", None, "ModernBertForQuestionAnswering"),
    ),
    base_architecture="ModernBertModel",
    tokenizer_kind="byte_level_bpe",
    tokenizer_class="PreTrainedTokenizerFast",
    hf_extra={
        "bos_token_id": 50281,
        "classifier_activation": "gelu",
        "classifier_dropout": 0.0,
        "classifier_pooling": "cls",
        "cls_token_id": 50281,
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": 50282,
        "initializer_cutoff_factor": 2.0,
        "pad_token_id": 50283,
        "sep_token_id": 50282,
        "sparse_pred_ignore_index": -100,
        "sparse_prediction": False,
        "tie_word_embeddings": True,
    },
    record_model_type=True,
    word_embeddings="embeddings.tok_embeddings",
    embedding_norm="embeddings.norm",
    final_norm="final_norm",
    fused_qkv="attn.Wqkv",
    modern=True,
    read_config=read_config,
    write_config=write_config,
    carried_keys=(
        "architectures",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "cls_token_id",
        "sep_token_id",
        "classifier_pooling",
        "classifier_dropout",
        "embedding_dropout",
        "initializer_cutoff_factor",
    ),
)
