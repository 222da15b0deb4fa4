// tpar-bench's command line: what a run is asked to do (Config), --help, and the parser
// that turns argv into a Config or stops with a usage error.
#pragma once

#include "bench.hpp"
#include "common/cli.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpar_bench {

struct Config {
  std::vector<std::size_t> sizes;
  std::size_t min_bytes = 16 << 10, max_bytes = 0, factor = 4;
  int iters = 0, warmup = 5, repeat = 1;
  std::vector<std::optional<tpar::Wire>> wires{std::nullopt};
  std::vector<tpar::AlgoChoice> algos{tpar::AlgoChoice::automatic};
  tpar::SyncChoice sync = tpar::SyncChoice::automatic;
  bool link = false, link_only = false, csv = false, json = false, quiet = false;
  std::size_t link_bytes = 256 << 20;
  std::size_t link_window = 0;
  std::size_t piece_bytes = 0;
  std::uint32_t lanes = 0;
  std::uint32_t max_pieces = 0;
  tpar::DownloadQueue downloads = tpar::DownloadQueue::compute;
  std::uint32_t defer = 1;  // calls per submission in the timed loop
  std::uint32_t depth = 0;  // 0: tpar's default, or 2 x defer (at most 8) with --defer
  bool profile = false;
  std::string profile_out;
  bool wake = false;
  bool submit_cost = false;
  tpar::GroupOptions group;
  bool explicit_devices = false;
};

inline void print_help() {
  std::printf(
      "Usage: tpar-bench [options]\n"
      "Times tpar's AllReduce on the selected devices over a range of sizes (back-to-back,\n"
      "in place, f32 payload), then checks every result. Columns: bytes and count of the f32\n"
      "payload, wire, algorithm, sync, time per call (us), algbw = bytes/time and busbw =\n"
      "algbw*2(n-1)/n (GB/s), max error relative to sum|x| on random data, #wrong values on\n"
      "integer data (must be 0), host CPU time per call (us: every thread of the process, less\n"
      "the bench's own wait for the results), and with --link the\n"
      "efficiency against the host-staging bound.\n\n"
      "Sizes:\n"
      "  -b, --min-bytes SIZE  smallest payload (default 16K)\n"
      "  -e, --max-bytes SIZE  largest payload (default 256M on GPUs, 4M on lavapipe)\n"
      "  -f, --factor N        multiply by N between sizes (default 4)\n"
      "  --sizes A,B,...       exactly these sizes (bytes; K, M, G suffixes)\n"
      "Runs:\n"
      "  -n, --iters N         timed calls per size (default: 200 up to 1M, 40 up to 16M, 10 above)\n"
      "  -w, --warmup N        untimed calls first (default 5)\n"
      "  -r, --repeat R        time R runs of N calls; report each figure's median over the\n"
      "                        runs (default 1)\n"
      "  --wire W              auto, f32, bf16, f16 or all (default auto)\n"
      "  --algo A              auto, ring, oneshot or all (default auto)\n"
      "  --sync S              auto, native or proxy (default auto)\n"
      "  --link                measure host-staging bandwidth first, and report efficiency\n"
      "  --link-only           only measure the host-staging bandwidth\n"
      "  --wake                only measure how late a host thread blocked in vkWaitSemaphores\n"
      "                        wakes after the GPU signals (what ProxyBridge pays per hop)\n"
      "  --submit-cost         only measure the host CPU of vkQueueSubmit on device 0 by\n"
      "                        batches per submission (-n: batches per row, default 4096)\n"
      "  --link-bytes SIZE     bytes per link copy (default 256M)\n"
      "  --link-window SIZE    device->host link copies cycle through SIZE of host memory per\n"
      "                        device (default: all of --link-bytes)\n"
      "  --piece-bytes SIZE    ChunkedRing: fixed f32 payload per pipelined piece (default:\n"
      "                        automatic, see --max-pieces)\n"
      "  --max-pieces N        ChunkedRing: at most N pieces per chunk, each at least 1 MiB on\n"
      "                        the wire (default 4)\n"
      "  --lanes N             ChunkedRing: pieces in flight per device (default 4)\n"
      "  --downloads Q         ChunkedRing: where downloads run: compute (in the combine's\n"
      "                        batch, the default) or separate (batches of their own on the\n"
      "                        second transfer queue, a second copy engine)\n"
      "  --defer K             timed calls go K to a submission: K calls with\n"
      "                        AllreduceArgs::defer, then flush() (default 1: each call\n"
      "                        submits itself)\n"
      "  --depth D             calls in flight, each with its own staging slots (default 2,\n"
      "                        or 2K up to 8 with --defer K)\n"
      "  --profile             after each row, one more call with GPU timestamps around every\n"
      "                        batch: per device and queue, batches, busy time and the span\n"
      "  --profile-out PREFIX  also write every batch to PREFIX-<bytes>-<wire>-<algo>.csv\n"
      "Output:\n"
      "  --csv, --json         machine-readable table on stdout\n"
      "  -q, --quiet           no progress on stderr\n"
      "  -h, --help            this text\n\n"
      "TPAR_SYNC, TPAR_ALGO and TPAR_WIRE apply where the flags are not given.\n\n%s",
      tpar_cli::device_flags_help());
}

inline Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) tpar_cli::usage_error(program, std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    } else if (a == "-b" || a == "--min-bytes") {
      c.min_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "-e" || a == "--max-bytes") {
      c.max_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "-f" || a == "--factor") {
      c.factor = tpar_cli::parse_number<std::size_t>(program, a, value());
      if (c.factor < 2) tpar_cli::usage_error(program, "--factor must be at least 2");
    } else if (a == "--sizes") {
      c.sizes = tpar_cli::parse_list(program, a, value(), [&](std::string_view t) { return tpar_cli::parse_size(program, a, t); });
    } else if (a == "-n" || a == "--iters") {
      c.iters = tpar_cli::parse_number<int>(program, a, value());
      if (c.iters < 1) tpar_cli::usage_error(program, "--iters must be at least 1");
    } else if (a == "-r" || a == "--repeat") {
      c.repeat = tpar_cli::parse_number<int>(program, a, value());
      if (c.repeat < 1) tpar_cli::usage_error(program, "--repeat must be at least 1");
    } else if (a == "-w" || a == "--warmup") {
      c.warmup = tpar_cli::parse_number<int>(program, a, value());
    } else if (a == "--wire") {
      const std::string_view w = value();
      if (w == "all") c.wires = {tpar::Wire::f32, tpar::Wire::bf16, tpar::Wire::f16};
      else if (w == "auto") c.wires = {std::nullopt};
      else if (auto p = tpar::parse_wire(w)) c.wires = {*p};
      else tpar_cli::usage_error(program, "--wire takes auto, f32, bf16, f16 or all");
    } else if (a == "--algo") {
      const std::string_view v = value();
      if (v == "all") c.algos = {tpar::AlgoChoice::oneshot, tpar::AlgoChoice::ring};
      else if (v == "auto") c.algos = {tpar::AlgoChoice::automatic};
      else if (v == "ring") c.algos = {tpar::AlgoChoice::ring};
      else if (v == "oneshot") c.algos = {tpar::AlgoChoice::oneshot};
      else tpar_cli::usage_error(program, "--algo takes auto, ring, oneshot or all");
    } else if (a == "--sync") {
      const std::string_view v = value();
      if (v == "auto") c.sync = tpar::SyncChoice::automatic;
      else if (v == "native") c.sync = tpar::SyncChoice::native;
      else if (v == "proxy") c.sync = tpar::SyncChoice::proxy;
      else tpar_cli::usage_error(program, "--sync takes auto, native or proxy");
    } else if (a == "--link") {
      c.link = true;
    } else if (a == "--link-only") {
      c.link = c.link_only = true;
    } else if (a == "--link-bytes") {
      c.link_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "--piece-bytes") {
      c.piece_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "--max-pieces") {
      c.max_pieces = tpar_cli::parse_number<std::uint32_t>(program, a, value());
    } else if (a == "--link-window") {
      c.link_window = tpar_cli::parse_size(program, a, value());
    } else if (a == "--lanes") {
      c.lanes = tpar_cli::parse_number<std::uint32_t>(program, a, value());
    } else if (a == "--downloads") {
      const std::string_view v = value();
      if (v == "compute") c.downloads = tpar::DownloadQueue::compute;
      else if (v == "separate") c.downloads = tpar::DownloadQueue::separate;
      else tpar_cli::usage_error(program, "--downloads takes compute or separate");
    } else if (a == "--defer") {
      c.defer = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (c.defer < 1 || c.defer > 8) tpar_cli::usage_error(program, "--defer takes 1 to 8 calls per submission");
    } else if (a == "--depth") {
      c.depth = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (c.depth < 1 || c.depth > 8) tpar_cli::usage_error(program, "--depth takes 1 to 8");
    } else if (a == "--wake") {
      c.wake = true;
    } else if (a == "--submit-cost") {
      c.submit_cost = true;
    } else if (a == "--profile") {
      c.profile = true;
    } else if (a == "--profile-out") {
      c.profile = true;
      c.profile_out = std::string(value());
    } else if (a == "--csv") {
      c.csv = true;
    } else if (a == "--json") {
      c.json = true;
    } else if (a == "-q" || a == "--quiet") {
      c.quiet = true;
    } else if (tpar_cli::parse_device_flag(program, argc, argv, i, c.group)) {
      c.explicit_devices = true;
    } else {
      tpar_cli::usage_error(program, "unknown option " + std::string(a));
    }
  }
  if (c.csv && c.json) tpar_cli::usage_error(program, "choose one of --csv and --json");
  if (c.link_window && !c.link) tpar_cli::usage_error(program, "--link-window needs --link or --link-only");
  return c;
}

}  // namespace tpar_bench
