#!/usr/bin/env python3
"""Renders the table of llama.cpp's move to a newer tree in docs/PERFORMANCE.md from the raw
log of scripts/gpu-suite.sh's part move, so that no figure there is typed by hand: the
same models through the old tree's llama-bench and the new one's, on one machine in one
run; each ratio against the same tree's one GPU.

    python3 docs/perf/move_report.py            # rewrites the rendered block in place
    python3 docs/perf/move_report.py --check    # exits 1 where the rendered block differs
    python3 docs/perf/move_report.py --print    # prints the block

Reads docs/perf/raw/MOVE (below). A block sits between `<!-- rendered: NAME -->` and
`<!-- end rendered: NAME -->`. Needs nothing beyond Python 3. Exit status: 0 success
(--check: the doc matches), 1 it differs or the log is missing, 2 a usage error.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RAW = os.path.join(HERE, "raw")
MOVE = "move-h200x2-d1ea59b.txt"
sys.path.insert(0, HERE)
import decode_report  # noqa: E402  (the logs' stamp and llama-bench parsers)

MODELS = [("8b", "Llama-3-8B shapes"), ("70b20", "Llama-3-70B shapes, 20 of 80 layers")]
TYPES = [("q8_0", "Q8_0"), ("q4_k_m", "Q4_K_M")]


def trees(text):
    """(new llama.cpp commit, old llama.cpp commit, old tpar commit) from the move's stamp."""
    new = re.search(r"^# move: built .*, llama\.cpp ([0-9a-f]+) \+ (\d+) patches", text, re.M)
    old = re.search(r"^# move: old tree ([0-9a-f]+): llama\.cpp ([0-9a-f]+) \+ (\d+) patches", text, re.M)
    return {"new": new.group(1), "new_patches": int(new.group(2)), "old": old.group(2), "old_patches": int(old.group(3)),
            "old_tpar": old.group(1)}


def render():
    text = decode_report.read(MOVE)
    st = decode_report.stamp(text)
    tr = trees(text)
    b = decode_report.benches(text)

    def v(tree, mode, tag, ty, test):
        return b[f"move-{tree}-{mode}-{tag}-{ty}"][test][0]

    rows, one_gpu = [], []
    for tag, name in MODELS:
        for ty, tyname in TYPES:
            tg = "tg128" if tag == "8b" else "tg64"
            for test in ("pp512", tg):
                cells = []
                for tree in ("old", "new"):
                    none = v(tree, "none", tag, ty, test)
                    layer = v(tree, "layer2", tag, ty, test)
                    tpar = v(tree, "tpar2", tag, ty, test)
                    cells.append((none, layer, tpar))
                (n0, l0, t0), (n1, l1, t1) = cells
                one_gpu.append((test[:2], n1 / n0))
                rows.append(f"| {name}, {tyname} | {test} | {n0:.1f} | {n1:.1f} ({n1 / n0 - 1:+.1%}) "
                            f"| {l0 / n0:.2f}x | {l1 / n1:.2f}x | {t0:.1f} ({t0 / n0:.2f}x) | {t1:.1f} (**{t1 / n1:.2f}x**) |")
    head = (f"{st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, one run, tpar tree {st['tree']}: llama.cpp "
            f"{tr['old']} with its {tr['old_patches']} patches (as tpar {tr['old_tpar']} built it) against {tr['new']} with "
            f"{tr['new_patches']}, each tree's llama-bench on the same models, old and new taking turns model by model; "
            f"random weights, `llama-bench -fa 1 -p 512 -n 128|64`; raw: [perf/raw/{MOVE}](perf/raw/{MOVE}).")
    table = "\n".join([
        "| model | test | one GPU, old (t/s) | one GPU, new | `-sm layer`, 2 GPUs, old | new | tpar `-sm tensor`, 2 GPUs, old | new |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])

    def mean(xs):
        return sum(xs) / len(xs)
    pp = mean([r for k, r in one_gpu if k == "pp"])
    tg = mean([r for k, r in one_gpu if k == "tg"])
    worst = max(abs(r - 1) for _, r in one_gpu)
    same = worst < 0.02
    note = (f"On one GPU the newer tree runs these models {'at the old speed' if same else 'at another speed'}: prefill "
            f"{pp - 1:+.1%} and decode {tg - 1:+.1%} on average, no row further than {worst:.1%} from the old. Both trees were "
            f"built the same way, with Debian 12's glslc, which has no cooperative-matrix or integer-dot extensions: upstream's "
            f"matrix-core paths are in neither build. Each ratio is against its own tree's one GPU.")
    return {"move": head + "\n\n" + table + "\n\n" + note}


def main():
    args = sys.argv[1:]
    if args not in ([], ["--check"], ["--print"]):
        print("usage: move_report.py [--check | --print]", file=sys.stderr)
        return 2
    try:
        blocks = render()
    except (OSError, KeyError, AttributeError, ValueError, IndexError) as e:
        print(f"move_report.py: cannot render from the log: {e!r}", file=sys.stderr)
        return 1
    if args == ["--print"]:
        for name, body in blocks.items():
            print(f"<!-- rendered: {name} -->\n{body}\n<!-- end rendered: {name} -->\n")
        return 0
    path = os.path.join(ROOT, "docs/PERFORMANCE.md")
    with open(path) as f:
        text = f.read()
    missing = [name for name in blocks if f"<!-- rendered: {name} -->" not in text]
    if missing:
        print(f"move_report.py: no place in docs/PERFORMANCE.md for {', '.join(missing)}", file=sys.stderr)
        return 1
    new = decode_report.apply(text, blocks)
    if args == ["--check"]:
        if new != text:
            print("move_report.py: docs/PERFORMANCE.md differs from its rendering (move); run python3 docs/perf/move_report.py",
                  file=sys.stderr)
            return 1
        print("move_report.py: PERFORMANCE.md holds what the log says")
        return 0
    if new != text:
        with open(path, "w") as f:
            f.write(new)
        print("move_report.py: rendered move into docs/PERFORMANCE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
