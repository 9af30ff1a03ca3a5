"""Checkpoint conversion between bertzoo and other formats."""

from bertzoo.convert.hf import CheckpointError, hf_to_preset, load_hf_weights, save_hf
from bertzoo.convert.safetensors_io import SafetensorsError, read_safetensors, write_safetensors

__all__ = [
    "CheckpointError",
    "SafetensorsError",
    "hf_to_preset",
    "load_hf_weights",
    "save_hf",
    "read_safetensors",
    "write_safetensors",
]
