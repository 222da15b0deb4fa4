#!/usr/bin/env python3
"""Requests to a running llama-server, as its users make them, for scripts/gpu-suite.sh's
part server: with --slots 2 or more, two rounds of 2 x SLOTS requests at once; with one
slot, three requests in a row. Each request asks for a fixed number of tokens
(--n-predict, the end-of-text token ignored) by greedy decoding of a fixed prompt, with
no grammar or other constraint that would make sampling, not the GPUs, the bound. A
request counts as answered only when it returns every token it asked for; one that
fails, times out or comes back short is a failure of this server's mode, printed as
such and counted in the summary line.

    server_load.py --port P --label NAME --slots N --out FILE.json [--n-predict 128]
    server_load.py --compare A.json B.json     # exit 1 unless every text is the same

Per round: requests answered, the tokens of all answers over the round's wall time, and
each request's own tokens/s (the server's timings). The last line sums the rounds:
"LABEL: A of R requests answered, F failed; T tokens in W s, X t/s in all". The answers'
texts go to --out (JSON), so that two servers' can be compared; with several slots the
server batches requests as they happen to arrive and a batch's size picks ggml's kernels,
so texts are compared only between one-slot runs. Needs only Python 3. Exit status: 0
every request answered, 1 a request failed or the texts differ, 2 a usage error.
"""
import argparse
import json
import sys
import threading
import time
import urllib.request

PROMPTS = [
    "The quick brown fox jumps over the lazy dog, and then",
    "Tensor parallelism splits every layer of a model across",
    "A decode step of a large language model reads",
    "Host memory is what every Vulkan device can see, so",
    "Once upon a time, in a data center far away,",
    "The semaphore hop between two devices costs",
    "To sum partial results across GPUs, the host",
    "Every token of a conversation pays for",
]


def request(port, prompt, n_predict, timeout):
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read())
    timings = out.get("timings", {})
    return {"prompt": prompt, "text": out.get("content", ""), "tokens": int(timings.get("predicted_n", 0)),
            "tps": float(timings.get("predicted_per_second", 0.0))}


def judge(answers, n_predict):
    """Splits a round's answers (None: no answer) into the answered and the failures: a
    request is answered only with every token it asked for."""
    done, failed = [], []
    for i, a in enumerate(answers):
        if a is None:
            failed.append((i, "no answer"))
        elif a["tokens"] != n_predict:
            failed.append((i, f"{a['tokens']} of {n_predict} tokens"))
        else:
            done.append(a)
    return done, failed


def round_figures(done, wall):
    """Tokens of the answered requests, and their rate over the round's wall time."""
    tokens = sum(a["tokens"] for a in done)
    return tokens, (tokens / wall if wall > 0 else 0.0)


def summary(label, rounds):
    """The last line: every round's requests, answers, failures, tokens and wall time summed."""
    asked = sum(r["asked"] for r in rounds)
    answered = sum(len(r["answers"]) for r in rounds)
    tokens = sum(sum(a["tokens"] for a in r["answers"]) for r in rounds)
    wall = sum(r["wall_s"] for r in rounds)
    rate = tokens / wall if wall > 0 else 0.0
    return (f"{label}: {answered} of {asked} requests answered, {asked - answered} failed; "
            f"{tokens} tokens in {wall:.2f} s, {rate:.1f} t/s in all")


def run(args):
    results = []
    rounds = [(r, 2 * args.slots) for r in range(2)] if args.slots > 1 else [(r, 1) for r in range(3)]
    for r, count in rounds:
        answers, errors = [None] * count, [None] * count

        def one(i):
            try:
                answers[i] = request(args.port, PROMPTS[i % len(PROMPTS)], args.n_predict, args.timeout)
            except Exception as e:  # noqa: BLE001 (a failed request is a finding, reported below)
                errors[i] = f"{type(e).__name__}: {e}"

        start = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        done, failed = judge(answers, args.n_predict)
        tokens, rate = round_figures(done, wall)
        speeds = ", ".join("%.1f" % a["tps"] for a in done)
        how = "at once" if count > 1 else "(one at a time)"
        print(f"{args.label} round {r + 1}: {len(done)} of {count} requests answered {how}; {tokens} tokens in {wall:.2f} s, "
              f"{rate:.1f} t/s in all; per request {speeds} t/s")
        for i, why in failed:
            print(f"{args.label} round {r + 1}: FAILED request {i}: {why}{' (' + errors[i] + ')' if errors[i] else ''}")
        results.append({"round": r + 1, "asked": count, "wall_s": wall, "answers": done})
    print(summary(args.label, results))
    with open(args.out, "w") as f:
        json.dump({"label": args.label, "slots": args.slots, "n_predict": args.n_predict, "rounds": results}, f, indent=1)
    return 0 if all(len(r["answers"]) == r["asked"] for r in results) else 1


def compare(a_path, b_path):
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    texts = lambda d: [(x["prompt"], x["text"]) for r in d["rounds"] for x in sorted(r["answers"], key=lambda x: x["prompt"])]
    ta, tb = texts(a), texts(b)
    same = sum(1 for x, y in zip(ta, tb) if x == y)
    ok = len(ta) == len(tb) and same == len(ta) and all(t for _, t in ta)
    print(f"compare {a['label']} and {b['label']}: {same} of {max(len(ta), len(tb))} texts the same"
          f"{'' if ok else ' (DIFFER)'}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(prog="server_load.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--port", type=int)
    p.add_argument("--label", default="server")
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--n-predict", type=int, default=128)
    p.add_argument("--timeout", type=float, default=600, help="seconds a request may take (default 600)")
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    try:
        args = p.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    if args.compare:
        sys.exit(compare(*args.compare))
    if not args.port or not args.out or args.slots < 1 or args.n_predict < 1:
        print("server_load.py: --port, --out, --slots >= 1 and --n-predict >= 1 are needed (--help)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
