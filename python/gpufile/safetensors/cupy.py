"""gpufile.safetensors for cupy, laid out as safetensors.cupy: load_file,
load, save_file, save, load_checkpoint (device defaults to "cuda:0")."""

from . import _framework_api

load_file, load, save_file, save, load_checkpoint = _framework_api("cupy", "cupy", "cuda:0")

__all__ = ["load_file", "load", "save_file", "save", "load_checkpoint"]
