# What the shell benchmarks share (run_host_bench.sh, write_bench.sh),
# sourced from the repository's root: . bench/benchlib.sh

json_get() { # KEY: from the JSON on stdin; dotted paths and [index] allowed
	python3 -c 'import json, re, sys
v = json.load(sys.stdin)
for part in re.findall(r"[^.\[\]]+", sys.argv[1]):
    v = v[int(part)] if isinstance(v, list) else v[part]
print(v)' "$1"
}
median() { python3 -c 'import statistics, sys
print(f"{statistics.median(float(x) for x in sys.argv[1:]):.3f}")' "$@"; }
ratio() { python3 -c 'import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print(f"{a / b:.2f}x" if b > 0 else "n/a")' "$1" "$2"; }
