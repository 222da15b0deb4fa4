#!/usr/bin/env bash
# Checks the Markdown files under docs/ and README.md, CHANGELOG.md: every relative link
# points at a file or folder that exists; every path written as docs/... (from the
# repository root) exists; every raw log named as raw/NAME.txt or perf/raw/NAME.txt exists
# under docs/perf/raw/ (NAME-xN.txt stands for the -x2 and -x4 logs). Prints each broken
# reference with its file and line; exits 1 if there is one. Needs only Python 3.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 - "$root" <<'PY'
import os, re, sys

root = sys.argv[1]
files = [os.path.join(root, "README.md"), os.path.join(root, "CHANGELOG.md")]
for d, _, names in os.walk(os.path.join(root, "docs")):
    files += [os.path.join(d, n) for n in names if n.endswith(".md")]

link = re.compile(r"\]\(([^)\s]+)\)")
raw = re.compile(r"(?<![\w/.-])(?:docs/perf/raw/|perf/raw/|raw/)([\w.-]+\.txt)")
rooted = re.compile(r"(?<![\w/.-])(docs/[\w/.-]*\w)")
bad = 0
for path in sorted(files):
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        for target in link.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same file
            target = target.split("#", 1)[0]
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                print(f"{os.path.relpath(path, root)}:{no}: broken link {target}")
                bad += 1
        for name in raw.findall(line):
            names = [name.replace("-xN", "-x2"), name.replace("-xN", "-x4")] if "-xN" in name else [name]
            for n in names:
                if not os.path.exists(os.path.join(root, "docs", "perf", "raw", n)):
                    print(f"{os.path.relpath(path, root)}:{no}: no raw log {n}")
                    bad += 1
        for target in rooted.findall(line):
            if "-xN" not in target and not os.path.exists(os.path.join(root, target)):
                print(f"{os.path.relpath(path, root)}:{no}: no such path {target}")
                bad += 1
sys.exit(1 if bad else 0)
PY
