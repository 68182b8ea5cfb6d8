#!/usr/bin/env python3
"""The symbol map, the headers and the shared library agree.

    check_abi.py LIBRARY SOURCE_DIR      check; exit 0 pass, 1 fail
    check_abi.py --selftest SOURCE_DIR   show that the check catches a
                                         missing symbol, an extra export
                                         and a wildcard

Rules (src/gpufile.map says how to add a function):
  - every function declared GPUFILE_API in include/gpufile.h is listed,
    by name, in a public node (GPUFILE_<version>) of src/gpufile.map, and
    every one in include/gpufile_private.h in the GPUFILE_PRIVATE node;
  - the map lists nothing else, and no wildcard in a global section;
  - the library exports (nm -D --defined-only) exactly the map's symbols,
    each under the node the map puts it in.
Every problem is reported on a line of its own naming the symbol.
"""
import os
import re
import subprocess
import sys


def header_functions(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return set(re.findall(r"\bGPUFILE_API\b[^;{}()]*?\b(gpufile_\w+)\s*\(", text))


def map_nodes(text):
    """{node: (globals, has_wildcard)} of a GNU ld version script."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"#[^\n]*", " ", text)
    nodes = {}
    for m in re.finditer(r"(\w[\w.]*)\s*\{(.*?)\}\s*[\w.]*\s*;", text, flags=re.S):
        body = m.group(2)
        glob = re.split(r"\blocal\s*:", body)[0]
        glob = re.sub(r"\bglobal\s*:", " ", glob)
        names = [n.strip() for n in glob.split(";") if n.strip()]
        wild = [n for n in names if re.search(r"[*?\[]", n)]
        nodes[m.group(1)] = (set(n for n in names if n not in wild), wild)
    return nodes


def exported(library):
    """{symbol: node} of the library's dynamic symbol table."""
    out = subprocess.run(["nm", "-D", "--defined-only", library],
                         stdout=subprocess.PIPE, universal_newlines=True,
                         check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[1] == "A":  # version nodes themselves
            continue
        name, _, node = parts[2].partition("@")
        syms[name] = node.lstrip("@")
    return syms


def check(public, private, nodes, exports):
    problems = []
    where = {}
    for node, (names, wild) in nodes.items():
        for w in wild:
            problems.append("src/gpufile.map: node %s exports by wildcard "
                            "'%s'; list each symbol by name" % (node, w))
        for n in names:
            where[n] = node
    for f in sorted(public):
        node = where.get(f)
        if node is None:
            problems.append("%s: declared GPUFILE_API in include/gpufile.h "
                            "but not listed in src/gpufile.map (add it to the "
                            "newest GPUFILE_<version> node)" % f)
        elif node == "GPUFILE_PRIVATE":
            problems.append("%s: public (include/gpufile.h) but listed in "
                            "GPUFILE_PRIVATE in src/gpufile.map" % f)
    for f in sorted(private):
        node = where.get(f)
        if node is None:
            problems.append("%s: declared in include/gpufile_private.h but "
                            "not listed in src/gpufile.map (add it to "
                            "GPUFILE_PRIVATE)" % f)
        elif node != "GPUFILE_PRIVATE":
            problems.append("%s: private (include/gpufile_private.h) but "
                            "listed in %s in src/gpufile.map" % (f, node))
    for f in sorted(set(where) - public - private):
        problems.append("%s: listed in src/gpufile.map but declared "
                        "GPUFILE_API in no header" % f)
    for f in sorted(set(where) - set(exports)):
        problems.append("%s: listed in src/gpufile.map but not exported by "
                        "the library (not defined, or not GPUFILE_API)" % f)
    for f in sorted(set(exports) - set(where)):
        problems.append("%s: exported by the library but not listed in "
                        "src/gpufile.map" % f)
    for f in sorted(set(exports) & set(where)):
        if exports[f] != where[f]:
            problems.append("%s: exported under version %s, the map says %s"
                            % (f, exports[f] or "(none)", where[f]))
    return problems


def read(path):
    with open(path) as f:
        return f.read()


def inputs(src):
    return (header_functions(read(os.path.join(src, "include/gpufile.h"))),
            header_functions(read(os.path.join(src, "include/gpufile_private.h"))),
            map_nodes(read(os.path.join(src, "src/gpufile.map"))))


def selftest(src):
    public, private, nodes = inputs(src)
    exports = {}
    for node, (names, _) in nodes.items():
        for n in names:
            exports[n] = node
    ok = True

    def expect(label, problems, needle):
        nonlocal ok
        hit = [p for p in problems if needle in p]
        print("%s %s: %s" % ("ok  " if hit else "FAIL", label,
                             hit[0] if hit else problems))
        ok = ok and bool(hit)

    if check(public, private, nodes, exports):
        print("FAIL consistent inputs reported problems")
        ok = False
    victim = sorted(public)[0]
    trimmed = {k: (v[0] - {victim}, v[1]) for k, v in nodes.items()}
    expect("symbol missing from the map",
           check(public, private, trimmed, exports), victim + ": declared")
    extra = dict(exports, gpufile__leaked=exports[victim])
    expect("extra export", check(public, private, nodes, extra),
           "gpufile__leaked: exported by the library but not listed")
    wild = map_nodes("GPUFILE_0.1 { global: gpufile_*; local: *; };")
    expect("wildcard map", check(public, private, wild, exports), "wildcard")
    return 0 if ok else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--selftest":
        return selftest(sys.argv[2])
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    library, src = sys.argv[1:]
    public, private, nodes = inputs(src)
    exports = exported(library)
    problems = check(public, private, nodes, exports)
    for p in problems:
        print("ABI: " + p)
    print("%d public + %d private functions, %d exported, %d problem(s)"
          % (len(public), len(private), len(exports), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
