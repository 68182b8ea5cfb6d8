#!/usr/bin/env python3
"""save_file of a checkpoint against a raw gpufile write of the same bytes
(issue 33 item 2), from host tensors (torch CPU, else NumPy) and, where
torch sees a GPU, from GPU tensors; and safetensors.torch.save_file where
the safetensors package is installed. The writers are interleaved over
--rounds rounds; each writes a new file (removed before), and the medians
and their ratios are printed.

  save_file   gpufile.safetensors.save_file: header, each tensor's
              gpufile_pwrite, then (as it replaces the file through a
              temporary one) fsync and rename
  raw         gpufile.File(path, "w").write of one buffer of the same
              size, then File.sync (the fsync save_file pays), so the pair
              measures what save_file adds
  raw_nosync  the same without the sync
  safetensors safetensors.torch.save_file (no fsync of its own: the
              file is synced after, untimed, like every writer's); from
              GPU tensors it copies each to the host first
  safetensors_sync  the same, then an fsync of the file (timed): the
              durability save_file pays before its rename

Usage (from the repository root, after building):
  GPUFILE_LIBRARY=build/libgpufile.so PYTHONPATH=python \\
      python3 bench/st_save_bench.py --dir build/write-bench --size 2g --rounds 5 [--device cuda]
"""
import argparse
import os
import statistics
import sys
import time


def parse_size(text):
    units = {"": 0, "k": 10, "m": 20, "g": 30}
    t = text.lower().rstrip("ib")
    u = t[-1] if t[-1] in units else ""
    return int(t[:len(t) - len(u)]) << units[u]


def make_tensors(total, device):
    """A checkpoint of total bytes: for each 64 MiB, one 48 MiB float16
    tensor, one 12 MiB float32, one 4 MiB bfloat16 and a few small ones
    (biases, norms), as a transformer layer has; torch when importable."""
    try:
        import torch
    except ImportError:
        torch = None
    if device != "cpu" and torch is None:
        sys.exit("st_save_bench: --device %s needs torch" % device)
    layer = 64 << 20
    small = [4096, 16384, 65536]
    out, left, i = {}, total, 0
    while left > 0:
        for name, nbytes, dt in (("w", 48 << 20, "f16"), ("u", 12 << 20, "f32"),
                                 ("v", (4 << 20) - sum(small), "bf16"),
                                 ("b0", small[0], "f32"), ("b1", small[1], "f32"),
                                 ("n", small[2], "f16")):
            nbytes = min(nbytes, left)
            if nbytes <= 0:
                break
            if torch is not None:
                dtype = {"f16": torch.float16, "f32": torch.float32,
                         "bf16": torch.bfloat16}[dt]
                n = nbytes // torch.tensor([], dtype=dtype).element_size()
                t = torch.randint(0, 100, (n,), dtype=torch.int16).to(dtype)
                out["layer%d.%s" % (i, name)] = t.to(device)
            else:
                import numpy as np
                dtype = {"f16": np.float16, "f32": np.float32,
                         "bf16": np.float16}[dt]
                n = nbytes // np.dtype(dtype).itemsize
                out["layer%d.%s" % (i, name)] = np.ones(n, dtype=dtype)
            left -= n * (2 if dt != "f32" else 4)
        i += 1
        if left < 4:
            break
    return out, torch


def nbytes_of(t):
    return t.nelement() * t.element_size() if hasattr(t, "element_size") else t.nbytes


def sync_remove(path):
    if os.path.exists(path):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="build/write-bench")
    ap.add_argument("--size", default="2g")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    a = ap.parse_args()
    import gpufile
    import gpufile.safetensors as gst

    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "ckpt.safetensors")
    tensors, torch = make_tensors(parse_size(a.size), a.device)
    if a.device != "cpu" and not torch.cuda.is_available():
        print("st_save_bench: skipped, torch sees no GPU for --device %s" % a.device)
        return 77
    total = sum(nbytes_of(t) for t in tensors.values())
    if torch is not None:
        flat = torch.empty(total, dtype=torch.uint8, device=a.device)
        flat.fill_(7)
        if a.device == "cpu":
            flat = flat.numpy()  # a host buffer gpufile takes as is
    else:
        import numpy as np
        flat = np.full(total, 7, dtype=np.uint8)
    try:
        import safetensors.torch as sft
    except ImportError:
        sft = None
    print("checkpoint: %d tensors, %d bytes, on %s (%s)"
          % (len(tensors), total, a.device, "torch" if torch else "numpy"))
    if sft is None:
        print("safetensors: not installed here; safetensors.torch.save_file not measured")
    elif torch is None:
        sft = None

    def sync_dev():
        if a.device != "cpu":
            torch.cuda.synchronize()

    def w_save():
        gst.save_file(tensors, path)

    def w_raw(sync=True):
        with gpufile.File(path, "w") as f:
            n = f.write(flat)
            assert n == total, n
            if sync:
                f.sync()

    writers = [("save_file", w_save), ("raw", w_raw),
               ("raw_nosync", lambda: w_raw(False))]
    def w_sft_sync():
        sft.save_file(tensors, path)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if sft is not None:
        # From GPU tensors it copies each to the host first, as its users
        # get it. And it does not sync: safetensors_sync adds the fsync
        # that save_file makes before its rename.
        writers.append(("safetensors", lambda: sft.save_file(tensors, path)))
        writers.append(("safetensors_sync", w_sft_sync))
    sync_dev()
    w_raw(False)  # warm-up: workers, bounce buffers
    sync_remove(path)
    secs = {n: [] for n, _ in writers}
    for r in range(a.rounds):
        line = []
        for name, fn in writers:
            sync_remove(path)
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            sync_remove(path)
            secs[name].append(dt)
            line.append("%s %.2f GB/s" % (name, total / dt / 1e9))
        print("round %d: %s" % (r + 1, ", ".join(line)), flush=True)
    med = {n: statistics.median(v) for n, v in secs.items()}
    print("medians (GB/s): " + ", ".join("%s %.3f" % (n, total / med[n] / 1e9)
                                          for n in med))
    print("save_file / raw (synced, as save_file is): %.2fx"
          % (med["raw"] / med["save_file"]))
    print("save_file / raw_nosync: %.2fx" % (med["raw_nosync"] / med["save_file"]))
    if "safetensors" in med:
        print("save_file / safetensors.torch.save_file: %.2fx"
              % (med["safetensors"] / med["save_file"]))
        print("save_file / safetensors.torch.save_file + fsync: %.2fx"
              % (med["safetensors_sync"] / med["save_file"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
