"""gpufile.safetensors for torch, laid out as safetensors.torch: load_file,
load, save_file, save, load_checkpoint (device defaults to "cpu")."""

from . import _framework_api

load_file, load, save_file, save, load_checkpoint = _framework_api("pt", "torch", "cpu")

__all__ = ["load_file", "load", "save_file", "save", "load_checkpoint"]
