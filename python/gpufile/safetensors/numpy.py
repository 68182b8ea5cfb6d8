"""gpufile.safetensors for numpy, laid out as safetensors.numpy: load_file,
load, save_file, save, load_checkpoint (device defaults to "cpu")."""

from . import _framework_api

load_file, load, save_file, save, load_checkpoint = _framework_api("numpy", "numpy", "cpu")

__all__ = ["load_file", "load", "save_file", "save", "load_checkpoint"]
