"""gpufile's settings, as KvikIO's ``kvikio.defaults``.

    gpufile.defaults.get("task_size")            # 4194304
    gpufile.defaults.set("compat_mode", "off")   # stays set
    gpufile.defaults.set({"compat_mode": "off"})  # the same, as KvikIO's
    with gpufile.defaults.set(task_size=1 << 30, gds_threshold="64k"):
        ...                                      # restored on exit

Values come back typed, one type per setting: sizes and counts as int,
modes ("auto", "on", "off") and text settings (TEXT_SETTINGS: names,
lists) as str, even when all digits. Values given may be int (a NumPy integer too),
bool, str (any spelling the environment accepts: "4m", "1 GiB", "yes", ...)
or a gpufile.CompatMode.
KvikIO's names are accepted too (ALIASES: num_threads is nthreads). An
unknown name is a KeyError that names the nearest setting ("did you mean
'task_size'?"); an invalid value a gpufile.ConfigError
(an OSError with errno EINVAL that is also a ValueError) naming the
setting and the value, and then nothing changes.
"""

import ctypes
import enum

from . import _lib

__all__ = ["get", "set", "names", "help", "items", "reset", "CompatMode"]


class CompatMode(str, enum.Enum):
    AUTO = "auto"  # try cuFile, fall back with a reason
    ON = "on"      # never cuFile
    OFF = "off"    # cuFile or a clear error

    def __str__(self):
        return self.value


def names():
    """Every setting's name, in the library's order."""
    lib = _lib.lib()
    return [lib.gpufile_config_name(i).decode() for i in range(lib.gpufile_config_count())]


def help(name=None):
    """The one-line description of a setting, or {name: description}."""
    lib = _lib.lib()
    table = {lib.gpufile_config_name(i).decode(): lib.gpufile_config_help(i).decode()
             for i in range(lib.gpufile_config_count())}
    if name is None:
        return table
    return table[_known(name)]


# KvikIO's names for gpufile's settings (issue 34): a KvikIO program's
# defaults.set(num_threads=8) works unchanged. Reported under gpufile's
# name (names(), items()).
ALIASES = {"num_threads": "nthreads", "thread_pool_nthreads": "nthreads"}


def _known(name):
    """gpufile's name for setting name (itself, or the setting an alias in
    ALIASES names). An unknown name is a KeyError that lists the settings
    and names the nearest one ("did you mean 'task_size'?")."""
    if not isinstance(name, str):
        raise TypeError("a setting name is a str, not %s" % type(name).__name__)
    name = ALIASES.get(name, name)
    known = names()
    if name not in known:
        import difflib
        near = difflib.get_close_matches(name, known + sorted(ALIASES), n=1)
        hint = " (did you mean %r?)" % near[0] if near else ""
        raise KeyError("unknown gpufile setting %r%s; settings are: %s"
                       % (name, hint, ", ".join(known)))
    return name


# The settings whose values are text (KIND_STRING in src/core/config.c): a
# library name, a list of HTTP statuses. Their values stay str even when
# all digits ("503" came back as the int 503, "429,503" as a str). Every
# other setting is a mode ("auto", "on", "off": str) or a number (int):
# the library gives those only as such words or as decimal digits.
TEXT_SETTINGS = frozenset(("cufile_library", "http_status_codes"))


def _typed(name, text):
    if name in TEXT_SETTINGS or not text.isdigit():
        return text
    return int(text)


def _raw(name):
    """(canonical text, source word, variable or None)."""
    name = _known(name)
    lib = _lib.lib()
    value = ctypes.create_string_buffer(1024)
    variable = ctypes.create_string_buffer(256)
    source = ctypes.c_int(0)
    rc = lib.gpufile_config_get(name.encode(), value, len(value), ctypes.byref(source),
                                variable, len(variable))
    _lib.check(rc)
    var = variable.value.decode()
    return (value.value.decode(), lib.gpufile_source_name(source.value).decode(),
            var or None)


def get(name):
    """The effective value of setting name (or of the setting an alias in
    ALIASES names): an int for sizes and counts, a str for modes ("auto",
    "on", "off") and for TEXT_SETTINGS."""
    return _typed(_known(name), _raw(name)[0])


def items():
    """{name: {"value", "source", "variable"}} for every setting, as
    ``gpufile config --json`` reports them."""
    out = {}
    for n in names():
        v, source, variable = _raw(n)
        out[n] = {"value": v, "source": source, "variable": variable}
    return out


def _text(value):
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\0" in value:
            # A C string would end at the NUL: "4m\0junk" would set 4m.
            raise ValueError("embedded null byte in setting value %r" % value)
        return value
    if hasattr(type(value), "__index__"):  # numpy.int64(1 << 20), as File
        return str(value.__index__())
    raise TypeError("a setting value is an int, bool or str, not %s"
                    % type(value).__name__)


def _set_one(name, value):
    name = _known(name)
    _lib.check(_lib.lib().gpufile_config_set(name.encode(), _text(value).encode()))


class _NotSet(str):
    """A value before set() that no setter gave (a default, or the
    environment's): restoring it unsets the setting (_unset)."""

    __slots__ = ()

    def __repr__(self):
        return "%s (unset)" % str.__repr__(self)


def _previous(name):
    value, source, _ = _raw(name)
    return value if source == "setter" else _NotSet(value)


def _unset(name):
    """Gives setting name back to the environment or its default. Set to
    the same text instead, it stayed a setter's: items() and stats() said
    "setter", and cufile_stats then overrode cufile.json's
    profile.cufile_stats, which only the default leaves to cuFile. The
    library has no call for one setting: every setting is reset and the
    others' setter values put back (other threads may see the
    environment's values in between)."""
    kept = {}
    for n in names():
        try:
            value, source, _ = _raw(n)
        except _lib.ConfigError:  # a bad variable: no setter's value
            continue
        if n != name and source == "setter":
            kept[n] = value
    reset()
    for n, value in kept.items():
        _set_one(n, value)


def _restore_one(name, value):
    if isinstance(value, _NotSet):
        _unset(name)
    else:
        _set_one(name, value)


def set(*args, **values):
    """set(name, value), set({name: value, ...}) (KvikIO's form) or
    set(name=value, ...): sets each, all or none. Usable as
    ``with gpufile.defaults.set(...):`` to restore on exit the previous
    values and where they came from (a setting no setter had set is
    unset again); otherwise the new values stay."""
    if len(args) == 1 and isinstance(args[0], dict):
        given = args[0]
    elif len(args) == 2:
        given = {args[0]: args[1]}
    elif args:
        raise TypeError("set() takes (name, value), a dict or keyword "
                        "arguments")
    if args:
        values = [*given.items(), *values.items()]
    else:
        values = list(values.items())
    if not values:
        raise TypeError("set() needs at least one setting")
    # Under gpufile's names: an alias and its setting, or a name given
    # both positionally and as a keyword, is one setting given twice.
    canonical = {}
    for name, value in values:
        key = _known(name)
        if key in canonical:
            raise TypeError("set(): %r given twice" % (name,))
        canonical[key] = value
    values = canonical
    return _lib.set_all(values, _previous, _restore_one,
                        "gpufile.defaults.set")


def reset():
    """Forgets every setter and rereads the environment."""
    _lib.lib().gpufile_config_reset()
