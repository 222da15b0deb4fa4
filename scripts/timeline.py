#!/usr/bin/env python3
"""Draws a TPAR_TRACE file (Chrome trace-event JSON written by tpar's trace) as an SVG
timeline of one step (a decode token): what the host thread was inside of, and when each
command buffer ran on each GPU, with the figures that say where the step's time went.

  timeline.py TRACE.json [-o token.svg] [--title TEXT] [--step K|all] [--summary-json FILE]

Without -o it draws nothing and prints the figures only.

A step runs from the end of one synchronize to the end of the next (a token of llama.cpp:
ggml-vulkan's synchronize on every device at its end; synchronizes with no graph_compute
between them count as one). --step picks the K-th complete step of the window (default: the last); --step all
draws the last and prints the median over every complete step instead (the host's spans as
a mean a step, per host thread too), what a token costs rather than one token. Printed, and
written with --summary-json: the step's time; the host's time before its first
graph_compute (under -sm tensor the meta backend's split of a graph built anew lies there,
host_before_enqueue_us); the step's time in no host span (llama.cpp's own work: sampling,
and building and allocating the next step's graph, which lie between the synchronizes that
end a step; host_outside_spans_us); the host's enqueue time (its
first graph_compute to the start of its synchronize); how much of the GPUs' work was done
when the host finished enqueuing; per device its busy time, vkQueueSubmit calls (command
buffers submitted together), semaphore waits, and the time its GPU spent on ggml's work
and on tpar's.

A file with no synchronize spans (tpar-bench --chain's window) is one step: the whole
window. Exit status: 0 success, 1 a failure (a file it cannot read or draw), 2 a usage error.
"""
import argparse
import json
import sys

HOST_COLORS = {
    "graph_compute": "#4c78a8",
    "ggml submit": "#72b7b2",
    "allreduce hook": "#f58518",
    "tpar call": "#ffbf79",
    "vkQueueSubmit": "#e45756",
    "tpar slot wait": "#b279a2",
    "synchronize": "#9d9d9d",
}
GPU_COLORS = {"ggml": "#4c78a8", "chain step": "#4c78a8", "host": "#4c78a8", "tpar": "#f58518"}


def gpu_color(name):
    return GPU_COLORS["tpar"] if name.startswith("tpar") else GPU_COLORS.get(name, "#72b7b2")


def fail(message, code=1):
    print(f"timeline.py: {message}", file=sys.stderr)
    sys.exit(code)


def merge_syncs(spans, graphs=()):
    """Synchronize spans grouped: those with no graph_compute (of `graphs`) starting between
    them are one group (a token's end: every device's synchronize, one after another)."""
    starts = sorted(g["ts"] for g in graphs)
    groups = []
    for s in sorted(spans, key=lambda e: e["ts"]):
        if groups:
            last_end = groups[-1][1]
            between = any(last_end <= t < s["ts"] for t in starts) if starts else s["ts"] - last_end >= 1000
            if not between:
                groups[-1][1] = max(groups[-1][1], s["ts"] + s["dur"])
                continue
        groups.append([s["ts"], s["ts"] + s["dur"]])
    return groups


def union_length(intervals):
    total, end = 0.0, None
    for b, e in sorted(intervals):
        if end is None or b > end:
            total += e - b
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarize(events, names, begin, end):
    host = [e for e in events if e["pid"] == 0 and e["ts"] >= begin - 1e-6 and e["ts"] + e["dur"] <= end + 1e-6]
    gpu = [e for e in events if e["pid"] != 0 and e["ts"] < end and e["ts"] + e["dur"] > begin]
    graphs = [e for e in host if e["name"] == "graph_compute"]
    syncs = [e for e in host if e["name"] == "synchronize"]
    enqueue_begin = min((e["ts"] for e in graphs), default=begin)
    enqueue_end = min((e["ts"] for e in syncs), default=max((e["ts"] + e["dur"] for e in host), default=begin))
    work = sum(e["dur"] for e in gpu)
    done_when_enqueued = sum(max(0.0, min(e["ts"] + e["dur"], enqueue_end) - e["ts"]) for e in gpu)
    devices = {}
    for pid in sorted({e["pid"] for e in gpu}):
        mine = [e for e in gpu if e["pid"] == pid]
        submits = len({e["args"].get("submitted") for e in mine})
        devices[names.get(pid, str(pid))] = {
            "busy_us": round(union_length([(max(e["ts"], begin), min(e["ts"] + e["dur"], end)) for e in mine]), 1),
            "ggml_us": round(sum(e["dur"] for e in mine if not e["name"].startswith("tpar")), 1),
            "tpar_us": round(sum(e["dur"] for e in mine if e["name"].startswith("tpar")), 1),
            "command_buffers": len(mine),
            "vkQueueSubmit": submits,
            "semaphore_waits": sum(e["args"].get("waits", 0) for e in mine),
        }
    host_time = {}
    for e in host:
        host_time[e["name"]] = host_time.get(e["name"], 0.0) + e["dur"]
    return {
        "step_us": round(end - begin, 1),
        "host_before_enqueue_us": round(enqueue_begin - begin, 1),
        "host_outside_spans_us": round(end - begin - union_length([(e["ts"], e["ts"] + e["dur"]) for e in host]), 1),
        "host_enqueue_us": round(enqueue_end - enqueue_begin, 1),
        "host_enqueue_end_us": round(enqueue_end - begin, 1),
        "gpu_work_done_when_enqueued": round(done_when_enqueued / work, 3) if work else None,
        "host_us_by_span": {k: round(v, 1) for k, v in sorted(host_time.items())},
        "devices": devices,
    }


def median_summary(events, names, steps):
    """The median step's time and host enqueue over every step, the host spans' mean a step
    (in all and per host thread), and the devices' figures of the last step."""
    rows = [summarize(events, names, b, e) for b, e in steps]
    med = lambda key: sorted(r[key] for r in rows)[len(rows) // 2]
    spans, threads = {}, {}
    for b, e in steps:
        for ev in events:
            if ev["pid"] == 0 and ev["ts"] >= b - 1e-6 and ev["ts"] + ev["dur"] <= e + 1e-6:
                spans[ev["name"]] = spans.get(ev["name"], 0.0) + ev["dur"] / len(steps)
                t = threads.setdefault(str(ev["tid"]), {})
                t[ev["name"]] = t.get(ev["name"], 0.0) + ev["dur"] / len(steps)
    out = dict(rows[-1])
    out.update({
        "steps": len(rows),
        "step_us": med("step_us"),
        "host_before_enqueue_us": med("host_before_enqueue_us"),
        "host_outside_spans_us": med("host_outside_spans_us"),
        "host_enqueue_us": med("host_enqueue_us"),
        "host_enqueue_end_us": med("host_enqueue_end_us"),
        "host_us_by_span": {k: round(v, 1) for k, v in sorted(spans.items())},
        "host_us_by_thread": {t: {k: round(v, 1) for k, v in sorted(d.items())} for t, d in sorted(threads.items())},
    })
    return out


def draw(events, names, begin, end, summary, title):
    width, left, row_h, top = 1500, 190, 26, 64
    rows = []  # (label, pid, tid)
    for tid in sorted({e["tid"] for e in events if e["pid"] == 0}):
        rows.append((f"host thread {tid}", 0, tid))
    for pid in sorted({e["pid"] for e in events if e["pid"] != 0}):
        for tid in sorted({e["tid"] for e in events if e["pid"] == pid}):
            rows.append((f"{names.get(pid, pid)}, family {tid}", pid, tid))
    span = max(end - begin, 1e-3)
    scale = (width - left - 20) / span
    height = top + row_h * len(rows) + 90
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{title}</text>']
    s = summary
    line = (f'step {s["step_us"] / 1000:.2f} ms; host enqueue {s["host_enqueue_us"] / 1000:.2f} ms, ending at '
            f'{s["host_enqueue_end_us"] / 1000:.2f} ms')
    if s["gpu_work_done_when_enqueued"] is not None:
        line += f' with {100 * s["gpu_work_done_when_enqueued"]:.0f}% of the GPUs\' work done'
    out.append(f'<text x="10" y="40">{line}</text>')
    per_dev = "; ".join(f'{k}: {v["vkQueueSubmit"]} vkQueueSubmit, {v["semaphore_waits"]} waits, busy {v["busy_us"] / 1000:.2f} ms'
                        for k, v in s["devices"].items())
    out.append(f'<text x="10" y="56">{per_dev}</text>')
    for i, (label, pid, tid) in enumerate(rows):
        y = top + i * row_h
        out.append(f'<text x="10" y="{y + 17}">{label}</text>')
        out.append(f'<rect x="{left}" y="{y + 2}" width="{width - left - 20}" height="{row_h - 4}" fill="#f4f4f4"/>')
        mine = [e for e in events if e["pid"] == pid and e["tid"] == tid and e["ts"] < end and e["ts"] + e["dur"] > begin]
        # Host spans nest (a vkQueueSubmit inside a graph_compute): longest first, so the inner ones stay visible.
        for e in sorted(mine, key=lambda e: -e["dur"]):
            x0 = left + (max(e["ts"], begin) - begin) * scale
            x1 = left + (min(e["ts"] + e["dur"], end) - begin) * scale
            color = HOST_COLORS.get(e["name"], "#bab0ac") if pid == 0 else gpu_color(e["name"])
            out.append(f'<rect x="{x0:.2f}" y="{y + 3}" width="{max(x1 - x0, 0.6):.2f}" height="{row_h - 6}" fill="{color}">'
                       f'<title>{e["name"]}: {e["dur"]:.1f} us</title></rect>')
    axis_y = top + row_h * len(rows) + 8
    out.append(f'<line x1="{left}" y1="{axis_y}" x2="{width - 20}" y2="{axis_y}" stroke="black"/>')
    step = 10 ** len(str(int(span / 8))) / 10 if span >= 8 else 1
    while span / step > 12:
        step *= 2
    t = 0.0
    while t <= span:
        x = left + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle">{t / 1000:g} ms</text>')
        t += step
    legend = [("host: graph_compute (ggml)", HOST_COLORS["graph_compute"]), ("host: AllReduce hook", HOST_COLORS["allreduce hook"]),
              ("host: vkQueueSubmit", HOST_COLORS["vkQueueSubmit"]), ("host: tpar slot wait", HOST_COLORS["tpar slot wait"]),
              ("host: synchronize", HOST_COLORS["synchronize"]), ("GPU: ggml's work", GPU_COLORS["ggml"]),
              ("GPU: tpar's batches", GPU_COLORS["tpar"])]
    x = 10
    for text, color in legend:
        out.append(f'<rect x="{x}" y="{axis_y + 32}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 16}" y="{axis_y + 43}">{text}</text>')
        x += 18 + 7 * len(text)
    out.append("</svg>")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(prog="timeline.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("trace")
    parser.add_argument("-o", "--output", help="the SVG to write (without it: the figures only)")
    parser.add_argument("--title", default="")
    parser.add_argument("--step", default="-1", help="which complete step of the window (default: the last), or all")
    parser.add_argument("--summary-json")
    try:
        args = parser.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    try:
        with open(args.trace) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {args.trace}: {e}")
    events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X"]
    names = {e["pid"]: e["args"]["name"] for e in data.get("traceEvents", []) if e.get("ph") == "M"}
    if not events:
        fail(f"{args.trace} holds no spans")
    syncs = merge_syncs([e for e in events if e["pid"] == 0 and e["name"] == "synchronize"],
                        [e for e in events if e["pid"] == 0 and e["name"] == "graph_compute"])
    if len(syncs) >= 2:
        steps = [(syncs[i][1], syncs[i + 1][1]) for i in range(len(syncs) - 1)]
    else:
        steps = [(min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events))]
    if args.step != "all":
        try:
            begin, end = steps[int(args.step)]
        except (IndexError, ValueError):
            fail(f"--step {args.step}: the window holds {len(steps)} complete step(s); give an index or all", 2)
        summary = summarize(events, names, begin, end)
    else:
        begin, end = steps[-1]
        summary = median_summary(events, names, steps)
    summary["trace"] = args.trace
    summary["tpar"] = data.get("tpar", {})
    if args.output:
        with open(args.output, "w") as f:
            f.write(draw(events, names, begin, end, summary, args.title or args.trace))
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "tpar"}, indent=1))


if __name__ == "__main__":
    main()
