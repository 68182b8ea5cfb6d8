#!/usr/bin/env python3
"""Compute over a Zarr array on S3 with several Dask workers, every chunk
read through gpufile's S3 source on the worker that needs it.

    AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_DEFAULT_REGION=... \\
    [AWS_ENDPOINT_URL=http://127.0.0.1:4568] \\
    GPUFILE_LIBRARY=build/libgpufile.so PYTHONPATH=python \\
        python3 examples/zarr_s3_dask.py s3://bucket/path/a.zarr --workers 2

Prints the array's shape and chunks, its sum, mean, min and max per
first-axis block, and for each worker process its pid and the bytes its
gpufile read from S3 (what `gpufile stats PID` shows while it runs).
--cupy reads the chunks into GPU memory on each worker (CuPy).

The URL may also be http(s):// (a Zarr folder served over HTTP). Writing
to S3 is not gpufile's: upload the array with your S3 tools.
"""
import argparse
import logging
import os

import dask.array as da
import distributed

import gpufile
import gpufile.zarr as gz


def worker_counters():
    """On a worker: its pid and the bytes its gpufile read from remote
    sources (the "remote" path) and in all."""
    reads = gpufile.stats()["gpufile"]["read"]
    return {"pid": os.getpid(), "remote_bytes": reads["remote"]["bytes"],
            "bytes": sum(c["bytes"] for c in reads.values())}


def open_array(url, cupy):
    meta = None
    if cupy:
        import cupy as cp
        meta = cp.empty(())
    return gz.open_array(url, mode="r", meta_array=meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url", help="s3://bucket/key/of/array.zarr (or http(s)://)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cupy", action="store_true",
                    help="chunks into GPU memory on the workers")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds to wait for the cluster and the result")
    args = ap.parse_args()

    z = open_array(args.url, args.cupy)
    print("array %s: shape %s, chunks %s, dtype %s"
          % (gpufile._lib.shown_name(args.url), z.shape, z.chunks, z.dtype))
    x = da.from_zarr(z)
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                  processes=True, dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster, timeout=args.timeout) as client:
        client.wait_for_workers(args.workers, timeout=args.timeout)
        total, mean, lo, hi = client.compute(
            [x.sum(), x.mean(), x.min(), x.max()], sync=False)
        distributed.wait([total, mean, lo, hi], timeout=args.timeout)
        print("sum %r  mean %r  min %r  max %r"
              % tuple(float(f.result()) for f in (total, mean, lo, hi)))
        for addr, c in sorted(client.run(worker_counters).items()):
            print("worker %s pid %d: %d bytes read from S3/HTTP by gpufile "
                  "(%d in all)" % (addr, c["pid"], c["remote_bytes"],
                                   c["bytes"]))


if __name__ == "__main__":
    main()
