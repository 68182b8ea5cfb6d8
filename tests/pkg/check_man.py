#!/usr/bin/env python3
"""The man pages cover the library and the tool, and render cleanly.

    check_man.py LIBRARY SOURCE_DIR CLI   check; exit 0 pass, 1 fail
    check_man.py --selftest SOURCE_DIR    show that the check catches a
                                          symbol without a page and a page
                                          that renders with a warning

Rules (docs/man/, installed by cmake --install):
  - every symbol the library exports (nm -D --defined-only) appears in the
    NAME section of a page in docs/man/man3/ (one page per group of
    functions, as liburing does), and every gpufile_* name in a NAME
    section is exported;
  - each man3 page has .TH and the sections NAME, SYNOPSIS, DESCRIPTION,
    RETURN VALUE and SEE ALSO; gpufile.1 has NAME, SYNOPSIS, DESCRIPTION
    and names every command of `gpufile --help`, and its SYNOPSIS gives
    each command the options of that command's `--help` usage lines, no
    more and no fewer;
  - every page renders without a warning (groff -man -ww -z, and man -l
    --warnings where man is installed);
  - a SEE ALSO reference to gpufile_*(3) names a documented function.
Every problem is reported on a line of its own naming the page or symbol.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_abi import exported  # noqa: E402

MAN3_SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "RETURN VALUE", "SEE ALSO"]
MAN1_SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION"]


def sections(text):
    """{section title: body} of a man(7) page."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r'^\.SH\s+"?([^"]*?)"?\s*$', line)
        if m:
            cur = m.group(1).upper()
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def name_entries(text):
    """The names before '\\-' in the NAME section."""
    body = sections(text).get("NAME", "")
    head = body.split("\\-")[0]
    return [n.strip() for n in re.split(r"[,\s]+", head) if n.strip()]


def synopsis_options(text):
    """{command: set of --options} of gpufile.1's SYNOPSIS: a line
    "gpufile CMD ..." and the indented lines after it."""
    body = sections(text).get("SYNOPSIS", "")
    out, cur = {}, None
    for line in body.splitlines():
        if not line.startswith("."):
            continue
        m = re.match(r"^\.\w+\s*(.*)$", line)
        words = (m.group(1) if m else "").replace('"', "")
        words = words.replace("\\-", "-")
        head = re.match(r"^gpufile\s+([a-z]+)", words)
        if head:
            cur = head.group(1)
        elif not words.startswith(" "):
            cur = None
        if cur:
            out.setdefault(cur, set()).update(
                re.findall(r"--[a-z][a-z-]*", words))
    return out


def usage_options(cli, command):
    """The --options of the usage lines of `gpufile COMMAND --help` (up to
    its first empty line)."""
    out = subprocess.run([cli, command, "--help"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    return set(re.findall(r"--[a-z][a-z-]*", out.split("\n\n", 1)[0]))


def render_warnings(path):
    cmds = [["groff", "-man", "-ww", "-z", path]]
    if shutil.which("man"):
        cmds.append(["man", "--warnings", "-l", path])
    out = []
    for cmd in cmds:
        if not shutil.which(cmd[0]):
            continue  # main() says so, and skips when nothing else failed
        env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0")
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, universal_newlines=True,
                           env=env)
        msg = r.stderr.strip()
        if r.returncode or msg:
            out.append("%s: %s" % (" ".join(cmd[:-1]),
                                   msg or "exit %d" % r.returncode))
    return out


def check(pages, symbols, commands, render=render_warnings, usages=None):
    """pages: {path: text}; symbols: exported names; commands: the tool's
    subcommands; usages: {command: the options of its --help usage}, or
    None not to compare them. Returns the list of problems."""
    problems = []
    documented = {}
    for path, text in sorted(pages.items()):
        rel = os.path.join(*path.split(os.sep)[-2:])
        section = os.path.splitext(path)[1][1:]
        th = re.search(r"^\.TH\s+(\S+)\s+(\S+)", text, flags=re.M)
        stem = os.path.splitext(os.path.basename(path))[0]
        if not th:
            problems.append("%s: no .TH line" % rel)
        elif th.group(1).upper() != stem.upper() or th.group(2) != section:
            problems.append("%s: .TH says %s(%s), the file name %s(%s)"
                            % (rel, th.group(1), th.group(2), stem, section))
        have = sections(text)
        for s in MAN3_SECTIONS if section == "3" else MAN1_SECTIONS:
            if s not in have:
                problems.append("%s: no .SH %s section" % (rel, s))
        if section == "3":
            for n in name_entries(text):
                documented.setdefault(n, rel)
            for ref in re.findall(r"^\.BR\s+(gpufile\w*)\s+\(3\)", text,
                                  flags=re.M):
                if not any(ref in name_entries(t) for p, t in pages.items()
                           if p.endswith(".3")):
                    problems.append("%s: SEE ALSO names %s(3), which no "
                                    "page documents" % (rel, ref))
        if section == "1" and stem == "gpufile":
            body = have.get("COMMANDS", "") + have.get("DESCRIPTION", "")
            for c in commands:
                if not re.search(r"^\.B\s+%s\s*$" % re.escape(c), body,
                                 flags=re.M):
                    problems.append("%s: command '%s' (gpufile --help) has "
                                    "no '.B %s' entry under COMMANDS"
                                    % (rel, c, c))
            syn = synopsis_options(text)
            for c, want in sorted((usages or {}).items()):
                have = syn.get(c, set())
                for o in sorted(want - have):
                    problems.append("%s: SYNOPSIS of '%s' lacks %s (in "
                                    "'gpufile %s --help')" % (rel, c, o, c))
                for o in sorted(have - want):
                    problems.append("%s: SYNOPSIS of '%s' has %s, which "
                                    "'gpufile %s --help' does not"
                                    % (rel, c, o, c))
        for w in render(path):
            problems.append("%s: renders with a warning: %s" % (rel, w))
    for s in sorted(symbols):
        if s not in documented:
            problems.append("%s: exported but in the NAME section of no page "
                            "in docs/man/man3/ (add it to its group's page, "
                            "or write docs/man/man3/%s.3)" % (s, s))
    for n in sorted(documented):
        if n.startswith("gpufile_") and n not in symbols:
            problems.append("%s: named in %s but not exported by the library"
                            % (n, documented[n]))
    if not any(p.endswith(os.path.join("man1", "gpufile.1")) for p in pages):
        problems.append("docs/man/man1/gpufile.1: missing (the tool's page)")
    return problems


def load_pages(src):
    pages = {}
    for p in sorted(glob.glob(os.path.join(src, "docs/man/man[13]/*.[13]"))):
        with open(p) as f:
            pages[p] = f.read()
    return pages


def cli_commands(cli):
    out = subprocess.run([cli, "--help"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    block = out.split("Commands:", 1)[1] if "Commands:" in out else ""
    cmds = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            break
        cmds.append(line.split()[0])
    return cmds


def selftest(src):
    pages = load_pages(src)
    symbols = set()
    for p, t in pages.items():
        if p.endswith(".3"):
            symbols.update(n for n in name_entries(t) if n.startswith("gpufile_"))
    ok = True

    def expect(label, problems, needle):
        nonlocal ok
        hit = [p for p in problems if needle in p]
        print("%s %s: %s" % ("ok  " if hit else "FAIL", label,
                             hit[0] if hit else problems))
        ok = ok and bool(hit)

    base = check(pages, symbols, [], render=lambda p: [])
    if base:
        print("FAIL consistent inputs reported problems: %s" % base)
        ok = False
    victim = next(p for p in pages if p.endswith("gpufile_open.3"))
    fewer = {p: t for p, t in pages.items() if p != victim}
    expect("symbol without a page",
           check(fewer, symbols, [], render=lambda p: []),
           "gpufile_open: exported but in the NAME section of no page")
    expect("unknown command", check(pages, symbols, ["frobnicate"],
                                    render=lambda p: []), "'frobnicate'")
    man1 = next(t for p, t in pages.items() if p.endswith("gpufile.1"))
    syn = synopsis_options(man1)
    base = check(pages, symbols, [], render=lambda p: [], usages=syn)
    if base or "--no-progress" not in syn.get("write", ()):
        print("FAIL the SYNOPSIS compared with itself: %s, write: %s"
              % (base, sorted(syn.get("write", ()))))
        ok = False
    more = dict(syn, write=syn.get("write", set()) | {"--frob"})
    expect("option of --help missing from the SYNOPSIS",
           check(pages, symbols, [], render=lambda p: [], usages=more),
           "SYNOPSIS of 'write' lacks --frob")
    fewer = dict(syn, read=syn.get("read", set()) - {"--window"})
    expect("option of the SYNOPSIS not in --help",
           check(pages, symbols, [], render=lambda p: [], usages=fewer),
           "SYNOPSIS of 'read' has --window")
    if not shutil.which("groff"):
        print("groff is not installed: rendering not tested; skipped")
        return 77 if ok else 1
    bad = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                       "gpufile_check_man_%d.3" % os.getpid())
    with open(bad, "w") as f:
        f.write(pages[victim] + ".frobnicate\n")
    try:
        expect("page with a warning", [w for w in render_warnings(bad)],
               "frobnicate")
    finally:
        os.unlink(bad)
    return 0 if ok else 1


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--selftest":
        return selftest(sys.argv[2])
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    library, src, cli = sys.argv[1:]
    pages = load_pages(src)
    symbols = set(exported(library))
    commands = cli_commands(cli)
    usages = {c: usage_options(cli, c) for c in commands if c != "help"}
    problems = check(pages, symbols, commands, usages=usages)
    for p in problems:
        print("MAN: " + p)
    print("%d pages, %d exported symbols, %d problem(s)"
          % (len(pages), len(symbols), len(problems)))
    if problems:
        return 1
    if not shutil.which("groff"):
        # A machine without groff (the GPU machine, where nothing can be
        # installed) checks the coverage only: skipped, not passed.
        print("groff is not installed (scripts/deps.sh installs groff-base): "
              "pages not rendered; skipped")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
