"""safetensors checkpoints straight into GPU (or host) tensors, through
gpufile: the header is parsed and validated by libgpufile (every error names
the file, the tensor and the field) and the data section is read with large
parallel reads on gpufile's paths, so gpufile.stats() counts every byte.

    from gpufile.safetensors import load_file, safe_open, save_file
    sd = load_file("model.safetensors", device="cuda:0")   # dict of torch tensors
    with safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
        w = f.get_tensor(f.keys()[0])
        rows = f.get_slice("lm_head.weight")[:4096]   # reads those rows only
    sd = load_checkpoint("path/to/model_dir", device_map={"lm_head": "cuda:1"},
                         device="cuda:0")

Module layout mirrors the safetensors package: gpufile.safetensors.torch,
.numpy and .cupy each have load_file / save_file for their framework;
gpufile.safetensors.load_file is the torch one (framework="numpy"/"cupy"
picks another). Torch, NumPy and CuPy are imported only when used.

Differences from safetensors.torch.load_file, on purpose:
  - device defaults to "cuda:0" (safetensors: "cpu").
  - the tensors of one file (one device) are views of one allocation, read
    as one request; a tensor whose offset does not suit its dtype's
    alignment is copied out instead. Use safe_open(...).get_tensor() for a
    tensor with memory of its own.
  - save_file writes __metadata__ keys sorted (safetensors writes them in
    hash order, so files with two or more metadata keys differ only there).

Errors: SafetensorError where safetensors raises it, each also the
OSError / KeyError / ValueError / IndexError gpufile raises there
(_errors). The drop-in table, name by name: docs/safetensors.md.
"""

import concurrent.futures
import os

from .. import _lib
from . import _core, _slice
from ._core import TensorInfo, dtype_order
from ._errors import SafetensorError

__all__ = ["load_file", "load", "safe_open", "save_file", "save", "load_checkpoint",
           "TensorInfo", "dtype_order", "SafetensorError"]
# Issue 37: a checkpoint shared by the ranks of a torch.distributed group.
from ._distributed import (REPLICATE, DistributedLoadError, Shard,  # noqa: E402
                           load_distributed)
__all__ += ["load_distributed", "Shard", "REPLICATE", "DistributedLoadError"]


def _set_current(fw, device):
    """Makes device current in this (worker) thread for the framework."""
    if device is None:
        return
    if fw.name in ("pt", "cupy"):
        fw.need_gpu(device)
    if fw.name == "pt":
        fw.torch.cuda.set_device(device)
    elif fw.name == "cupy":
        fw.cp.cuda.Device(device).use()


def _group(header, device, device_map):
    """{device: [TensorInfo in offset order]} of an open Header: device
    (parsed once) for every tensor without a device_map; with one, each
    name's device, each distinct device value parsed once."""
    if not device_map:
        return {_core._parse_cuda_device(device, header.path): header.tensors}
    groups, parsed = {}, {}
    for t in header.tensors:
        raw = _core.device_for(t.name, device_map, device)
        try:
            dev = parsed[type(raw), raw]
        except KeyError:
            dev = parsed[type(raw), raw] = _core._parse_cuda_device(raw, header.path)
        except TypeError:  # an unhashable value: _parse_cuda_device says what
            dev = _core._parse_cuda_device(raw, header.path)
        groups.setdefault(dev, []).append(t)
    return groups


def _load_header(header, fw, device, device_map, parallel=True):
    """{name: tensor} of every tensor of an open Header, grouped by device."""
    groups = _group(header, device, device_map)
    if len(groups) <= 1 or not parallel:
        out = {}
        for dev, infos in groups.items():
            with _core.on_device(fw, dev):
                out.update(_core.load_group(header, infos, fw, dev, ordered=True))
        return out
    return _run_per_device(
        [(dev, lambda dev=dev, infos=infos:
          _core.load_group(header, infos, fw, dev, ordered=True))
         for dev, infos in groups.items()], fw)


def _run_per_device(jobs, fw):
    """Runs [(device, fn)], one thread per device (jobs of one device in
    order, devices at the same time, each thread with its device current);
    merges the dicts they return. The first error is raised after every
    thread has ended."""
    by_dev = {}
    for dev, fn in jobs:
        by_dev.setdefault(dev, []).append(fn)

    def run(dev, fns):
        _set_current(fw, dev)
        out = {}
        for fn in fns:
            out.update(fn())
        return out

    out = {}
    if not by_dev:  # no tensor at all: ThreadPoolExecutor(0) would raise
        return out
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(by_dev)) as ex:
        futs = [ex.submit(run, dev, fns) for dev, fns in by_dev.items()]
        concurrent.futures.wait(futs)
        for f in futs:
            out.update(f.result())
    return out


def load_file(filename, device="cuda:0", framework="pt", device_map=None):
    """Every tensor of a safetensors file, as {name: tensor} with the names,
    dtypes, shapes and bytes safetensors' own load_file gives. device:
    "cuda", "cuda:N", an int, a torch.device or "cpu". device_map, when
    given, maps a tensor name or dotted prefix ("model.layers.0") to a
    device (the longest match wins; others go to device); the devices are
    loaded at the same time, one thread each. Raises OSError (the library's
    message names the file, the tensor and the field) for a malformed file,
    ValueError for a dtype the framework lacks."""
    fw = _core.framework(framework)
    with _core.Header(filename) as h:
        return _load_header(h, fw, device, device_map)


def load(data, device="cpu", framework="pt"):
    """safetensors' load(bytes): the tensors of a file's bytes. Written to a
    temporary file and loaded from there (gpufile reads files)."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".safetensors") as tmp:
        tmp.write(bytes(data))
        tmp.flush()
        return load_file(tmp.name, device=device, framework=framework)


class safe_open:
    """A safetensors file opened for reading single tensors, like
    safetensors.safe_open: keys(), get_tensor(name), get_slice(name),
    metadata(); a context manager. Each get_tensor() reads that tensor
    alone into memory of its own on device.

    May be shared by threads: close() waits for the get_tensor(),
    load_all() and slice reads of other threads; one that starts once
    close() has begun raises ValueError("I/O operation on closed
    safetensors file ...")."""

    def __init__(self, filename, framework="pt", device="cpu"):
        self._fw = _core.framework(framework)
        self._device = _core._parse_cuda_device(
            device, _lib.shown_name(os.fsdecode(filename)))
        if self._device is not None and self._fw.name == "numpy":
            self._fw.alloc(0, self._device)  # raises, as safetensors does here
        self._h = _core.Header(filename)
        self._staging = _slice.Staging()

    def _check_open(self):
        """Raises the closed-file ValueError once close() has begun (before
        memory is allocated for a read that could not happen)."""
        if self._h.closed:
            with self._h.hold():
                pass

    def keys(self):
        """Tensor names, sorted. On a closed file raises SafetensorError
        (also a ValueError), as safetensors does, as every method does."""
        self._check_open()
        return sorted(self._h.by_name)

    def offset_keys(self):
        """Tensor names in the order of their data in the file."""
        self._check_open()
        return [t.name for t in self._h.tensors]

    def metadata(self):
        """The __metadata__ dict ({} for an empty one), or None when the
        file has none or "__metadata__": null, as safetensors gives it."""
        self._check_open()
        return None if self._h.metadata is None else dict(self._h.metadata)

    def get_tensor(self, name):
        info = self._h.info(name)
        with self._h.hold(), _core.on_device(self._fw, self._device):
            return _core.load_group(self._h, [info], self._fw, self._device)[name]

    def get_slice(self, name):
        """Tensor name, to be read in parts: get_shape(), get_dtype() and
        [index] (ints, slices, Ellipsis, None read only the bytes they
        select, or the span they lie in; any other index reads the tensor
        whole and indexes it in the framework). Each part has memory of its
        own on device, C-contiguous. Nothing is read until it is indexed."""
        self._check_open()
        return _slice.Slice(self, self._h.info(name))

    def tensor_info(self, name):
        """dtype, shape and data_offsets of tensor name, without reading it."""
        self._check_open()
        return self._h.info(name)

    def load_all(self):
        """Every tensor, as load_file() would read them."""
        with self._h.hold():
            return _load_header(self._h, self._fw, self._device, None)

    def get_tensors(self):
        """safetensors' get_tensors(): {name: tensor} of every tensor, read
        as load_file() reads them (views of one allocation, see above)."""
        return self.load_all()

    def close(self):
        """Closes the file once the reads of other threads have ended.
        Calling it again does nothing."""
        try:
            self._h.close()
        finally:
            self._staging.drop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def save_file(tensors, filename, metadata=None):
    """Writes {name: tensor} (torch tensors on any device and CuPy arrays,
    contiguous; NumPy arrays of any layout and byte order, written
    little-endian in C order as safetensors.numpy writes them) as a
    safetensors file, through gpufile (device memory is written from the
    GPU). The bytes are those of safetensors' own save_file for the same
    input: tensors laid out by dtype (in the format's dtype order,
    descending) then name, compact JSON header with __metadata__ first,
    padded with spaces to a multiple of 8 bytes."""
    _core.save(tensors, filename, metadata)


def save(tensors, metadata=None):
    """safetensors' save(): the file's bytes. Host and device tensors."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.safetensors")
        save_file(tensors, p, metadata)
        with open(p, "rb") as f:
            return f.read()


def load_checkpoint(index_json_or_dir, device="cuda:0", device_map=None, framework="pt",
                    parallel=True):
    """Every tensor of a sharded checkpoint (model.safetensors.index.json,
    or the folder that holds it, or a folder of .safetensors files) as one
    {name: tensor}. device_map as for load_file. With parallel (default),
    the loads for different devices run at the same time, one thread per
    device with that device current; shards of one device load in turn.
    Raises ValueError when the index names a tensor its shard lacks, or a
    name is in two shards, or the index is no regular file (a FIFO, a
    device: refused unread, without blocking)."""
    fw = _core.framework(framework)
    index, folder, shards = _core.checkpoint_files(index_json_or_dir)
    headers = [_core.Header(p) for p in shards]
    try:
        owner = {}
        for h in headers:
            for name in h.by_name:
                if name in owner:
                    raise ValueError("tensor %r is in both %s and %s"
                                     % (name, owner[name], h.path))
                owner[name] = h.path
        if index is not None:
            for name, shard in index["weight_map"].items():
                p = _core.shard_path(folder, shard)
                if owner.get(name) != p:
                    raise ValueError("%s: weight_map puts tensor %r in %s, which has "
                                     "no such tensor" % (index_json_or_dir, name, p))
        jobs = []
        for h in headers:
            for dev, infos in _group(h, device, device_map).items():
                jobs.append((dev, lambda h=h, infos=infos, dev=dev:
                             _core.load_group(h, infos, fw, dev, ordered=True)))
        if not parallel:
            out = {}
            for dev, fn in jobs:
                with _core.on_device(fw, dev):
                    out.update(fn())
            return out
        return _run_per_device(jobs, fw)
    finally:
        for h in headers:
            h.close()


def _framework_api(framework, name, default_device):
    """load_file, load, save_file, save and load_checkpoint bound to one
    framework with its default device, as safetensors.<name> has them: the
    functions of the modules torch, numpy and cupy."""

    def load_file_(filename, device=default_device, device_map=None):
        return load_file(filename, device=device, framework=framework,
                         device_map=device_map)

    def load_(data, device=default_device):
        return load(data, device=device, framework=framework)

    def save_file_(tensors, filename, metadata=None):
        return save_file(tensors, filename, metadata)

    def save_(tensors, metadata=None):
        return save(tensors, metadata)

    def load_checkpoint_(index_json_or_dir, device=default_device, device_map=None,
                         parallel=True):
        return load_checkpoint(index_json_or_dir, device=device, device_map=device_map,
                               framework=framework, parallel=parallel)

    load_file_.__doc__ = (
        "The tensors of a safetensors file as %s objects (see "
        "gpufile.safetensors.load_file). device defaults to %r as in "
        "safetensors.%s." % (name, default_device, name))
    fns = (load_file_, load_, save_file_, save_, load_checkpoint_)
    for fn in fns:
        fn.__name__ = fn.__qualname__ = fn.__name__.rstrip("_")
        fn.__module__ = "gpufile.safetensors." + name
    return fns
