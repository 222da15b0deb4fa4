#!/usr/bin/env python3
"""Checks that every measured figure a user reads in README.md and docs/PERFORMANCE.md
comes from a raw log: it sits in a block a renderer writes (`<!-- rendered: NAME -->`,
checked by decode_report.py, llama_report.py and report.py --check) or is a line that
report.py checks row for row (its sweep tables and the notes under them). A figure is a
number with a unit of time, rate or ratio (us, ms, s, GB/s, t/s, %, or a ratio like
1.62x); commands in code blocks are not figures. Typed figures belong in the engineering
notes under docs/design/, each with its run.

    python3 docs/perf/figures.py --check     # exits 1 and lists each typed figure
    python3 docs/perf/figures.py --check --docs README.md docs/PERFORMANCE.md --root DIR

Needs nothing beyond Python 3. Exit status: 0 none typed, 1 typed figures found (or a
doc missing), 2 a usage error.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = ("README.md", "docs/PERFORMANCE.md")
FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:\s?(?:us|ms|s|GB/s|GiB/s|MB/s|t/s)\b|%|x\b)")


def checked_lines():
    """The lines report.py --check holds the page to, row for row."""
    sys.path.insert(0, HERE)
    import report
    lines = set()
    for kind in report.KINDS:
        lines.update(report.table(kind).splitlines())
    lines.update(report.chain_table().splitlines())
    lines.update(report.h100_note().splitlines())
    lines.update(report.chain_note().splitlines())
    return {line.strip() for line in lines if line.strip()}


def typed(text, checked):
    """(line number, line, figures) for each line outside the rendered blocks, the code
    blocks and the checked lines that holds a figure."""
    out, rendered, fenced = [], None, False
    for no, line in enumerate(text.splitlines(), 1):
        m = re.match(r"<!-- (end )?rendered: ([\w-]+) -->", line.strip())
        if m:
            rendered = None if m.group(1) else m.group(2)
            continue
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if rendered or fenced or line.startswith("    ") and not line.lstrip().startswith(("-", "|")):
            continue
        if line.strip() in checked:
            continue
        found = FIGURE.findall(line)
        if found:
            out.append((no, line, found))
    return out


def main():
    args = sys.argv[1:]
    if not args or args[0] != "--check":
        print("usage: figures.py --check [--docs DOC... ] [--root DIR]", file=sys.stderr)
        return 2
    root, docs = os.path.dirname(os.path.dirname(HERE)), list(DOCS)
    rest = args[1:]
    while rest:
        if rest[0] == "--root" and len(rest) >= 2:
            root, rest = rest[1], rest[2:]
        elif rest[0] == "--docs":
            docs, rest = [], rest[1:]
            while rest and not rest[0].startswith("--"):
                docs.append(rest.pop(0))
        else:
            print(f"figures.py: unknown argument {rest[0]!r}", file=sys.stderr)
            return 2
    checked = checked_lines()
    bad = 0
    for doc in docs:
        path = os.path.join(root, doc)
        try:
            text = open(path).read()
        except OSError as e:
            print(f"figures.py: {e}", file=sys.stderr)
            return 1
        for no, line, found in typed(text, checked):
            print(f"{doc}:{no}: typed figure {', '.join(found)}: {line.strip()[:120]}", file=sys.stderr)
            bad = 1
    if not bad:
        print(f"figures.py: every figure in {', '.join(docs)} is rendered or checked from a raw log")
    return bad


if __name__ == "__main__":
    sys.exit(main())
