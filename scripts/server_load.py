#!/usr/bin/env python3
"""Requests to a running llama-server, as its users make them, for scripts/gpu-suite.sh's
parts server and server-mixed, and for the llama.cpp tests.

Uniform load (the default): with --slots 2 or more, two rounds of 2 x SLOTS requests at
once; with one slot, three requests in a row. Each asks for a fixed number of tokens
(--n-predict) by greedy decoding of a fixed prompt.

Mixed traffic (--mixed ROUNDS): the traffic of a server many users share, the same in
every mode for one --seed: each round sends 1 to 10 requests at once, each with a prompt
of 3 to 400 words, n_predict one of 8/32/64/128/256, temperature 0 or 0.7 (a seed of its
own) and cache_prompt on for half of them, so that nearly every step of the server has a
batch of a new shape. --greedy makes every temperature 0 (texts then compare between
one-slot servers); --max-words and --max-predict clamp the prompts and token counts for
slow test devices, every other draw unchanged. --max-seconds bounds the whole run: rounds not started by then count
as failed. --warm first sends, untimed, the requests of warm_plan() (a long prompt alone, then
four short ones at once), so that no mode's first round pays for compiling its GPU
programs (a server's first mode on a machine also fills the driver's shader cache).

Every request ignores the end-of-text token, with no grammar or other constraint that
would make sampling, not the GPUs, the bound (--grammar adds one that keeps a random
model's text to letters, for tests that compare texts, not speed). A request counts as
answered only when it returns every token it asked for; one that fails, times out or
comes back short is a failure of this server's mode, printed as such and counted in the
summary line.

    server_load.py --port P --label NAME --slots N --out FILE.json [--n-predict 128]
    server_load.py --port P --label NAME --mixed 16 [--seed 1] [--warm] --out FILE.json
    server_load.py --compare A.json B.json     # exit 1 unless every text is the same

Per round: requests answered, the tokens of all answers over the round's wall time, and
each request's own tokens/s (the server's timings). The last line sums the rounds:
"LABEL: A of R requests answered, F failed; T tokens in W s, X t/s in all". The answers'
texts go to --out (JSON), so that two servers' can be compared; with several slots the
server batches requests as they happen to arrive and a batch's size picks ggml's kernels,
so texts are compared only between one-slot runs. Needs only Python 3; talks to
127.0.0.1 only. Exit status: 0 every request answered, 1 a request failed or the texts
differ, 2 a usage error.
"""
import argparse
import json
import random
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


WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will more what up out about who "
         "into them some could time only other new these two may then do first any like now my over such our man "
         "me even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long get "
         "here between both life being under never day same another know while last might us great old year off come "
         "since against go came right used take three").split()
GRAMMAR = "root ::= [a-z ]+"


def mixed_plan(seed, rounds, max_words=400, max_predict=256):
    """The requests of --mixed: per round, 1 to 10 at once, the same for one seed. The
    bounds clamp each request's prompt words and tokens (for slow test devices), leaving
    every other draw as it was."""
    rng = random.Random(seed)
    plan = []
    for _ in range(rounds):
        reqs = []
        for _ in range(rng.randint(1, 10)):
            drawn = [rng.choice(WORDS) for _ in range(rng.randint(3, 400))]  # all drawn, so a clamp changes no later draw
            reqs.append({"prompt": " ".join(drawn[:max_words]),
                         "n_predict": min(rng.choice((8, 32, 64, 128, 256)), max_predict),
                         "temperature": rng.choice((0.0, 0.7)),
                         "cache_prompt": rng.random() < 0.5,
                         "seed": rng.randrange(1 << 31)})
        plan.append(reqs)
    return plan


def warm_plan():
    """The untimed requests of --warm: a prompt of 400 words alone, then four prompts of
    5 to 120 words at once, so that prompt and decode batches of several sizes have run
    once. Their words are not the traffic's draws, and no prompt is cached."""
    words = [WORDS[(7 * i) % len(WORDS)] for i in range(400)]
    long_one = [{"prompt": " ".join(words), "n_predict": 8, "temperature": 0.0, "cache_prompt": False, "seed": 0}]
    several = [{"prompt": " ".join(words[:k]), "n_predict": 16, "temperature": 0.0, "cache_prompt": False, "seed": 0}
               for k in (5, 20, 60, 120)]
    return [long_one, several]


def uniform_plan(slots, n_predict):
    """The requests of the uniform load: 2 rounds of 2 x slots at once, or 3 one at a time."""
    count, rounds = (2 * slots, 2) if slots > 1 else (1, 3)
    return [[{"prompt": PROMPTS[i % len(PROMPTS)], "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False,
              "seed": 0} for i in range(count)] for _ in range(rounds)]


def request(port, req, timeout, greedy=False, grammar=False):
    body = {"prompt": req["prompt"], "n_predict": req["n_predict"], "ignore_eos": True,
            "temperature": 0.0 if greedy else req["temperature"], "cache_prompt": req["cache_prompt"],
            "seed": req["seed"]}
    if grammar:
        body["grammar"] = GRAMMAR
    http = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                  headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(http, timeout=timeout) as r:
        out = json.loads(r.read())
    timings = out.get("timings", {})
    return {"prompt": req["prompt"], "text": out.get("content", ""), "tokens": int(timings.get("predicted_n", 0)),
            "tps": float(timings.get("predicted_per_second", 0.0))}


def judge(answers, n_predict):
    """Splits a round's answers (None: no answer) into the answered and the failures: a
    request is answered only with every token it asked for. `n_predict`: one count for
    every request, or a list, one per request."""
    wanted = n_predict if isinstance(n_predict, list) else [n_predict] * len(answers)
    done, failed = [], []
    for i, a in enumerate(answers):
        if a is None:
            failed.append((i, "no answer"))
        elif a["tokens"] != wanted[i]:
            failed.append((i, f"{a['tokens']} of {wanted[i]} tokens"))
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
    plan = (mixed_plan(args.seed, args.mixed, args.max_words, args.max_predict) if args.mixed
            else uniform_plan(args.slots, args.n_predict))
    if args.warm:
        start, answered, sent = time.monotonic(), 0, 0
        for reqs in warm_plan():
            answers = [None] * len(reqs)

            def warm_one(i, reqs=reqs, answers=answers):
                try:
                    answers[i] = request(args.port, reqs[i], args.timeout)
                except Exception:  # noqa: BLE001 (the timed rounds say whether the server serves)
                    pass

            threads = [threading.Thread(target=warm_one, args=(i,)) for i in range(len(reqs))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sent, answered = sent + len(reqs), answered + sum(a is not None for a in answers)
        print(f"{args.label} warm-up: {answered} of {sent} requests answered in {time.monotonic() - start:.2f} s, "
              "not counted", flush=True)
    began = time.monotonic()
    for r, reqs in enumerate(plan):
        count = len(reqs)
        if args.max_seconds and r > 0 and time.monotonic() - began > args.max_seconds:
            print(f"{args.label} round {r + 1}: FAILED {count} request{'s' if count != 1 else ''} not sent: the run passed --max-seconds "
                  f"{args.max_seconds:g}")
            results.append({"round": r + 1, "asked": count, "wall_s": 0.0, "answers": []})
            continue
        answers, errors = [None] * count, [None] * count

        def one(i):
            try:
                answers[i] = request(args.port, reqs[i], args.timeout, args.greedy, args.grammar)
            except Exception as e:  # noqa: BLE001 (a failed request is a finding, reported below)
                errors[i] = f"{type(e).__name__}: {e}"

        start = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        done, failed = judge(answers, [q["n_predict"] for q in reqs])
        tokens, rate = round_figures(done, wall)
        speeds = ", ".join("%.1f" % a["tps"] for a in done)
        how = "at once" if count > 1 else ("(one at a time)" if not args.mixed else "alone")
        print(f"{args.label} round {r + 1}: {len(done)} of {count} requests answered {how}; {tokens} tokens in {wall:.2f} s, "
              f"{rate:.1f} t/s in all; per request {speeds} t/s", flush=True)
        for i, why in failed:
            print(f"{args.label} round {r + 1}: FAILED request {i}: {why}{' (' + errors[i] + ')' if errors[i] else ''}")
        results.append({"round": r + 1, "asked": count, "wall_s": wall, "answers": done})
    print(summary(args.label, results))
    with open(args.out, "w") as f:
        json.dump({"label": args.label, "slots": args.slots, "n_predict": args.n_predict, "mixed": args.mixed,
                   "seed": args.seed, "rounds": results}, f, indent=1)
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
    p.add_argument("--mixed", type=int, default=0, metavar="ROUNDS", help="mixed traffic, this many rounds")
    p.add_argument("--seed", type=int, default=1, help="the mixed traffic's seed (default 1)")
    p.add_argument("--greedy", action="store_true", help="temperature 0 for every request")
    p.add_argument("--grammar", action="store_true", help="keep the text to letters (tests that compare texts)")
    p.add_argument("--max-seconds", type=float, default=0, help="bound on the whole run (default: none)")
    p.add_argument("--warm", action="store_true", help="first send warm_plan()'s requests, untimed")
    p.add_argument("--max-words", type=int, default=400, help="--mixed: at most this many prompt words (tests)")
    p.add_argument("--max-predict", type=int, default=256, help="--mixed: at most this many tokens a request (tests)")
    p.add_argument("--out")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"))
    try:
        args = p.parse_args()
    except SystemExit as e:
        sys.exit(0 if e.code == 0 else 2)
    if args.compare:
        sys.exit(compare(*args.compare))
    if (not args.port or not args.out or args.slots < 1 or args.n_predict < 1 or args.mixed < 0 or args.max_seconds < 0
            or args.max_words < 3 or args.max_predict < 1):
        print("server_load.py: --port, --out, --slots >= 1, --n-predict >= 1, --mixed >= 0, --max-seconds >= 0, "
              "--max-words >= 3 and --max-predict >= 1 are needed (--help)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
