#!/usr/bin/env python3
"""Lines per source file and the longest functions, for the closing notes
of structural changes (issue 12): run it on two trees and compare.

    scripts/code_size.py [DIR] [--top N]

DIR defaults to src/ of this checkout (its wing folders included). A function is a definition that
starts in column 0 (return type and name, as .clang-format lays them out)
and ends at the first "}" in column 0; its length counts its lines, both
braces included."""
import os
import re
import sys

DEF = re.compile(r"^[A-Za-z_][^;()]*\b([A-Za-z_]\w*)\s*\(")


def functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = DEF.match(lines[i])
        if m and not lines[i].startswith(("typedef", "struct", "enum", "#")):
            j = i
            while j < len(lines) and not lines[j].startswith("{"):
                if lines[j].rstrip().endswith(";"):
                    break
                j += 1
            if j < len(lines) and lines[j].startswith("{"):
                k = j
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                out.append((k - i + 1, m.group(1)))
                i = k
        i += 1
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    top = 15
    if "--top" in sys.argv:
        top = int(sys.argv[sys.argv.index("--top") + 1])
        args = [a for a in args if a != str(top)]
    root = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src")
    files, funcs, total = [], [], 0
    names = sorted(os.path.relpath(os.path.join(d, n), root)
                   for d, _, ns in os.walk(root) for n in ns)
    for name in names:
        if not name.endswith((".c", ".h")):
            continue
        p = os.path.join(root, name)
        n = sum(1 for _ in open(p, encoding="utf-8", errors="replace"))
        total += n
        files.append((n, name))
        if name.endswith(".c"):
            funcs += [(length, f"{name}:{fn}") for length, fn in functions(p)]
    print(f"lines per file ({root}):")
    for n, name in files:
        print(f"  {n:6d}  {name}")
    print(f"  {total:6d}  total")
    print(f"longest functions (of {len(funcs)}):")
    for length, fn in sorted(funcs, reverse=True)[:top]:
        print(f"  {length:6d}  {fn}")


if __name__ == "__main__":
    main()
