"""gpufile.safetensors for torch, laid out as safetensors.torch: load_file,
load, save_file, save."""

from . import load_checkpoint as _load_checkpoint
from . import load_file as _load_file
from . import save as _save
from . import save_file as _save_file
from . import load as _load

__all__ = ["load_file", "load", "save_file", "save", "load_checkpoint"]


def load_file(filename, device="cpu", device_map=None):
    """The tensors of a safetensors file as torch objects (see
    gpufile.safetensors.load_file). device defaults to "cpu" as in
    safetensors.torch."""
    return _load_file(filename, device=device, framework="pt", device_map=device_map)


def load(data, device="cpu"):
    return _load(data, device=device, framework="pt")


def save_file(tensors, filename, metadata=None):
    return _save_file(tensors, filename, metadata)


def save(tensors, metadata=None):
    return _save(tensors, metadata)


def load_checkpoint(index_json_or_dir, device="cpu", device_map=None, parallel=True):
    return _load_checkpoint(index_json_or_dir, device=device, device_map=device_map,
                            framework="pt", parallel=parallel)
