"""The preset loader and checkpoint formats: one place that reads and writes
models in every format (floor 3, above the models it builds).

- `bertzoo.convert.loader`: classifies a preset argument and builds the
  class it is given (`BertBackbone.from_preset` and the task models'
  `from_preset` reach it through `bertzoo.loader_registry`);
  `convert_google_checkpoint`, `download_google_checkpoint`.
- One module per format: `bertzoo_format` (bertzoo's preset directories),
  `hf` (Hugging Face directories, per family from a spec table; safetensors,
  pytorch_model.bin only on request), `heads` (task-head tensors in Hugging
  Face names), `google` (Google's original TF1 checkpoints), `download`.

Importing this package registers the loader (`bertzoo.loader_registry`)."""

from bertzoo.convert.common import CheckpointError, assign_tensors
from bertzoo.convert.download import download_google_archive, google_checkpoints
from bertzoo.convert.google import read_google_checkpoint
from bertzoo.convert.hf import hf_to_preset, load_hf_weights, save_hf
from bertzoo.convert.loader import (
    convert_google_checkpoint,
    download_google_checkpoint,
    resolve_preset,
)
from bertzoo.convert.torch_pickle import read_torch_pickle
from bertzoo.io.safetensors import SafetensorsError, read_safetensors, write_safetensors

__all__ = [
    "CheckpointError",
    "SafetensorsError",
    "assign_tensors",
    "convert_google_checkpoint",
    "download_google_archive",
    "download_google_checkpoint",
    "google_checkpoints",
    "hf_to_preset",
    "load_hf_weights",
    "read_google_checkpoint",
    "read_safetensors",
    "read_torch_pickle",
    "resolve_preset",
    "save_hf",
    "write_safetensors",
]
