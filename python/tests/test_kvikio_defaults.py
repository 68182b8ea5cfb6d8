"""gpufile.kvikio.defaults (KvikIO's names, types, checks and context
managers) and gpufile.defaults accepting KvikIO's names (issue 34)."""
import pytest

import gpufile
import gpufile.kvikio as kvikio

D = kvikio.defaults
NAMES = ("compat_mode", "num_threads", "task_size", "gds_threshold",
         "bounce_buffer_size", "http_max_attempts", "http_status_codes",
         "http_timeout", "auto_direct_io_read", "auto_direct_io_write")


def test_every_name_and_type():
    for name in NAMES:
        D.get(name)
    assert isinstance(D.get("compat_mode"), kvikio.CompatMode)
    assert D.get("num_threads") == D.get("thread_pool_nthreads")
    assert D.get("num_threads") == gpufile.defaults.get("nthreads")
    assert all(isinstance(c, int) for c in D.get("http_status_codes"))
    assert isinstance(D.get("auto_direct_io_read"), bool)
    assert isinstance(D.get("auto_direct_io_write"), bool)
    assert [m.value for m in kvikio.CompatMode] == [0, 1, 2]
    assert kvikio.CompatMode.AUTO.name == "AUTO"


def test_unknown_names():
    for bad in ("nonexistent_property", "set_task_size"):
        with pytest.raises(KeyError):
            D.set(bad, 123)
        with pytest.raises(KeyError):
            D.get(bad)
    with pytest.raises(KeyError, match="did you mean 'task_size'"):
        D.get("task_sise")
    for args in ((), ("task_size",), (1, 2), ("a", 1, 2)):
        with pytest.raises(ValueError, match="Valid arguments"):
            D.set(*args)


def test_context_managers_nest_and_restore():
    before = D.get("task_size")
    with D.set("task_size", 1024) as r:
        assert r is None
        assert D.get("task_size") == 1024
        with D.set("task_size", 2048):
            assert D.get("task_size") == 2048
        assert D.get("task_size") == 1024
    assert D.get("task_size") == before
    # A setting nobody had set is unset again: its source is the default.
    assert gpufile.defaults.items()["task_size"]["source"] != "setter"
    old = {n: D.get(n) for n in ("task_size", "num_threads",
                                 "bounce_buffer_size")}
    with D.set({"task_size": 1024, "num_threads": 16,
                "bounce_buffer_size": 1024}):
        assert (D.get("task_size"), D.get("num_threads"),
                D.get("bounce_buffer_size")) == (1024, 16, 1024)
    assert {n: D.get(n) for n in old} == old
    # Without with, the values stay.
    D.set("num_threads", 3)
    assert D.get("num_threads") == 3


def test_bounce_buffer_size_small_values_exact():
    # KvikIO honours any positive size; gpufile clamped below 64 KiB.
    for size in (3, 4, 1000, 4095, 65535):
        with D.set("bounce_buffer_size", size):
            assert D.get("bounce_buffer_size") == size
            assert gpufile.defaults.get("bounce_buffer_size") == size
            assert gpufile.defaults.items()["bounce_buffer_size"][
                "value"] == str(size)


def test_value_checks_as_kvikio():
    for name in ("num_threads", "task_size", "bounce_buffer_size",
                 "http_max_attempts"):
        with pytest.raises(ValueError, match="positive integer"):
            D.set(name, 0)
        with pytest.raises(OverflowError, match="negative value"):
            D.set(name, -1)
    with pytest.raises(OverflowError, match="negative value"):
        D.set("gds_threshold", -1)
    with D.set("gds_threshold", 0):
        assert D.get("gds_threshold") == 0
    with pytest.raises(TypeError):
        D.set("task_size", 1.5)
    before = D.get("http_status_codes")
    with D.set("http_status_codes", [500]):
        assert D.get("http_status_codes") == [500]
        D.set("http_status_codes", [429, 500])
        assert D.get("http_status_codes") == [429, 500]
    assert D.get("http_status_codes") == before
    for bad in (0, ["a"]):
        with pytest.raises(TypeError):
            D.set("http_status_codes", bad)
    with D.set({"http_timeout": 1, "http_max_attempts": 5}):
        assert D.get("http_timeout") == 1 and D.get("http_max_attempts") == 5
    # All or none: a bad value leaves the good one unset.
    before = D.get("task_size")
    with pytest.raises(ValueError):
        D.set({"task_size": 4096, "num_threads": 0})
    assert D.get("task_size") == before


def test_compat_mode():
    before = D.get("compat_mode")
    with D.set("compat_mode", kvikio.CompatMode.ON):
        assert D.get("compat_mode") == kvikio.CompatMode.ON
        assert gpufile.defaults.get("compat_mode") == "on"
        assert D.is_compat_mode_preferred()
        D.set("compat_mode", kvikio.CompatMode.OFF)
        assert D.get("compat_mode") == kvikio.CompatMode.OFF
        assert not D.is_compat_mode_preferred()
        D.set("compat_mode", kvikio.CompatMode.AUTO)
        assert D.get("compat_mode") == kvikio.CompatMode.AUTO
        D.set("compat_mode", gpufile.CompatMode.ON)  # gpufile's enum too
        assert D.get("compat_mode") == kvikio.CompatMode.ON
        D.set("compat_mode", "off")
        assert D.get("compat_mode") == kvikio.CompatMode.OFF
    assert D.get("compat_mode") == before
    with pytest.raises(ValueError):
        D.set("compat_mode", "sometimes")
    if gpufile.cuda_device_count() == 0:
        with D.set("compat_mode", kvikio.CompatMode.AUTO):
            assert D.is_compat_mode_preferred()


def test_direct_io_flags():
    with D.set({"auto_direct_io_read": False, "auto_direct_io_write": False}):
        assert D.get("auto_direct_io_read") is False
        assert gpufile.defaults.get("direct_io") == "off"
        assert D.get("auto_direct_io_write") is False
    with D.set("auto_direct_io_read", True):
        assert gpufile.defaults.get("direct_io") == "auto"
    assert D.get("auto_direct_io_write") is True


def test_deprecated_getters_and_setters():
    with pytest.warns(FutureWarning, match="defaults.get"):
        assert D.task_size() == D.get("task_size")
    with pytest.warns(FutureWarning, match="defaults.get"):
        assert D.num_threads() == D.get("num_threads")
    with pytest.warns(FutureWarning, match="defaults.set"):
        D.set_num_threads(5)
    assert D.get("num_threads") == 5
    with pytest.warns(FutureWarning, match="defaults.set"):
        D.task_size_reset(8192)
    assert D.get("task_size") == 8192
    with pytest.warns(FutureWarning):
        D.compat_mode_reset(kvikio.CompatMode.ON)
    with pytest.warns(FutureWarning):
        assert D.compat_mode() == kvikio.CompatMode.ON
    for name in ("gds_threshold", "bounce_buffer_size", "http_max_attempts",
                 "http_status_codes", "http_timeout"):
        for fn in (name, "set_" + name, name + "_reset"):
            assert callable(getattr(D, fn)), fn


# ---- gpufile.defaults with KvikIO's names ----

def test_gpufile_defaults_aliases():
    with gpufile.defaults.set(num_threads=3):
        assert gpufile.defaults.get("nthreads") == 3
        assert gpufile.defaults.get("num_threads") == 3
    gpufile.defaults.set({"num_threads": 6})
    assert gpufile.defaults.get("thread_pool_nthreads") == 6
    gpufile.defaults.set("num_threads", 7)
    assert gpufile.defaults.items()["nthreads"]["value"] == "7"
    assert "num_threads" not in gpufile.defaults.names()
    assert gpufile.defaults.help("num_threads") == gpufile.defaults.help(
        "nthreads")
    with pytest.raises(TypeError, match="given twice"):
        gpufile.defaults.set({"nthreads": 2}, num_threads=3)


def test_gpufile_defaults_did_you_mean():
    with pytest.raises(KeyError, match="did you mean 'task_size'"):
        gpufile.defaults.get("task_sise")
    with pytest.raises(KeyError, match="did you mean 'num_threads'"):
        gpufile.defaults.set(num_thread=4)
    with pytest.raises(KeyError) as e:
        gpufile.defaults.get("zzzzzz")
    assert "did you mean" not in str(e.value)
    assert "task_size" in str(e.value)  # the list of settings
