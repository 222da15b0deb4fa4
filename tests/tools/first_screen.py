#!/usr/bin/env python3
"""Fails when README.md's first screen (its first 45 lines) says what a first screen must not:

- a commit hash other than the pinned llama.cpp tree's (de3ff815), anywhere, file names included;
- a run label (Y0, Z2, P6, "run A", ...): the names of runs belong to the design notes;
- "before": what changed belongs to the changelog and the history notes;
- a figure (a number with a unit of time, rate or ratio, as docs/perf/figures.py reads one)
  outside the block docs/perf/llama_report.py renders (readme-first), or a rendered block that is
  not what the renderer gives from the newest stamped logs, or one that runs past line 45.

    tests/tools/first_screen.py [--root DIR]    # DIR: a checkout or a copy of README.md and docs/

Exit status: 0 the first screen holds, 1 it does not (each problem on stderr), 2 a usage error.
"""
import importlib.util
import os
import re
import sys

LINES = 45
PINNED = ("de3ff815", "de3ff815ea7d559ee917f063901b8986f038abc6")
HASH = re.compile(r"(?<![0-9a-f])[0-9a-f]{7,40}(?![0-9a-f])")
LABEL = re.compile(r"\b[A-Z]\d{1,2}\b|\bruns? [A-Z]\b|\bpass(?:es)? [A-Z]\d*\b")
BEFORE = re.compile(r"\bbefore\b", re.I)


def load(root, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "docs", "perf", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.join(root, "docs", "perf"))
    spec.loader.exec_module(module)
    return module


def problems(root):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    screen = lines[:LINES]
    out = []
    begin = [i for i, line in enumerate(lines) if line.strip() == "<!-- rendered: readme-first -->"]
    end = [i for i, line in enumerate(lines) if line.strip() == "<!-- end rendered: readme-first -->"]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        return ["README.md: no single readme-first block (<!-- rendered: readme-first --> ... <!-- end rendered: "
                "readme-first -->)"]
    b, e = begin[0], end[0]
    if b >= LINES:
        out.append(f"README.md:{b + 1}: the rendered first screen begins past line {LINES}")
    if e >= LINES:
        out.append(f"README.md:{e + 1}: the rendered first screen ends past line {LINES}")
    for no, line in enumerate(screen, 1):
        for h in HASH.findall(line):
            if re.search(r"[a-f]", h) and re.search(r"\d", h) and h not in PINNED:
                out.append(f"README.md:{no}: commit hash {h} (the first screen names none but llama.cpp {PINNED[0]})")
        for m in LABEL.finditer(line):
            out.append(f"README.md:{no}: run label '{m.group(0)}' (runs are named in the design notes)")
        if BEFORE.search(line):
            out.append(f"README.md:{no}: 'before' (what changed is the changelog's and the history notes')")
    figures = load(root, "figures")
    for no, line in enumerate(screen, 1):
        if b < no - 1 < e:
            continue  # inside the block: held to the renderer below
        if line.startswith("    ") and not line.lstrip().startswith(("-", "|")):
            continue  # a command
        for fig in figures.FIGURE.findall(line):
            out.append(f"README.md:{no}: figure {fig} outside the rendered block (not rendered from a log)")
    try:
        rendered = load(root, "llama_report").render_current()["readme-first"]
    except (OSError, KeyError, AttributeError, ValueError, IndexError) as exc:
        return out + [f"llama_report.py cannot render the first screen from the logs: {exc!r}"]
    body = "\n".join(lines[b + 1:e])
    if body != rendered:
        have, want = body.split("\n"), rendered.split("\n")
        first = next((i for i, (x, y) in enumerate(zip(have, want)) if x != y), min(len(have), len(want)))
        out.append(f"README.md:{b + 2 + first}: the first screen is not what llama_report.py renders from the newest "
                   f"stamped logs (a figure or line edited by hand, or a log newer than the render): "
                   f"{have[first][:100] if first < len(have) else '(missing)'!r}")
    return out


def main():
    args = sys.argv[1:]
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if args[:1] == ["--root"] and len(args) == 2:
        root = args[1]
    elif args:
        print("usage: first_screen.py [--root DIR]", file=sys.stderr)
        return 2
    bad = problems(root)
    for p in bad:
        print(f"first_screen.py: {p}", file=sys.stderr)
    if not bad:
        print(f"first_screen.py: README.md's first {LINES} lines name no commit but {PINNED[0]}, no run, nothing "
              "'before', and every figure in them is rendered from the newest stamped logs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
