#!/usr/bin/env python3
"""A running llama-server's decode steps phase by phase, for scripts/gpu-suite.sh's part
server-steps: which batches a server makes slower, and whether llama.cpp reused its graph.

    server_steps.py --port PORT --label LABEL [--log SERVER_LOG] [--timeout S]

Phases, one after the other (greedy, the end-of-text token ignored, prompts of 8 words
unless said): a warm-up; 1, 2, 3 and 4 requests of 128 tokens at once; one request with
a prompt of 400 words; 3 requests at once; 4 requests with prompts of 400 words and 8
tokens; 3 requests of 256 tokens at once; 2 requests of 128 tokens at once. The server
gives each request the slot it chooses: the last phase's two requests come after a history
of slots used in turn, as a server's users make it. Each phase prints its wall time, tokens
and every request's own rate. With --log (the server's log, run with -v and
LLAMA_GRAPH_RESULT_DEBUG=2) each phase also counts, from the lines the server wrote during
it, llama.cpp's graph reuse checks, the builds whose parameters differed from the graph
before (no reuse: a new graph) and the inputs that failed a check, by their index.

Exit status: 0 every request answered in full, 1 a request failed or came back short, 2 a
usage error.
"""
import argparse
import collections
import json
import re
import sys
import threading
import time
import urllib.request

WORDS = ("the of and to in is was that for it with as his on be at by had are but from or have an they which one you "
         "were all her she there would their we him been has when who will no more if out so said what up its about into "
         "than them can only other new some could time these two may then do first any my now such like our over man me "
         "even most made after also did many before must through back years where much your way well down should because "
         "each just those people how too little state good very make world still own see men work long get here between "
         "both life being under never day same another know while last might us great old year off come since against go "
         "came right used take three").split()

# (name, [(prompt words, tokens)] one entry a request sent at once)
PHASES = [("warm", [(8, 16)])] + [(f"{k} at once x128", [(8, 128)] * k) for k in (1, 2, 3, 4)] + [
    ("long prompt", [(400, 8)]),
    ("3 at once x128 after a long prompt", [(8, 128)] * 3),
    ("4 long prompts", [(400, 8)] * 4),
    ("3 at once x256", [(8, 256)] * 3),
    ("2 at once x128", [(8, 128)] * 2),
]


def prompt(n, seed):
    return " ".join(WORDS[(i * 7 + seed * 13) % len(WORDS)] for i in range(n))


class LogReader:
    """The server log's lines written since the last look."""

    def __init__(self, path):
        self.path, self.pos = path, 0
        if path:
            with open(path, errors="replace") as f:
                f.seek(0, 2)
                self.pos = f.tell()

    def report(self):
        if not self.path:
            return ""
        with open(self.path, errors="replace") as f:
            f.seek(self.pos)
            text = f.read()
            self.pos = f.tell()
        checks = differ = 0
        fails, idx = collections.Counter(), -1
        for line in text.splitlines():
            if "cannot reuse graph due to incompatible graph parameters" in line:
                differ += 1
            elif "checking compatibility of" in line:
                checks, idx = checks + 1, 0
            else:
                m = re.search(r"can_reuse = (\d)", line)
                if m and idx >= 0:
                    if m.group(1) == "0":
                        fails[idx] += 1
                    idx += 1
        return f" | graph reuse checks {checks}, parameters differed {differ}, inputs failed by index {dict(fails)}"


def run(args):
    log = LogReader(args.log)
    seed, failed = 0, 0
    for name, reqs in PHASES:
        res = [None] * len(reqs)

        def ask(k, words, n):
            body = json.dumps({"prompt": prompt(words, seed + k), "n_predict": n, "temperature": 0, "ignore_eos": True,
                               "cache_prompt": False}).encode()
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{args.port}/completion", body,
                                             {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=args.timeout) as r:
                    d = json.loads(r.read())
                res[k] = (d.get("tokens_predicted") or 0, n, d.get("timings", {}).get("predicted_per_second") or 0.0)
            except (OSError, ValueError) as e:
                res[k] = (0, n, 0.0)
                print(f"{args.label} {name}: request {k + 1} failed: {e}", file=sys.stderr)

        threads = [threading.Thread(target=ask, args=(k, w, n)) for k, (w, n) in enumerate(reqs)]
        start = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - start
        short = sum(1 for got, want, _ in res if got != want)
        failed += short
        print(f"{args.label} {name}: {wall:.2f} s, {sum(r[0] for r in res)} tokens, per request t/s "
              + ", ".join(f"{r[2]:.1f}" for r in res) + (f", {short} short or failed" if short else "") + log.report(),
              flush=True)
        seed += 10
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(prog="server_steps.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--port", type=int)
    p.add_argument("--label", default="server")
    p.add_argument("--log", help="the server's log (-v, LLAMA_GRAPH_RESULT_DEBUG=2): count graph reuse per phase")
    p.add_argument("--timeout", type=float, default=300, help="seconds a request may take (default 300)")
    try:
        args = p.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    if not args.port or args.timeout <= 0:
        print("server_steps.py: --port and a positive --timeout are needed (--help)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
