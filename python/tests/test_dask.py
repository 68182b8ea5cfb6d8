"""Dask: dask.array.from_zarr over a gpufile.zarr array on a
dask.distributed.LocalCluster of 2 worker processes reads the right
bytes, and each worker's gpufile counters are visible to
`gpufile stats PID` while it runs.

For a loaded CI machine: no timing assumptions. Each wait has a bound
(START_S, RUN_S) far above what the work needs, and a bound reached
fails naming what was waited for; which worker reads which block is
fixed (workers=, allow_other_workers=False), not left to the
scheduler, so the per-worker counts are exact whatever the load."""
import json
import logging
import os
import subprocess

import numpy as np
import pytest

import gpufile
from conftest import PKG_ROOT, missing

try:
    import dask
    import dask.array as da
    import distributed
    import zarr  # noqa: F401
except ImportError as e:  # python3-dask, -distributed, -zarr (deps.sh)
    distributed = None
    _why = str(e)

START_S = 240  # the cluster's 2 worker processes up (spawned: imports)
RUN_S = 300  # every computation done
NBLOCKS = 8
BLOCK = 32768  # float64 items: 256 KiB chunks


@pytest.fixture(scope="module", autouse=True)
def _deps():
    if distributed is None:
        missing("python3-dask / python3-distributed / python3-zarr (%s)"
                % _why)


def expected():
    return np.arange(NBLOCKS * BLOCK, dtype="<f8") * 0.5 - 7


@pytest.fixture(scope="module")
def array_root(tmp_path_factory):
    import gpufile.zarr as gz
    root = str(tmp_path_factory.mktemp("dask") / "a.zarr")
    z = gz.open_array(root, mode="w", shape=(NBLOCKS * BLOCK,),
                      chunks=(BLOCK,), dtype="<f8", compressor=None)
    z[:] = expected()
    return root


@pytest.fixture(scope="module")
def client():
    # The workers are new processes: they find this checkout's package
    # and library as this process does.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = PKG_ROOT + (os.pathsep + saved if saved else "")
    os.environ.setdefault("GPUFILE_LIBRARY", gpufile.library_path())
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "%ds" % START_S,
                              "distributed.comm.timeouts.tcp": "%ds" % RUN_S}):
            cluster = distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True,
                dashboard_address=None, memory_limit=0,
                silence_logs=logging.ERROR)
            try:
                with distributed.Client(cluster, timeout=START_S) as c:
                    try:
                        c.wait_for_workers(2, timeout=START_S)
                    except Exception as e:
                        pytest.fail("the LocalCluster's 2 worker processes "
                                    "were not up after %ds: %r" % (START_S, e))
                    yield c
            finally:
                cluster.close()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def stats_of(pid):
    """`gpufile stats PID --json`, parsed."""
    p = subprocess.run([gpufile.cli_path(), "stats", str(pid), "--json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=RUN_S)
    assert p.returncode == 0, "gpufile stats %d: %s" % (pid, p.stderr)
    return json.loads(p.stdout)


def read_bytes(st):
    """Bytes read, all paths: {"paths": {"host": {"read": {"bytes"}}}}."""
    return sum(p["read"]["bytes"] for p in st["paths"].values())


def test_from_zarr_on_two_worker_processes(client, array_root):
    import gpufile.zarr as gz
    x = da.from_zarr(gz.open_array(array_root, mode="r"))
    assert x.numblocks == (NBLOCKS,)
    pids = client.run(os.getpid)  # {worker address: pid}
    assert len(pids) == 2 and os.getpid() not in pids.values()
    workers = sorted(pids)
    futures = {}
    for i in range(NBLOCKS):
        w = workers[i % 2]
        futures[i] = (w, client.compute(x.blocks[i], workers=[w],
                                        allow_other_workers=False))
    try:
        distributed.wait([f for _, f in futures.values()], timeout=RUN_S)
    except Exception as e:
        pytest.fail("the %d block reads were not done after %ds: %r"
                    % (NBLOCKS, RUN_S, e))
    want = expected()
    for i, (w, f) in futures.items():
        got = f.result()
        assert (got == want[i * BLOCK:(i + 1) * BLOCK]).all(), \
            "block %d read on %s" % (i, w)
    # Each worker's own counters, read from outside by the CLI: the
    # chunks it was given, and metadata (.zarray, a few hundred bytes).
    chunk_bytes = BLOCK * 8
    for w in workers:
        st = stats_of(pids[w])
        assert st["pid"] == pids[w]
        mine = sum(1 for ww, _ in futures.values() if ww == w)
        got = read_bytes(st)
        print("worker %s pid %d: %d blocks pinned to it, %d bytes read "
              "(gpufile stats %d)" % (w, pids[w], mine, got, pids[w]))
        assert mine * chunk_bytes <= got < (mine + 1) * chunk_bytes, \
            st["paths"]
    # The whole array through the default scheduler on the cluster.
    total = client.compute(x.sum())
    assert total.result(timeout=RUN_S) == want.sum()
    listed = {p["pid"] for p in gpufile.processes()}
    assert set(pids.values()) <= listed
