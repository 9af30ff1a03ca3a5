"""Checkpoint conversion between bertzoo and other formats: Hugging Face
directories (safetensors; pytorch_model.bin only on request) and Google's
original TF1 checkpoints. These modules read and write tensors, config dicts
and the backbones handed to them; building a backbone from a checkpoint is
`bertzoo.models.loading` (`BertBackbone.from_preset`,
`convert_google_checkpoint`, `download_google_checkpoint`)."""

from bertzoo.convert.common import CheckpointError, assign_tensors
from bertzoo.convert.download import download_google_archive, google_checkpoints
from bertzoo.convert.google import read_google_checkpoint
from bertzoo.convert.hf import hf_to_preset, load_hf_weights, save_hf
from bertzoo.convert.safetensors_io import SafetensorsError, read_safetensors, write_safetensors
from bertzoo.convert.torch_pickle import read_torch_pickle

__all__ = [
    "CheckpointError",
    "SafetensorsError",
    "assign_tensors",
    "download_google_archive",
    "google_checkpoints",
    "hf_to_preset",
    "load_hf_weights",
    "read_google_checkpoint",
    "read_safetensors",
    "read_torch_pickle",
    "save_hf",
    "write_safetensors",
]
