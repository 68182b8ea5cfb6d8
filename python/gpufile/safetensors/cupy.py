"""gpufile.safetensors for cupy, laid out as safetensors.cupy: load_file,
load, save_file, save."""

from . import load_checkpoint as _load_checkpoint
from . import load_file as _load_file
from . import save as _save
from . import save_file as _save_file
from . import load as _load

__all__ = ["load_file", "load", "save_file", "save", "load_checkpoint"]


def load_file(filename, device="cuda:0", device_map=None):
    """The tensors of a safetensors file as cupy objects (see
    gpufile.safetensors.load_file). device defaults to "cuda:0" as in
    safetensors.cupy."""
    return _load_file(filename, device=device, framework="cupy", device_map=device_map)


def load(data, device="cuda:0"):
    return _load(data, device=device, framework="cupy")


def save_file(tensors, filename, metadata=None):
    return _save_file(tensors, filename, metadata)


def save(tensors, metadata=None):
    return _save(tensors, metadata)


def load_checkpoint(index_json_or_dir, device="cuda:0", device_map=None, parallel=True):
    return _load_checkpoint(index_json_or_dir, device=device, device_map=device_map,
                            framework="cupy", parallel=parallel)
