#!/usr/bin/env python3
"""Side-by-side tables and a busbw plot from tpar-bench logs and NCCL anchor logs (the output
of scripts/nccl_anchor.py sweep, which the anchor script before it printed the same way).

    python3 docs/perf/report.py            # prints the Markdown tables, writes docs/perf/busbw.svg
    python3 docs/perf/report.py --check    # exits 1 unless docs/PERFORMANCE.md holds these tables
                                           # and busbw.svg is their drawing
    python3 docs/perf/report.py --logs DIR # the tables of a new run: DIR holds what
                                           # scripts/gpu-suite.sh sweep nccl wrote there
                                           # (sweep-KIND-nN.txt), from any tree and machine

Reads docs/perf/raw/sweep-{nccl,default,link-native,proxy}-SUFFIX.txt, SUFFIX one of KINDS' (the
logs of the sweeps the tables come from: x2 and x4 on H200s, 2026-11-21; h100x2-c142125 written by
scripts/gpu-suite.sh's parts sweep and nccl on two H100s, 2026-11-26); needs nothing beyond Python 3.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RAW = os.path.join(HERE, "raw")
sys.path.insert(0, HERE)
import decode_report  # noqa: E402  (places the rendered targets, as the other renderers do)


# Each machine's sweeps: its device count and the suffix of its logs' names.
KINDS = {"x2": (2, "x2"), "x4": (4, "x4"), "h100x2": (2, "h100x2-c142125")}


def nccl(kind, where=RAW):
    out = {}
    suffix = KINDS[kind][1] if kind in KINDS else kind
    for line in open(os.path.join(where, f"sweep-nccl-{suffix}.txt")):
        m = re.match(r"(\S+) n=(\d+) bytes=\s*(\d+) time_us=\s*([\d.]+) algbw=\s*([\d.]+) busbw=\s*([\d.]+)", line)
        if m:
            out[(m.group(1), int(m.group(3)))] = (float(m.group(4)), float(m.group(6)))
    return out


def bench(name, where=RAW):
    rows = []
    for line in open(os.path.join(where, name)):
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        if len(f) < 12 or not f[0].isdigit():
            continue
        rows.append(dict(bytes=int(f[0]), wire=f[2], algo=f[3], sync=f[4], us=float(f[5]), busbw=float(f[7]),
                         err=float(f[8]), wrong=int(f[9]), cpu=float(f[10]), eff=f[11]))
    return rows


CHAIN_LOG = "x2-h100-c142125.txt"  # gpu-suite.sh parts nccl and chain, one run on two H100s


def chain_table():
    """tpar's chain against NCCL's (P2P off), eager and from a CUDA graph, same run: boundary (host enqueue a step)."""
    tpar, nccl_rows, work = {}, {}, None
    for line in open(os.path.join(RAW, CHAIN_LOG)):
        m = re.match(r"## tpar-bench --devices \S+ --chain \d+ --chain-work (\S+)", line)
        if m:
            work = m.group(1)
            continue
        f = line.split()
        if work is not None and len(f) >= 7 and f[0].isdigit() and f[2] == "streams":
            tpar[(work, int(f[0]))] = (float(f[5]), float(f[6]))
        m = re.match(r"p2p-off chain n=2 bytes=\s*(\d+) steps=\d+ work=(\d+) mode=(\w+) step_us=\s*[\d.]+ "
                     r"no_allreduce_us=\s*[\d.]+ boundary_us=\s*([\d.-]+) enqueue_us=\s*([\d.]+) ok=True", line)
        if m:
            w = "0" if m.group(2) == "0" else "58M"
            nccl_rows[(w, int(m.group(1)), m.group(3))] = (float(m.group(4)), float(m.group(5)))
    lines = ["| weights a step | bytes | tpar, streams: boundary (enqueue a step) | NCCL P2P off, PyTorch's loop | "
             "NCCL P2P off, CUDA graph |", "|---|---|---|---|---|"]
    for w in ("0", "58M"):
        for b in (4096, 16384, 65536):
            cell = lambda v: f"{v[0]:.1f} us ({v[1]:.1f} us)"
            lines.append(f"| {w} | {human(b)} | {cell(tpar[(w, b)])} | {cell(nccl_rows[(w, b, 'eager')])} | "
                         f"{cell(nccl_rows[(w, b, 'graph')])} |")
    return "\n".join(lines)


def rng(values, fmt="{:.0f}"):
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def chain_note():
    """The paragraph under the chain table, its figures from the same log."""
    t = chain_table().splitlines()[2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in t]
    num = lambda c: [float(x) for x in re.findall(r"([\d.]+) us", c)]
    pick = lambda w, col, k: [num(r[col])[k] for r in cells if r[0] == w]
    return (f"- **Without weights** NCCL's graph pays {rng(pick('0', 4, 0))} us a boundary, tpar {rng(pick('0', 2, 0))} us: "
            f"NCCL's\n  kernel waits for its peer inside the kernel, tpar's batch waits on a timeline semaphore\n"
            f"  (the semaphore hop, \"What bounds each figure\"). From PyTorch's loop NCCL's figure is the\n"
            f"  host's ({rng(pick('0', 3, 1))} us a step to enqueue).\n"
            f"- **With 58 MiB of weights a step** the graph's replay returned only when the whole chain\n"
            f"  had run ({rng(pick('58M', 4, 1))} us a step of host time, as long as the step), and NCCL's boundary grew to\n"
            f"  {rng(pick('58M', 4, 0))} us; tpar's stayed at {rng(pick('58M', 2, 0))} us. Why NCCL's host-staged "
            f"transport holds the replay\n  so was not probed; the eager figures ({rng(pick('58M', 3, 0))} us) are bounded "
            f"by PyTorch's enqueue ({rng(pick('58M', 3, 1))}\n  us a step), not by NCCL.")


def h100_note():
    """The paragraph under the two H100s' table, its figures from the same logs."""
    auto = {r["bytes"]: r for r in bench(f"sweep-default-{KINDS['h100x2'][1]}.txt")}
    nc = nccl("h100x2")
    small = [auto[b] for b in (4096, 16384, 65536)]
    big = [auto[b]["busbw"] / nc[("p2p-off", b)][1] for b in auto if b >= 1 << 20]
    h200 = {r["bytes"]: r for r in bench("sweep-default-x2.txt")}
    t = chain_table().splitlines()[2:5]
    chain = [float(re.findall(r"([\d.]+) us", row.split("|")[3])[0]) for row in t]
    # The same calls three times over on two H100s, in the run of the chain (another machine).
    oneshot, inside = [], False
    for line in open(os.path.join(RAW, CHAIN_LOG)):
        if line.startswith("## "):
            inside = line.startswith("## tpar-bench --devices 0,1 --algo oneshot --sizes 4K,16K,64K -r 3")
        f = line.split()
        if inside and len(f) >= 12 and f[0].isdigit():
            oneshot.append((float(f[5]), float(f[10])))
    return (f"Up to 64 KiB this run's one-repetition figures ({rng([r['us'] for r in small])} us, with "
            f"{rng([r['cpu'] for r in small])} us of host CPU a call)\n"
            f"are far from the chain on two H100s above ({rng(chain)} us a boundary; another machine) and from the H200s'\n"
            f"{rng([h200[16384]['us'], h200[65536]['us']])} us; the sweeps ran right after the link probe, as the slow rows of the H200 run\n"
            f"below did. The same sizes with `--algo oneshot -r 3` on two H100s in the chain's run took\n"
            f"{rng([o[0] for o in oneshot], '{:.1f}')} us a call with {rng([o[1] for o in oneshot], '{:.1f}')} us of host CPU "
            f"([log](perf/raw/{CHAIN_LOG})): the figure for a call of these sizes;\n"
            f"why the sweep's first rows ran slow was not probed. From 1 MiB tpar's choice moves {rng(big, '{:.2f}')}x the bus bandwidth of NCCL with\n"
            f"peer-to-peer off.")


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def table(kind, where=RAW, n=None):
    if kind in KINDS:
        n, suffix = KINDS[kind]
    else:
        suffix = kind  # a gpu-suite.sh run's own names: nN
    nc = nccl(kind, where)
    auto = {r["bytes"]: r for r in bench(f"sweep-default-{suffix}.txt", where)}
    native = bench(f"sweep-link-native-{suffix}.txt", where)
    by = lambda wire: {r["bytes"]: r for r in native if r["wire"] == wire}
    f32, bf16 = by("f32"), by("bf16")
    proxy = {}
    for r in bench(f"sweep-proxy-{suffix}.txt", where):  # the default wire (older logs: every wire; bf16 kept)
        if r["bytes"] not in proxy or r["wire"] == "bf16":
            proxy[r["bytes"]] = r
    lines = [f"| bytes | NCCL P2P off: us / busbw | tpar, runtime's choice: algo, wire, us / busbw (x NCCL) | tpar f32 NativeImport: us / busbw (eff) | tpar bf16 NativeImport: us / busbw (eff) | tpar ProxyBridge: us | NCCL NVLink busbw |",
             "|---|---|---|---|---|---|---|"]
    for b in sorted(auto):
        if ("p2p-off", b) not in nc:
            continue
        t, bw = nc[("p2p-off", b)]
        a = auto[b]
        ratio = a["busbw"] / bw if bw else 0
        cell = lambda r: f"{r['us']:.1f} / {r['busbw']:.2f} ({r['eff']})" if r else "-"
        p = proxy.get(b)
        lines.append(f"| {human(b)} | {t:.1f} / {bw:.2f} | {a['algo']}, {a['wire']}, {a['us']:.1f} / {a['busbw']:.2f} ({ratio:.2f}x) | "
                     f"{cell(f32.get(b))} | {cell(bf16.get(b))} | {p['us']:.1f} ({p['algo']}) | {nc.get(('nvlink', b), (0, 0))[1]:.1f} |"
                     if p else
                     f"| {human(b)} | {t:.1f} / {bw:.2f} | {a['algo']}, {a['wire']}, {a['us']:.1f} / {a['busbw']:.2f} ({ratio:.2f}x) | "
                     f"{cell(f32.get(b))} | {cell(bf16.get(b))} | - | {nc.get(('nvlink', b), (0, 0))[1]:.1f} |")
    return f"n = {n}\n\n" + "\n".join(lines)


def svg(write=True):
    W, H, L, R, T, B = 760, 420, 70, 190, 30, 50
    series = []
    colors = {"x2": ("#1f77b4", "#aec7e8"), "x4": ("#d62728", "#ff9896")}
    for kind in ("x2", "x4"):
        nc = nccl(kind)
        auto = bench(f"sweep-default-{kind}.txt")
        series.append((f"tpar (auto), n={kind[1]}", colors[kind][0], [(r["bytes"], r["busbw"]) for r in auto], False))
        series.append((f"NCCL P2P off, n={kind[1]}", colors[kind][1],
                       sorted((b, v[1]) for (k, b), v in nc.items() if k == "p2p-off" and b >= 16384), True))
    xs = [x for _, _, pts, _ in series for x, _ in pts]
    ymax = 60.0
    import math
    lx0, lx1 = math.log2(min(xs)), math.log2(max(xs))
    px = lambda x: L + (math.log2(x) - lx0) / (lx1 - lx0) * (W - L - R)
    py = lambda y: H - B - y / ymax * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="14">AllReduce busbw on NVIDIA H200 through host memory (GB/s)</text>']
    for y in range(0, int(ymax) + 1, 10):
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{y}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 18}" text-anchor="middle">{human(x).replace(" ", "")}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">f32 payload per call</text>')
    for i, (name, color, pts, dashed) in enumerate(series):
        d = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(pts))
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        ly = T + 20 + 20 * i
        out.append(f'<line x1="{W - R + 15}" y1="{ly}" x2="{W - R + 45}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - R + 50}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    text = "\n".join(out) + "\n"
    if write:
        open(os.path.join(HERE, "busbw.svg"), "w").write(text)
    return text


def allreduce_targets():
    """PERFORMANCE.md's AllReduce targets, each verdict from the sweeps' logs (the H200
    runs of 2026-11-21, n = 2 and 4; the two H100s' of 2026-11-26 for the bound)."""
    def native(kind):
        return bench(f"sweep-link-native-{KINDS[kind][1]}.txt")

    def ratio(kind, wire, b):
        # f32: NativeImport's f32 rows; bf16: the runtime's choice (bf16 at these sizes)
        rows = native(kind) if wire == "f32" else bench(f"sweep-default-{KINDS[kind][1]}.txt")
        r = next(x for x in rows if x["bytes"] == b and x["wire"] == wire)
        return r["busbw"] / nccl(kind)[("p2p-off", b)][1]

    big = (64 << 20, 256 << 20)
    out = []
    for wire, goal in (("f32", 1.0), ("bf16", 1.8)):
        r2 = [ratio("x2", wire, b) for b in big]
        r4 = [ratio("x4", wire, b) for b in big]
        met = min(r2 + r4) >= goal
        how = "NativeImport" if wire == "f32" else "the runtime's choice"
        out.append(f"- busbw >= 64 MiB, {wire} wire ({how}) >= {goal:.1f}x NCCL P2P off: n=2 {r2[0]:.2f}x / {r2[1]:.2f}x "
                   f"(64 / 256 MiB), n=4 {r4[0]:.2f}x / {r4[1]:.2f}x: **{'met' if met else 'missed'}**"
                   + ("" if met else f", by up to {1 - min(r2 + r4) / goal:.0%}") + ".")
    effs = {}
    for kind in ("x2", "x4", "h100x2"):
        effs[kind] = [int(x["eff"].rstrip("%")) for x in native(kind) if x["bytes"] in big and x["wire"] in ("f32", "bf16")]
    h200 = effs["x2"] + effs["x4"]
    h100 = effs["h100x2"]
    out.append(f"- >= 80% of the host-staging bound at >= 64 MiB (f32 and bf16 wires): H200s {min(h200)}-{max(h200)}%, "
               f"two H100s {min(h100)}-{max(h100)}%: **{'met' if min(h200) >= 80 else 'missed'} on the H200s, "
               f"{'met' if min(h100) >= 80 else f'missed by up to {80 - min(h100)} points'} on the H100s**.")
    for b, name in ((16384, "16 KiB"), (1 << 20, "1 MiB")):
        cells, met = [], True
        for kind in ("x2", "x4"):
            auto = {r["bytes"]: r for r in bench(f"sweep-default-{KINDS[kind][1]}.txt")}
            t, nc = auto[b]["us"], nccl(kind)[("p2p-off", b)][0]
            cells.append(f"{t:.1f} against {nc:.1f} us (n={KINDS[kind][0]})")
            met &= t <= nc
        out.append(f"- {name} a call <= NCCL P2P off: {', '.join(cells)}: **{'met' if met else 'missed'}**.")
    return "\n".join(out)


def check():
    """The page's tables must be the ones these logs give, row for row."""
    page = open(os.path.join(HERE, "..", "PERFORMANCE.md")).read().splitlines()
    missing = [line for kind in KINDS for line in table(kind).splitlines()[2:] if line not in page]
    missing += [line for line in chain_table().splitlines()[2:] if line not in page]
    if h100_note() not in "\n".join(page):
        missing.append("the paragraph under the two H100s' table:\n" + h100_note())
    if chain_note() not in "\n".join(page):
        missing.append("the paragraph under the NCCL chain table:\n" + chain_note())
    for line in missing:
        print(f"report.py: not in docs/PERFORMANCE.md: {line}", file=sys.stderr)
    if decode_report.place({"allreduce-targets": allreduce_targets()}, ("docs/PERFORMANCE.md",), True, "report.py"):
        missing.append("the AllReduce targets")
    drawn = open(os.path.join(HERE, "busbw.svg")).read()
    if drawn != svg(write=False):
        print("report.py: docs/perf/busbw.svg is not the drawing of the logs; run python3 docs/perf/report.py",
              file=sys.stderr)
        return 1
    return 1 if missing else 0


def from_logs(where):
    """The tables of one gpu-suite.sh run, read under the names it writes."""
    ns = sorted(int(m.group(1)) for f in os.listdir(where) for m in [re.match(r"sweep-default-n(\d+)\.txt$", f)] if m)
    if not ns:
        print(f"report.py: no sweep-default-nN.txt in {where} (scripts/gpu-suite.sh sweep writes them)", file=sys.stderr)
        return 1
    for n in ns:
        try:
            print(table(f"n{n}", where, n))
        except OSError as e:
            print(f"report.py: n={n}: {e} (parts sweep and nccl write the four logs)", file=sys.stderr)
            return 1
        print()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    if len(sys.argv) == 3 and sys.argv[1] == "--logs":
        sys.exit(from_logs(sys.argv[2]))
    if sys.argv[1:]:
        print("usage: report.py [--check | --logs DIR]", file=sys.stderr)
        sys.exit(2)
    for kind in KINDS:
        print(table(kind))
        print()
    print(chain_table())
    print()
    print(chain_note())
    print()
    print(allreduce_targets())
    svg()
    sys.exit(decode_report.place({"allreduce-targets": allreduce_targets()}, ("docs/PERFORMANCE.md",), False, "report.py"))
