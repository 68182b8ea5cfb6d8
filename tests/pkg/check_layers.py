#!/usr/bin/env python3
"""The one-way rule of src/'s wings (docs/ARCHITECTURE.md): a file may
include headers of, and use symbols defined in, its own wing and the wings
below it, never a wing above.

    check_layers.py SRC OBJECT...    check SRC (the src/ folder) and the
                                     library's objects (nm reads what each
                                     object defines and uses)
    check_layers.py --selftest SRC CC OBJECT...
                                     plant an upward include and an upward
                                     call into a copy of one file, compile
                                     it with CC, and check that both are
                                     caught, by file, line and name

An object is matched to its source by its path (.../src/WING/NAME.c.o).
Every violation is printed as FILE:LINE: what, naming the header or the
symbol; the exit status is 1 when there is one, 2 on a usage error.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Each wing and the wings it may reach. formats/ and controls/ stand side
# by side at the top: neither reaches the other.
ORDER = ["common", "platform", "core", "paths", "sources", "api"]
BELOW = {w: set(ORDER[:i + 1]) for i, w in enumerate(ORDER)}
BELOW["formats"] = set(ORDER) | {"formats"}
BELOW["controls"] = set(ORDER) | {"controls"}
WINGS = set(BELOW)
PUBLIC = {"gpufile.h", "gpufile_private.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def wing_of(path, src):
    rel = os.path.relpath(path, src)
    head = rel.split(os.sep)[0]
    return head if head in WINGS and os.sep in rel else None


def sources(src):
    for wing in sorted(WINGS):
        d = os.path.join(src, wing)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                yield wing, os.path.join(d, name)


def strip_comments(text):
    """text with comments and string literals blanked, lines kept."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'
                  r"'(?:\\.|[^'\\\n])*'", blank, text, flags=re.S)


def check_includes(src):
    bad = []
    loose = [n for n in os.listdir(src) if n.endswith(".c")]
    for n in sorted(loose):
        bad.append(f"{os.path.join(src, n)}:1: a source file outside "
                   f"the wings ({', '.join(sorted(WINGS))})")
    for wing, path in sources(src):
        with open(path, encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                name = m.group(1)
                if name in PUBLIC:
                    continue
                if name == "internal.h":
                    bad.append(f"{path}:{no}: includes \"internal.h\" "
                               f"(every wing at once, for tests only); "
                               f"include \"{wing}/{wing}.h\"")
                    continue
                target = name.split("/")[0] if "/" in name else None
                if target is None and os.path.exists(
                        os.path.join(os.path.dirname(path), name)):
                    target = wing
                if target not in WINGS:
                    bad.append(f"{path}:{no}: includes \"{name}\", "
                               f"which is in no wing (write \"WING/{name}\")")
                elif target not in BELOW[wing]:
                    bad.append(f"{path}:{no}: {wing}/ includes \"{name}\" "
                               f"of {target}/, a wing above it or beside it")
    return bad


def symbols(objects):
    """{object: (defined set, used set)} as nm reports them."""
    out = {}
    for o in objects:
        r = subprocess.run(["nm", o], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"check_layers: nm {o}: {r.stderr.strip()}")
        defs, uses = set(), set()
        for line in r.stdout.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRCVGS":
                defs.add(p[2])
            elif len(p) == 2 and p[0] == "U":
                uses.add(p[1])
        out[o] = (defs, uses)
    return out


def source_of(obj, src):
    """The source file an object was built from (.../src/W/N.c.o)."""
    parts = os.path.normpath(obj).split(os.sep)
    if len(parts) < 2 or not parts[-1].endswith(".c.o"):
        return None
    wing, name = parts[-2], parts[-1][:-2]
    path = os.path.join(src, wing, name)
    return (wing, path) if wing in WINGS and os.path.exists(path) else None


def line_of(path, name):
    """The first line of path that uses name outside comments, or 1."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    m = re.search(r"\b%s\b" % re.escape(name), text)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def check_calls(src, objects):
    bad, count = [], 0
    table = symbols(objects)
    where = {}
    for o, (defs, _) in table.items():
        s = source_of(o, src)
        if s:
            for d in defs:
                where[d] = (s[0], s[1])
    for o, (_, uses) in sorted(table.items()):
        s = source_of(o, src)
        if not s:
            bad.append(f"{o}:1: an object of no source in a wing of {src}")
            continue
        wing, path = s
        for name in sorted(uses):
            if name not in where or where[name][1] == path:
                continue
            count += 1
            to_wing, to_path = where[name]
            if to_wing not in BELOW[wing]:
                bad.append(f"{path}:{line_of(path, name)}: {wing}/ uses "
                           f"{name}, defined in {to_wing}/ "
                           f"({os.path.basename(to_path)}), a wing above "
                           f"it or beside it")
    return bad, count


def run(src, objects):
    bad = check_includes(src)
    call_bad, count = check_calls(src, objects)
    bad += call_bad
    for b in bad:
        print(b)
    files = sum(1 for _ in sources(src))
    print(f"check_layers: {files} files, {len(objects)} objects, {count} "
          f"uses between files; {len(bad)} against the one-way rule "
          f"({' <- '.join(ORDER)} <- formats, controls)")
    return 1 if bad else 0


def selftest(src, cc, objects):
    """Plants `#include "api/api.h"` and a call of gpufile_open into a
    copy of common/sized.c, builds it, and expects both to be named."""
    tmp = tempfile.mkdtemp(prefix="check_layers.")
    try:
        copy = os.path.join(tmp, "src")
        shutil.copytree(src, copy)
        victim = os.path.join(copy, "common", "sized.c")
        with open(victim, encoding="utf-8") as f:
            lines = f.read().split("\n")
        at = next(i for i, l in enumerate(lines) if INCLUDE.match(l)) + 1
        lines.insert(at, '#include "api/api.h"')
        lines += ["void gpufile__planted(void);",
                  "void gpufile__planted(void)",
                  "{",
                  "\tgpufile_close(NULL);",
                  "}", ""]
        with open(victim, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        inc = os.path.join(os.path.dirname(os.path.abspath(src)), "include")
        obj = os.path.join(tmp, "src", "common", "sized.c.o")
        r = subprocess.run([cc, "-c", "-std=gnu11", "-I", inc, "-I", copy,
                            victim, "-o", obj], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"selftest: {cc} could not build the planted file:\n"
                  f"{r.stderr}")
            return 1
        planted = [obj if o.endswith(os.sep + os.path.join("common",
                   "sized.c.o")) else o for o in objects]
        if obj not in planted:
            print("selftest: no common/sized.c.o among the objects given")
            return 1
        bad = check_includes(copy) + check_calls(copy, planted)[0]
        for b in bad:
            print(b)
        want_inc = f"{victim}:{at + 1}: common/ includes \"api/api.h\""
        call_line = len(lines) - 2
        want_call = (f"{victim}:{call_line}: common/ uses gpufile_close, "
                     f"defined in api/ (file.c)")
        ok = True
        for want in (want_inc, want_call):
            if not any(b.startswith(want) for b in bad):
                print(f"selftest: FAILED: not reported: {want}")
                ok = False
        if len(bad) != 2:
            print(f"selftest: FAILED: {len(bad)} violations reported, "
                  f"2 planted")
            ok = False
        print("selftest: " + ("both planted violations named" if ok
                              else "FAILED"))
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp)


def main(argv):
    if len(argv) >= 4 and argv[1] == "--selftest":
        return selftest(argv[2], argv[3], argv[4:])
    if len(argv) < 3 or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return run(argv[1], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
