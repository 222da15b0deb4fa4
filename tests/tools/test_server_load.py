#!/usr/bin/env python3
"""scripts/server_load.py's arithmetic and its judgement of answers, against a small
fake llama-server on loopback: every request answered, one answered short, one that
fails with HTTP 500, and the summary line's sums; the mixed traffic's plan (the same for
one seed, within its ranges) and its run, with rounds past --max-seconds counted as
failed."""
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "server_load.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import server_load  # noqa: E402


def answer(tokens, tps=50.0, text="abc"):
    return {"prompt": "p", "text": text, "tokens": tokens, "tps": tps}


class Arithmetic(unittest.TestCase):
    def test_judge(self):
        done, failed = server_load.judge([answer(128), None, answer(100), answer(128)], 128)
        self.assertEqual(len(done), 2)
        self.assertEqual(failed, [(1, "no answer"), (2, "100 of 128 tokens")])

    def test_round_figures(self):
        self.assertEqual(server_load.round_figures([answer(128), answer(128)], 2.0), (256, 128.0))
        self.assertEqual(server_load.round_figures([], 1.5), (0, 0.0))
        self.assertEqual(server_load.round_figures([answer(10)], 0.0), (10, 0.0))

    def test_summary(self):
        rounds = [{"asked": 8, "wall_s": 4.0, "answers": [answer(128)] * 8},
                  {"asked": 8, "wall_s": 6.0, "answers": [answer(128)] * 7}]
        self.assertEqual(server_load.summary("tpar-4", rounds),
                         "tpar-4: 15 of 16 requests answered, 1 failed; 1920 tokens in 10.00 s, 192.0 t/s in all")


class Mixed(unittest.TestCase):
    def test_plan_is_seeded_and_in_range(self):
        a, b = server_load.mixed_plan(7, 16), server_load.mixed_plan(7, 16)
        self.assertEqual(a, b)
        self.assertNotEqual(a, server_load.mixed_plan(8, 16))
        self.assertEqual(len(a), 16)
        reqs = [q for r in a for q in r]
        self.assertTrue(all(1 <= len(r) <= 10 for r in a))
        self.assertTrue(all(3 <= len(q["prompt"].split()) <= 400 for q in reqs))
        self.assertTrue(all(q["n_predict"] in (8, 32, 64, 128, 256) for q in reqs))
        self.assertEqual({q["temperature"] for q in reqs}, {0.0, 0.7})
        self.assertEqual({q["cache_prompt"] for q in reqs}, {False, True})
        # several shapes at once in most rounds: the point of the traffic
        self.assertGreater(sum(1 for r in a if len(r) > 1), 8)

    def test_bounds_clamp_and_keep_the_rest(self):
        a, b = server_load.mixed_plan(7, 16), server_load.mixed_plan(7, 16, max_words=20, max_predict=32)
        self.assertEqual([len(r) for r in a], [len(r) for r in b])
        for x, y in zip([q for r in a for q in r], [q for r in b for q in r]):
            self.assertEqual(len(y["prompt"].split()), min(len(x["prompt"].split()), 20))
            self.assertEqual(y["n_predict"], min(x["n_predict"], 32))
            self.assertEqual((x["temperature"], x["cache_prompt"], x["seed"]), (y["temperature"], y["cache_prompt"], y["seed"]))

    def test_judge_per_request(self):
        done, failed = server_load.judge([answer(8), answer(31), None], [8, 32, 64])
        self.assertEqual(len(done), 1)
        self.assertEqual(failed, [(1, "31 of 32 tokens"), (2, "no answer")])


class FakeServer(http.server.BaseHTTPRequestHandler):
    plan = []  # per request in arrival order: "ok", "short" or "error"
    lock = threading.Lock()
    n_predict = 16

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with FakeServer.lock:
            what = FakeServer.plan.pop(0) if FakeServer.plan else "ok"
        if what == "error":
            self.send_response(500)
            self.end_headers()
            return
        n = body["n_predict"] if what == "ok" else body["n_predict"] // 2
        out = {"content": "x" * n, "timings": {"predicted_n": n, "predicted_per_second": 100.0}}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class EndToEnd(unittest.TestCase):
    def setUp(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()

    def load(self, slots, plan, *extra):
        FakeServer.plan = list(plan)
        out = os.path.join(self.dir, "out.json")
        p = subprocess.run([sys.executable, SCRIPT, "--port", str(self.server.server_address[1]), "--label", "fake",
                            "--slots", str(slots), "--n-predict", "16", "--out", out, *extra], capture_output=True, text=True)
        return p.returncode, p.stdout

    def test_mixed(self):
        plan = server_load.mixed_plan(3, 4)
        asked = sum(len(r) for r in plan)
        tokens = sum(q["n_predict"] for r in plan for q in r)
        rc, text = self.load(4, [], "--mixed", "4", "--seed", "3")
        self.assertEqual(rc, 0, text)
        self.assertIn(f"fake: {asked} of {asked} requests answered, 0 failed; {tokens} tokens", text)

    def test_mixed_past_max_seconds(self):
        plan = server_load.mixed_plan(3, 4)
        first = len(plan[0])
        rc, text = self.load(4, [], "--mixed", "4", "--seed", "3", "--max-seconds", "0.000001")
        self.assertEqual(rc, 1, text)
        asked = sum(len(r) for r in plan)
        self.assertIn(f"fake: {first} of {asked} requests answered, {asked - first} failed", text)
        self.assertIn("not sent: the run passed --max-seconds", text)

    def test_all_answered(self):
        rc, text = self.load(1, [])
        self.assertEqual(rc, 0, text)
        self.assertIn("fake: 3 of 3 requests answered, 0 failed; 48 tokens", text)

    def test_short_and_failed_count_as_failures(self):
        rc, text = self.load(2, ["short", "error"])
        self.assertEqual(rc, 1, text)
        self.assertIn("fake: 6 of 8 requests answered, 2 failed; 96 tokens", text)
        self.assertIn("8 of 16 tokens", text)
        self.assertIn("no answer (HTTPError", text)

    def test_usage_error(self):
        p = subprocess.run([sys.executable, SCRIPT, "--slots", "2"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
