#!/usr/bin/env python3
"""Requests to a running llama-server, as its users make them, for scripts/gpu-suite.sh's
part server: with --slots 4 (or more), two rounds of 2 x SLOTS requests at once; with one
slot, three requests in a row. Every request must be answered; per request its tokens/s
(the server's timings), per round the tokens of all answers over the round's wall time.
The answers' texts go to --out (JSON), so that two servers' can be compared.

    server_load.py --port P --label NAME --slots N --out FILE.json
    server_load.py --compare A.json B.json     # exit 1 unless every text is the same

Greedy decoding (temperature 0) of a fixed prompt per request; a grammar keeps a
random-weight model's text to letters and spaces (the server rejects output that is not
valid UTF-8). Needs only Python 3. Exit status: 0 success, 1 a request failed or the texts
differ, 2 a usage error.
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


def request(port, prompt, n_predict):
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                       "cache_prompt": False, "grammar": "root ::= [a-z ]+"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    timings = out.get("timings", {})
    return {"prompt": prompt, "text": out.get("content", ""), "tokens": int(timings.get("predicted_n", 0)),
            "tps": float(timings.get("predicted_per_second", 0.0))}


def run(args):
    results, failures = [], 0
    rounds = [(r, 2 * args.slots) for r in range(2)] if args.slots > 1 else [(r, 1) for r in range(3)]
    for r, count in rounds:
        answers, errors = [None] * count, []

        def one(i):
            try:
                answers[i] = request(args.port, PROMPTS[i % len(PROMPTS)], args.n_predict)
            except Exception as e:  # noqa: BLE001 (a failed request is a finding, reported below)
                errors.append(f"request {i}: {e}")

        start = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        done = [a for a in answers if a]
        tokens = sum(a["tokens"] for a in done)
        failures += len(errors)
        speeds = ", ".join("%.1f" % a["tps"] for a in done)
        how = "at once" if count > 1 else "(one at a time)"
        print(f"{args.label} round {r + 1}: {len(done)} of {count} requests answered {how}; {tokens} tokens in {wall:.2f} s, "
              f"{tokens / wall:.1f} t/s in all; per request {speeds} t/s")
        for e in errors:
            print(f"{args.label} round {r + 1}: FAILED {e}")
        results.append({"round": r + 1, "wall_s": wall, "answers": done})
    with open(args.out, "w") as f:
        json.dump({"label": args.label, "slots": args.slots, "rounds": results}, f, indent=1)
    return 1 if failures else 0


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
    p.add_argument("--n-predict", type=int, default=64)
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    try:
        args = p.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    if args.compare:
        sys.exit(compare(*args.compare))
    if not args.port or not args.out or args.slots < 1:
        print("server_load.py: --port, --out and --slots >= 1 are needed (--help)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
