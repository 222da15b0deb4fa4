#!/usr/bin/env python3
"""Renders the llama.cpp figures from the raw logs of scripts/gpu-suite.sh, so that no figure there is
typed by hand.

The current results, each from the newest run under docs/perf/raw that holds what it needs (a run: the
sections of one log of one tree and build, as its stamp says; a new log replaces, it never adds):

- README.md's first screen (readme-first): what tpar is, what to expect by model size against one GPU
  and -sm layer, the table with its llama.cpp tree and patch count, CUDA's rates on the same machine,
  where it has not run and how to find out, the commands to try;
- PERFORMANCE.md's tables of two H200s (perf-llama-h200x2, perf-decode-h200x2, server,
  perf-server-mixed), of four (perf-h200x4) and the targets with their verdicts (perf-targets).

The run-by-run history, each block from the logs its runs wrote (the constants below): the decode
runs in docs/design/decode-history.md (decode-now, decode-relay, decode-bound, decode-ride,
decode-ride-chain, decode-parts and their targets), the servers in docs/design/server-history.md
(server-mixed-*, server-steps) and the move to llama.cpp de3ff815 in docs/design/llama-move.md (move).

    python3 docs/perf/llama_report.py            # rewrites the rendered blocks in place
    python3 docs/perf/llama_report.py --check    # exits 1 where a rendered block differs
    python3 docs/perf/llama_report.py --print    # prints the blocks

A block sits between `<!-- rendered: NAME -->` and `<!-- end rendered: NAME -->`. Needs
nothing beyond Python 3. Exit status: 0 success (--check: the docs match), 1 they differ
or a log is missing, 2 a usage error. tests/tools/first_screen.py holds README's first 45 lines
to this rendering and to what a first screen may name.
"""
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RAW = os.path.join(HERE, "raw")
# The history's logs: each block of docs/design/decode-history.md, server-history.md and llama-move.md
# shows the run it names (the current tables pick their own, newest first: runs()).
MOVE = "move-h200x2-d1ea59b.txt"
GLANCE = "glance-h200x2-5b869da.txt"
# The same run's decode rows (part decode: 8B at -d 8192 and the 32-layer model, then 8B
# q8_0, Q4_K_M and the 70B shapes with a token's trace) and its mixed traffic: run Q1 of
# docs/design/boundary-parts.md, every command on one machine.
NOW = "decode-now-h200x2-5b869da.txt"
MIXED_Q1 = "server-mixed-h200x2-5b869da.txt"
# A server's steps phase by phase (scripts/server_steps.py; runs S1-S3 with its first form
# without the patch that keys replay by the subgraph's nodes, S4 with its first form, then
# numbered 0011) and the mixed traffic with it (another machine). It was withdrawn after a
# lavapipe crash and is back as 0012, with the crash's cause fixed by 0011
# (docs/design/server-mixed.md).
STEPS_BEFORE = "server-steps-h200x2-5b869da.txt"
STEPS_AFTER = "server-steps-h200x2-50628cb.txt"
MIXED_NOW = "server-mixed-h200x2-50628cb.txt"
# run R1: three commands back to back on one machine, the code a user runs (ten patches)
MIXED_R1 = ("server-mixed-h200x2-d527ccd.txt", "server-mixed-kvu-h200x2-d527ccd.txt", "server-mixed-again-h200x2-d527ccd.txt")
# run T1: two commands back to back on one machine, with patches 0011 and 0012 (twelve patches)
MIXED_T1 = ("server-mixed-h200x2-785d281.txt", "server-mixed-again-h200x2-785d281.txt")
# run V1: four commands back to back on one machine, with patch 0013 (thirteen patches) and the bundle without it
MIXED_V1 = ("server-mixed-h200x2-601d1ba.txt", "server-mixed-12p-h200x2-ccbf4c7.txt",
            "server-mixed-12p-again-h200x2-ccbf4c7.txt", "server-mixed-again-h200x2-601d1ba.txt")
# run W1: three commands back to back on one machine, with patch 0014 (fourteen patches) and the bundle of 601d1ba
MIXED_W1 = ("server-mixed-h200x2-956f288.txt", "server-mixed-13p-h200x2-601d1ba.txt", "server-mixed-again-h200x2-956f288.txt")
MIXED_X1 = ("server-mixed-h200x2-7e23035.txt", "server-mixed-14p-h200x2-57cd294.txt")
HOST_TIMERS_X1 = "host-timers-h200x2-7e23035.txt"
# run Y0: the servers warmed first, before 779f435 (one command); run Y1: after it, batched decode then the
# servers in two passes (two commands back to back on one machine)
MIXED_Y0 = "server-mixed-warm-h200x2-3458489.txt"
BATCHED_Y1 = "batched-h200x2-779f435.txt"
MIXED_Y1 = "server-mixed-warm-h200x2-779f435.txt"
# run Y2: the same bundle on another machine of the kind, with -sm layer, two passes
MIXED_Y2 = "server-mixed-layer-h200x2-779f435.txt"
# run Z1: patch 0016 (a step's slots in one ubatch whatever their KV streams), five commands back to back on one
# machine: the cases and the servers with and without it (LLAMA_KV_GAPS_DISABLE=1), twice; batched decode and free
# boundaries; two more passes
MIXED_Z1 = "server-mixed-gaps-h200x2-489628b.txt"
# run Z2: the eighteen patches and the relay's parts of 512 values, three commands back to back on one machine: one
# GPU, tpar and tpar with eight relay threads; the reverse order with -sm layer; two more passes of one GPU and tpar
MIXED_Z2 = "server-mixed-h200x2-a426dfb.txt"
DECODE = "decode-h200x2-1fcf991.txt"
DECODE4 = "decode-h200x4-2cbede6.txt"
MIXED_BEFORE = "server-mixed-h200x2-5548578.txt"
MIXED_AFTER = "server-mixed-h200x2-8a4b3b5.txt"
MIXED_RELAY = "server-mixed-h200x2-9240d7b.txt"
MIXED_THREADS = "server-mixed-h200x2-1fcf991.txt"
MIXED_BOUND = "server-mixed-h200x2-82400b1.txt"
MIXED_AGAIN = "server-mixed-h200x2-f61e8f8.txt"
STEADY = "replay-steady-h200x2-5548578.txt"
BOUND = "decode-bound-h200x2-fb2bc17.txt"
RIDE = (("A", "decode-ride-h200x2-941446e.txt"), ("B", "decode-ride-h200x2-67f26f4.txt"),
        ("C", "decode-ride-chain-h200x2-402ecba.txt"), ("D", "decode-ride-trace-h200x2-7d7dba0.txt"),
        ("P6", "decode-ride-narrow-h200x2-973ae7a.txt"))
RIDE_CHAIN = "decode-ride-chain-h200x2-402ecba.txt"
MIXED_RIDE = (("E", "server-mixed-ride-h200x2-7d7dba0.txt"), ("F", "server-mixed-ride-again-h200x2-7d7dba0.txt"),
              ("P2", "server-mixed-turns-h200x2-94fcb1b.txt"))
# The relay kernels' own clock inside a token and in the chain (docs/design/boundary-parts.md runs P3, P4).
PARTS = (("P3", "decode-kernel-parts-h200x2-970e50b.txt"), ("P4", "decode-gap-median-h200x2-46ad648.txt"),
         ("P6", "decode-ride-narrow-h200x2-973ae7a.txt"))
DOCS = ("README.md", "docs/PERFORMANCE.md", "docs/design/decode-history.md", "docs/design/server-history.md",
        "docs/design/llama-move.md")
sys.path.insert(0, HERE)
import decode_report  # noqa: E402  (the logs' stamp and llama-bench parsers)

MODELS = [("8b", "Llama-3-8B shapes"), ("70b20", "Llama-3-70B shapes, 20 of 80 layers")]
TYPES = [("q8_0", "Q8_0"), ("q4_k_m", "Q4_K_M")]


# --- The current results: README's first screen and PERFORMANCE.md's tables, each from the newest run under raw/
# that holds what it needs (a run: the sections of one log of one tree and build, scripts/gpu-suite.sh's stamp).

PINNED = "de3ff815"  # the llama.cpp tree the patches apply to (third_party/): the only commit the first screen names


def _section_stamp(sec):
    """A gpu-suite.sh section's stamp: tree, build, llama.cpp and its patch count, run time, GPUs."""
    tree = re.search(r"^# tree (\S+)", sec, re.M)
    built = re.search(r"^# built (\S+)", sec, re.M)
    ran = re.search(r"^# ran (\S+)", sec, re.M)
    if not (tree and built and ran):
        return None
    llama = re.search(r"^# (?:tree|built) .*?llama\.cpp ([0-9a-f]+) \+ (?:(\d+) patches|patches to (\d{4}))", sec, re.M)
    head = sec.split("\ngpu-suite.sh:")[0]
    gpus = re.findall(r"^# gpu \d+, ([^,]+), ([^,]+),", head, re.M)
    if not llama or not gpus:
        return None
    return {"tree": tree.group(1), "built": built.group(1), "ran": ran.group(1), "llama": llama.group(1),
            "patches": int(llama.group(2) or llama.group(3)), "gpu": gpus[0][0], "driver": gpus[0][1], "n": len(gpus),
            "date": ran.group(1)[:10]}


_RUNS = None


def runs():
    """Every run under raw/, oldest first: {file, tree, llama, patches, built, ran (the last section's), date, gpu,
    driver, n, text}. A log of several commands of one bundle is one run; a log of two bundles is two."""
    global _RUNS
    if _RUNS is None:
        _RUNS = []
        for name in sorted(os.listdir(RAW)):
            if not name.endswith(".txt"):
                continue
            text = decode_report.read(name)
            group = None
            for part in text.split("# tpar gpu-suite:")[1:]:
                sec = "# tpar gpu-suite:" + part
                st = _section_stamp(sec)
                if st is None:
                    continue
                key = (st["tree"], st["built"], st["n"], st["gpu"])
                if group and group["key"] == key:
                    group["text"] += sec
                    group["ran"] = max(group["ran"], st["ran"])
                else:
                    group = dict(st, file=name, text=sec, key=key)
                    _RUNS.append(group)
        _RUNS.sort(key=lambda r: r["ran"])
    return _RUNS


def newest(what, test):
    """The newest run for which test(run) holds; ValueError naming `what` where none does."""
    for run in reversed(runs()):
        try:
            if test(run):
                return run
        except (KeyError, ValueError, IndexError):
            continue
    raise ValueError(f"no stamped log under docs/perf/raw holds {what}")


def benches_of(run):
    if "benches" not in run:
        run["benches"] = decode_report.benches(run["text"])
    return run["benches"]


def has(run, labels):
    b = benches_of(run)
    return all(label in b for label in labels)


ratio = decode_report.ratio_spread


def fx(x):
    return f"{x:.2f}x"


def rng(values, unit="x"):
    lo, hi = min(values), max(values)
    return f"{lo:.2f}{unit}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}{unit}"


word = decode_report.word


TABLE_LABELS = ([f"move-new-{m}-{t}-{q}" for m in ("none", "layer2", "tpar2") for t, _ in MODELS for q, _ in TYPES]
                + [f"cuda-none-{t}" for t, _ in MODELS] + [f"cuda2-{m}-{t}" for m in ("nccl-p2p-off", "internal")
                                                           for t, _ in MODELS])


def llama_table_run():
    return newest("llama-bench's none, layer and tensor rows of the 8B and 70B shapes with CUDA's beside",
                  lambda r: r["n"] == 2 and has(r, TABLE_LABELS))


def llama_cells(run):
    """{(model, type): {"pp"|"tg": {"one"|"layer": (mean, low, high)}, "abs": {...}}} from a run's move rows."""
    b = benches_of(run)
    out = {}
    for tag, _ in MODELS:
        tg = "tg128" if tag == "8b" else "tg64"
        for ty, _ in TYPES:
            none, layer, tpar = (b[f"move-new-{m}-{tag}-{ty}"] for m in ("none", "layer2", "tpar2"))
            out[(tag, ty)] = {test: {"one": ratio(tpar[t], none[t]), "layer": ratio(tpar[t], layer[t])}
                              for test, t in (("pp", "pp512"), ("tg", tg))}
            out[(tag, ty)]["abs"] = {"none": none[tg][0], "layer": layer[tg][0], "tpar": tpar[tg][0],
                                     "pp_none": none["pp512"][0], "pp_tpar": tpar["pp512"][0]}
    return out


def server_run():
    return newest("a llama-server of 4 slots in each split mode",
                  lambda r: r["n"] == 2 and all(k in server_rows(r["text"]) for k in ("none-4", "layer-4", "tpar-4")))


def mixed_run():
    def passes(r):
        sections = ["# tpar gpu-suite:" + t for t in r["text"].split("# tpar gpu-suite:")[1:]]
        ps = [p for p in split_passes({l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in sections)
              if "mixed-none" in p and "mixed-tpar" in p]
        if not ps or any(x[0] != x[1] for p in ps for x in p.values()):
            raise ValueError("no pass of one GPU and tpar, or a request unanswered")
        return ps
    run = newest("llama-server under mixed traffic, each server warmed first",
                 lambda r: r["n"] == 2 and "warm-up:" in r["text"] and passes(r))
    return run, passes(run)


def four_run():
    return newest("llama-bench decode on four GPUs",
                  lambda r: r["n"] == 4 and has(r, [f"{m}-{t}" for m in ("none", "none2", "tpar4-auto")
                                                    for t in ("8b", "8b-q4_k_m", "70b20")]))


def decode_run(tree):
    """The decode rows (one GPU first and last, tpar, free boundaries) of the given tree's newest run."""
    return newest(f"decode rows of tree {tree}", lambda r: r["tree"] == tree and r["n"] == 2 and has(
        r, [f"{m}-{t}" for m in ("none", "none2", "tpar2-auto", "tpar2-skip") for t, _, _ in NOW_MODELS]))


def mixed_figures(passes):
    rates = [p["mixed-none"][3] / p["mixed-tpar"][3] for p in passes]
    total = sum(p["mixed-none"][3] for p in passes) / sum(p["mixed-tpar"][3] for p in passes)
    layer = [p["mixed-none"][3] / p["mixed-layer"][3] for p in passes if "mixed-layer" in p]
    over_layer = [p["mixed-layer"][3] / p["mixed-tpar"][3] for p in passes if "mixed-layer" in p]
    return rates, total, layer, over_layer


def built_with(run):
    return f"llama.cpp {run['llama']} + {run['patches']} patches"


def render_first_screen():
    """README's first screen: what tpar is, what to expect by model size, the table with its tree and patch count,
    CUDA's absolute rates on the same machine, where it has not run and how to find out, the commands to try."""
    run = llama_table_run()
    if run["llama"] != PINNED:
        raise ValueError(f"{run['file']}: llama.cpp {run['llama']}, not the pinned {PINNED}")
    cells = llama_cells(run)
    sv_run = server_run()
    sv = server_rows(sv_run["text"])
    mx_run, passes = mixed_run()
    rates, total, layer, over_layer = mixed_figures(passes)
    b = benches_of(run)
    gpu = run["gpu"].replace("NVIDIA ", "")

    def means(tag, test, against):
        return [cells[(tag, ty)][test][against] for ty, _ in TYPES]

    def m(rs):
        return rng([r[0] for r in rs])

    def s(rs):
        return rng([r[1] for r in rs] + [r[2] for r in rs], "")

    big_pp, big_tg = means("70b20", "pp", "one"), means("70b20", "tg", "one")
    big_ppl, big_tgl = means("70b20", "pp", "layer"), means("70b20", "tg", "layer")
    sm_pp, sm_tg = means("8b", "pp", "one"), means("8b", "tg", "one")
    sm_ppl, sm_tgl = means("8b", "pp", "layer"), means("8b", "tg", "layer")
    def both(w_one, w_layer):
        """'faster than one GPU and than `-sm layer`' where the two words agree, else both in full."""
        lead_one, lead_layer = w_one[:-len("one GPU")], w_layer[:-len("`-sm layer`")]
        return f"{w_one} and {lead_layer.split()[-1]} `-sm layer`" if lead_one == lead_layer else f"{w_one} and {w_layer}"

    lines = [
        "tpar lets llama.cpp's `-sm tensor` split one model across several Vulkan GPUs, without CUDA or NCCL. It is "
        "a header-only C++20 AllReduce that stays on the GPUs' own queues, staged through host memory.",
        "",
        f"**What to expect** on {run['n']} NVIDIA {gpu}s, against one GPU and `-sm layer` of the same machine "
        "(llama-bench, random weights; spread: each side ± one standard deviation of its 3 repetitions):",
        "",
        f"- **A 70B-class model** (Llama-3-70B's shapes, 20 of its 80 layers): "
        f"{both(word(big_pp + big_tg, 'one GPU'), word(big_ppl + big_tgl, '`-sm layer`'))}: the prompt "
        f"{m(big_pp)} and {m(big_ppl)}, generation {m(big_tg)} (spread {s(big_tg)}) and {m(big_tgl)}.",
        f"- **An 8B model**: the prompt {both(word(sm_pp, 'one GPU'), word(sm_ppl, '`-sm layer`'))} ({m(sm_pp)}, {m(sm_ppl)}); one "
        f"stream's generation {word(sm_tg, 'one GPU')} ({m(sm_tg)}, spread {s(sm_tg)}), {word(sm_tgl, '`-sm layer`')} "
        f"({m(sm_tgl)}).",
        f"- **A llama-server** on the 8B model: 8 requests at once on 4 slots "

        f"{fx(sv['tpar-4'][4] / sv['none-4'][4])} one GPU's tokens/s (`-sm layer` {fx(sv['layer-4'][4] / sv['none-4'][4])}); "
        f"mixed traffic, 1 to 10 requests at once, {rng(rates)} one GPU's rate in {len(passes)} passes, "
        f"{fx(total)} in all (`-sm layer` {rng(layer)}).",
        "",
        "| model | prompt (pp512) vs one GPU | vs `-sm layer` | generation vs one GPU | vs `-sm layer` |",
        "|---|---|---|---|---|",
    ]
    for tag, name in MODELS:
        for ty, tyname in TYPES:
            c = cells[(tag, ty)]

            def cell(r, bold=False):
                v = f"**{r[0]:.2f}x**" if bold else f"{r[0]:.2f}x"
                return f"{v} ({r[1]:.2f}-{r[2]:.2f})"
            lines.append(f"| {name.replace('Llama-3-70B shapes, 20 of 80 layers', 'Llama-3-70B shapes, 20 layers')}, "
                         f"{tyname} | {cell(c['pp']['one'], True)} | {fx(c['pp']['layer'][0])} | "
                         f"{cell(c['tg']['one'], True)} | {fx(c['tg']['layer'][0])} |")
    a8, a70 = cells[("8b", "q8_0")]["abs"], cells[("70b20", "q8_0")]["abs"]

    def cu(label, tag):
        return b[f"{label}-{tag}"]["tg128" if tag == "8b" else "tg64"][0]
    lines += [
        "",
        (f"The table and the 4-slot server: {built_with(run)}, {run['date']}, one run; "
         if (sv_run["tree"], sv_run["built"]) == (run["tree"], run["built"]) else
         f"The table: {built_with(run)}, {run['date']}; the 4-slot server: {built_with(sv_run)}, {sv_run['date']}; ")
        + f"the mixed traffic: {built_with(mx_run)}, {mx_run['date']}; each run, other machines and what bounds each figure: "
        f"[PERFORMANCE.md](docs/PERFORMANCE.md). Generation, t/s, Q8_0, the same machine: 8B {a8['none']:.1f} on one GPU "
        f"with Vulkan, {cu('cuda-none', '8b'):.1f} with CUDA; on two {a8['tpar']:.1f} through tpar, "
        f"{cu('cuda2-nccl-p2p-off', '8b'):.1f} with CUDA and NCCL through host memory, {cu('cuda2-internal', '8b'):.1f} "
        f"with CUDA's own AllReduce; 70B shapes {a70['none']:.1f} and {cu('cuda-none', '70b20'):.1f} on one, "
        f"{a70['tpar']:.1f}, {cu('cuda2-nccl-p2p-off', '70b20'):.1f} and {cu('cuda2-internal', '70b20'):.1f} on two.",
        "",
        "**Measured on NVIDIA H100/H200 only; AMD, Intel, consumer cards and Windows never run — how to find out on "
        "yours:** `tpar-info --self-test` (`scripts/run.sh` builds it) reports, device by device, what tpar needs "
        "and what its self-tests find there; `scripts/llama.sh` prints the none / layer / tensor table on your GPUs.",

        "",
        "**Try it** (Debian 12, as root; the guide: [docs/integrating-ggml.md](docs/integrating-ggml.md); "
        "programs go to build-llama/build/bin/, the models `scripts/llama.sh` makes to build-llama/models/):",
        "",
        "    scripts/llama.sh --preset llama3-8b --type q4_k_m   # builds llama.cpp with tpar (10-14 min on 2 cores), "
        "makes an 8B model of random weights, runs llama-bench over the split modes",
        "    build-llama/build/bin/tpar-llama-model --preset llama3-70b --layers 20 -o build-llama/models/llama3-70b-20l.gguf",
        "    scripts/llama.sh --model build-llama/models/llama3-70b-20l.gguf   # a model past one GPU's memory: "
        "70B's shapes (more --layers, more memory), or your own GGUF",
        "    GGML_VK_VISIBLE_DEVICES=0,1 build-llama/build/bin/llama-server -m model.gguf -ngl 99 -fa on -sm tensor",
    ]
    out = []
    for line in lines:
        if line.startswith(("|", "    ")) or not line:
            out.append(line)
        else:
            indent = "  " if line.startswith("- ") else ""
            line = line.replace("`-sm layer`", "`-sm\x00layer`").replace("`-sm tensor`", "`-sm\x00tensor`")
            out.append(textwrap.fill(line, width=100, subsequent_indent=indent, break_on_hyphens=False,
                                     break_long_words=False).replace("\x00", " "))

    return "\n".join(out)


def trees(text):
    """(new llama.cpp commit, old llama.cpp commit, old tpar commit) from the move's stamp."""
    new = re.search(r"^# move: built .*, llama\.cpp ([0-9a-f]+) \+ (\d+) patches", text, re.M)
    old = re.search(r"^# move: old tree ([0-9a-f]+): llama\.cpp ([0-9a-f]+) \+ (\d+) patches", text, re.M)
    return {"new": new.group(1), "new_patches": int(new.group(2)), "old": old.group(2), "old_patches": int(old.group(3)),
            "old_tpar": old.group(1)}


def server_rows(text):
    """{label: (answered, asked, tokens, seconds, t/s)} from the part's summary lines."""
    out = {}
    for m in re.finditer(r"^([a-z0-9-]+): (\d+) of (\d+) requests answered, \d+ failed; (\d+) tokens in ([\d.]+) s, "
                         r"([\d.]+) t/s in all$", text, re.M):
        out[m.group(1)] = (int(m.group(2)), int(m.group(3)), int(m.group(4)), float(m.group(5)), float(m.group(6)))
    return out


def commands(run):
    """The gpu-suite.sh commands of a run, as its sections' first lines name them (a command run again: "twice")."""
    cmds = [m.group(1).strip() for m in re.finditer(r"^# tpar gpu-suite: (.*)$", run["text"], re.M)]
    out = []
    for c in cmds:
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    times = {1: "", 2: " twice", 3: " three times"}
    return ", then ".join(f"`scripts/gpu-suite.sh {c}`{times.get(k, f' {k} times')}" for c, k in out)


def run_line(run, what=""):
    """A table's head: machine, driver, date, tpar tree, llama.cpp and its patch count, the commands, the raw log."""
    return (f"{run['n']} × {run['gpu']} (driver {run['driver']}), {run['date']}, tpar tree {run['tree']}, "
            f"{built_with(run)}{what}: {commands(run)}; raw [perf/raw/{run['file']}](perf/raw/{run['file']}).")


def cell(r, bold=False):
    v = f"**{r[0]:.2f}x**" if bold else f"{r[0]:.2f}x"
    return f"{v} ({r[1]:.2f}-{r[2]:.2f})"


def best_one(b, tag, test):
    """The faster of the one-GPU rows run first and last: (mean, sd)."""
    return max(b[f"none-{tag}"][test], b[f"none2-{tag}"][test])


def render_current():
    """PERFORMANCE.md's current tables, each from the newest run under raw/ that holds it."""
    blocks = {"readme-first": render_first_screen()}
    run = llama_table_run()
    cells = llama_cells(run)
    b = benches_of(run)
    rows = ["| model | one GPU: pp512 / tg (t/s) | `-sm layer` tg | tpar: pp512 / tg | prompt vs one GPU (spread) "
            "| vs `-sm layer` | generation vs one GPU (spread) | vs `-sm layer` | CUDA tg: one GPU / `-sm tensor`, NCCL "
            "through host memory / its own AllReduce |", "|---|---|---|---|---|---|---|---|---|"]
    for tag, name in MODELS:
        tg = "tg128" if tag == "8b" else "tg64"
        for ty, tyname in TYPES:
            c = cells[(tag, ty)]
            a = c["abs"]
            cuda = ""
            if ty == "q8_0":
                one = b[f"cuda-none-{tag}"][tg][0]
                cuda = (f"{one:.1f} / {b[f'cuda2-nccl-p2p-off-{tag}'][tg][0]:.1f} "
                        f"({b[f'cuda2-nccl-p2p-off-{tag}'][tg][0] / one:.2f}x) / {b[f'cuda2-internal-{tag}'][tg][0]:.1f} "
                        f"({b[f'cuda2-internal-{tag}'][tg][0] / one:.2f}x)")
            rows.append(f"| {name}, {tyname} | {a['pp_none']:.1f} / {a['none']:.1f} | {a['layer']:.1f} | "
                        f"{a['pp_tpar']:.1f} / {a['tpar']:.1f} | {cell(c['pp']['one'], True)} | {fx(c['pp']['layer'][0])} | "
                        f"{cell(c['tg']['one'], True)} | {fx(c['tg']['layer'][0])} | {cuda} |")
    blocks["perf-llama-h200x2"] = (run_line(run) + " llama-bench `-fa 1 -p 512 -n 128` (70B shapes `-n 64`) `-r 3`, "
                                   "random weights, every mode of a model back to back; ggml-cuda built from the same "
                                   "llama.cpp on the same machine.\n\n" + "\n".join(rows))

    dr = decode_run(run["tree"])
    db = benches_of(dr)
    drows = ["| model | one GPU, first / last (t/s) | tpar (the defaults) | against the faster one GPU (spread) | free "
             "boundaries (timing only) against it |", "|---|---|---|---|---|"]
    for tag, test, name in NOW_MODELS:
        one = best_one(db, tag, test)
        tp, skip = db[f"tpar2-auto-{tag}"][test], db[f"tpar2-skip-{tag}"][test]
        drows.append(f"| {name} | {db[f'none-{tag}'][test][0]:.1f} / {db[f'none2-{tag}'][test][0]:.1f} | "
                     f"{tp[0]:.1f} ± {tp[1]:.1f} | {cell(ratio(tp, one), True)} | {skip[0] / one[0]:.2f}x |")
    blocks["perf-decode-h200x2"] = (
        run_line(dr) + " llama-bench `-fa 1 -p 0 -r 3`, one GPU first and last for each model. Free boundaries "
        "(`TPAR_GGML_SKIP_ALLREDUCE=1`) accept every AllReduce and sum nothing: wrong results, the token's time "
        "without the AllReduce.\n\n" + "\n".join(drows))

    sv_run = server_run()
    sv = server_rows(sv_run["text"])
    srows = ["| mode | requests answered | tokens | seconds | t/s in all | against one GPU |", "|---|---|---|---|---|---|"]
    names = {"none-4": "`-sm none`, one GPU", "layer-4": "`-sm layer`, 2 GPUs", "tpar-4": "`-sm tensor`, tpar",
             "ggml-4": "`-sm tensor`, ggml's own AllReduce", "tpar-1": "tpar, one slot, f32 wire",
             "ggml-1": "ggml's AllReduce, one slot"}
    for label, name in names.items():
        answered, asked, tok, sec, rate = sv[label]
        rel = f"{rate / sv['none-4'][4]:.2f}x" if label.endswith("-4") else ""
        srows.append(f"| {name} | {answered} of {asked} | {tok} | {sec:.2f} | {rate:.1f} | {rel} |")
    same = re.search(r"^compare tpar-1 and ggml-1: (\d+) of (\d+) texts the same", sv_run["text"], re.M)
    blocks["server"] = (run_line(sv_run) + " `llama-server -m <Llama-3-8B shapes, Q8_0> -ngl 99 -fa on -c 4096`, "
                        "4 slots, two rounds of 8 requests of 128 tokens at once (the end-of-text token ignored), then "
                        "one slot and three requests in a row.\n\n" + "\n".join(srows)
                        + f"\n\nOne slot, f32 wire: {same.group(1)} of {same.group(2)} of tpar's texts equal ggml's own "
                        "AllReduce's.")

    mx_run, passes = mixed_run()
    rates, total, layer, over_layer = mixed_figures(passes)
    mrows = ["| mode | " + " | ".join(f"pass {i}: seconds (rate against one GPU)" for i in range(1, len(passes) + 1))
             + " |", "|---|" + "---|" * len(passes)]
    for label, name in (("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (the defaults)"),
                        ("mixed-layer", "`-sm layer`, 2 GPUs")):
        mrows.append(f"| {name} | " + " | ".join(
            (f"{p[label][3]:.2f} s ({p['mixed-none'][3] / p[label][3]:.2f}x)" if label in p else "") for p in passes)
            + " |")
    answered = sum(x[0] for p in passes for x in p.values())
    asked = sum(x[1] for p in passes for x in p.values())
    blocks["perf-server-mixed"] = (
        run_line(mx_run) + " llama-server on the 8B shapes (Q8_0), `-c 16384 -np 4`, each server answering five "
        "untimed requests first, then `scripts/server_load.py --mixed 16 --seed 1`: 16 rounds of 1 to 10 requests at "
        f"once, prompts of 3 to 400 words, 8 to 256 tokens each; a pass runs each mode once, a second pass of a "
        f"command in the reverse order. {answered} of {asked} requests answered.\n\n" + "\n".join(mrows)
        + f"\n\ntpar: {rng(rates)} one GPU's rate in the {len(passes)} passes, {fx(total)} over them all; `-sm layer` "
        f"{rng(layer)} one GPU's, tpar {rng(over_layer)} `-sm layer`'s in the same pass.")

    fr = four_run()
    fb = benches_of(fr)
    frows = [f"| model | one GPU, first / last (t/s) | tpar, {fr['n']} GPUs | against the faster one GPU (spread) |",
             "|---|---|---|---|"]
    four = {}
    for tag, test, name in (("8b", "tg128", "Llama-3-8B shapes, Q8_0, tg128"), ("8b-q4_k_m", "tg128", "the same, Q4_K_M"),
                            ("70b20", "tg64", "Llama-3-70B shapes (20 layers), Q8_0, tg64")):
        one, tp = best_one(fb, tag, test), fb[f"tpar{fr['n']}-auto-{tag}"][test]
        four[tag] = ratio(tp, one)
        frows.append(f"| {name} | {fb[f'none-{tag}'][test][0]:.1f} / {fb[f'none2-{tag}'][test][0]:.1f} | "
                     f"{tp[0]:.1f} ± {tp[1]:.1f} | {cell(four[tag], True)} |")
    blocks["perf-h200x4"] = (run_line(fr) + " llama-bench `-fa 1 -p 0 -r 3` (decode only), one GPU first and last "
                             "for each model.\n\n" + "\n".join(frows))

    def verdict(ok):
        return "**met**" if ok else "**missed**"
    g8 = [cells[("8b", ty)]["tg"]["one"][0] for ty, _ in TYPES]
    g70 = [cells[("70b20", ty)]["tg"]["one"][0] for ty, _ in TYPES]
    pps = [cells[k]["pp"]["one"][0] for k in cells]
    one_d = {tag: ratio(db[f"tpar2-auto-{tag}"][test], best_one(db, tag, test))[0] for tag, test, _ in NOW_MODELS}
    c8 = b["cuda2-nccl-p2p-off-8b"]["tg128"][0] / b["cuda-none-8b"]["tg128"][0]
    c70 = b["cuda2-nccl-p2p-off-70b20"]["tg64"][0] / b["cuda-none-70b20"]["tg64"][0]
    t8, t70 = cells[("8b", "q8_0")]["tg"]["one"][0], cells[("70b20", "q8_0")]["tg"]["one"][0]
    mx_ok = answered == asked
    two = f"{run['n']} × {run['gpu'].replace('NVIDIA ', '')}"
    fourname = f"{fr['n']} × {fr['gpu'].replace('NVIDIA ', '')}"
    blocks["perf-targets"] = "\n".join([
        f"- 8B generation ≥ 1.05x one GPU: {two} {' and '.join(fx(x) for x in g8)} (Q8_0, Q4_K_M): {verdict(min(g8) >= 1.05)}; "
        f"{fourname} {fx(four['8b'][0])} and {fx(four['8b-q4_k_m'][0])}: {verdict(min(four['8b'][0], four['8b-q4_k_m'][0]) >= 1.05)}.",
        f"- 70B shapes (20 layers) generation ≥ 1.50x: {two} {' and '.join(fx(x) for x in g70)}: {verdict(min(g70) >= 1.5)}; "
        f"{fourname} {fx(four['70b20'][0])}: {verdict(four['70b20'][0] >= 1.5)}.",

        f"- The prompt (pp512) ≥ 1.6x: {rng(pps)}: {verdict(min(pps) >= 1.6)}.",
        f"- 8B at `-d 8192` ≥ 1.0x: {fx(one_d['8b-d8192'])}: {verdict(one_d['8b-d8192'] >= 1.0)}.",
        f"- The 32-layer, 256-wide model (the host's token) ≥ 0.75x: {fx(one_d['tiny32'])}: {verdict(one_d['tiny32'] >= 0.75)}.",
        f"- At or above CUDA's own ratio over host memory on the same machine (NCCL, peer-to-peer off; Q8_0): 8B "
        f"{fx(t8)} against {fx(c8)}, 70B shapes {fx(t70)} against {fx(c70)}: {verdict(t8 >= c8 and t70 >= c70)}.",
        f"- A server under mixed traffic ≥ 1.20x one GPU's rate (its time ≤ 0.83x one GPU's): {fx(total)} over the "
        f"{len(passes)} passes, {rng(rates)} alone: {verdict(total >= 1.2)} (in {sum(r >= 1.2 for r in rates)} of "
        f"{len(passes)} passes alone); at or above `-sm layer`'s rate: {rng(over_layer)}: {verdict(min(over_layer) >= 1.0)}.",
        f"- No request fails for a reason `-sm none` does not show too: {answered} of {asked} answered: {verdict(mx_ok)}.",
    ])
    return blocks


def render():
    blocks = render_current()
    blocks.update(render_move())
    blocks.update(render_decode())
    blocks.update(render_bound())
    blocks.update(render_ride())
    blocks.update(render_ride_chain())
    blocks.update(render_ride_targets())
    blocks.update(render_mixed_ride())
    blocks.update(render_parts())
    blocks.update(render_now())
    blocks.update(render_steps())
    blocks.update(render_mixed())
    blocks.update(render_mixed_r1())
    blocks.update(render_mixed_t1())
    blocks.update(render_mixed_v1())
    blocks.update(render_mixed_w1())
    blocks.update(render_mixed_x1())
    blocks.update(render_mixed_y0())
    blocks.update(render_mixed_y1())
    blocks.update(render_mixed_z1())
    blocks.update(render_mixed_z2())
    return blocks


def mixed_runs(text):
    """[(label, seed, (answered, asked, tokens, seconds, t/s))] in the log's order: each
    '## llama-server LABEL: ... --seed N' header and the summary line of its requests."""
    out, head = [], None
    for line in text.splitlines():
        m = re.match(r"## llama-server (mixed-[a-z0-9-]+): .*--mixed 16 --seed (\d+)", line)
        if m:
            head = (m.group(1), int(m.group(2)))
            continue
        m = re.match(r"(mixed-[a-z0-9-]+): (\d+) of (\d+) requests answered, \d+ failed; (\d+) tokens in ([\d.]+) s, "
                     r"([\d.]+) t/s in all$", line)
        if m and head and m.group(1) == head[0]:
            out.append((head[0], head[1], (int(m.group(2)), int(m.group(3)), int(m.group(4)), float(m.group(5)),
                                           float(m.group(6)))))
            head = None
    return out


def render_mixed():
    logs = (MIXED_BEFORE, MIXED_AFTER, MIXED_RELAY, MIXED_THREADS, MIXED_BOUND, MIXED_AGAIN)
    texts = [decode_report.read(f) for f in logs]
    stamps = [decode_report.stamp(t) for t in texts]
    runs = [[r for r in mixed_runs(t) if r[1] == 1] for t in texts]

    def first(rs, label):
        return next(x for l, _, x in rs if l == label)
    nones = [first(rs, "mixed-none")[3] for rs in runs]
    names = [("mixed-none", "`-sm none`, one GPU"), ("mixed-layer", "`-sm layer`, 2 GPUs"),
             ("mixed-tpar-eager", "tpar, recording for replay when first seen (`GGML_VK_REPLAY_EAGER=1`, the rule before)"),
             ("mixed-tpar-noreplay", "tpar, replay off (`GGML_VK_DISABLE_REPLAY=1`)"),
             ("mixed-tpar-oneshot", "tpar, OneShot for every small call (`TPAR_ALGO=oneshot`, the choice before the relay's)"),
             ("mixed-tpar-relay256", "tpar, the relay for calls up to 256 KiB (`TPAR_RELAY_MAX=256K`)"),
             ("mixed-tpar", "tpar, the run's defaults"),
             ("mixed-tpar-depth8", "tpar, eight calls in flight at every size (`TPAR_DEPTH=8`)"),
             ("mixed-tpar-skip", "tpar with free boundaries (`TPAR_GGML_SKIP_ALLREDUCE=1`: timing only, the output is wrong)"),
             ("mixed-ggml", "ggml's own AllReduce, 2 GPUs")]
    rows = []
    for label, name in names:
        cells = []
        for rs, none in zip(runs, nones):
            xs = [x for l, _, x in rs if l == label]
            if not xs:
                cells.append("")
                continue
            if any(x[0] != x[1] for x in xs):
                raise ValueError(f"{label}: a request went unanswered")
            cells.append(" / ".join(f"{x[3]:.1f} s ({none / x[3]:.2f}x)" for x in xs))
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    asked = first(runs[-1], "mixed-none")
    steady = decode_report.benches(decode_report.read(STEADY))

    def tg(label):
        return steady[label]["tg128"]

    def code(f):
        return f.split('-')[3].split('.')[0]
    table = "\n".join([
        f"| mode | {code(logs[0])}: replay at second sight (one GPU's rate = 1.00x) | {code(logs[1])}: and staging that stops "
        f"shrinking | {code(logs[2])}: and the relay held, chosen for small calls | {code(logs[3])}: and two host threads "
        f"for the relay | {code(logs[4])}: the same code, with free boundaries beside | {code(logs[5])}: the same code "
        f"again, another machine |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ])
    head = (f"{stamps[-1]['n']} × {stamps[-1]['gpu']} (driver {stamps[-1]['driver']}), {stamps[-1]['date']}, llama-server on the "
            f"Llama-3-8B shapes (q8_0, random weights), `-c 16384 -np 4`, `scripts/server_load.py --mixed 16 --seed 1`: "
            f"{asked[1]} requests in 16 rounds of 1 to 10 at once, {asked[2]} tokens, every request answered in every "
            f"mode. {('Four', 'Five', 'Six')[len(logs) - 4]} runs, each on a machine of its own, trees " + ", ".join(st["tree"] for st in stamps)
            + " (each the code of the commit its column names); where a cell holds two figures, the mode ran twice in that "
            f"run. Raw: " + ", ".join(f"[perf/raw/{f}](perf/raw/{f})" for f in logs) + ".")
    s2, e2, o2 = tg("replay-second-8b-2"), tg("replay-eager-8b-2"), tg("replay-off-8b-2")
    note = (f"Steady decode under the replay rules (`llama-bench -p 0 -n 128 -r 3`, 2 GPUs, the second of two turns, "
            f"[raw](perf/raw/{STEADY})): recording at second sight {s2[0]:.1f} ± {s2[1]:.1f} t/s, at first sight "
            f"{e2[0]:.1f} ± {e2[1]:.1f}, replay off {o2[0]:.1f} ± {o2[1]:.1f}.")
    return {"server-mixed": head + "\n\n" + table + "\n\n" + note}


def mixed_r1():
    """Run R1's passes: [{label: (answered, asked, tokens, seconds, t/s)}] a command, and its stamp."""
    texts = [decode_report.read(f) for f in MIXED_R1]
    return [{l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in texts], decode_report.stamp(texts[0]), texts


def mixed_passes_table(names, columns, heads=("first pass: seconds for the 16 rounds (against one GPU's time), tokens",
                                              "second pass")):
    """A table of mixed-traffic passes: a row a mode of `names` ((label, name)), a column a pass; each column is a
    list of (runs by label, one GPU's seconds), the first holding the mode giving the cell. Returns the table and
    the requests answered and asked over its cells; a request unanswered is an error."""
    rows, answered, asked = [], 0, 0
    for label, name in names:
        cells = []
        for column in columns:
            found = [(run[label], none) for run, none in column if label in run]
            if not found:
                cells.append("")
                continue
            x, none = found[0]
            if x[0] != x[1]:
                raise ValueError(f"{label}: a request went unanswered")
            answered, asked = answered + x[0], asked + x[1]
            cells.append(f"{x[3]:.2f} s ({x[3] / none:.2f}x), {x[2]} tokens")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    table = "\n".join(["| mode | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads), *rows])
    return table, answered, asked


def render_mixed_r1():
    """The mixed traffic with the code a user runs: every mode, two passes of the main three, and the unified KV
    cache beside, in three commands on one machine."""
    passes, st, texts = mixed_r1()
    first, kvu, again = passes
    none1, none2 = first["mixed-none"][3], again["mixed-none"][3]
    names = [("mixed-none", "`-sm none`, one GPU"), ("mixed-layer", "`-sm layer`, 2 GPUs"),
             ("mixed-tpar", "`-sm tensor`, tpar (defaults: replay on)"),
             ("mixed-tpar-noreplay", "`-sm tensor`, tpar, `GGML_VK_DISABLE_REPLAY=1`"),
             ("mixed-ggml", "`-sm tensor`, ggml's own AllReduce"),
             ("mixed-none-kvu", "`-sm none`, one GPU, `--kv-unified`"),
             ("mixed-tpar-kvu", "`-sm tensor`, tpar, `--kv-unified`")]
    table, answered, asked = mixed_passes_table(names, [[(first, none1), (kvu, none1)], [(again, none2)]])
    replay = re.findall(r"Vulkan0: (\d+) subgraphs replayed, (\d+) recorded for replay, \d+ recorded as usual, (\d+) seen once",
                        texts[0])[0]
    steps = steps_phases(texts[1])
    last = "2 at once x128"
    head = (f"Run R1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with the "
            f"ten patches a user applies), three commands back to back on one machine: "
            f"`MIXED_MODES=none,tpar,tpar-noreplay,layer scripts/gpu-suite.sh env server-mixed`, then "
            f"`MIXED_MODES=none-kvu,tpar-kvu,ggml STEPS_MODES=none-kvu,tpar-kvu scripts/gpu-suite.sh env server-mixed "
            f"server-steps`, then `MIXED_MODES=tpar-noreplay,tpar,none` (the second pass, in the reverse order). "
            f"llama-server on the 8B shapes (Q8_0), `-c 16384 -np 4`, `scripts/server_load.py --mixed 16 --seed 1`; "
            f"{answered} of {asked} requests answered in all. Raw: " + ", ".join(f"[perf/raw/{f}](perf/raw/{f})" for f in MIXED_R1)
            + ". The `--kv-unified` rows are in the first pass's column, against its one GPU.")
    t1, t2 = first["mixed-tpar"][3], again["mixed-tpar"][3]
    o1, o2 = first["mixed-tpar-noreplay"][3], again["mixed-tpar-noreplay"][3]
    note = (f"Replay's counts in the first pass's tpar server (a device): {replay[0]} subgraphs replayed, {replay[1]} "
            f"recorded for replay, {replay[2]} seen once and recorded as usual. One KV cache for all slots "
            f"(`--kv-unified`, llama-server's default where `-np` is not given) puts a step's slots in one ubatch "
            f"whichever they are, but each step's attention then reads the cells of every slot (llama.cpp masks the "
            f"others' out): one GPU took "
            f"{kvu['mixed-none-kvu'][3]:.2f} s and tpar {kvu['mixed-tpar-kvu'][3]:.2f} s, each slower than with a "
            f"cache a slot. In `server_steps.py`'s phases with `--kv-unified` (same command) the last phase, two requests "
            f"after slots used in turn, took {steps[('steps-none-kvu', last)][-1][0]:.2f} s on one GPU and "
            f"{steps[('steps-tpar-kvu', last)][-1][0]:.2f} s through tpar.")
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **missed**, {t1 / none1:.2f}x and {t2 / none2:.2f}x in the "
        f"two passes ({t1:.2f} s against {none1:.2f}; {t2:.2f} against {none2:.2f}).",
        f"- At or below `-sm layer`'s ({first['mixed-layer'][3]:.2f} s, {first['mixed-layer'][3] / none1:.2f}x): "
        f"**missed** ({t1:.2f} s in the same pass).",
        f"- Replay on never slower than replay off: **{'met' if t1 <= o1 and t2 <= o2 else 'missed'}** in this run: "
        f"{t1:.2f} s on against {o1:.2f} off in the first pass, {t2:.2f} against {o2:.2f} in the second; the two passes "
        f"of one mode differ by more than the modes do ({abs(t1 - t2):.2f} s for replay on), so this traffic does not "
        f"resolve the difference in one run.",
        f"- No request fails for a reason `-sm none` does not show too: **met**, {answered} of {asked} answered over the "
        f"run's ten servers.",
    ])
    return {"server-mixed-r1": head + "\n\n" + table + "\n\n" + note + "\n\n" + targets}


def render_mixed_v1():
    """The mixed traffic with patch 0013 (the meta backend's split states) and without it, two passes in four
    commands on one machine: one GPU, tpar and replay off with the thirteen patches, tpar with the twelve."""
    texts = [decode_report.read(f) for f in MIXED_V1]
    runs = [{l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in texts]
    stamps = [decode_report.stamp(t) for t in texts]
    if stamps[0]["tree"] != stamps[3]["tree"] or stamps[1]["tree"] != stamps[2]["tree"]:
        raise ValueError("run V1: a pass's logs are of different trees")
    first, again = runs[0], runs[3]
    first["mixed-tpar-12"], again["mixed-tpar-12"] = runs[1]["mixed-tpar"], runs[2]["mixed-tpar"]
    none1, none2 = first["mixed-none"][3], again["mixed-none"][3]
    st, old = stamps[0], stamps[1]["tree"]
    names = [("mixed-none", "`-sm none`, one GPU"),
             ("mixed-tpar", "`-sm tensor`, tpar (defaults: replay on), thirteen patches"),
             ("mixed-tpar-noreplay", "`-sm tensor`, tpar, `GGML_VK_DISABLE_REPLAY=1`, thirteen patches"),
             ("mixed-tpar-12", f"`-sm tensor`, tpar, twelve patches (the bundle of {old}, without 0013)")]
    table, answered, asked = mixed_passes_table(names, [[(first, none1)], [(again, none2)]])
    head = (f"Run V1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with the "
            f"thirteen patches: 0013 makes the meta backend's split of a new graph cheaper) beside the bundle of {old} "
            f"(twelve patches), four commands back to back on one machine: `MIXED_MODES=none,tpar,tpar-noreplay "
            f"scripts/gpu-suite.sh env server-mixed`, `MIXED_MODES=tpar scripts/gpu-suite.sh --bin OLD server-mixed` "
            f"twice, then `MIXED_MODES=tpar-noreplay,tpar,none`. The same server and traffic as T1 and R1 below; "
            f"{answered} of {asked} requests answered. Raw: "
            + ", ".join(f"[perf/raw/{f}](perf/raw/{f})" for f in MIXED_V1) + ".")
    t1, t2 = first["mixed-tpar"][3], again["mixed-tpar"][3]
    o1, o2 = first["mixed-tpar-noreplay"][3], again["mixed-tpar-noreplay"][3]
    w1, w2 = first["mixed-tpar-12"][3], again["mixed-tpar-12"][3]
    spread = abs(none1 - none2)
    within = "within" if max(abs(t1 - w1), abs(t2 - w2)) < spread else "beyond"
    note = (f"One GPU's own two passes differ by {spread:.2f} s; tpar with and without patch 0013 "
            f"differ by {abs(t1 - w1):.2f} and {abs(t2 - w2):.2f} s in the two passes, {within} that spread.")
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **missed**, {t1 / none1:.2f}x and {t2 / none2:.2f}x in the "
        f"two passes ({t1:.2f} s against {none1:.2f}; {t2:.2f} against {none2:.2f}).",
        f"- Replay on never slower than replay off: **{'met' if t1 <= o1 and t2 <= o2 else 'missed'}**: {t1:.2f} s on "
        f"against {o1:.2f} off in the first pass, {t2:.2f} against {o2:.2f} in the second.",
        f"- No request fails for a reason `-sm none` does not show too: **met**, {answered} of {asked} answered.",
    ])
    return {"server-mixed-v1": head + "\n\n" + table + "\n\n" + note + "\n\n" + targets}


def render_mixed_w1():
    """The mixed traffic with patch 0014 (the split-state cache kept across graphs) and without it, in three commands
    on one machine: one GPU, tpar and replay off in two passes and tpar and one GPU once more with the fourteen
    patches; between them tpar in two passes with the thirteen (the bundle of 601d1ba)."""
    texts = [decode_report.read(f) for f in MIXED_W1]
    runs = [{l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in texts]
    stamps = [decode_report.stamp(t) for t in texts]
    if stamps[0]["tree"] != stamps[2]["tree"] or stamps[1]["tree"] == stamps[0]["tree"]:
        raise ValueError("run W1: the first and last logs must be of one tree, the middle one of another")
    a, b, c = runs
    a2 = {k[:-3]: v for k, v in a.items() if k.endswith("-p2")}
    b2 = {k[:-3]: v for k, v in b.items() if k.endswith("-p2")}
    a1 = {k: v for k, v in a.items() if not k.endswith("-p2")}
    b1 = {k: v for k, v in b.items() if not k.endswith("-p2")}
    b1["mixed-tpar-13"], b2["mixed-tpar-13"] = b1.pop("mixed-tpar"), b2.pop("mixed-tpar")
    nones = [a1["mixed-none"][3], a2["mixed-none"][3], c["mixed-none"][3]]
    none_mean = sum(nones) / len(nones)
    st, old = stamps[0], stamps[1]["tree"]
    names = [("mixed-none", "`-sm none`, one GPU"),
             ("mixed-tpar", "`-sm tensor`, tpar (defaults: replay on), fourteen patches"),
             ("mixed-tpar-noreplay", "`-sm tensor`, tpar, `GGML_VK_DISABLE_REPLAY=1`, fourteen patches"),
             ("mixed-tpar-13", f"`-sm tensor`, tpar, thirteen patches (the bundle of {old}, without 0014)")]
    table, answered, asked = mixed_passes_table(
        names, [[(a1, nones[0])], [(a2, nones[1])], [(b1, none_mean)], [(b2, none_mean)], [(c, nones[2])]],
        heads=("command 1, first pass: seconds for the 16 rounds (against one GPU's), tokens", "command 1, second pass",
               "command 2, first pass", "command 2, second pass", "command 3"))
    head = (f"Run W1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with the "
            f"fourteen patches: 0014 keeps the meta backend's split-state cache entries across graphs) beside the bundle "
            f"of {old} (thirteen patches), three commands back to back on one machine: `MIXED_MODES=none,tpar,tpar-noreplay "
            f"MIXED_PASSES=2 scripts/gpu-suite.sh env server-mixed`, `MIXED_MODES=tpar MIXED_PASSES=2 scripts/gpu-suite.sh "
            f"--bin OLD server-mixed`, `MIXED_MODES=tpar,none scripts/gpu-suite.sh server-mixed` (a second pass runs the "
            f"modes in reverse). The same server and traffic as V1 below; {answered} of {asked} requests answered. The "
            f"thirteen patches' passes are set against the mean of one GPU's three ({none_mean:.2f} s). Raw: "
            + ", ".join(f"[perf/raw/{f}](perf/raw/{f})" for f in MIXED_W1) + ".")
    t14 = [a1["mixed-tpar"][3], a2["mixed-tpar"][3], c["mixed-tpar"][3]]
    t13 = [b1["mixed-tpar-13"][3], b2["mixed-tpar-13"][3]]
    off = [a1["mixed-tpar-noreplay"][3], a2["mixed-tpar-noreplay"][3]]
    m14, m13 = sum(t14) / len(t14), sum(t13) / len(t13)
    spread = max(max(v) - min(v) for v in (nones, t14, t13, off))
    within = "within" if abs(m14 - m13) < spread else "beyond"
    lower = "with" if m14 < m13 else "without"
    note = (f"tpar's mean with 0014 is {m14:.2f} s over three passes, {m13:.2f} s without it over two (the lower "
            f"{lower} it): {abs(m14 - m13):.2f} s apart, {within} the spread of one mode's own passes in this run "
            f"(up to {spread:.2f} s).")
    ratios = [t / n for t, n in zip(t14, nones)]
    met = all(t <= o for t, o in zip(t14, off))
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **{'met' if max(ratios) <= 0.83 else 'missed'}**, "
        + ", ".join(f"{r:.2f}x" for r in ratios) + " in the three passes with the fourteen patches.",
        f"- Replay on never slower than replay off: **{'met' if met else 'missed'}**, in the two passes that ran both: "
        + "; ".join(f"{t:.2f} s on against {o:.2f} off" for t, o in zip(t14, off)) + ".",
        f"- No request fails for a reason `-sm none` does not show too: **{'met' if answered == asked else 'missed'}**, "
        f"{answered} of {asked} answered.",
    ])
    return {"server-mixed-w1": head + "\n\n" + table + "\n\n" + note + "\n\n" + targets}


def mixed_x1():
    """Run X1's passes: ([first command's passes], [second command's passes], the first log's stamp, the second's);
    a pass is {label: (answered, asked, tokens, seconds, t/s)} with the second pass's '-p2' taken off."""
    texts = [decode_report.read(f) for f in MIXED_X1]
    runs = [{l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in texts]
    stamps = [decode_report.stamp(t) for t in texts]

    def passes(run):
        return ({k: v for k, v in run.items() if not k.endswith("-p2")},
                {k[:-3]: v for k, v in run.items() if k.endswith("-p2")})
    return passes(runs[0]), passes(runs[1]), stamps[0], stamps[1]


def host_timer_sums(text):
    """{timer file: the medians of a graph built anew, in ms: graph build + allocation (+ the meta backend's rebuild)}
    from a host_timers_summary.py output."""
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"(timers-\S+)\.tq: \d+ graphs built anew", line)
        if m:
            name = m.group(1)
            out[name] = 0.0
            continue
        m = re.match(r"  (graph build|allocation \(sched_alloc_graph\)|meta backend's rebuild \(graph_compute\))\s+median\s+(\d+)", line)
        if m and name:
            out[name] += int(m.group(2)) / 1000
    return out


def render_mixed_x1():
    """The mixed traffic with patch 0015 (a new graph's split states and slices found with less work) and without it,
    in two commands on one machine: one GPU and tpar in two passes with the fifteen patches, then tpar in two passes
    with the fourteen; both builds carry the host timers of host-timers-h200x2-7e23035.txt."""
    (a1, a2), (b1, b2), st, old = mixed_x1()
    new_tree, old_tree = st["tree"].split()[0], old["tree"].split()[0]
    if new_tree == old_tree:
        raise ValueError("run X1: the two logs must be of different bundles")
    b1["mixed-tpar-14"], b2["mixed-tpar-14"] = b1.pop("mixed-tpar"), b2.pop("mixed-tpar")
    nones = [a1["mixed-none"][3], a2["mixed-none"][3]]
    none_mean = sum(nones) / len(nones)
    names = [("mixed-none", "`-sm none`, one GPU"),
             ("mixed-tpar", "`-sm tensor`, tpar (defaults), fifteen patches"),
             ("mixed-tpar-14", "`-sm tensor`, tpar, fourteen patches (without 0015)")]
    table, answered, asked = mixed_passes_table(
        names, [[(a1, nones[0])], [(a2, nones[1])], [(b1, none_mean)], [(b2, none_mean)]],
        heads=("command 1, first pass: seconds for the 16 rounds (against one GPU's), tokens", "command 1, second pass",
               "command 2, first pass", "command 2, second pass"))
    head = (f"Run X1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, llama.cpp with the fifteen patches of "
            f"tree {new_tree} (0015 finds a new graph's split states and slices with less work) beside the "
            f"fourteen before it (patches 0001-0014, the bundle stamped {old_tree}), both built with the host timers, two commands back to back on one machine: "
            f"`MIXED_MODES=none,tpar MIXED_PASSES=2 scripts/gpu-suite.sh --bin BUNDLE-15 server-mixed`, then "
            f"`MIXED_MODES=tpar MIXED_PASSES=2 scripts/gpu-suite.sh --bin BUNDLE-14 server-mixed` (a second pass runs the "
            f"modes in reverse). The same server and traffic as W1 below; {answered} of {asked} requests answered. The "
            f"fourteen patches' passes are set against the mean of one GPU's two ({none_mean:.2f} s). Raw: "
            + ", ".join(f"[perf/raw/{f}](perf/raw/{f})" for f in MIXED_X1) + ".")
    t15 = [a1["mixed-tpar"][3], a2["mixed-tpar"][3]]
    t14 = [b1["mixed-tpar-14"][3], b2["mixed-tpar-14"][3]]
    m15, m14 = sum(t15) / len(t15), sum(t14) / len(t14)
    spread = max(max(v) - min(v) for v in (nones, t15, t14))
    within = "within" if abs(m15 - m14) < spread else "beyond"
    note = (f"tpar's mean is {m15:.2f} s with 0015 and {m14:.2f} s without it, {abs(m15 - m14):.2f} s apart, {within} "
            f"the spread of one mode's own passes in this run (up to {spread:.2f} s); against the mean of one GPU's "
            f"passes tpar takes {m15 / none_mean:.2f}x its time ({none_mean / m15:.2f}x its rate).")
    ratios = [t / n for t, n in zip(t15, nones)]
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **{'met' if max(ratios) <= 0.83 else 'missed'}**, "
        + " and ".join(f"{r:.3f}x" for r in ratios) + " in the two passes with the fifteen patches"
        + (f" (the closer {min(ratios):.3f}x: {min((r - 0.83) * n for r, n in zip(ratios, nones)):.2f} s over)"
           if min(ratios) > 0.83 else "") + ".",
        f"- No request fails for a reason `-sm none` does not show too: **{'met' if answered == asked else 'missed'}**, "
        f"{answered} of {asked} answered.",
    ])
    sums = host_timer_sums(decode_report.read(HOST_TIMERS_X1))

    def timer_span(prefix):
        v = [x for k, x in sums.items() if k.startswith(prefix)]
        return f"{min(v):.1f}-{max(v):.1f} ms"
    host = (f"The host timers ([perf/raw/{HOST_TIMERS_X1}](perf/raw/{HOST_TIMERS_X1})): a graph built anew cost the "
            f"host, as the medians of its build, its allocation and (under `-sm tensor`) the meta backend's rebuild, "
            f"{timer_span('timers-x1-tpar-15p')} for tpar with fifteen patches, {timer_span('timers-x1-tpar-14p')} with fourteen, and "
            f"{timer_span('timers-x1-none')} for one GPU, whose scheduler splits the graph for ggml-vulkan; on one H200 opened "
            f"as two devices the same work took {timer_span('timers-virtual-tpar')}.")
    return {"server-mixed-x1": head + "\n\n" + table + "\n\n" + note + "\n\n" + host + "\n\n" + targets}


def batched_tables(text):
    """{label: {sequences: decode t/s}} from the '## llama-batched-bench LABEL:' sections (S_TG by B)."""
    out, label = {}, None
    for line in text.splitlines():
        m = re.match(r"## llama-batched-bench (\S+):", line)
        if m:
            label = m.group(1)
            out[label] = {}
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if label and len(cells) == 10 and cells[2].isdigit():
            out[label][int(cells[2])] = float(cells[7])
    return out


def batched_table(text):
    """gpu-suite.sh's part batched as a table: decode t/s of 1 to 4 sequences by row, against one GPU's faster run."""
    tables = batched_tables(text)
    none = {b: max(tables["none-8b"][b], tables["none-8b-last"][b]) for b in (1, 2, 3, 4)}
    lines = ["| decode t/s (against one GPU's faster run) | 1 sequence | 2 at once | 3 at once | 4 at once |",
             "|---|---|---|---|---|"]
    for label, name in [("none-8b", "`-sm none`, one GPU, first / last"), ("tpar-8b", "`-sm tensor`, tpar (defaults)"),
                        ("tpar-relay-t4-8b", "tpar, four relay threads (`TPAR_RELAY_THREADS=4`)"),
                        ("tpar-skip-8b", "tpar, free boundaries (`TPAR_GGML_SKIP_ALLREDUCE=1`, timing only)")]:
        if label == "none-8b":
            cells = [f"{tables['none-8b'][b]:.1f} / {tables['none-8b-last'][b]:.1f}" for b in (1, 2, 3, 4)]
        else:
            cells = [f"{tables[label][b]:.1f} ({tables[label][b] / none[b]:.2f}x)" for b in (1, 2, 3, 4)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def staging_made(text):
    """{server label: (stagings made, ms each)} from the summary lines after each llama-server."""
    out, label = {}, None
    for line in text.splitlines():
        m = re.match(r"## llama-server (\S+):", line)
        if m:
            label = m.group(1)
            continue
        m = re.match(r"# tpar info: ggml comm: host staging made (once|(\d+) times) .*?, ([\d.]+) us each", line)
        if m and label:
            out[label] = (1 if m.group(1) == "once" else int(m.group(2)), float(m.group(3)) / 1000)
    return out


def render_mixed_y0():
    """Run Y0: the servers warmed first, with the count of stagings made, before 779f435 (one command)."""
    text = decode_report.read(MIXED_Y0)
    st = decode_report.stamp(text)
    runs = {l: x for l, seed, x in mixed_runs(text) if seed == 1}
    none = runs["mixed-none"][3]
    names = [("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (defaults)"),
             ("mixed-tpar-relay-t4", "`-sm tensor`, tpar, four relay threads (`TPAR_RELAY_THREADS=4`)")]
    table, answered, asked = mixed_passes_table(names, [[(runs, none)]],
                                                heads=("seconds for the 16 rounds (against one GPU's), tokens",))
    made = staging_made(text)
    warm = dict(re.findall(r"^(mixed-[a-z0-9-]+) warm-up: .*? in ([\d.]+) s", text, re.M))
    head = (f"Run Y0: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with the "
            f"fifteen patches), `MIXED_MODES=none,tpar,tpar-relay-t4 scripts/gpu-suite.sh server-mixed`: the server and "
            f"traffic of X1, each server first answering five untimed warm-up requests; {answered} of {asked} requests "
            f"answered. Raw: [perf/raw/{MIXED_Y0}](perf/raw/{MIXED_Y0}).")
    note = (f"The warm-up took one GPU's server, the first on the machine, {float(warm['mixed-none']):.2f} s, and tpar's "
            f"{float(warm['mixed-tpar']):.2f} s: the first server compiles ggml-vulkan's programs into the driver's "
            f"cache, which X1 and the runs before it left to the first mode's first round. Each tpar server made its "
            f"host staging anew {made['mixed-tpar'][0]} and {made['mixed-tpar-relay-t4'][0]} times, "
            f"{made['mixed-tpar'][1]:.1f} ms of the host's time each ({made['mixed-tpar'][0] * made['mixed-tpar'][1] / 1000:.1f} "
            f"s of the {runs['mixed-tpar'][3]:.2f} s run): the relay's decode calls shrank the staging that the next "
            f"prompt grew again, and took turns in its two large slot sets meanwhile. Since 779f435 a relay call takes "
            f"the relay's own slot sets and leaves the staging's size alone ([design note](design/server-mixed.md)).")
    ratio = runs["mixed-tpar"][3] / none
    target = (f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **{'met' if ratio <= 0.83 else 'missed'}** here, "
              f"{ratio:.3f}x (four relay threads: {runs['mixed-tpar-relay-t4'][3] / none:.3f}x).")
    return {"server-mixed-y0": head + "\n\n" + table + "\n\n" + note + "\n\n" + target}


def render_mixed_y1():
    """The servers warmed first: run Y0 before 779f435 (a relay call takes the relay's own slot sets and leaves the
    staging's size alone), run Y1 after it, with llama-batched-bench's decode of 1 to 4 sequences."""
    y0_text, b_text, y1_text = (decode_report.read(f) for f in (MIXED_Y0, BATCHED_Y1, MIXED_Y1))
    st0, stb, st1 = (decode_report.stamp(t) for t in (y0_text, b_text, y1_text))
    if stb["tree"] != st1["tree"]:
        raise ValueError("run Y1's two logs must be of one bundle")
    btable = batched_table(b_text)
    bhead = (f"Run Y1: {st1['n']} × {st1['gpu']} (driver {st1['driver']}), {st1['date']}, tree {st1['tree']} (llama.cpp with "
             f"the fifteen patches), two commands back to back on one machine. First `scripts/gpu-suite.sh env batched`: "
             f"`llama-batched-bench -fa on -npp 128 -ntg 128 -npl 1,2,3,4` on the 8B shapes (Q8_0), each sequence in its "
             f"own KV stream as a server's slots are, so the decode of B sequences is a server's decode step of B slots "
             f"(the AllReduce carries B x 16 KiB); raw: [perf/raw/{BATCHED_Y1}](perf/raw/{BATCHED_Y1}).")
    y0 = {l: x for l, seed, x in mixed_runs(y0_text) if seed == 1}
    y1 = {l: x for l, seed, x in mixed_runs(y1_text) if seed == 1}
    p1 = {k: v for k, v in y1.items() if not k.endswith("-p2")}
    p2 = {k[:-3]: v for k, v in y1.items() if k.endswith("-p2")}
    names = [("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (defaults)"),
             ("mixed-tpar-relay-t4", "`-sm tensor`, tpar, four relay threads (`TPAR_RELAY_THREADS=4`)")]
    table, answered, asked = mixed_passes_table(
        names, [[(y0, y0["mixed-none"][3])], [(p1, p1["mixed-none"][3])], [(p2, p2["mixed-none"][3])]],
        heads=(f"Y0 (tree {st0['tree']}, before): seconds for the 16 rounds (against one GPU's), tokens",
               f"Y1 (tree {st1['tree']}), first pass", "Y1, second pass"))
    made0, made1 = staging_made(y0_text), staging_made(y1_text)

    def made(runs, label):
        n, ms = runs[label]
        return f"{n} times ({ms:.1f} ms each)"
    mhead = (f"Then `MIXED_MODES=none,tpar,tpar-relay-t4 MIXED_PASSES=2 scripts/gpu-suite.sh server-mixed` (the second "
             f"pass in reverse), beside run Y0 of tree {st0['tree']} on {st0['n']} × {st0['gpu']} ({st0['date']}, another "
             f"machine of the kind, one pass, `MIXED_MODES=none,tpar,tpar-relay-t4`): the server and traffic of X1, each "
             f"server answering five untimed warm-up requests first; {answered} of {asked} requests answered. Raw: "
             f"[perf/raw/{MIXED_Y0}](perf/raw/{MIXED_Y0}), [perf/raw/{MIXED_Y1}](perf/raw/{MIXED_Y1}).")
    note = (f"The host staging was made {made(made0, 'mixed-tpar')} in Y0's tpar server and "
            f"{made(made1, 'mixed-tpar')} and {made(made1, 'mixed-tpar-p2')} in Y1's.")
    y2_text = decode_report.read(MIXED_Y2)
    st2 = decode_report.stamp(y2_text)
    if st2["tree"] != st1["tree"]:
        raise ValueError("runs Y1 and Y2 must be of one bundle")
    y2 = {l: x for l, seed, x in mixed_runs(y2_text) if seed == 1}
    q1 = {k: v for k, v in y2.items() if not k.endswith("-p2")}
    q2 = {k[:-3]: v for k, v in y2.items() if k.endswith("-p2")}
    table2, answered2, asked2 = mixed_passes_table(
        [("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (defaults)"),
         ("mixed-layer", "`-sm layer`, 2 GPUs")],
        [[(q1, q1["mixed-none"][3])], [(q2, q2["mixed-none"][3])]],
        heads=("Y2, first pass: seconds for the 16 rounds (against one GPU's), tokens", "Y2, second pass"))
    made2 = staging_made(y2_text)
    y2head = (f"Run Y2: the same bundle on another machine of the kind ({st2['n']} × {st2['gpu']}, {st2['date']}), "
              f"`MIXED_MODES=none,tpar,layer MIXED_PASSES=2 scripts/gpu-suite.sh env server-mixed`; {answered2} of "
              f"{asked2} requests answered; raw: [perf/raw/{MIXED_Y2}](perf/raw/{MIXED_Y2}). tpar's servers made the "
              f"staging {made(made2, 'mixed-tpar')} and {made(made2, 'mixed-tpar-p2')}.")
    passes = [(p1, "Y1"), (p2, "Y1"), (q1, "Y2"), (q2, "Y2")]
    ratios = [p["mixed-tpar"][3] / p["mixed-none"][3] for p, _ in passes]
    layers = [p["mixed-layer"][3] / p["mixed-none"][3] for p in (q1, q2)]
    mean = sum(ratios) / len(ratios)
    met = sum(r <= 0.83 for r in ratios)
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **{'met' if met == len(ratios) else 'missed'}**: met in "
        f"{met} of {len(ratios)} passes (" + ", ".join(f"{r:.3f}x" for r in ratios) + f"; the mean of the four "
        f"{mean:.3f}x), against 0.964x in Y0 before 779f435.",
        f"- At or below `-sm layer`'s time: **{'met' if all(r < l for r, l in zip(ratios[2:], layers)) else 'missed'}** "
        f"in Y2, `-sm layer` " + " and ".join(f"{l:.2f}x" for l in layers) + " one GPU's time.",
        f"- No request fails for a reason `-sm none` does not show too: **{'met' if answered + answered2 == asked + asked2 else 'missed'}**, "
        f"{answered + answered2} of {asked + asked2} answered in Y0, Y1 and Y2.",
        f"- Four relay threads: no gain in Y1 ({p1['mixed-tpar-relay-t4'][3] / p1['mixed-none'][3]:.2f}x and "
        f"{p2['mixed-tpar-relay-t4'][3] / p2['mixed-none'][3]:.2f}x); the default stays two.",
    ])
    return {"server-mixed-y1": bhead + "\n\n" + btable + "\n\n" + mhead + "\n\n" + table + "\n\n" + note + "\n\n"
            + y2head + "\n\n" + table2 + "\n\n" + targets}


def mixed_z1():
    """Run Z1's commands: [(section text, {label: (answered, asked, tokens, seconds, t/s)})], and the stamp."""
    text = decode_report.read(MIXED_Z1)
    sections = ["# tpar gpu-suite:" + t for t in text.split("# tpar gpu-suite:")[1:]]
    if len(sections) != 5 or len({decode_report.stamp(t)["tree"] for t in sections}) != 1:
        raise ValueError(f"{MIXED_Z1}: five commands of one bundle expected")
    return [(t, {l: x for l, seed, x in mixed_runs(t) if seed == 1}) for t in sections], decode_report.stamp(text)


def split_passes(runs_by_command):
    """Each command's runs ({label: ...}) as its passes: the runs of a second pass (labels ending -p2) apart, their
    labels without the suffix."""
    passes = []
    for runs in runs_by_command:
        passes.append({k: v for k, v in runs.items() if not k.endswith("-p2")})
        if "mixed-none-p2" in runs:
            passes.append({k[:-3]: v for k, v in runs.items() if k.endswith("-p2")})
    return passes


def mixed_z2():
    """Run Z2's passes: [{label: (answered, asked, tokens, seconds, t/s)}] (the third command's second pass apart),
    and the stamp."""
    text = decode_report.read(MIXED_Z2)
    sections = ["# tpar gpu-suite:" + t for t in text.split("# tpar gpu-suite:")[1:]]
    if len(sections) != 3 or len({decode_report.stamp(t)["tree"] for t in sections}) != 1:
        raise ValueError(f"{MIXED_Z2}: three commands of one bundle expected")
    passes = split_passes({l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in sections)
    return passes, decode_report.stamp(text)


def render_mixed_z2():
    """Run Z2: the eighteen patches, four passes of one GPU and tpar over one machine, eight relay threads and
    `-sm layer` beside."""
    passes, st = mixed_z2()
    names = [("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (defaults)"),
             ("mixed-tpar-relay-t8", "tpar, eight relay threads (`TPAR_RELAY_THREADS=8`)"),
             ("mixed-layer", "`-sm layer`, 2 GPUs")]
    table, answered, asked = mixed_passes_table(
        names, [[(p, p["mixed-none"][3])] for p in passes],
        heads=("first command: seconds for the 16 rounds (against one GPU's), tokens",
               "second (the reverse order, and `-sm layer`)", "third (`tpar,none`)",
               "third, second pass (`none,tpar`)"))
    head = (f"Run Z2: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with "
            f"the eighteen patches: 0017 ends each command buffer with its barrier, 0018 reads the next weights beside "
            f"the relay's wait; the relay's calls cut into parts of 512 values), three commands back to back on one "
            f"machine; the server and traffic of Z1, each server answering five untimed warm-up requests first. "
            f"`MIXED_MODES=none,tpar,tpar-relay-t8 scripts/gpu-suite.sh env server-mixed`, then "
            f"`MIXED_MODES=tpar-relay-t8,tpar,none,layer`, then `MIXED_MODES=tpar,none MIXED_PASSES=2`. "
            f"Raw: [perf/raw/{MIXED_Z2}](perf/raw/{MIXED_Z2}).")
    ratios = [p["mixed-tpar"][3] / p["mixed-none"][3] for p in passes]
    total = sum(p["mixed-tpar"][3] for p in passes) / sum(p["mixed-none"][3] for p in passes)
    t8 = [p["mixed-tpar-relay-t8"][3] / p["mixed-none"][3] for p in passes if "mixed-tpar-relay-t8" in p]
    layer = [(i, p["mixed-layer"][3] / p["mixed-none"][3]) for i, p in enumerate(passes) if "mixed-layer" in p]
    met = sum(r <= 0.83 for r in ratios)
    z1 = split_passes(runs for _, runs in mixed_z1()[0])
    z1_total = sum(p["mixed-tpar"][3] for p in z1) / sum(p["mixed-none"][3] for p in z1)
    default_t8 = [q for q, p in zip(ratios, passes) if "mixed-tpar-relay-t8" in p]
    faster = sum(a < b for a, b in zip(t8, default_t8))
    t8_word = ("faster in every pass" if faster == len(t8) else "slower in every pass" if faster == 0
               else f"faster in {faster} of {len(t8)} passes")
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **{'met' if total <= 0.83 else 'missed'}** over the "
        f"{len(ratios)} passes together ({total:.3f}x: " + ", ".join(f"{r:.3f}x" for r in ratios) + f"; met in {met} "
        f"of {len(ratios)} passes alone), against run Z1's {z1_total:.3f}x over its six passes with sixteen patches.",
        f"- At or below `-sm layer`'s time: **{'met' if all(ratios[i] < l for i, l in layer) else 'missed'}**, "
        f"`-sm layer` " + " and ".join(f"{l:.2f}x" for _, l in layer) + " one GPU's time in the same command.",
        f"- No request fails for a reason `-sm none` does not show too: **{'met' if answered == asked else 'missed'}**, "
        f"{answered} of {asked} answered.",
        f"- Eight relay threads: " + " and ".join(f"{r:.3f}x" for r in t8) + " one GPU's time against the default's "
        + " and ".join(f"{r:.3f}x" for r in default_t8) + f" in the same commands ({t8_word}); the default stays "
        f"two threads, which spend fewer host cores.",
    ])
    return {"server-mixed-z2": head + "\n\n" + table + "\n\n" + targets}


def round_seconds(text, label, n):
    """Seconds of round n of the server LABEL."""
    return float(re.search(rf"^{label} round {n}: .*? tokens in ([\d.]+) s", text, re.M).group(1))


def render_mixed_z1():
    """Run Z1: patch 0016 on and off (LLAMA_KV_GAPS_DISABLE=1) in one run, batched decode, free boundaries, and the
    passes of one GPU and tpar over one machine."""
    cmds, st = mixed_z1()
    (t1, a1), (t2, a2), (t3, b1), (t4, b2), (t5, c) = cmds
    c1 = {k: v for k, v in c.items() if not k.endswith("-p2")}
    c2 = {k[:-3]: v for k, v in c.items() if k.endswith("-p2")}

    def split(runs):
        adj = {k: v for k, v in runs.items() if k.endswith("-adjacent")}
        return [(adj, adj["mixed-none-adjacent"][3])] if adj else [], [(runs, runs["mixed-none"][3])]
    cols = []
    for runs in (a1, a2):
        adj, new = split(runs)
        cols.append(adj + new)
    names = [("mixed-none-adjacent", "`-sm none`, one GPU, `LLAMA_KV_GAPS_DISABLE=1` (as before)"),
             ("mixed-tpar-adjacent", "`-sm tensor`, tpar, `LLAMA_KV_GAPS_DISABLE=1` (as before)"),
             ("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar"),
             ("mixed-layer", "`-sm layer`, 2 GPUs")]
    table, answered, asked = mixed_passes_table(
        names, cols, heads=("first command: seconds for the 16 rounds (against one GPU's of the same split), tokens",
                            "second command (the reverse order, and `-sm layer`)"))
    r10 = {l: [round_seconds(t, l, 10) for t in (t1, t2)] for l, _ in names[:4]}
    head = (f"Run Z1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with "
            f"the sixteen patches), five commands back to back on one machine; the server and traffic of X1, each "
            f"server answering five untimed warm-up requests first. First `MIXED_MODES=none,tpar,none-adjacent,"
            f"tpar-adjacent scripts/gpu-suite.sh env cases server-mixed`, then the same modes in the reverse order with "
            f"`layer`: each mode with patch 0016 and without it (`LLAMA_KV_GAPS_DISABLE=1`: a step's slots in one "
            f"ubatch only where their KV streams are adjacent, as before). Raw: [perf/raw/{MIXED_Z1}](perf/raw/{MIXED_Z1}).")
    note = ("Round 10 (four requests, three of them of 256 tokens), seconds in the two commands: one GPU "
            + " and ".join(f"{x:.2f}" for x in r10["mixed-none-adjacent"]) + " without the patch, "
            + " and ".join(f"{x:.2f}" for x in r10["mixed-none"]) + " with it; tpar "
            + " and ".join(f"{x:.2f}" for x in r10["mixed-tpar-adjacent"]) + " without, "
            + " and ".join(f"{x:.2f}" for x in r10["mixed-tpar"]) + " with it. That round ends with three requests "
            "decoding after the fourth finished: where it had sat in slot 1 or 2, the three were slots 0, 2 and 3 or 0, 1 "
            "and 3, and without the patch every later step ran as two ubatches. Which slot a request takes is the "
            "server's choice as requests arrive, so that round was slow in one pass and not in another.")
    bhead = ("Third, `MIXED_MODES=none,tpar,tpar-skip,tpar-relay-t4 scripts/gpu-suite.sh env batched server-mixed`: "
             "`llama-batched-bench -fa on -npp 128 -ntg 128 -npl 1,2,3,4` on the 8B shapes (Q8_0), a server's decode "
             "step of B slots:")
    table2, answered2, asked2 = mixed_passes_table(
        [("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (defaults)"),
         ("mixed-tpar-relay-t4", "tpar, four relay threads"),
         ("mixed-tpar-skip", "tpar, free boundaries (timing only)"), ("mixed-layer", "`-sm layer`, 2 GPUs")],
        [[(b1, b1["mixed-none"][3])], [(b2, b2["mixed-none"][3])], [(c1, c1["mixed-none"][3])],
         [(c2, c2["mixed-none"][3])]],
        heads=("third command: seconds (against one GPU's), tokens",
               "fourth (`tpar-relay-t4,tpar,none,layer`)", "fifth (`none,tpar`)", "fifth, second pass (reverse)"))
    passes = [a1, a2, b1, b2, c1, c2]
    ratios = [p["mixed-tpar"][3] / p["mixed-none"][3] for p in passes]
    before = [p["mixed-tpar-adjacent"][3] / p["mixed-none-adjacent"][3] for p in (a1, a2)]
    layers = [p["mixed-layer"][3] / p["mixed-none"][3] for p in (a2, b2)]
    total = sum(p["mixed-tpar"][3] for p in passes) / sum(p["mixed-none"][3] for p in passes)
    met = sum(r <= 0.83 for r in ratios)
    n_ok, n_asked = answered + answered2, asked + asked2
    gain = [1 - p["mixed-tpar"][3] / p["mixed-tpar-adjacent"][3] for p in (a1, a2)]
    gain1 = [1 - p["mixed-none"][3] / p["mixed-none-adjacent"][3] for p in (a1, a2)]
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **{'met' if met == len(ratios) else 'missed'}**: met in "
        f"{met} of {len(ratios)} passes (" + ", ".join(f"{r:.3f}x" for r in ratios) + f"; all six together "
        f"{total:.3f}x).",
        f"- Patch 0016, in one run: tpar's 16 rounds took " + " and ".join(f"{g:.0%}" for g in gain) + " less time "
        f"with it, one GPU's " + " and ".join(f"{g:.0%}" for g in gain1) + "; tpar against one GPU "
        + " and ".join(f"{r:.3f}x" for r in before) + " without it, " + " and ".join(f"{r:.3f}x" for r in ratios[:2])
        + " with it.",
        f"- At or below `-sm layer`'s time: **{'met' if all(ratios[i] < l for i, l in zip((1, 3), layers)) else 'missed'}**, "
        f"`-sm layer` " + " and ".join(f"{l:.2f}x" for l in layers) + " one GPU's time.",
        f"- No request fails for a reason `-sm none` does not show too: **{'met' if n_ok == n_asked else 'missed'}**, "
        f"{n_ok} of {n_asked} answered.",
        f"- With free boundaries the same server took {b1['mixed-tpar-skip'][3] / b1['mixed-none'][3]:.3f}x one GPU's "
        f"time: the AllReduce inside each decode step is what stands between these passes and the target.",
    ])
    return {"server-mixed-z1": head + "\n\n" + table + "\n\n" + note + "\n\n" + bhead + "\n\n" + batched_table(t3)
            + "\n\n" + table2 + "\n\n" + targets}


def render_mixed_t1():
    """The mixed traffic with the twelve patches (replay found by the subgraph's nodes): one GPU and tpar in two
    passes, replay off in the second, two commands on one machine."""
    texts = [decode_report.read(f) for f in MIXED_T1]
    first, again = ({l: x for l, seed, x in mixed_runs(t) if seed == 1} for t in texts)
    st = decode_report.stamp(texts[0])
    if decode_report.stamp(texts[1])["tree"] != st["tree"]:
        raise ValueError("run T1's two logs are of different trees")
    none1, none2 = first["mixed-none"][3], again["mixed-none"][3]
    names = [("mixed-none", "`-sm none`, one GPU"), ("mixed-tpar", "`-sm tensor`, tpar (defaults: replay on)"),
             ("mixed-tpar-noreplay", "`-sm tensor`, tpar, `GGML_VK_DISABLE_REPLAY=1`")]
    table, answered, asked = mixed_passes_table(names, [[(first, none1)], [(again, none2)]])
    counts = r"Vulkan0: (\d+) subgraphs replayed, (\d+) recorded for replay, \d+ recorded as usual, (\d+) seen once"
    replay = re.findall(counts, texts[0])[0]
    r1 = re.findall(counts, mixed_r1()[2][0])[0]
    head = (f"Run T1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']} (llama.cpp with the "
            f"twelve patches: replay found by the subgraph's nodes), two commands back to back on one machine: "
            f"`MIXED_MODES=none,tpar scripts/gpu-suite.sh env server-mixed`, then `MIXED_MODES=tpar,none,tpar-noreplay`. "
            f"The same server and traffic as R1 below; {answered} of {asked} requests answered. Raw: "
            + ", ".join(f"[perf/raw/{f}](perf/raw/{f})" for f in MIXED_T1) + ".")
    t1, t2, o2 = first["mixed-tpar"][3], again["mixed-tpar"][3], again["mixed-tpar-noreplay"][3]
    note = (f"Replay's counts in the first pass's tpar server (a device): {replay[0]} subgraphs replayed, {replay[1]} "
            f"recorded for replay, {replay[2]} seen once and recorded as usual (R1, keyed by the graph's uid: "
            f"{r1[0]}, {r1[1]} and {r1[2]}). One GPU's own two passes differ by {abs(none1 - none2):.2f} s on this machine.")
    targets = "\n".join([
        f"- tpar's time for the 16 rounds ≤ 0.83x one GPU's: **missed**, {t1 / none1:.2f}x and {t2 / none2:.2f}x in the "
        f"two passes ({t1:.2f} s against {none1:.2f}; {t2:.2f} against {none2:.2f}).",
        f"- Replay on never slower than replay off: **{'met' if t2 <= o2 else 'missed'}** in the one pass with both: "
        f"{t2:.2f} s on against {o2:.2f} off.",
        f"- No request fails for a reason `-sm none` does not show too: **met**, {answered} of {asked} answered.",
    ])
    return {"server-mixed-t1": head + "\n\n" + table + "\n\n" + note + "\n\n" + targets}


def decode_chains(text):
    """{(how, bytes): (boundary us, cpu us, submits a step, step us)} from part decode's tpar-bench sections (how:
    oneshot, relay, relay-scalar, each with -hold1 where TPAR_STREAM_HOLD=1, -tN where TPAR_RELAY_THREADS=N is
    not the default 2, and -ride for --chain-wiring ride)."""
    out, how = {}, None
    for line in text.splitlines():
        m = re.match(r"## (?:TPAR_STREAM_HOLD=(\d+) )?(?:TPAR_RELAY_THREADS=(\d+) )?tpar-bench --devices \S+ --chain 64 "
                     r"--chain-work 58M --chain-wiring (streams|ride) --algo (\w+)( --relay-sum scalar)?", line)
        if m:
            how = (m.group(4) + ("-scalar" if m.group(5) else "") + ("-hold1" if m.group(1) == "1" else "")
                   + (f"-t{m.group(2)}" if m.group(4) == "relay" and m.group(2) not in (None, "2") else "")
                   + ("-ride" if m.group(3) == "ride" else ""))
            continue
        if line.startswith("##"):
            how = None
        f = line.split()
        if how and len(f) == 11 and f[0].isdigit() and f[1] in ("oneshot", "relay"):
            if int(f[10]) != 0:
                raise ValueError(f"{how} at {f[0]} bytes: {f[10]} wrong results")
            out[(how, int(f[0]))] = (float(f[5]), float(f[7]), float(f[8]), float(f[3]))
    return out


def nccl_chains(text, n=2):
    """{(work, mode, bytes): boundary us} from the NCCL anchor's p2p-off chain lines at n devices."""
    out = {}
    for m in re.finditer(rf"^p2p-off chain n={n} bytes=\s*(\d+) steps=64 work=(\d+) mode=(\w+) .* boundary_us=\s*([\d.]+) "
                         r".* ok=(\w+)$", text, re.M):
        if m.group(5) != "True":
            raise ValueError(f"NCCL chain {m.group(0)} not ok")
        out[(int(m.group(2)) > 0, m.group(3), int(m.group(1)))] = float(m.group(4))
    return out


def kib(n):
    return f"{n >> 10} KiB"


def render_decode():
    text = decode_report.read(DECODE)
    st = decode_report.stamp(text)
    ch = decode_chains(text)
    nc = nccl_chains(text)
    sizes = sorted({n for how, n in ch if how == "relay"})
    code = DECODE.split('-')[2].split('.')[0]
    rows = []
    for how, name in (("oneshot", "OneShot"),
                      ("relay-hold1", "the relay, each call its own submission (`TPAR_STREAM_HOLD=1`), two threads"),
                      ("relay-t1", "the relay held, one host thread (`TPAR_RELAY_THREADS=1`, the code before)"),
                      ("relay", "the relay held, two host threads (the default)"),
                      ("relay-t4", "the relay held, four host threads (`TPAR_RELAY_THREADS=4`)")):
        rows.append(f"| tpar, {name} | " + " | ".join(f"{ch[(how, n)][0]:.1f}" for n in sizes) + " | "
                    + f"{ch[(how, 16384)][1]:.1f} | {ch[(how, 16384)][2]:.2f} |")
    for work, wname in ((True, "with the weights"), (False, "no weights")):
        rows.append(f"| NCCL, peer-to-peer off, replayed from a CUDA graph, {wname} | "
                    + " | ".join(f"{nc[(work, 'graph', n)]:.1f}" if (work, 'graph', n) in nc else "" for n in sizes)
                    + " | | |")
    chain = "\n".join([
        "| boundary per step (us) | " + " | ".join(kib(n) for n in sizes) + " | cpu per step at 16 KiB | submissions a step |",
        "|---|" + "---|" * len(sizes) + "---|---|",
        *rows,
    ])
    head = (f"The chain: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, one run, tree {st['tree']}; raw: "
            f"[perf/raw/{DECODE}](perf/raw/{DECODE}). `tpar-bench --chain 64 --chain-work 58M --chain-wiring streams` "
            f"(the relay's rows with `--relay-max 256K`, so that it takes every size), each row its median step minus the "
            f"same chain without the AllReduce; NCCL's from `scripts/nccl_anchor.py chain` in the same run (4, 16 and "
            f"64 KiB).")

    b = decode_report.benches(text)
    models = (("8b", "tg128", "Llama-3-8B shapes, q8_0, tg128"), ("8b-q4_k_m", "tg128", "the same, Q4_K_M"),
              ("8b-d8192", "tg128 @ d8192", "the same, q8_0, at `-d 8192`"),
              ("70b20", "tg64", "Llama-3-70B shapes (20 of 80 layers), q8_0, tg64"),
              ("tiny32", "tg64", "32 layers, 256 wide, f16, tg64"))
    lines = ["| t/s | one GPU, first / last | tpar, automatic (the relay) | `TPAR_ALGO=oneshot` | `TPAR_ALGO=relay` | "
             "relay, one thread | relay, `TPAR_STREAM_HOLD=1` | automatic against one GPU | OneShot against one GPU |",
             "|---|---|---|---|---|---|---|---|---|"]
    keys = ("none", "none2", "tpar2-auto", "tpar2-oneshot", "tpar2-relay", "tpar2-relay-t1", "tpar2-relay-hold1")

    def row(bb, k, tag, test):
        return {x: bb[f"{x.replace('tpar2', f'tpar{k}')}-{tag}"][test][0] for x in keys}

    def ratio(bb, k, tag, test, which="tpar2-auto"):
        v = row(bb, k, tag, test)
        return v[which] / max(v["none"], v["none2"])

    def model_line(name, v, cols):
        """A model's row: one GPU first / last, the columns `cols`, then automatic and OneShot against one GPU."""
        one = max(v["none"], v["none2"])
        return (f"| {name} | {v['none']:.1f} / {v['none2']:.1f} | " + " | ".join(f"{v[c]:.1f}" for c in cols)
                + f" | {v['tpar2-auto'] / one:.2f}x | {v['tpar2-oneshot'] / one:.2f}x |")

    for tag, test, name in models:
        lines.append(model_line(name, row(b, 2, tag, test), ("tpar2-auto", "tpar2-oneshot", "tpar2-relay", "tpar2-relay-t1",
                                                             "tpar2-relay-hold1")))
    ms = decode_report.stamp(text.split("\n# tpar gpu-suite:")[-1] if text.count("# tpar gpu-suite:") > 1 else text)
    models_head = (f"llama-bench `-fa 1 -r 3`, two runs of tree {st['tree']} on {st['n']} × {st['gpu']} (driver "
                   f"{st['driver']}), {st['date']} (the 8B q8_0 and Q4_K_M rows with the chain above, then the other three "
                   f"on another machine of the kind at {ms['time']}); raw: [perf/raw/{DECODE}](perf/raw/{DECODE}). One GPU ran "
                   f"first and last for each model; the ratios are against the faster of the two.")

    t4 = decode_report.read(DECODE4)
    s4 = decode_report.stamp(t4)
    c4 = decode_chains(t4)
    b4 = decode_report.benches(t4)
    sizes4 = sorted({n for how, n in c4 if how == "relay"})
    rows4 = []
    for how, name in (("oneshot", "OneShot"), ("relay-t1", "the relay, one host thread"),
                      ("relay", "the relay, two host threads (the default)"), ("relay-t4", "the relay, four host threads")):
        rows4.append(f"| tpar, {name} | " + " | ".join(f"{c4[(how, n)][3]:.1f}" for n in sizes4) + " |")
    chain4 = "\n".join(["| step (us), 4 GPUs | " + " | ".join(kib(n) for n in sizes4) + " |",
                         "|---|" + "---|" * len(sizes4), *rows4])
    m4 = ["| t/s, 4 GPUs | one GPU, first / last | tpar, automatic | `TPAR_ALGO=oneshot` | `TPAR_ALGO=relay` | relay, one "
          "thread | automatic against one GPU | OneShot against one GPU |", "|---|---|---|---|---|---|---|---|"]
    tags4 = [(t, te, nm) for t, te, nm in models if f"tpar4-auto-{t}" in b4]
    for tag, test, name in tags4:
        m4.append(model_line(name, row(b4, 4, tag, test), ("tpar2-auto", "tpar2-oneshot", "tpar2-relay", "tpar2-relay-t1")))
    head4 = (f"Four GPUs: {s4['n']} × {s4['gpu']} (driver {s4['driver']}), {s4['date']}; raw: [perf/raw/{DECODE4}]"
             f"(perf/raw/{DECODE4}) (the chain with tree {s4['tree']}, where the relay was taken only when asked for; the "
             f"models with the tree that takes it automatically on four, `DECODE_N=4`). The chain's steps, each a "
             f"dispatch reading 58 MiB of weights and the AllReduce (the same chain without it: "
             f"{float(re.search(r'^ +16384 +- +no AR +([0-9.]+)', t4, re.M).group(1)):.1f} us a step after OneShot's rows):")

    def verdict(ok):
        return "**met**" if ok else "**missed**"

    c16, n16w, n16 = ch[("relay", 16384)][0], nc[(True, "graph", 16384)], nc[(False, "graph", 16384)]
    r8, rq, rd, r70, rt = (ratio(b, 2, "8b", "tg128"), ratio(b, 2, "8b-q4_k_m", "tg128"), ratio(b, 2, "8b-d8192", "tg128 @ d8192"),
                           ratio(b, 2, "70b20", "tg64"), ratio(b, 2, "tiny32", "tg64"))
    r84 = ratio(b4, 4, "8b", "tg128")
    targets = "\n".join([
        f"- Chain boundary at 16 KiB with 58 MiB of weights ≤ 15 us: {c16:.1f} us: {verdict(c16 <= 15)}; at or below NCCL's "
        f"graph in the same run: {n16w:.1f} us with the weights ({verdict(c16 <= n16w)}), {n16:.1f} without "
        f"({verdict(c16 <= n16)}).",
        f"- 8B tg128 ≥ 1.05x one GPU: {r8:.2f}x on two GPUs: {verdict(r8 >= 1.05)}; {r84:.2f}x on four: "
        f"{verdict(r84 >= 1.05)}. Q4_K_M the same: {rq:.2f}x on two: {verdict(rq >= 1.05)}.",
        f"- 8B at `-d 8192` ≥ 1.0x: {rd:.2f}x: {verdict(rd >= 1.0)}.",
        f"- 70B shapes (20 layers) ≥ 1.50x: {r70:.2f}x: {verdict(r70 >= 1.50)}.",
        f"- The 32-layer, 256-wide model ≥ 0.75x: {rt:.2f}x: {verdict(rt >= 0.75)}.",
    ])
    return {"decode-relay": head + "\n\n" + chain + "\n\n" + models_head + "\n\n" + "\n".join(lines) + "\n\n"
            + head4 + "\n\n" + chain4 + "\n\n" + "\n".join(m4),
            "decode-relay-targets": targets}


def cbgap_rows(text):
    """{(words, row): (gpu us a step, extra us a command buffer)} from part probes' cbgap sections."""
    out, words = {}, None
    for line in text.splitlines():
        m = re.match(r"## PD=\d+ cbgap (\d+) (\d+) (\d+)", line)
        if m:
            words = int(m.group(2))
            continue
        f = line.split()
        if words and len(f) >= 6 and re.fullmatch(r"[a-z0-9-]+", f[0]) and re.fullmatch(r"[\d.]+", f[1]):
            out[(words, f[0])] = (float(f[1]), float(f[4]))
    return out


def calls_per_token(text, label, n, reps):
    """AllReduces a token for one llama-bench section: its summary line's count over the tokens it ran
    (reps x n, and one token of warm-up)."""
    sec = text.split(f"## llama-bench {label}:")[1].split("\n## ")[0]
    m = re.search(r"(?:the relay served|warning: ggml comm:) (\d+) AllReduces", sec)
    calls, tokens = int(m.group(1)), reps * n + 1
    if calls % tokens:
        raise ValueError(f"{label}: {calls} AllReduces over {tokens} tokens")
    return calls // tokens


def render_bound():
    text = decode_report.read(BOUND)
    st = decode_report.stamp(text)
    cb = cbgap_rows(text)
    names = (("one-cb", "every step in one command buffer, a barrier between steps"),
             ("cb-1", "a command buffer a step, all in one batch"),
             ("secondary-1", "one command buffer executing a secondary command buffer a step"),
             ("batch-1-signal", "a batch a step, each signalling a timeline semaphore, one vkQueueSubmit"),
             ("submit-1", "a vkQueueSubmit a step"))
    sizes = sorted({w for w, _ in cb})
    probe = "\n".join([
        "| dependent steps, one GPU | " + " | ".join(f"us a step, {kib(4 * w)}" for w in sizes)
        + " | " + " | ".join(f"more than one command buffer, per boundary, {kib(4 * w)}" for w in sizes) + " |",
        "|---|" + "---|" * (2 * len(sizes)),
        *[f"| {name} | " + " | ".join(f"{cb[(w, key)][0]:.2f}" for w in sizes) + " | "
          + " | ".join(("" if key == "one-cb" else f"{cb[(w, key)][1]:.2f}") for w in sizes) + " |" for key, name in names],
    ])
    b = decode_report.benches(text)
    models = (("8b", "tg128", 128, "Llama-3-8B shapes, q8_0, tg128"), ("8b-q4_k_m", "tg128", 128, "the same, Q4_K_M"),
              ("70b20", "tg64", 64, "Llama-3-70B shapes (20 of 80 layers), q8_0, tg64"),
              ("tiny32", "tg64", 64, "32 layers, 256 wide, f16, tg64"))
    lines = ["| t/s | one GPU, first / last | tpar, automatic (the relay) | free boundaries (`TPAR_GGML_SKIP_ALLREDUCE=1`) "
             "| automatic against one GPU | free boundaries against one GPU | AllReduces a token | a boundary's cost (us) |",
             "|---|---|---|---|---|---|---|---|"]
    costs = {}
    for tag, test, n, name in models:
        one, one2 = b[f"none-{tag}"][test][0], b[f"none2-{tag}"][test][0]
        auto, free = b[f"tpar2-auto-{tag}"][test][0], b[f"tpar2-skip-{tag}"][test][0]
        calls = calls_per_token(text, f"tpar2-auto-{tag}", n, 3)
        if calls_per_token(text, f"tpar2-skip-{tag}", n, 3) != calls:
            raise ValueError(f"{tag}: the free run made a different number of calls")
        cost = (1e6 / auto - 1e6 / free) / calls
        costs[tag] = cost
        best = max(one, one2)
        lines.append(f"| {name} | {one:.1f} / {one2:.1f} | {auto:.1f} | {free:.1f} | {auto / best:.2f}x | {free / best:.2f}x "
                     f"| {calls} | {cost:.1f} |")
    head = (f"{st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, one run, tree {st['tree']}; raw: "
            f"[perf/raw/{BOUND}](perf/raw/{BOUND}). `DECODE_CHAIN=0 DECODE_MODELS=8b,8b-q4_k_m,70b20,tiny "
            f"DECODE_ROWS=auto,skip scripts/gpu-suite.sh env probes decode`. First `probes/cbgap` on GPU 0: 256 dependent "
            f"dispatches, two timestamps only (before the first, after the last), median of 30:")
    models_head = ("Then llama-bench `-fa 1 -r 3`, one GPU first and last for each model. \"Free boundaries\" accepts "
                   "every AllReduce and sums nothing (wrong results, timing only): ggml's work alone, submitted as around "
                   "held relay calls. A boundary's cost is the token's time with the relay less its time with free "
                   "boundaries, over the AllReduces a token (counted from the run's own summary lines).")
    return {"decode-bound": head + "\n\n" + probe + "\n\n" + models_head + "\n\n" + "\n".join(lines)}


def run_head(run, log, st):
    """A run's label, machine, date and tree, with its raw log, for a block's head."""
    return (f"run {run}: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']}, raw "
            f"[perf/raw/{log}](perf/raw/{log})")


def render_ride():
    """The relay's kernel riding in ggml-vulkan's command buffers (the default) against its own
    command buffers (TPAR_RELAY_RIDE=0) and free boundaries, one table row per model and run."""
    models = (("8b", "tg128", 128, "8B q8_0"), ("8b-q4_k_m", "tg128", 128, "8B Q4_K_M"),
              ("70b20", "tg64", 64, "70B shapes, 20 layers"), ("tiny32", "tg64", 64, "32 layers, 256 wide"))
    lines = ["| t/s | run | one GPU, first / last | tpar, the relay riding (default) | the relay in its own command buffers "
             "(`TPAR_RELAY_RIDE=0`) | free boundaries | riding against one GPU | own command buffers against one GPU "
             "| a boundary's cost, riding / own (us) |",
             "|---|---|---|---|---|---|---|---|---|"]
    heads = []
    for run, log in RIDE:
        text = decode_report.read(log)
        st = decode_report.stamp(text)
        b = decode_report.benches(text)
        heads.append(run_head(run, log, st))
        for tag, test, n, name in models:
            if f"tpar2-auto-{tag}" not in b:
                continue
            one, one2 = b[f"none-{tag}"][test][0], b[f"none2-{tag}"][test][0]
            ride, own = (b[f"tpar2-{row}-{tag}"][test][0] for row in ("auto", "ride-off"))
            best = max(one, one2)
            if f"tpar2-skip-{tag}" in b:
                free = b[f"tpar2-skip-{tag}"][test][0]
                calls = calls_per_token(text, f"tpar2-auto-{tag}", n, 3)
                cost = [(1e6 / v - 1e6 / free) / calls for v in (ride, own)]
                free_cell, cost_cell = f"{free:.1f}", f"{cost[0]:.1f} / {cost[1]:.1f}"
            else:
                free_cell, cost_cell = "not run", "not run"
            lines.append(f"| {name} | {run} | {one:.1f} / {one2:.1f} | {ride:.1f} | {own:.1f} | {free_cell} | "
                         f"**{ride / best:.2f}x** | {own / best:.2f}x | {cost_cell} |")
    head = ("; ".join(heads) + ". `DECODE_ROWS=auto,ride-off,skip scripts/gpu-suite.sh env decode` (A: `DECODE_CHAIN=0 "
            "DECODE_MODELS=8b,8b-q4_k_m,70b20,tiny`; B: `DECODE_MODELS=8b,8b-q4_k_m`; C: the chain's run below; D: "
            "`DECODE_CHAIN=0 DECODE_MODELS=8b DECODE_ROWS=auto,ride-off DECODE_TRACE=1 DECODE_TRACE_ROWS=\"relay ride-off\"`, "
            "with the traces of its design note; P6, the barrier after the riding kernel narrowed since 973ae7a: "
            "`DECODE_CHAIN_ROWS=relay-ride DECODE_SIZES=16K DECODE_MODELS=8b,8b-q4_k_m,70b20,tiny` and "
            "`--tests stream,relay tests` first), llama-bench "
            "`-fa 1 -r 3`, each model's rows back to back, one GPU first and last. A boundary's cost is the token's time less "
            "its time with free boundaries (`TPAR_GGML_SKIP_ALLREDUCE=1`, wrong results, timing only), over the AllReduces "
            "a token.")
    return {"decode-ride": head + "\n\n" + "\n".join(lines)}


def chain_no_ar(text):
    """{bytes: [no-AR step us, one a tpar-bench invocation]} from part decode's chain sections."""
    out = {}
    for m in re.finditer(r"^\s+(\d+)\s+-\s+no AR\s+([\d.]+)", text, re.M):
        out.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    return out


def render_ride_chain():
    """The chain (tpar-bench --chain 64 --chain-work 58M) with the relay in its own command buffers and riding in
    each step's, beside OneShot and NCCL's chain from a CUDA graph, one run."""
    text = decode_report.read(RIDE_CHAIN)
    st = decode_report.stamp(text)
    ch = decode_chains(text)
    nc = nccl_chains(text)
    base = {n: min(v) for n, v in chain_no_ar(text).items()}
    sizes = sorted({n for how, n in ch if how == "relay-ride"})
    rows = []
    for how, name in (("oneshot", "OneShot"), ("relay", "the relay, its own command buffers"),
                      ("relay-ride", "the relay riding in each step's command buffer (`--chain-wiring ride`)")):
        rows.append(f"| {name} | " + " | ".join(f"{ch[(how, n)][3]:.1f} ({ch[(how, n)][3] - base[n]:.1f})" for n in sizes) + " |")
    nccl_sizes = [n for n in sizes if (True, "graph", n) in nc]
    for work, wname in ((False, "no weights"), (True, "58 MiB of weights a step")):
        rows.append(f"| NCCL P2P off from a CUDA graph, {wname}: boundary | "
                    + " | ".join(f"{nc[(work, 'graph', n)]:.1f}" if n in nccl_sizes else "not run" for n in sizes) + " |")
    head = (f"{st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, one run, tree {st['tree']}; raw: "
            f"[perf/raw/{RIDE_CHAIN}](perf/raw/{RIDE_CHAIN}). `NCCL_CHAIN_ONLY=1 DECODE_CHAIN_ROWS=oneshot,relay,relay-ride "
            f"DECODE_SIZES={','.join(f'{n >> 10}K' for n in sizes)} DECODE_MODELS=8b DECODE_ROWS=auto,ride-off,skip "
            f"scripts/gpu-suite.sh env decode nccl`: `tpar-bench --chain 64 --chain-work 58M -n 20 -r 3`, one invocation a "
            f"row, each with its own steps without the AllReduce; a step's time in us, and in brackets the boundary: the step "
            f"less the lowest of the invocations' steps without the AllReduce at that size (one invocation's own ran "
            f"{max(max(v) for v in chain_no_ar(text).values()) - min(base.values()):.0f} us long, its host slow: its enqueue "
            f"times show it). NCCL's rows are its boundary as its anchor measures it.")
    table = "\n".join(["| step (boundary), us | " + " | ".join(kib(n) for n in sizes) + " |",
                       "|---|" + "---|" * len(sizes), *rows])
    return {"decode-ride-chain": head + "\n\n" + table}


def render_ride_targets():
    """The boundary issue's targets: the chain's 16 KiB boundary (run C), and decode and prefill against one GPU
    from run Q1 (tree 5b869da, one machine), with the ride's earlier runs in brackets."""
    text = decode_report.read(RIDE_CHAIN)
    ch = decode_chains(text)
    nc = nccl_chains(text)
    base = min(chain_no_ar(text)[16384])
    ride = ch[("relay-ride", 16384)][3] - base
    with_w, without = nc[(True, "graph", 16384)], nc[(False, "graph", 16384)]

    def verdict(ok):
        return "**met**" if ok else "**missed**"
    earlier = {}
    for run, log in RIDE:
        b = decode_report.benches(decode_report.read(log))
        for tag, test in (("8b", "tg128"), ("8b-q4_k_m", "tg128"), ("70b20", "tg64"), ("tiny32", "tg64")):
            if f"tpar2-auto-{tag}" in b:
                best = max(b[f"none-{tag}"][test][0], b[f"none2-{tag}"][test][0])
                earlier.setdefault(tag, []).append(f"{b[f'tpar2-auto-{tag}'][test][0] / best:.2f}x in {run}")
    now = now_ratios()

    def cell(tag, goal):
        r = now[tag]["auto"]
        before = f" (before: {', '.join(earlier[tag])})" if tag in earlier else ""
        return f"{r:.2f}x in Q1{before}: {verdict(r >= goal)}"
    pp = now_prefill()
    lines = [
        f"- Chain boundary at 16 KiB with 58 MiB of weights ≤ 15 us: {ride:.1f} us riding (run C): {verdict(ride <= 15)}; at "
        f"or below NCCL's graph in the same run: {with_w:.1f} us with the weights ({verdict(ride <= with_w)}), {without:.1f} "
        f"without ({verdict(ride <= without)}).",
        f"- 8B tg128 ≥ 1.05x one GPU: {cell('8b', 1.05)}. Q4_K_M the same: {cell('8b-q4_k_m', 1.05)}.",
        f"- 8B at `-d 8192` ≥ 1.0x: {cell('8b-d8192', 1.0)}.",
        f"- 70B shapes (20 layers) ≥ 1.50x: {cell('70b20', 1.5)}.",
        f"- The 32-layer, 256-wide model ≥ 0.75x: {cell('tiny32', 0.75)}.",
        f"- pp512 not below 1.6x: {', '.join(f'{r:.2f}x' for _, r in pp)} (8B Q8_0, Q4_K_M; 70B shapes Q8_0, Q4_K_M) in Q1: "
        f"{verdict(min(r for _, r in pp) >= 1.6)}.",
    ]
    return {"decode-ride-targets": "\n".join(lines)}


def render_mixed_ride():
    """The mixed traffic with the relay riding (the default) and in its own command buffers, two runs."""
    names = {"mixed-none": "one GPU (`-sm none`)", "mixed-tpar": "tpar, the relay riding (default)",
             "mixed-tpar-ride-off": "tpar, the relay in its own command buffers (`TPAR_RELAY_RIDE=0`)"}
    rows, heads = [], []
    for run, log in MIXED_RIDE:
        text = decode_report.read(log)
        st = decode_report.stamp(text)
        heads.append(run_head(run, log, st))
        for label, seed, (answered, asked, tokens, secs, tps) in mixed_runs(text):
            rows.append(f"| {run} | {names[label]} | {answered} of {asked} | {tokens} | {secs:.2f} |")
    head = ("; ".join(heads) + ". `MIXED_MODES=none,tpar,tpar-ride-off` (E), then `tpar-ride-off,tpar` (F) on the same "
            "machine; `MIXED_MODES=none,tpar,tpar-ride-off,tpar,tpar-ride-off` (P2, another machine); "
            "`scripts/gpu-suite.sh env server-mixed`: the traffic of the table above, in the order run.")
    table = "\n".join(["| run | mode | requests answered | tokens | seconds for the 16 rounds |", "|---|---|---|---|---|", *rows])
    return {"server-mixed-ride": head + "\n\n" + table}


def render_move():
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


KERNEL_LINE = re.compile(r"a kernel took ([\d.]+) us on the GPU \(([\d.]+) publishing its values, ([\d.]+) waiting for "
                         r"the sum, ([\d.]+) copying it; mean of (\d+) device parts\), ([\d.]+) us from one kernel's end to "
                         r"the next's start on a device(?: \(median ([\d.]+)\))?")
SPREAD_LINE = re.compile(r"the devices' first values came ([\d.]+) us apart")


def kernel_parts(text):
    """{(where, what): (kernel, publish, wait, copy, gap mean, gap median or None, arrivals spread or None)}: where is
    a llama-bench label (its summary lines) or ("chain-" wiring, bytes) for tpar-bench's relay rows."""
    out, label, chain, size, spread = {}, None, None, None, None
    for line in text.splitlines():
        m = re.match(r"## llama-bench (\S+):", line)
        if m:
            label, chain, spread = m.group(1), None, None
            continue
        m = re.match(r"## .*tpar-bench .*--chain-wiring (\w+) --algo relay", line)
        if m:
            label, chain, spread = None, m.group(1), None
            continue
        if line.startswith("##"):
            label, chain = None, None
            continue
        f = line.split()
        if chain and len(f) == 11 and f[0].isdigit() and f[1] == "relay":
            size, spread = int(f[0]), None
            continue
        m = re.match(r"^\s+(\d+)\s+-\s+no AR\s+([\d.]+)", line)
        if m and chain:
            out[(f"no-ar-{chain}", int(m.group(1)))] = float(m.group(2))
            continue
        m = SPREAD_LINE.search(line)
        if m and (label or chain):
            spread = float(m.group(1))
            continue
        m = KERNEL_LINE.search(line)
        if m and (label or (chain and size)):
            v = [float(x) for x in m.group(1, 2, 3, 4, 6)]
            key = (label, None) if label else (f"chain-{chain}", size)
            out[key] = (*v, float(m.group(7)) if m.group(7) else None, spread)
    return out


def render_parts():
    """Where a boundary's time goes, from the relay kernels' device clock: the chain against tokens, with free
    boundaries' per-segment time beside the token rows."""
    rows, heads = [], []
    for run, log in PARTS:
        text = decode_report.read(log)
        st = decode_report.stamp(text)
        heads.append(run_head(run, log, st))
        parts = kernel_parts(text)
        b = decode_report.benches(text)
        for (where, size), v in parts.items():
            if where.startswith("no-ar-"):
                continue
            k, pub, wait, copy, gap, median, spread = v
            if where.startswith("chain-"):
                name = f"chain, {kib(size)}, " + ("riding" if where == "chain-ride" else "own command buffers")
                free = f"{parts[(f'no-ar-{where[6:]}', size)]:.1f}"
            else:
                tag = re.sub(r"^tpar2-(auto|ride-off)-", "", where)
                if not where.startswith(("tpar2-auto-", "tpar2-ride-off-")) or f"tpar2-skip-{tag}" not in b:
                    continue
                test, n = ("tg128", 128) if tag.startswith("8b") else ("tg64", 64)
                calls = calls_per_token(text, where, n, 3)
                name = {"8b": "8B q8_0", "8b-q4_k_m": "8B Q4_K_M", "70b20": "70B shapes, 20 layers",
                        "tiny32": "32 layers, 256 wide"}.get(tag, tag)
                name += ", " + ("riding" if "-auto-" in where else "own command buffers")
                free = f"{1e6 / b[f'tpar2-skip-{tag}'][test][0] / calls:.1f}"
            rows.append(f"| {run} | {name} | {k:.1f} | {pub:.1f} | {wait:.1f} | {copy:.1f} | {gap:.1f}"
                        f"{f' ({median:.1f})' if median is not None else ''} | {free} | "
                        f"{f'{spread:.1f}' if spread is not None else '-'} |")
    head = ("; ".join(heads) + ". P3: `DECODE_CHAIN_ROWS=relay,relay-ride DECODE_SIZES=4K,16K,64K DECODE_MODELS=8b,70b20,tiny "
            "DECODE_ROWS=auto,ride-off,skip scripts/gpu-suite.sh --tests relay tests decode`; P4: the same with "
            "`DECODE_CHAIN_ROWS=relay-ride DECODE_SIZES=16K DECODE_MODELS=8b,tiny` and `--tests relay,stream`; P6 (the "
            "barrier after the riding kernel narrowed, 973ae7a): `DECODE_CHAIN_ROWS=relay-ride DECODE_SIZES=16K "
            "DECODE_MODELS=8b,8b-q4_k_m,70b20,tiny` and `--tests stream,relay`. The relay "
            "kernel's work group 0 stamps the device clock at its start, its values published, the sum seen and its copy "
            "done; the relay thread reads the stamps back (means over every device part of the run, warm-up included). "
            "\"Between kernels\" is the GPU's time from one relay kernel's end to the next's start on the same device (in "
            "brackets its median, to 0.25 us): a token's segment of ggml's work with its command buffer's end. \"Free "
            "boundaries\" is the token's time with `TPAR_GGML_SKIP_ALLREDUCE=1` over its AllReduces: a segment of ggml's "
            "work with no AllReduce, the host's time between tokens included; for the chain, the invocation's step without the "
            "AllReduce, each step a vkQueueSubmit of its own (the relay's steps go about ten to one). \"Apart\" is how far apart the two devices' "
            "first values came, as the relay thread saw them.")
    table = "\n".join(["| run | where | a relay kernel, us | publishing | waiting for the sum | copying | between kernels "
                       "(median), us | free boundaries: a segment, us | apart, us |", "|---|---|---|---|---|---|---|---|---|",
                       *rows])
    return {"decode-parts": head + "\n\n" + table}

NOW_MODELS = (("8b", "tg128", "Llama-3-8B shapes, Q8_0, tg128"), ("8b-q4_k_m", "tg128", "the same, Q4_K_M"),
              ("8b-d8192", "tg128 @ d8192", "8B Q8_0 at `-d 8192`, tg128"),
              ("70b20", "tg64", "70B shapes (20 layers), Q8_0, tg64"),
              ("tiny32", "tg64", "32 layers x 256 wide, F16, tg64 (the host's token)"))


def now_ratios():
    """{tag: {row: rate against the better of the one-GPU rows}} of the decode rows of run Q1."""
    b = decode_report.benches(decode_report.read(NOW))
    out = {}
    for tag, test, _ in NOW_MODELS:
        one = max(b[f"none-{tag}"][test][0], b[f"none2-{tag}"][test][0])
        out[tag] = {row: b[f"tpar2-{row}-{tag}"][test][0] / one for row in ("auto", "oneshot", "skip")}
    return out


def now_prefill():
    """[(name, tpar pp512 against one GPU's)] from run Q1's move rows."""
    g = decode_report.benches(decode_report.read(GLANCE))
    return [(f"{name}, {tyname}", g[f"move-new-tpar2-{tag}-{ty}"]["pp512"][0] / g[f"move-new-none-{tag}-{ty}"]["pp512"][0])
            for tag, name in MODELS for ty, tyname in TYPES]


def render_now():
    """The decode table of run Q1, tree 5b869da, one run on one machine: OneShot (the path before)
    against the automatic choice (the relay riding), free boundaries, CUDA's ratio from the same run."""
    text = decode_report.read(NOW)
    st = decode_report.stamp(text)
    b = decode_report.benches(text)
    g = decode_report.benches(decode_report.read(GLANCE))
    rows = []
    for tag, test, name in NOW_MODELS:
        one, one2 = b[f"none-{tag}"][test][0], b[f"none2-{tag}"][test][0]
        best = max(one, one2)
        auto, oneshot, skip = (b[f"tpar2-{row}-{tag}"][test] for row in ("auto", "oneshot", "skip"))
        cuda = ""
        if tag in ("8b", "70b20"):
            cuda = f"{g[f'cuda2-nccl-p2p-off-{tag}'][test][0] / g[f'cuda-none-{tag}'][test][0]:.2f}x"
        rows.append(f"| {name} | {one:.1f} / {one2:.1f} | {oneshot[0]:.1f} ± {oneshot[1]:.1f} ({oneshot[0] / best:.2f}x) "
                    f"| {auto[0]:.1f} ± {auto[1]:.1f} (**{auto[0] / best:.2f}x**) | {skip[0]:.1f} ({skip[0] / best:.2f}x) "
                    f"| {cuda} |")
    pp = "; ".join(f"{name} {r:.2f}x" for name, r in now_prefill())
    head = (f"run Q1: {st['n']} × {st['gpu']} (driver {st['driver']}), {st['date']}, tree {st['tree']}, one machine, "
            f"commands back to back: `scripts/gpu-suite.sh env cuda`, `server`, `MOVE_TREES=new ... move`, then "
            f"`DECODE_CHAIN=0 DECODE_ROWS=auto,oneshot,skip ... decode` with `DECODE_MODELS=8b-d8192,tiny` and "
            f"`DECODE_MODELS=8b,8b-q4_k_m,70b20 DECODE_TRACE=1 DECODE_TRACE_ROWS=relay`; raw "
            f"[perf/raw/{NOW}](perf/raw/{NOW}) and [perf/raw/{GLANCE}](perf/raw/{GLANCE}) (CUDA and prefill). llama-bench "
            f"`-fa 1 -r 3`, t/s ± the spread of the three repetitions; each model's rows back to back, one GPU first and "
            f"last, each ratio against the better of the two. OneShot (`TPAR_ALGO=oneshot`) is the decode path before "
            f"the relay; the automatic choice takes the relay, riding in ggml-vulkan's command buffers, for these calls. "
            f"\"Free boundaries\" skips every AllReduce (`TPAR_GGML_SKIP_ALLREDUCE=1`, wrong results, timing only): the "
            f"token's bound. CUDA: ggml-cuda's `-sm tensor` with NCCL through host memory (`NCCL_P2P_DISABLE=1`) against "
            f"ggml-cuda on one GPU, part cuda of the same run.")
    table = "\n".join(["| model | one GPU, first / last (t/s) | OneShot, the path before | tpar now: the relay riding "
                        "(default) | free boundaries | CUDA `-sm tensor` over host memory |", "|---|---|---|---|---|---|",
                        *rows])
    return {"decode-now": head + "\n\n" + table + f"\n\nPrefill in the same run (pp512, tpar against one GPU): {pp}."}



STEP_LINE = re.compile(r"^(\S+) (.+?): ([\d.]+) s, (\d+) tokens, per request t/s ([\d.]+(?:, [\d.]+)*)")


def steps_phases(text):
    """{(label, phase): [(seconds, [per request t/s])], in the order run} from server_steps.py's lines."""
    out = {}
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        if m:
            out.setdefault((m.group(1), m.group(2)), []).append((float(m.group(3)), [float(x) for x in m.group(5).split(", ")]))
    return out


def steps_trace(text, header):
    """(step us, graph_compute us) of the first summary after the section header `header` (a trace's --step all)."""
    sec = text.split(header, 1)[1]
    return (float(re.search(r'"step_us": ([\d.]+)', sec).group(1)),
            float(re.search(r'"graph_compute": ([\d.]+)', sec).group(1)))


def render_steps():
    """A server's decode steps without and with replay keyed by nodes (S4: its first form), and the mixed traffic with it."""
    bt, at = decode_report.read(STEPS_BEFORE), decode_report.read(STEPS_AFTER)
    b, a = steps_phases(bt), steps_phases(at)
    phases = (("1 at once x128", 0, "1 at once x128"), ("2 at once x128", 0, "2 at once x128"),
              ("3 at once x128", 0, "3 at once x128"), ("4 at once x128", 0, "4 at once x128"),
              ("3 at once x256", -1, "3 at once x256, after long prompts"),
              ("2 at once x128", -1, "2 at once x128, the last phase"))
    rows = []
    for ph, k, name in phases:
        cells = []
        for src, label in ((b, "none"), (b, "tpar"), (b, "skip"), (a, "steps-none"), (a, "steps-tpar")):
            sec, rates = src[(label, ph)][k]
            cells.append(f"{sec:.2f} ({rates[0]:.0f})")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    differ = re.findall(r"^reuse 2 at once x128: .*params differ (\d+)", bt[bt.rindex("## reuse:"):], re.M)[-1]
    tb = steps_trace(bt, "## trace: TPAR_TRACE=trace.json TPAR_TRACE_GPU=0 TPAR_TRACE_SKIP=990")
    ta = steps_trace(at, "## llama-server steps-tpar-trace:")
    sb, sa = decode_report.stamp(bt), decode_report.stamp(at)
    mq, mn = ({l: x for l, seed, x in mixed_runs(decode_report.read(f)) if seed == 1} for f in (MIXED_Q1, MIXED_NOW))
    head = (f"Runs S1-S3 (without replay keyed by nodes; tree {sb['tree']}, the first form of `scripts/server_steps.py`, raw "
            f"[perf/raw/{STEPS_BEFORE}](perf/raw/{STEPS_BEFORE})) and S4 (with its first form, then patch 0011, a bundle "
            f"of tree {sa['tree']}; see below; "
            f"`STEPS_MODES=none,tpar scripts/gpu-suite.sh server-steps`, raw [perf/raw/{STEPS_AFTER}](perf/raw/{STEPS_AFTER})), "
            f"{sa['n']} × {sa['gpu']} (driver {sa['driver']}), {sa['date']}, machines of the kind started afresh. llama-server "
            f"on the 8B shapes (Q8_0), 4 slots, `-c 16384`; each phase's requests at once, greedy, 8-word prompts; seconds "
            f"for the phase, in brackets the first request's t/s. Free boundaries: `TPAR_GGML_SKIP_ALLREDUCE=1` (timing "
            f"only).")
    table = "\n".join(["| phase | one GPU, S1 | tpar, S1 | free boundaries, S1 | one GPU, S4 | tpar, S4 (keyed by nodes) |",
                        "|---|---|---|---|---|---|", *rows])
    note = (f"In the last phase the two requests sit in slots 0 and 3. With the default KV cache (a stream a sequence) "
            f"llama.cpp before patch 0016 (these runs) ran such a step as one ubatch a slot and built each ubatch's graph "
            f"anew ({differ} of the phase's builds found the graph before incompatible, S3, `LLAMA_GRAPH_RESULT_DEBUG=2`), "
            f"so every mode paid two passes a step, and `-sm tensor` also recorded every subgraph anew: the host's "

            f"`graph_compute` took {tb[1] / 1000:.1f} ms of a {tb[0] / 1000:.1f} ms step (S2, eight steps traced from "
            f"step 990, host spans only), against {ta[1] / 1000:.2f} ms of {ta[0] / 1000:.1f} ms with a recording found by its subgraph's nodes "
            f"instead of the graph's uid (S4). That patch was withdrawn when a llama-server on lavapipe (two devices of "
            f"one) crashed with it after a phase of long prompts; the cause was lavapipe's, reading a freed buffer "
            f"through a binding the dispatch did not use, and patch 0011 now fixes it: the keying is back as patch 0012, "
            f"its comparison widened (each source's shape, buffers freed since), measured in run T1 below. "
            f"Which slots a phase's requests take is the server's choice as they arrive, so a phase splits in one server "
            f"and not in another: three at once ran {b[('tpar', '3 at once x128')][0][0]:.2f} s in S1's tpar server and "
            f"{a[('steps-tpar', '3 at once x128')][0][0]:.2f} s in S4's (not traced; one GPU "
            f"{a[('steps-none', '3 at once x128')][0][0]:.2f} s there). "
            f"The mixed traffic of the table above, 16 rounds: one GPU {mq['mixed-none'][3]:.2f} s and tpar "
            f"{mq['mixed-tpar'][3]:.2f} s without the patch (run Q1, [raw](perf/raw/{MIXED_Q1})); one GPU "
            f"{mn['mixed-none'][3]:.2f} s and tpar {mn['mixed-tpar'][3]:.2f} s with it (S4's machine, "
            f"[raw](perf/raw/{MIXED_NOW})); every request answered in each.")
    return {"server-steps": head + "\n\n" + table + "\n\n" + note}


def main():
    args = sys.argv[1:]
    if args not in ([], ["--check"], ["--print"]):
        print("usage: llama_report.py [--check | --print]", file=sys.stderr)
        return 2
    try:
        blocks = render()
    except (OSError, KeyError, AttributeError, ValueError, IndexError) as e:
        print(f"llama_report.py: cannot render from the logs: {e!r}", file=sys.stderr)
        return 1
    if args == ["--print"]:
        for name, body in blocks.items():
            print(f"<!-- rendered: {name} -->\n{body}\n<!-- end rendered: {name} -->\n")
        return 0
    bad = decode_report.place(blocks, DOCS, args == ["--check"], "llama_report.py")
    if args == ["--check"] and not bad:
        print("llama_report.py: README.md, PERFORMANCE.md and the history notes hold what the logs say")
    return bad

if __name__ == "__main__":
    sys.exit(main())
