"""Checkpoint conversion between bertzoo and other formats: Hugging Face
directories (safetensors; pytorch_model.bin only on request) and Google's
original TF1 checkpoints."""

from bertzoo.convert.common import CheckpointError, assign_tensors
from bertzoo.convert.google import convert_google_checkpoint, download_google_checkpoint
from bertzoo.convert.hf import hf_to_preset, load_hf_weights, read_torch_pickle, save_hf
from bertzoo.convert.safetensors_io import SafetensorsError, read_safetensors, write_safetensors

__all__ = [
    "CheckpointError",
    "SafetensorsError",
    "assign_tensors",
    "convert_google_checkpoint",
    "download_google_checkpoint",
    "hf_to_preset",
    "load_hf_weights",
    "read_safetensors",
    "read_torch_pickle",
    "save_hf",
    "write_safetensors",
]
