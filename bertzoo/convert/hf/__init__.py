"""Hugging Face format <-> bertzoo, for `model_type` "bert", "albert",
"distilbert", "electra", "roberta" (KLUE-RoBERTa too) and "xlm-roberta".

A checkpoint directory holds `config.json`, `model.safetensors` (or, only when
asked for with `allow_pickle=True`, `pytorch_model.bin`) and optionally
`tokenizer_config.json` with `vocab.txt` or `spiece.model`.

Each model type is described once, as data, by an `HfSpec` in a module of
its own (`bert`, `albert`, `distilbert`, `electra`, `roberta`, listed in
`families`):
config keys, tensor names, head prefixes, architecture names. Reading the
config (`config`), mapping tensors to variables and loading them
(`weights`), and exporting (`export`) are one piece of code for all.

Loading is strict: every backbone variable must be filled and every tensor
used, except buffers (`embeddings.position_ids`, ...) and task-head tensors
(e.g. "cls.", "predictions.", "vocab_projector."), which are returned (and
kept as `backbone.head_tensors`) for task models and written back by
`save_hf`.
"""

from bertzoo.convert.hf.config import hf_to_preset
from bertzoo.convert.hf.export import model_type_of, save_hf
from bertzoo.convert.hf.families import SUPPORTED_MODEL_TYPES
from bertzoo.convert.hf.spec import PICKLE_FILE, SAFETENSORS_FILE, HfSpec
from bertzoo.convert.hf.weights import load_hf_weights

__all__ = [
    "PICKLE_FILE",
    "SAFETENSORS_FILE",
    "SUPPORTED_MODEL_TYPES",
    "HfSpec",
    "hf_to_preset",
    "load_hf_weights",
    "model_type_of",
    "save_hf",
]
