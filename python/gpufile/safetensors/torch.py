"""gpufile.safetensors for torch, laid out as safetensors.torch: load_file,
load, save_file, save, load_checkpoint (device defaults to "cpu"), and
save_model, load_model, storage_ptr, storage_size for tensors that share
memory (see _torch_model)."""

from . import _framework_api, _torch_model
from ._torch_model import storage_ptr, storage_size

load_file, load, save_file, save, load_checkpoint = _framework_api("pt", "torch", "cpu")


def save_model(model, filename, metadata=None, force_contiguous=True):
    """Writes model.state_dict() as safetensors.torch.save_model does: one
    name per group of tensors sharing memory (tied weights), each other
    name recorded in the metadata as name -> kept name (a key the given
    metadata has already is left alone; the dict given is not changed);
    with force_contiguous, non-contiguous tensors are written contiguous.
    RuntimeError when no tensor of a shared group covers its memory."""
    _torch_model.save_model(save_file, model, filename, metadata, force_contiguous)


def load_model(model, filename, strict=True, device="cpu"):
    """Loads a file into model (load_state_dict) as
    safetensors.torch.load_model does: a name the model shares with a
    tensor of the file (a tied weight save_model left out) counts as
    loaded. Returns (missing, unexpected): a set and a list of names; with
    strict, raises RuntimeError naming them when either is not empty."""
    return _torch_model.load_model(load_file, model, filename, strict, device)


__all__ = ["load_file", "load", "save_file", "save", "load_checkpoint",
           "save_model", "load_model", "storage_ptr", "storage_size"]
