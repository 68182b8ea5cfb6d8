#!/usr/bin/env python3
"""Per-tensor overhead of gpufile.safetensors.load_file (issue 16): how
many microseconds each tensor costs on top of gpufile's raw read of the
same bytes, with NumPy (host memory; runs anywhere), torch (host or GPU)
and CuPy (GPU).

The file has many small tensors (default 2,000 of 4 KiB: 8 MiB), so that
the read itself is short and the per-tensor work shows. For each framework
it times, warm (page cache hot), the best of --rounds runs of:
  raw     gpufile's read of the data section into a buffer allocated once
  header  opening the file: header parsed and validated in C, the tensor
          table fetched into Python (gpufile.safetensors._core.Header)
  views   building the {name: tensor} dict over a loaded buffer
  load    the whole gpufile.safetensors.load_file
and prints microseconds per tensor for header, views and load - raw.

Usage (from the repository root, after building):
  GPUFILE_LIBRARY=build/libgpufile.so PYTHONPATH=python \\
      python3 bench/st_overhead.py                       # numpy, host
  ... bench/st_overhead.py --framework pt --device cuda:0
  ... bench/st_overhead.py --framework cupy --device cuda:0
  ... bench/st_overhead.py --framework pt --device cuda:0 --tensors 2000 \\
      --tensor-bytes 1048576          # the shape of st_bench.py's "many"
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

import gpufile
import gpufile.safetensors as gst
from gpufile.safetensors import _core


def make_file(path, ntensors, nbytes):
    """ntensors F16 tensors of nbytes each (shape [nbytes/64, 32]),
    written with NumPy; kept when it already has that table."""
    if os.path.exists(path):
        try:
            with _core.Header(path) as h:
                if len(h.tensors) == ntensors and h.data_size == ntensors * nbytes:
                    return
        except OSError:
            pass
    rows = nbytes // 64
    rng = np.random.default_rng(1)
    d = {"layer.%05d.weight" % i: rng.integers(0, 1 << 16, (rows, 32), dtype=np.uint16)
         .view(np.float16) for i in range(ntensors)}
    gst.save_file(d, path)


def best(fn, rounds):
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framework", default="numpy", choices=["numpy", "pt", "cupy"])
    ap.add_argument("--device", default="cpu", help='"cpu" or "cuda:N"')
    ap.add_argument("--tensors", type=int, default=2000)
    ap.add_argument("--tensor-bytes", type=int, default=4096,
                    help="bytes per tensor, a multiple of 64")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--file", default=None,
                    help="the file to use (created when absent); default: a "
                    "temporary one")
    args = ap.parse_args()
    if args.tensor_bytes % 64 or args.tensor_bytes <= 0:
        ap.error("--tensor-bytes must be a positive multiple of 64")
    fw = _core.framework(args.framework)
    dev = _core._parse_cuda_device(args.device, "--device")
    tmp = None
    path = args.file
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "overhead.safetensors")
    make_file(path, args.tensors, args.tensor_bytes)
    n = args.tensors

    sync = lambda: None  # noqa: E731
    if args.framework == "pt" and dev is not None:
        sync = lambda: fw.torch.cuda.synchronize(dev)  # noqa: E731
    elif args.framework == "cupy":
        sync = lambda: fw.cp.cuda.Device(dev).synchronize()  # noqa: E731

    with _core.Header(path) as h:
        size = h.data_size
        doff = h.data_offset
    buf = fw.alloc(size + 2 * _core._PAGE, dev)
    base = fw.ptr(buf)
    shift = (doff - base) % _core._PAGE  # congruent, as load_file places it
    gpufile.warmup()

    def raw():
        with gpufile.File(path) as f:
            rc = gpufile._lib.lib().gpufile_pread(f._h(), gpufile._lib.ctypes.c_void_p(
                base + shift), size, doff)
        assert rc == size, rc

    def header():
        _core.Header(path).close()

    h = _core.Header(path)
    offs = [shift + t.begin for t in h.tensors]

    def views():
        fw.views(buf, base, h.tensors, offs, path)

    def load():
        out = gst.load_file(path, device=args.device, framework=args.framework)
        sync()
        assert len(out) == n

    load()  # allocator, page cache
    t_raw = best(raw, args.rounds)
    t_hdr = best(header, args.rounds)
    t_views = best(views, args.rounds)
    t_load = best(load, args.rounds)
    h.close()
    print("gpufile %s, %s on %s, %d tensors of %d bytes (%.1f MiB), best of %d"
          % (gpufile.version(), args.framework, args.device, n, args.tensor_bytes,
             size / 2**20, args.rounds))
    print("raw read   %8.3f ms" % (t_raw * 1e3))
    print("load_file  %8.3f ms" % (t_load * 1e3))
    print("header     %8.2f us/tensor" % (t_hdr / n * 1e6))
    print("views      %8.2f us/tensor" % (t_views / n * 1e6))
    print("load - raw %8.2f us/tensor (goal: < 15 on the H200 host)"
          % ((t_load - t_raw) / n * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
