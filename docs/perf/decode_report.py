#!/usr/bin/env python3
"""Renders the four-H100 decode figures of docs/PERFORMANCE.md and README.md's AllReduce
paragraph from the raw logs of scripts/gpu-suite.sh, so that no figure there is typed by
hand (README's first screen: docs/perf/llama_report.py).

    python3 docs/perf/decode_report.py            # rewrites the rendered blocks in place
    python3 docs/perf/decode_report.py --check    # exits 1 where a rendered block differs
    python3 docs/perf/decode_report.py --print    # prints the blocks

Reads (docs/perf/raw/): decode-host-h100x4-4cc2272.txt (gpu-suite.sh env tests chain
trace, then llama, on four H100s), its traces (…-traces.tar.xz, summarized with
scripts/timeline.py's own functions) and decode-host-h100x4-tiny-a63afdb.txt (the part
tiny); draws docs/perf/timeline-8b-h100x2-after.svg from the trace with GPU timestamps.
A block sits between `<!-- rendered: NAME -->` and `<!-- end rendered: NAME -->`.
Needs nothing beyond Python 3. Exit status: 0 success (--check: the docs match), 1 they
differ or a log is missing, 2 a usage error.
"""
import io
import json
import os
import re
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RAW = os.path.join(HERE, "raw")
RUN = "decode-host-h100x4-4cc2272.txt"
TRACES = "decode-host-h100x4-4cc2272-traces.tar.xz"
TINY = "decode-host-h100x4-tiny-a63afdb.txt"
SVG = "timeline-8b-h100x2-after.svg"
CUDA = "decode-cuda-h100x4-a81da69.txt"
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import timeline  # noqa: E402  (the same step rules the pictures use)
sys.path.insert(0, HERE)
import report  # noqa: E402  (the sweep logs' parsers)
import textwrap  # noqa: E402


def read(name):
    with open(os.path.join(RAW, name)) as f:
        return f.read()


def stamp(text):
    """tree, built, ran, the GPUs' name and driver, from a log's header."""
    tree = re.search(r"^# tree (\S+)", text, re.M).group(1)
    ran = re.search(r"^# ran (\S+)", text, re.M).group(1)
    header = text.split("\ngpu-suite.sh:")[0]  # the first log's stamp
    gpus = re.findall(r"^# gpu \d+, ([^,]+), ([^,]+),", header, re.M)
    llama = re.search(r"^# (?:tree|built) .*?llama\.cpp ([0-9a-f]+) \+ (?:(\d+) patches|patches to (\d{4}))", header, re.M)
    return {"tree": tree, "date": ran[:10], "time": ran[11:16], "gpu": gpus[0][0], "driver": gpus[0][1], "n": len(gpus),
            "llama": llama.group(1) if llama else None, "patches": int(llama.group(2) or llama.group(3)) if llama else None}


def ratio_spread(a, b):
    """(mean, low, high) of a / b, each llama-bench's (mean, sd): low and high with each side one sd apart."""
    (ma, sa), (mb, sb) = a, b
    return ma / mb, (ma - sa) / (mb + sb), (ma + sa) / (mb - sb)


def word(ratios, than):
    """How (mean, low, high) ratios stand against `than`, in words: faster or slower only where every spread is."""
    if all(lo >= 1.005 for _, lo, _ in ratios):
        return f"faster than {than}"
    if all(hi < 0.995 for _, _, hi in ratios):
        return f"slower than {than}"
    return f"about as fast as {than}"


def benches(text):
    """{label: {test: (mean, sd)}} from the '## llama-bench LABEL:' sections."""
    out, label = {}, None
    for line in text.splitlines():
        m = re.match(r"## llama-bench (\S+):", line)
        if m:
            label = m.group(1)
            out[label] = {}
            continue
        m = re.match(r"\|.*\|\s*(pp\d+|tg\d+(?: @ d\d+)?)\s*\|\s*([\d.]+) ± ([\d.]+) \|", line)
        if m and label:
            out[label][m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


def chains(text):
    """{(devices, work): [row dicts]} from the tpar-bench --chain sections."""
    out, key = {}, None
    for line in text.splitlines():
        m = re.match(r"## tpar-bench --devices (\S+) --chain 64 --chain-work (\S+)", line)
        if m:
            key = (len(m.group(1).split(",")), m.group(2))
            out[key] = []
            continue
        f = line.split()
        if key and len(f) == 11 and f[0].isdigit() and f[1] == "oneshot":
            out[key].append(dict(bytes=int(f[0]), wiring=f[2], step=float(f[3]), none=float(f[4]), boundary=float(f[5]),
                                 enqueue=float(f[6]), cpu=float(f[7]), submits=float(f[8]), waits=float(f[9]), wrong=int(f[10])))
    return out


def gpu_path(events, names, begin, end):
    """Per device, in one step: the median time of each kind of command buffer and of the
    gaps before a combine (the wait for the peers), and the totals."""
    out = {}
    for pid in sorted({e["pid"] for e in events if e["pid"] != 0}):
        cbs = sorted((e for e in events if e["pid"] == pid and begin <= e["ts"] < end), key=lambda e: e["ts"])
        kinds = {"ggml": [], "upload": [], "sum": [], "wait": []}
        last_end = None
        for e in cbs:
            kind = "ggml" if e["name"] == "ggml" else "upload" if e["name"].endswith("transfer") else "sum"
            kinds[kind].append(e["dur"])
            if kind == "sum" and last_end is not None:
                kinds["wait"].append(e["ts"] - last_end)
            last_end = e["ts"] + e["dur"]
        med = {k: sorted(v)[len(v) // 2] for k, v in kinds.items() if v}
        out[names.get(pid, str(pid))] = {
            "median": med,
            "ggml_total": sum(kinds["ggml"]),
            "tpar_total": sum(kinds["upload"]) + sum(kinds["sum"]),
            "wait_total": sum(kinds["wait"]),
            "boundaries": len(kinds["sum"]),
        }
    return out


def traces():
    """{label: median summary over the window's steps} for each trace of the run, and for
    the trace with GPU timestamps its GPU path in the middle step."""
    out = {}
    with tarfile.open(os.path.join(RAW, TRACES), "r:xz") as tar:
        for member in tar.getmembers():
            m = re.match(r"trace-(.+)\.json$", member.name)
            if not m:
                continue
            data = json.load(io.TextIOWrapper(tar.extractfile(member)))
            events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X"]
            names = {e["pid"]: e["args"]["name"] for e in data.get("traceEvents", []) if e.get("ph") == "M"}
            syncs = timeline.merge_syncs([e for e in events if e["pid"] == 0 and e["name"] == "synchronize"],
                                         [e for e in events if e["pid"] == 0 and e["name"] == "graph_compute"])
            steps = [(syncs[i][1], syncs[i + 1][1]) for i in range(len(syncs) - 1)]
            out[m.group(1)] = timeline.median_summary(events, names, steps)
            if any(e["pid"] != 0 for e in events):
                mid = steps[len(steps) // 2]
                out[m.group(1)]["gpu_path"] = gpu_path(events, names, *mid)
                summary = timeline.summarize(events, names, *mid)
                out[m.group(1)]["svg"] = timeline.draw(events, names, *mid, summary,
                                                       "one decode token, Llama-3-8B shapes, -sm tensor with tpar, two H100s")
    return out


def t(b, label, test):
    return b[label][test][0]


def tg_cell(b, label, test):
    mean, sd = b[label][test]
    return f"{mean:.2f} ± {sd:.2f}"


def render():
    run, tiny_log = read(RUN), read(TINY)
    s, st = stamp(run), stamp(tiny_log)
    b, tb = benches(run), benches(tiny_log)
    tr = traces()
    ch = chains(run)
    n = s["n"]
    blocks = {}

    # --- llama.cpp, the two models
    rows = ["| model | mode | pp512 t/s | tg t/s | tg vs one GPU |", "|---|---|---|---|---|"]
    names = {"none": "`-sm none`, one GPU", "layer2": "`-sm layer`, 2 GPUs", "ggml2": "`-sm tensor`, ggml's AllReduce, 2 GPUs"}
    for k in (2, n):
        names[f"tpar{k}-before"] = f"`-sm tensor`, tpar, {k} GPUs, before (`GGML_VK_DISABLE_REPLAY=1`)"
        names[f"tpar{k}-after"] = f"`-sm tensor`, tpar, {k} GPUs, **after** (the defaults)"
        names[f"tpar{k}-threads"] = f"`-sm tensor`, tpar, {k} GPUs, a thread per device (`TPAR_GGML_THREADS=1`)"
    for model, suffix, tg in (("Llama-3-8B shapes, q8_0", "8b", "tg128"), ("70B shapes, 20 of 80 layers, q8_0", "70b20", "tg64")):
        base = t(b, f"none-{suffix}", tg)
        first = True
        for key, name in names.items():
            label = f"{key}-{suffix}"
            if label not in b:
                continue
            ratio = t(b, label, tg) / base
            bold = "**" if key.endswith("after") else ""
            rows.append(f"| {model if first else ''} | {name} | {tg_cell(b, label, 'pp512')} | {tg_cell(b, label, tg)} "
                        f"| {bold}{ratio:.2f}x{bold} |")
            first = False
    deep = ["| mode (8B, `-p 0 -n 128 -d 8192`) | tg128 @ d8192 t/s | vs one GPU |", "|---|---|---|"]
    base = t(b, "none-8b-d8192", "tg128 @ d8192")
    for label, name in (("none-8b-d8192", "`-sm none`, one GPU"), ("layer2-8b-d8192", "`-sm layer`, 2 GPUs"),
                        ("tpar2-before-8b-d8192", "tpar, 2 GPUs, before"), ("tpar2-after-8b-d8192", "tpar, 2 GPUs, after")):
        deep.append(f"| {name} | {tg_cell(b, label, 'tg128 @ d8192')} | {t(b, label, 'tg128 @ d8192') / base:.2f}x |")
    blocks["decode-llama"] = "\n".join(
        [f"{n} × {s['gpu']} (driver {s['driver']}), tree {s['tree']}, {s['date']}; one run, every row the same binary "
         f"(llama.cpp {s['llama']} + {s['patches']} patches), random weights, `llama-bench -fa 1 -r 3`; raw: "
         f"[perf/raw/{RUN}](perf/raw/{RUN}).", "", "    scripts/gpu-suite.sh llama      # on the GPU machine, after scripts/gpu-bundle.sh here",
         ""] + rows + [""] + deep)

    # --- at a glance
    def ratio(label, test, base):
        return t(b, label, test) / t(b, base, test)

    glance = ["| model | prompt, pp512, 2 / {n} GPUs (spread) | generation, 2 / {n} GPUs (spread) | `-sm layer` generation, "
              "2 GPUs | in words, {n} GPUs against one |".format(n=n), "|---|---|---|---|---|"]

    def spread(r):
        return f"{r[0]:.2f}x ({r[1]:.2f}-{r[2]:.2f})"
    for model, suffix, tg in (("Llama-3-8B shapes, q8_0", "8b", "tg128"), ("Llama-3-70B shapes, 20 of 80 layers, q8_0", "70b20", "tg64")):
        pre = [ratio_spread(b[f"tpar{k}-after-{suffix}"]["pp512"], b[f"none-{suffix}"]["pp512"]) for k in (2, n)]
        dec = [ratio_spread(b[f"tpar{k}-after-{suffix}"][tg], b[f"none-{suffix}"][tg]) for k in (2, n)]
        lay = ratio(f"layer2-{suffix}", tg, f"none-{suffix}")
        glance.append(f"| {model} | {spread(pre[0])} / {spread(pre[1])} | {spread(dec[0])} / {spread(dec[1])} | {lay:.2f}x | "
                      f"the prompt {word([pre[1]], 'one GPU')}, generation {word([dec[1]], 'one GPU')} |")
    blocks["glance"] = "\n".join(
        [f"{n} × {s['gpu']} (driver {s['driver']}), {s['date']}, tpar tree {s['tree']}, llama.cpp {s['llama']} + "
         f"{s['patches']} patches, one run, `scripts/gpu-suite.sh llama`: random weights, `llama-bench -fa 1 -r 3`; raw "
         f"[perf/raw/{RUN}](perf/raw/{RUN}); every mode, the host's time per token and the targets of that run: "
         f"[design/decode-history.md](design/decode-history.md#four-h100s-llamacpp-3f545bec-2026-11-26).", ""] + glance)

    # --- the AllReduce alone, from the sweep logs (report.py renders their full tables)
    arows = ["| machine | figure | tpar (runtime's choice) | NCCL P2P off | ratio | NCCL NVLink (reference) |",
             "|---|---|---|---|---|---|"]
    ar = {}
    for kind, machine in (("h100x2", "2 H100s, 2026-11-26, c142125, -r 1"), ("x2", "2 H200s, 2026-11-21"),
                          ("x4", "4 H200s, 2026-11-21")):
        nc = report.nccl(kind)
        auto = {r["bytes"]: r for r in report.bench(f"sweep-default-{report.KINDS[kind][1]}.txt")}
        big, small = auto[64 << 20], auto[16 << 10]
        ar[kind] = (big["busbw"] / nc[("p2p-off", 64 << 20)][1], small["us"] / nc[("p2p-off", 16 << 10)][0])
        arows.append(f"| {machine} | 64 MiB, busbw ({big['wire']} wire) | {big['busbw']:.1f} GB/s | "
                     f"{nc[('p2p-off', 64 << 20)][1]:.1f} GB/s | {ar[kind][0]:.2f}x | {nc[('nvlink', 64 << 20)][1]:.0f} GB/s |")
        arows.append(f"| {machine} | 16 KiB, time per call | {small['us']:.1f} us | {nc[('p2p-off', 16 << 10)][0]:.1f} us | "
                     f"{ar[kind][1]:.1f}x slower | |")
    blocks["glance-allreduce"] = "\n".join(arows)
    blocks["readme-allreduce"] = (
        f"As an AllReduce by itself, against NCCL with peer-to-peer off (NCCL staging through host memory, as tpar must: "
        f"Vulkan reaches no NVLink), tpar moved 64 MiB at {ar['h100x2'][0]:.2f}x NCCL's bus bandwidth on two H100s "
        f"(2026-11-26, tree c142125), {ar['x2'][0]:.2f}x on two H200s and {ar['x4'][0]:.2f}x on four (2026-11-21), and was "
        f"{ar['x4'][1]:.1f}-{ar['x2'][1]:.1f}x slower at 16 KiB on the H200s, back to back (the two H100s' 16 KiB row is "
        f"their sweep's first and slow; docs/PERFORMANCE.md, \"The AllReduce by size\", where \"The chain\" times a "
        f"decode's dependent chain).")

    # --- the host per token
    hrows = ["| 8B, one decode token | token | host enqueue | vs `-sm none`'s | in vkQueueSubmit | in graph_compute | "
             "in tpar's hook | tokens |", "|---|---|---|---|---|---|---|---|"]
    none_enq = tr["host-none-8b"]["host_enqueue_us"]
    for label, name in [("host-none-8b", "`-sm none`")] + [
            (f"host-tpar{k}-{v}-8b", f"tpar, {k} GPUs, {w}") for k in (2, n) for v, w in
            (("before", "before"), ("after", "**after**"), ("threads", "threads"))]:
        r = tr[label]
        spans = r["host_us_by_span"]
        hook = spans.get("allreduce hook", 0) + spans.get("allreduce hook (deferred)", 0) + spans.get("tpar enqueue", 0)
        hrows.append(f"| {name} | {r['step_us'] / 1000:.2f} ms | {r['host_enqueue_us'] / 1000:.2f} ms | "
                     f"{r['host_enqueue_us'] / none_enq:.2f}x | {spans.get('vkQueueSubmit', 0) / 1000:.2f} ms | "
                     f"{spans.get('graph_compute', 0) / 1000:.2f} ms | {hook / 1000:.2f} ms | {r['steps']} |")
    blocks["decode-host"] = "\n".join(
        [f"`TPAR_TRACE`, `TPAR_TRACE_GPU=0` (host spans only), `llama-bench -p 0 -n 48`, a window of six tokens, the median "
         f"token; the spans' times are per token, summed over the host's threads (with a thread per device, they run at "
         f"once). Same run and machine; traces: [perf/raw/{TRACES}](perf/raw/{TRACES}), summarized by "
         f"`scripts/timeline.py TRACE --step all`.", ""] + hrows)

    def span(label, name):
        return tr[label]["host_us_by_span"].get(name, 0.0)

    def per_call(label, k):  # vkQueueSubmit a call: one a device a boundary, 64 boundaries
        return span(label, "vkQueueSubmit") / (64 * k + 1 * k)

    gc_before = [span(f"host-tpar{k}-before-8b", "graph_compute") for k in (2, n)]
    gc_after = [span(f"host-tpar{k}-after-8b", "graph_compute") for k in (2, n)]
    blocks["decode-host-why"] = (
        f"Before, the host recorded every subgraph of every device anew each token "
        f"({gc_before[0] / 1000:.2f} ms of graph_compute on 2 GPUs, {gc_before[1] / 1000:.2f} ms on {n}); with replay that "
        f"is {gc_after[0] / 1000:.2f} and {gc_after[1] / 1000:.2f} ms, and what is left is tpar's hook, most of it "
        f"vkQueueSubmit, one a device a boundary: {per_call('host-tpar2-after-8b', 2):.1f} us each on 2 GPUs, "
        f"{per_call(f'host-tpar{n}-after-8b', n):.1f} on {n}. A thread per device does not help on this driver, which "
        f"serializes the devices' submissions: its {n} threads spent "
        f"{span(f'host-tpar{n}-threads-8b', 'vkQueueSubmit') / 1000:.2f} ms a token in vkQueueSubmit, "
        f"{per_call(f'host-tpar{n}-threads-8b', n):.1f} us a call, against {span(f'host-tpar{n}-after-8b', 'vkQueueSubmit') / 1000:.2f} ms "
        f"for one thread.")

    g = tr["gpu-tpar2-after-8b"]
    dev = list(g["gpu_path"].values())
    md = lambda key: "-".join(sorted({f"{d['median'][key]:.0f}" for d in dev}, key=float))
    per_gpu = ", ".join(f"{name}: {d['ggml_total'] / 1000:.1f} ms of ggml work, {d['tpar_total'] / 1000:.1f} ms of tpar "
                        f"batches and {d['wait_total'] / 1000:.1f} ms of waits over {d['boundaries']} boundaries"
                        for name, d in g["gpu_path"].items())
    blocks["svg"] = g["svg"]
    blocks["decode-gpu"] = (
        f"The GPUs' timelines (timestamps around every command buffer, which slow the host and stretch the token to "
        f"{g['step_us'] / 1000:.1f} ms, against {tr['host-tpar2-after-8b']['step_us'] / 1000:.2f} without) and the host's: "
        f"blue ggml's work, orange tpar's batches. Per boundary a GPU runs ggml's subgraph, tpar's upload (median "
        f"{md('upload')} us), waits for its peer's semaphore ({md('wait')} us) and sums ({md('sum')} us); in the token, "
        f"{per_gpu}. "
        f"ggml's work a GPU is far from half of one GPU's whole token ({tr['host-none-8b']['step_us'] / 1000:.2f} ms): "
        f"each GPU holds half of a layer's matrices but runs as many dispatches, each paying its launch and barrier.")

    # --- the tiny model
    trow = ["| 32 layers, 256 wide, f16, tg64 | t/s | vs `-sm none` |", "|---|---|---|"]
    base = t(tb, "none-tiny32", "tg64")
    for label, name in [("none-tiny32", "`-sm none`"), ("layer2-tiny32", "`-sm layer`, 2 GPUs")] + [
            (f"tpar{k}-{v}-tiny32", f"tpar, {k} GPUs, {v}") for k in (2, st["n"]) for v in ("before", "after", "threads")]:
        trow.append(f"| {name} | {tg_cell(tb, label, 'tg64')} | {t(tb, label, 'tg64') / base:.2f}x |")
    blocks["decode-tiny"] = "\n".join(
        [f"Same machine kind, tree {st['tree']} (the binaries of {s['tree']}), {st['date']}, `scripts/gpu-suite.sh tiny`; "
         f"raw: [perf/raw/{TINY}](perf/raw/{TINY}). A token of this model is almost all host and boundaries: "
         f"the spread between runs is wide.", ""] + trow)

    # --- the chain
    crow = ["| devices | weights a dispatch | wiring | step | no AllReduce | boundary | host enqueue a step |",
            "|---|---|---|---|---|---|---|"]
    for key in sorted(ch):
        for r in ch[key]:
            if r["bytes"] != 16384 or r["wiring"] == "semaphores":
                continue
            crow.append(f"| {key[0]} | {key[1]} | {r['wiring']} | {r['step']:.1f} us | {r['none']:.1f} us | {r['boundary']:.1f} us "
                        f"| {r['enqueue']:.1f} us |")
    blocks["decode-chain"] = "\n".join(
        ["`tpar-bench --devices … --chain 64 --chain-work W --chain-wiring all -n 20 -r 3`, 16 KiB (a decode call), same run; "
         "the boundary is the step less the same chain without the AllReduce.", ""] + crow)

    # --- targets
    r8 = {k: t(b, f"tpar{k}-after-8b", "tg128") / t(b, "none-8b", "tg128") for k in (2, n)}
    r70 = {k: t(b, f"tpar{k}-after-70b20", "tg64") / t(b, "none-70b20", "tg64") for k in (2, n)}
    host = {k: tr[f"host-tpar{k}-after-8b"]["host_enqueue_us"] / none_enq for k in (2, n)}
    tiny2 = t(tb, "tpar2-after-tiny32", "tg64") / t(tb, "none-tiny32", "tg64")
    deep2 = t(b, "tpar2-after-8b-d8192", "tg128 @ d8192") / t(b, "none-8b-d8192", "tg128 @ d8192")
    pp = {k: t(b, f"tpar{k}-after-8b", "pp512") / t(b, "none-8b", "pp512") for k in (2, n)}

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    targets = [
        f"- 8B tg128 ≥ 1.10x one GPU: 2 GPUs {r8[2]:.2f}x, {n} GPUs {r8[n]:.2f}x: {verdict(min(r8.values()) >= 1.10)}.",
        f"- 70B shapes (20 layers) tg ≥ 1.60x at 2 GPUs and ≥ 2.10x at {n}: {r70[2]:.2f}x and {r70[n]:.2f}x: "
        f"{verdict(r70[2] >= 1.60 and r70[n] >= 2.10)}.",
        f"- Host enqueue per token ≤ 1.5x `-sm none`'s: 2 GPUs {host[2]:.2f}x ({verdict(host[2] <= 1.5)[2:-2]}), "
        f"{n} GPUs {host[n]:.2f}x ({verdict(host[n] <= 1.5)[2:-2]}).",
        f"- The 32-layer, 256-wide model ≥ 0.7x `-sm none` on 2 GPUs: {tiny2:.2f}x: {verdict(tiny2 >= 0.7)}.",
        f"- `-d 8192` tg ≥ one GPU at 2 GPUs: {deep2:.2f}x: {verdict(deep2 >= 1.0)}.",
        f"- pp512 not below 1.61x / 1.97x (8B, 2 / {n} GPUs): {pp[2]:.2f}x / {pp[n]:.2f}x: {verdict(pp[2] >= 1.61 and pp[n] >= 1.97)}.",
    ]
    blocks["decode-targets"] = "\n".join(targets)

    # --- the CUDA anchor: ggml-cuda's -sm tensor on the same machine, same run as tpar's rows
    cuda_log = read(CUDA)
    sc, cb = stamp(cuda_log), benches(cuda_log)
    crows = ["| model | GPUs | tpar (Vulkan, host memory) | CUDA, ggml's own AllReduce | CUDA + NCCL, peer-to-peer off (host memory) "
             "| CUDA + NCCL over NVLink (reference) |", "|---|---|---|---|---|---|"]
    cuda_ratio = {}
    for model, suffix, tg in (("Llama-3-8B shapes", "8b", "tg128"), ("70B shapes, 20 layers", "70b20", "tg64")):
        vk1, cu1 = t(cb, f"none-{suffix}", tg), t(cb, f"cuda-none-{suffix}", tg)
        for k in (2, n):
            r = {"tpar": t(cb, f"tpar{k}-after-{suffix}", tg) / vk1}
            for mode in ("internal", "nccl-p2p-off", "nccl"):
                r[mode] = t(cb, f"cuda{k}-{mode}-{suffix}", tg) / cu1
            cuda_ratio[(suffix, k)] = r
            sp = {"tpar": ratio_spread(cb[f"tpar{k}-after-{suffix}"][tg], cb[f"none-{suffix}"][tg])}
            for mode in ("internal", "nccl-p2p-off", "nccl"):
                sp[mode] = ratio_spread(cb[f"cuda{k}-{mode}-{suffix}"][tg], cb[f"cuda-none-{suffix}"][tg])
            cell = {m: f"{v[0]:.2f}x ({v[1]:.2f}-{v[2]:.2f})" for m, v in sp.items()}
            crows.append(f"| {model if k == 2 else ''} | {k} | {cell['tpar']} | {cell['internal']} | {cell['nccl-p2p-off']} "
                         f"| {cell['nccl']} |")
    blocks["decode-cuda"] = "\n".join(
        [f"Decode (tg) against each backend's own one GPU, in brackets the spread: {n} × {sc['gpu']}, {sc['date']}, one "
         f"machine, one run (tree {sc['tree']}, tpar's binaries of {s['tree']}, llama.cpp {sc['llama']} + {sc['patches']} "
         f"patches); the pinned llama.cpp of that day built there with ggml-cuda (sm_90, NCCL from "

         f"PyTorch's wheel), `GGML_CUDA_ALLREDUCE=internal|nccl`, `NCCL_P2P_DISABLE=1` for NCCL staged through host "
         f"memory, as tpar must. One GPU: Vulkan {t(cb, 'none-8b', 'tg128'):.2f} and CUDA {t(cb, 'cuda-none-8b', 'tg128'):.2f} "
         f"t/s (8B), {t(cb, 'none-70b20', 'tg64'):.2f} and {t(cb, 'cuda-none-70b20', 'tg64'):.2f} (70B shapes). Raw: "
         f"[perf/raw/{CUDA}](perf/raw/{CUDA}).", "", "    scripts/gpu-suite.sh cuda llama", ""] + crows)

    beat = [cuda_ratio[(m, k)]["tpar"] >= cuda_ratio[(m, k)]["nccl-p2p-off"] for m in ("8b", "70b20") for k in (2, n)]
    blocks["decode-targets"] += "\n" + (
        f"- Beat CUDA's ratios over host memory on these four H100s (NCCL, peer-to-peer off; the run of {sc['tree']}, "
        f"PERFORMANCE.md's CUDA table): 8B "

        f"{cuda_ratio[('8b', 2)]['tpar']:.2f}x / {cuda_ratio[('8b', n)]['tpar']:.2f}x against "
        f"{cuda_ratio[('8b', 2)]['nccl-p2p-off']:.2f}x / {cuda_ratio[('8b', n)]['nccl-p2p-off']:.2f}x, 70B shapes "
        f"{cuda_ratio[('70b20', 2)]['tpar']:.2f}x / {cuda_ratio[('70b20', n)]['tpar']:.2f}x against "
        f"{cuda_ratio[('70b20', 2)]['nccl-p2p-off']:.2f}x / {cuda_ratio[('70b20', n)]['nccl-p2p-off']:.2f}x: "
        f"{verdict(all(beat))}; CUDA's own AllReduce on {n} GPUs ({cuda_ratio[('8b', n)]['internal']:.2f}x, "
        f"{cuda_ratio[('70b20', n)]['internal']:.2f}x) "
        f"{'tpar beats' if all(cuda_ratio[(m, n)]['tpar'] > cuda_ratio[(m, n)]['internal'] for m in ('8b', '70b20')) else 'tpar does not beat'}.")

    for name in ("readme-allreduce", "decode-host-why", "decode-gpu"):
        blocks[name] = textwrap.fill(blocks[name], width=89, break_on_hyphens=False, break_long_words=False)
    return blocks


def relink(body, doc):
    """A block written for docs/ (its links relative to docs/: perf/raw/..., design/...) as it reads in `doc`:
    each relative link made relative to doc's own folder. README's blocks name paths from the root."""
    here = os.path.dirname(doc)
    if doc == "README.md" or here == "docs":
        return body

    def fix(m):
        target = m.group(1)
        if re.match(r"[a-z]+:|#", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        new = os.path.relpath(os.path.normpath(os.path.join("docs", path)), here)
        return f"]({new}{'#' + anchor if anchor else ''})"
    return re.sub(r"\]\(([^)\s]+)\)", fix, body)


def apply(text, blocks, doc="docs/PERFORMANCE.md"):
    for name, body in blocks.items():
        body = relink(body, doc)
        pattern = re.compile(rf"(<!-- rendered: {re.escape(name)} -->\n)(?:.*?\n)?(<!-- end rendered: {re.escape(name)} -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def place(blocks, docs, check, tool):
    """Puts each rendered block into its place in the docs (or, with check, reports where
    a doc differs from its rendering); 1 where one differs or a block has no place."""
    bad, missing = 0, set(blocks)
    for doc in docs:
        path = os.path.join(ROOT, doc)
        with open(path) as f:
            text = f.read()
        found = [name for name in blocks if f"<!-- rendered: {name} -->" in text]
        missing -= set(found)
        new = apply(text, blocks, doc)
        if check:

            if new != text:
                print(f"{tool}: {doc} differs from its rendering ({', '.join(found)}); run python3 docs/perf/{tool}",
                      file=sys.stderr)
                bad = 1
        elif new != text:
            with open(path, "w") as f:
                f.write(new)
            print(f"{tool}: rendered {', '.join(found)} into {doc}")
    if missing:
        print(f"{tool}: no place in the docs for {', '.join(sorted(missing))}", file=sys.stderr)
        bad = 1
    return bad


def main():
    args = sys.argv[1:]
    if args not in ([], ["--check"], ["--print"]):
        print("usage: decode_report.py [--check | --print]", file=sys.stderr)
        return 2
    try:
        blocks = render()
    except (OSError, KeyError, AttributeError, ValueError, IndexError) as e:
        print(f"decode_report.py: cannot render from the logs: {e!r}", file=sys.stderr)
        return 1
    svg = blocks.pop("svg")
    if args == ["--print"]:
        for name, body in blocks.items():
            print(f"<!-- rendered: {name} -->\n{body}\n<!-- end rendered: {name} -->\n")
        return 0
    bad = 0
    svg_path = os.path.join(HERE, SVG)
    old_svg = open(svg_path).read() if os.path.exists(svg_path) else ""
    if args == ["--check"] and old_svg != svg:
        print(f"decode_report.py: docs/perf/{SVG} differs from its drawing; run python3 docs/perf/decode_report.py", file=sys.stderr)
        bad = 1
    elif not args and old_svg != svg:
        with open(svg_path, "w") as f:
            f.write(svg)
        print(f"decode_report.py: drew docs/perf/{SVG}")
    bad = place(blocks, ("docs/PERFORMANCE.md", "README.md", "docs/design/decode-history.md", "docs/design/allreduce-bounds.md"),
                args == ["--check"],
                "decode_report.py") or bad

    if args == ["--check"] and not bad:
        print("decode_report.py: PERFORMANCE.md, README.md and the timeline hold what the logs say")
    return bad


if __name__ == "__main__":
    sys.exit(main())
