#!/usr/bin/env python3
"""Requests at once to a llama-server, each pinned to a slot (id_slot), for the slots
case of tests/llama/case.sh: round after round, the even slots then the odd ones and then
every slot, each request a different length, so that a step's busy slots are not adjacent.
Exits 0 when every request of every round was answered with text, 1 otherwise (each
failure named on stderr), 2 on a usage error.

    slots_load.py --port PORT --slots 16 --rounds 3 [--max-predict 96] [--timeout 300]
"""
import argparse
import json
import sys
import threading
import urllib.error
import urllib.request


def request(port, slot, n_predict, timeout, results, key):
    body = json.dumps({
        "prompt": "Slot %d:" % slot,
        "n_predict": n_predict,
        "temperature": 0,
        "ignore_eos": True,
        "cache_prompt": False,
        "id_slot": slot,
        "grammar": "root ::= [a-z ]+",  # the random model's text stays valid UTF-8
    }).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port, data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            reply = json.loads(r.read())
        results[key] = (bool(reply.get("content")), reply.get("tokens_predicted", 0), "")
    except (urllib.error.URLError, OSError, ValueError) as e:
        results[key] = (False, 0, str(e))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--slots", type=int, required=True, help="the server's -np")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-predict", type=int, default=96, help="the longest request, in tokens (the shortest is 4)")
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()
    if a.slots < 2 or a.rounds < 1 or a.max_predict < 4:
        p.error("--slots takes 2 or more, --rounds 1 or more, --max-predict 4 or more")
    patterns = [range(0, a.slots, 2), range(1, a.slots, 2), range(a.slots)]
    results, answered, total = {}, 0, 0
    for r in range(a.rounds):
        slots = list(patterns[r % len(patterns)])
        threads = []
        for i, slot in enumerate(slots):
            n_predict = 4 + (13 * (i + r)) % (a.max_predict - 3)  # 4 to max_predict tokens
            t = threading.Thread(target=request, args=(a.port, slot, n_predict, a.timeout, results, (r, slot)))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        ok = sum(1 for s in slots if results[(r, s)][0])
        print("round %d: slots %s: %d of %d answered" % (r + 1, ",".join(map(str, slots)), ok, len(slots)))
        answered += ok
        total += len(slots)
        for s in slots:
            good, _, why = results[(r, s)]
            if not good:
                print("slots_load: round %d, slot %d: no answer %s" % (r + 1, s, why), file=sys.stderr)
    print("%d of %d requests answered" % (answered, total))
    return 0 if answered == total else 1


if __name__ == "__main__":
    sys.exit(main())
