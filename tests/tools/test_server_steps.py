#!/usr/bin/env python3
"""scripts/server_steps.py against a small fake llama-server on loopback: every phase runs
and prints its line, requests that come back short fail the run (exit 1), a usage error
exits 2, and with --log each phase counts only the graph reuse lines the server wrote
during it (the fake writes them as llama.cpp does at LLAMA_GRAPH_RESULT_DEBUG=2), and the
renderer of PERFORMANCE.md (docs/perf/llama_report.py) reads the lines it prints."""
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "server_steps.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
sys.path.insert(0, os.path.join(HERE, "..", "..", "docs", "perf"))
import server_steps  # noqa: E402
import llama_report  # noqa: E402


class FakeServer(http.server.BaseHTTPRequestHandler):
    log_path = None
    short = False
    lock = threading.Lock()
    requests = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body["n_predict"]
        with FakeServer.lock:
            FakeServer.requests += 1
            if FakeServer.log_path:
                # per request: one reused graph and one built anew (input 2 failing)
                with open(FakeServer.log_path, "a") as f:
                    f.write("0.01 D can_reuse: checking compatibility of 3 inputs:\n")
                    f.write("0.01 D placeholder: can_reuse = 1\n0.01 D placeholder: can_reuse = 1\n"
                            "0.01 D placeholder: can_reuse = 0\n")
                    f.write("0.01 D can_reuse: cannot reuse graph due to incompatible graph parameters\n")
        got = n - 1 if FakeServer.short else n
        out = json.dumps({"content": "x", "tokens_predicted": got, "timings": {"predicted_per_second": 100.0}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class Steps(unittest.TestCase):
    def setUp(self):
        FakeServer.log_path, FakeServer.short, FakeServer.requests = None, False, 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()
        self.dir.cleanup()

    def steps(self, *extra):
        return subprocess.run([sys.executable, SCRIPT, "--port", str(self.server.server_address[1]), "--label", "fake",
                               *extra], capture_output=True, text=True, timeout=60)

    def test_every_phase_prints_its_line(self):
        p = self.steps()
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), len(server_steps.PHASES))
        self.assertEqual(FakeServer.requests, sum(len(reqs) for _, reqs in server_steps.PHASES))
        three = [line for line in lines if line.startswith("fake 3 at once x256:")]
        self.assertEqual(len(three), 1)
        self.assertRegex(three[0], r"^fake 3 at once x256: [\d.]+ s, 768 tokens, per request t/s 100.0, 100.0, 100.0$")
        # what PERFORMANCE.md's renderer reads: both "2 at once x128" phases, in the order run
        phases = llama_report.steps_phases(p.stdout)
        self.assertEqual(len(phases[("fake", "2 at once x128")]), 2)
        self.assertEqual(phases[("fake", "4 at once x128")][0][1], [100.0] * 4)

    def test_short_answers_fail_the_run(self):
        FakeServer.short = True
        p = self.steps()
        self.assertEqual(p.returncode, 1)
        self.assertIn("1 short or failed", p.stdout)

    def test_reuse_counted_per_phase(self):
        log = os.path.join(self.dir.name, "server.err")
        with open(log, "w") as f:
            f.write("0.00 D can_reuse: cannot reuse graph due to incompatible graph parameters\n" * 5)  # before the run
        FakeServer.log_path = log
        p = self.steps("--log", log)
        self.assertEqual(p.returncode, 0, p.stderr)
        for name, reqs in server_steps.PHASES:
            k = len(reqs)
            line = next(x for x in p.stdout.splitlines() if x.startswith(f"fake {name}:"))
            m = re.search(r"graph reuse checks (\d+), parameters differed (\d+), inputs failed by index (.*)$", line)
            self.assertIsNotNone(m, line)
            self.assertEqual((int(m.group(1)), int(m.group(2)), m.group(3)), (k, k, f"{{2: {k}}}"), line)

    def test_usage_error(self):
        p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        p = subprocess.run([sys.executable, SCRIPT, "--port", "1", "--timeout", "0"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 2)
        p = subprocess.run([sys.executable, SCRIPT, "--bogus"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    unittest.main()
