#!/usr/bin/env python3
"""The llama.cpp plot of docs/PERFORMANCE.md: prefill (pp512) and decode (tg128) tokens/s of
Llama-3-8B's shapes (q8_0) per split mode, on two H200s and on one H200 opened as two ggml
devices, read from the llama-bench tables in the raw logs.

    python3 docs/perf/llama_plot.py        # writes docs/perf/llama.svg

Reads docs/perf/raw/llama-8b-h200-x2.txt and docs/perf/raw/decode-h200-final.txt (sections
"### MODE (...)" followed by llama-bench's Markdown rows); needs nothing beyond Python 3.
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
RAW = os.path.join(HERE, "raw")
MODES = [("none", "-sm none (one GPU)"), ("layer", "-sm layer"), ("tensor-ggml", "-sm tensor, ggml's AllReduce"),
         ("tensor-tpar", "-sm tensor, tpar")]
COLORS = {"none": "#7f7f7f", "layer": "#bcbd22", "tensor-ggml": "#1f77b4", "tensor-tpar": "#ff7f0e"}


def read(name, section=None):
    """{mode: {test: t/s}} from the llama-bench tables of one log (of one section of it)."""
    out, mode, inside = {}, None, section is None
    for line in open(os.path.join(RAW, name)):
        if line.startswith("##### "):
            inside = section is None or section in line
        m = re.match(r"### (\S+) \(", line)
        if m:
            mode = m.group(1)
        m = re.search(r"\|\s*(pp512|tg128)\s*\|\s*([\d.]+) ±", line)
        if m and mode and inside:
            out.setdefault(mode, {})[m.group(1)] = float(m.group(2))
    return out


def svg(groups):
    w, h, left, top, bar, gap = 760, 330, 60, 40, 22, 30
    panels = [("pp512", "prefill, pp512 (t/s)"), ("tg128", "decode, tg128 (t/s)")]
    pw = (w - left - 20) / len(panels)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="18" font-size="13" font-weight="bold">llama.cpp, Llama-3-8B shapes (q8_0): tokens/s by split mode</text>']
    for p, (test, title) in enumerate(panels):
        x0 = left + p * pw
        top_value = max(v.get(test, 0) for _, data in groups for v in data.values()) * 1.15
        plot_h = h - top - 70
        parts.append(f'<text x="{x0}" y="{top + 4}" font-weight="bold">{title}</text>')
        x = x0
        for label, data in groups:
            start = x
            for mode, _ in MODES:
                v = data.get(mode, {}).get(test)
                if v is None:
                    continue
                bh = plot_h * v / top_value
                y = top + 14 + plot_h - bh
                parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar}" height="{bh:.1f}" fill="{COLORS[mode]}"/>')
                parts.append(f'<text x="{x + bar / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" font-size="9">{v:.0f}</text>')
                x += bar + 2
            parts.append(f'<text x="{(start + x) / 2:.1f}" y="{top + plot_h + 30}" text-anchor="middle">{label}</text>')
            x += gap
        parts.append(f'<line x1="{x0 - 4}" y1="{top + 14 + plot_h}" x2="{x - gap}" y2="{top + 14 + plot_h}" stroke="black"/>')
    lx = left
    for mode, text in MODES:
        parts.append(f'<rect x="{lx}" y="{h - 22}" width="10" height="10" fill="{COLORS[mode]}"/>')
        parts.append(f'<text x="{lx + 14}" y="{h - 13}">{text}</text>')
        lx += 40 + 6.2 * len(text)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    groups = [("two H200s", read("llama-8b-h200-x2.txt")),
              ("one H200 as 2 devices", read("decode-h200-final.txt", "Llama-3-8B"))]
    with open(os.path.join(HERE, "llama.svg"), "w") as f:
        f.write(svg(groups))
    for label, data in groups:
        print(label, data)


if __name__ == "__main__":
    main()
