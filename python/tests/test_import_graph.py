"""The modules of the gpufile package import each other one way only.

Read from the source, not from sys.modules: every ``from . import X``,
``from .X import Y``, ``from .. import X`` and ``import gpufile.X`` line
counts, those inside functions too (an import deferred into a function is
still a loop: _file.py and _page_cache.py each imported the other inside
functions). A package's __init__ is a node of the graph too, but only
for names: `from . import _core` needs the module _core, while
`from . import _on_device` in a module needs its package's __init__, which
imports that module in turn (safetensors/_slice.py did that).
"""
import ast
import os

import gpufile

PKG_DIR = os.path.dirname(os.path.abspath(gpufile.__file__))
ROOT = os.path.dirname(PKG_DIR)


def _modules():
    """{dotted name: (path, is_package)} of every .py file of the package."""
    mods = {}
    for folder, _, files in os.walk(PKG_DIR):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            mods[".".join(parts)] = (path, is_package)
    return mods


def _targets(node, module, is_package, mods):
    """The modules of mods that the import statement node in module names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    out = []
    for alias in node.names:
        sub = prefix + "." + alias.name
        if sub in mods:  # "from . import _lib": the module _lib
            out.append(sub)
        elif prefix in mods:  # "from ._file import File": the module _file;
            out.append(prefix)  # "from . import name": the package's __init__
    return out


def import_graph():
    """{module or package: {imported module or package: (path, line)}}."""
    mods = _modules()
    graph = {m: {} for m in mods}
    for module in graph:
        path, is_package = mods[module]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, module, is_package, mods):
                if target in graph and target != module:
                    graph[module].setdefault(target, (path, node.lineno))
    return graph


def find_cycle(graph):
    """One cycle of graph as [m0, m1, ..., m0], or None."""
    state = {}  # absent: not seen; 1: on the path; 2: done

    def visit(m, path):
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state:
                found = visit(t, path)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [])
            if found:
                return found
    return None


def describe(cycle, graph):
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        path, line = graph[a][b]
        steps.append("%s imports %s (%s:%d)"
                     % (a, b, os.path.relpath(path, ROOT), line))
    return "; ".join(steps)


def test_the_graph_sees_function_level_imports():
    """The reader is not blind: File is imported, at module level or in a
    function, by the modules that take a File."""
    graph = import_graph()
    assert "gpufile._file" in graph["gpufile._page_cache"]
    assert "gpufile._file" in graph["gpufile.safetensors._core"]
    assert "gpufile._lib" in graph["gpufile._file"]
    # A name from a package is an edge to the package; a module of it is not.
    assert "gpufile.safetensors._core" in graph["gpufile.safetensors"]
    assert "gpufile.safetensors" not in graph["gpufile.safetensors._slice"]
    assert "gpufile.safetensors" in graph["gpufile.safetensors.torch"]


def test_find_cycle_names_a_loop():
    graph = {"a": {"b": ("a.py", 1)}, "b": {"c": ("b.py", 2)},
             "c": {"a": ("c.py", 3)}, "d": {}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": ("a.py", 1)}, "b": {}}) is None


def test_no_import_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + describe(cycle, graph)
