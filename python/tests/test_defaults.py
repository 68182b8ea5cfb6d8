"""gpufile.defaults: get/set for every setting, round trips, the context
manager, and errors."""
import pytest

import gpufile
from gpufile import defaults


def test_every_setting_round_trips():
    names = defaults.names()
    assert {"compat_mode", "task_size", "gds_threshold", "nthreads",
            "bounce_buffer_size"} <= set(names)
    for name in names:
        value = defaults.get(name)
        assert isinstance(value, (int, str))
        with defaults.set(name, value):
            assert defaults.get(name) == value
            assert defaults.items()[name]["source"] == "setter"
        assert defaults.get(name) == value
        assert defaults.help(name)


def test_typed_values():
    assert defaults.get("task_size") == 4 << 20
    assert defaults.get("gds_threshold") == 16 << 10
    assert defaults.get("compat_mode") == "auto"
    assert isinstance(defaults.get("nthreads"), int)


def test_one_type_per_setting():
    """A text setting whose value was all digits came back as an int
    (http_status_codes "503" -> 503, but "429,503" a str): text settings
    are always str, numbers always int, modes always str."""
    with defaults.set("http_status_codes", "503"):
        assert defaults.get("http_status_codes") == "503"
    with defaults.set("http_status_codes", "429,503"):
        assert defaults.get("http_status_codes") == "429,503"
    with defaults.set("cufile_library", "42"):
        assert defaults.get("cufile_library") == "42"
    modes = {"auto", "on", "off"}
    for name in defaults.names():
        value = defaults.get(name)
        if name in defaults.TEXT_SETTINGS:
            assert isinstance(value, str), (name, value)
        elif isinstance(value, str):  # a mode; a number never comes as text
            assert value in modes, (name, value)
            with defaults.set(name, "on"):
                assert defaults.get(name) == "on"
        else:
            assert type(value) is int, (name, value)
    assert defaults.TEXT_SETTINGS <= set(defaults.names())


def test_set_stays_and_spellings():
    defaults.set("task_size", "1 GiB")
    assert defaults.get("task_size") == 1 << 30
    defaults.set(task_size=8 << 20, gds_threshold="64k")
    assert defaults.get("task_size") == 8 << 20
    assert defaults.get("gds_threshold") == 64 << 10
    defaults.set("compat_mode", gpufile.CompatMode.ON)
    assert defaults.get("compat_mode") == "on" == gpufile.CompatMode.ON
    defaults.set("compat_mode", "OFF")
    assert defaults.get("compat_mode") == "off"
    defaults.set("compat_mode", True)  # true means on
    assert defaults.get("compat_mode") == "on"


def test_set_takes_a_dict_as_kvikio():
    # kvikio.defaults.set({"name": value, ...}): a TypeError before.
    before = defaults.get("task_size"), defaults.get("gds_threshold")
    with defaults.set({"task_size": 2 << 20, "gds_threshold": "32k"}):
        assert defaults.get("task_size") == 2 << 20
        assert defaults.get("gds_threshold") == 32 << 10
    assert (defaults.get("task_size"), defaults.get("gds_threshold")) == before
    with pytest.raises(TypeError, match="given twice"):
        defaults.set({"task_size": 1 << 20}, task_size=2 << 20)
    with pytest.raises(TypeError):
        defaults.set(["task_size", 1 << 20])
    assert defaults.get("task_size") == before[0]


def test_numpy_integers_are_integers():
    # As File takes them: np.prod(shape) * 4 is a numpy.int64, and
    # set(task_size=...) of one raised TypeError "not int64".
    np = pytest.importorskip("numpy")
    with defaults.set(task_size=np.int64(2 << 20), nthreads=np.uint8(3)):
        assert defaults.get("task_size") == 2 << 20
        assert defaults.get("nthreads") == 3
    with pytest.raises(TypeError, match="not float64"):
        defaults.set("task_size", np.float64(1 << 20))


def test_context_manager_restores():
    before = {n: defaults.get(n) for n in defaults.names()}
    with defaults.set(task_size=1 << 30, compat_mode="on") as r:
        assert defaults.get("task_size") == 1 << 30
        assert defaults.get("compat_mode") == "on"
        with defaults.set("task_size", 1 << 20):
            assert defaults.get("task_size") == 1 << 20
        assert defaults.get("task_size") == 1 << 30
    assert {n: defaults.get(n) for n in defaults.names()} == before
    assert "restores" in repr(r)
    with pytest.raises(ZeroDivisionError):
        with defaults.set(nthreads=3):
            1 / 0
    assert defaults.get("nthreads") == before["nthreads"]


def test_context_manager_restores_where_values_came_from(monkeypatch):
    # Restored by setting the same text, a default or a variable's value
    # stayed a setter's: items() and stats() said "setter", and
    # cufile_stats then overrode cufile.json's profile.cufile_stats.
    monkeypatch.setenv("KVIKIO_TASK_SIZE", "2m")
    defaults.reset()
    defaults.set("nthreads", 5)  # a setter's before the block: stays one
    before = defaults.items()
    assert before["task_size"]["source"] == "kvikio-environment"
    assert before["gds_threshold"]["source"] == "default"
    with defaults.set(task_size="1m", gds_threshold="64k", nthreads=6):
        defaults.set("bounce_buffers", 3)  # set in the block: stays set
    after = defaults.items()
    assert after.pop("bounce_buffers")["value"] == "3"
    before.pop("bounce_buffers")
    assert after == before
    with pytest.raises(gpufile.ConfigError):  # rolled back the same way
        defaults.set(gds_threshold="1m", nthreads="lots")
    after = defaults.items()
    after.pop("bounce_buffers")
    assert after == before


def test_setting_applies_to_io(data_file):
    path, data = data_file
    out = bytearray(data.size)
    with defaults.set(task_size=1 << 20):
        s0 = gpufile.stats()["gpufile"]["read"]["host"]
        with gpufile.File(path) as f:
            assert f.read(out) == data.size
        s1 = gpufile.stats()["gpufile"]["read"]["host"]
    assert s1["ops"] - s0["ops"] == 1
    assert s1["tasks"] - s0["tasks"] == 6  # 5 MiB + 123 bytes at 1 MiB


def test_invalid_value_changes_nothing():
    before = defaults.get("task_size")
    with pytest.raises(gpufile.ConfigError) as ei:
        defaults.set(task_size=1 << 20, nthreads="lots")
    assert "nthreads" in str(ei.value) and "lots" in str(ei.value)
    assert ei.value.errno == 22
    assert defaults.get("task_size") == before  # rolled back
    with pytest.raises(ValueError):  # ConfigError is a ValueError too
        defaults.set("compat_mode", "maybe")
    with pytest.raises(ValueError):
        defaults.set("task_size", 0)  # below the minimum
    with pytest.raises(TypeError):
        defaults.set("task_size", 1.5)


def test_unknown_name_and_bad_calls():
    with pytest.raises(KeyError, match="task_size"):  # lists the names
        defaults.get("tasksize")
    with pytest.raises(KeyError):
        defaults.set(banana=1)
    with pytest.raises(TypeError):
        defaults.set()
    with pytest.raises(TypeError):
        defaults.set("task_size")


def test_environment_and_kvikio_fallback(monkeypatch):
    monkeypatch.setenv("KVIKIO_TASK_SIZE", "2m")
    defaults.reset()
    assert defaults.get("task_size") == 2 << 20
    assert defaults.items()["task_size"]["variable"] == "KVIKIO_TASK_SIZE"
    monkeypatch.setenv("GPUFILE_TASK_SIZE", "3m")
    defaults.reset()
    assert defaults.get("task_size") == 3 << 20
    item = defaults.items()["task_size"]
    assert item["variable"] == "GPUFILE_TASK_SIZE"
    with defaults.set(task_size="1m"):
        assert defaults.get("task_size") == 1 << 20
    assert defaults.get("task_size") == 3 << 20
