#!/usr/bin/env python3
"""Fails on a raw log under docs/perf/raw that does not begin with its stamp: the tpar tree it
ran, the llama.cpp tree and how many patches it carried (or none), when it was built and run,
the machine and its driver.

A log carries its stamp in one of two forms, before its first line that is not a comment:

- as scripts/gpu-suite.sh writes it: `# tree T`, `# built TIME ..., llama.cpp HASH + N patches`
  (or `+ patches to NNNN` in the tree line), `# ran TIME on HOST`, and a line
  `# gpu I, NAME, DRIVER, ...` a device;
- as one line, first in the file, for a log written another way (or stamped afterwards from
  its text and git history):
  `# stamp: tree T; llama.cpp none|HASH + N patches; built WHEN; ran WHEN; machine M; driver D`,
  each WHEN holding a date (2026-11-21, 2026-11-21T09:53Z, or a bound A..B).

Traces (NAME-traces.tar.xz, NAME.tar.xz) belong to the log NAME.txt beside them, and an
instrumentation diff (NAME.diff) to a stamped log that names it; either one alone fails.

    tests/tools/check_stamps.py [--raw DIR]     # default: docs/perf/raw of this checkout

Exit status: 0 every log stamped, 1 one is not (each named on stderr), 2 a usage error.
"""
import os
import re
import sys

DATE = r"\d{4}-\d\d-\d\d"
FORM_B = re.compile(r"# stamp: tree (?P<tree>[^;]+); llama\.cpp (?P<llama>none\b[^;]*|[0-9a-f]{7,40} \+ \d+ patches[^;]*); "
                    r"built (?P<built>[^;]*" + DATE + r"[^;]*); ran (?P<ran>[^;]*" + DATE + r"[^;]*); "
                    r"machine (?P<machine>[^;]+); driver (?P<driver>.+)$")


def header(text):
    """The log's lines up to its first line that is not a comment."""
    out = []
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            break
        out.append(line)
    return out


def problems(text):
    """What the log's stamp lacks ([] when it is whole)."""
    lines = header(text)
    if lines and lines[0].startswith("# stamp:"):
        return [] if FORM_B.match(lines[0]) else [f"its '# stamp:' line lacks a field or a date: {lines[0][:160]}"]
    head = "\n".join(lines)
    missing = []
    if not re.search(r"^# tree [0-9a-f]{7,40}\b", head, re.M):
        missing.append("# tree")
    if not re.search(r"^# built " + DATE + r"T\d\d:\d\d", head, re.M):
        missing.append("# built TIME")
    if not re.search(r"^# (?:tree|built) .*llama\.cpp [0-9a-f]{7,40} \+ (?:\d+ patches|patches to \d{4})", head, re.M):
        missing.append("the llama.cpp tree and its patch count")
    if not re.search(r"^# ran " + DATE + r"T\d\d:\d\d\S* on \S", head, re.M):
        missing.append("# ran TIME on HOST")
    if not re.search(r"^# gpu \d+, [^,]+, [^,]+,", head, re.M):
        missing.append("# gpu I, NAME, DRIVER")
    if len(missing) == 5:
        return ["no stamp (neither gpu-suite.sh's lines nor a '# stamp:' line before its first line of output)"]
    return ["its stamp lacks " + ", ".join(missing)] if missing else []


def main():
    args = sys.argv[1:]
    raw = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "perf", "raw")
    if args[:1] == ["--raw"] and len(args) == 2:
        raw = args[1]
    elif args:
        print("usage: check_stamps.py [--raw DIR]", file=sys.stderr)
        return 2
    raw = os.path.normpath(raw)
    logs, others = {}, []
    for d, _, names in os.walk(raw):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), raw)
            if n.endswith(".txt"):
                with open(os.path.join(d, n), encoding="utf-8", errors="replace") as f:
                    logs[rel] = f.read()
            else:
                others.append(rel)
    bad = []
    for rel, text in sorted(logs.items()):
        bad += [f"{rel}: {p}" for p in problems(text)]
    for rel in sorted(others):
        stem = re.sub(r"(-traces)?\.tar\.xz$", "", rel)
        if rel.endswith(".tar.xz"):
            if stem + ".txt" not in logs:
                bad.append(f"{rel}: no log {stem}.txt beside it")
        elif rel.endswith(".diff"):
            if not any(os.path.basename(rel) in text for text in logs.values()):
                bad.append(f"{rel}: no log names it")
        else:
            bad.append(f"{rel}: neither a log (.txt) nor its traces (.tar.xz) or instrumentation (.diff)")
    for line in bad:
        print(f"check_stamps.py: {line}", file=sys.stderr)
    if bad:
        print(f"check_stamps.py: {len(bad)} of {len(logs) + len(others)} files under {raw} unstamped or alone",
              file=sys.stderr)
        return 1
    print(f"check_stamps.py: every one of the {len(logs)} logs under docs/perf/raw begins with its stamp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
