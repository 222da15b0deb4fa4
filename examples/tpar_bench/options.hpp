// tpar-bench's command line: what a run is asked to do (Config), --help, and the parser
// that turns argv into a Config or stops with a usage error (exit 2, nothing on stdout).
#pragma once

#include "bench.hpp"
#include "common/cli.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpar_bench {

// Every algorithm tpar-bench can ask for by name, besides auto: --algo's values, what
// --algo all runs, and what --soak draws from. A new AlgoChoice is added here (its name
// comes from tpar::to_string).
inline constexpr tpar::AlgoChoice algo_choices[] = {tpar::AlgoChoice::oneshot, tpar::AlgoChoice::ring, tpar::AlgoChoice::relay};
// Every wire, besides auto: --wire's values, --wire all, and what --soak draws from.
inline constexpr tpar::Wire wire_choices[] = {tpar::Wire::f32, tpar::Wire::bf16, tpar::Wire::f16};

// How --chain wires each step's dispatch to the AllReduce (chain.hpp).
enum class Wiring { none, streams, semaphores, gated, threads, ride, ride_ordered };

// Exit status of a run whose results checked wrong (0, 1 and 2 as every program: cli.hpp).
inline constexpr int exit_wrong_results = 3;

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
  std::uint32_t depth = 0;  // 0: tpar's default (sized by bytes), or 2 x defer (at most 8) with --defer
  std::uint32_t chain_steps = 0;  // --chain: steps a run (0: not the chain)
  std::size_t chain_work = 0;     // --chain-work: bytes of weights each step reads per device
  std::size_t chain_warm = 0;     // --chain-warm: bytes of them read beside each riding call's kernel
  std::vector<Wiring> chain_wirings{Wiring::streams, Wiring::semaphores};
  bool profile = false;
  std::string profile_out;
  bool wake = false;
  bool submit_cost = false;
  double soak_seconds = 0;  // --soak: run random checked calls this long instead of the table
  double soak_timeout = 0;  // --soak-timeout: each communicator's timeout (0: 60 s on GPUs, 120 s elsewhere)
  std::optional<std::uint64_t> seed;
  bool inject_fault = false;  // --soak: corrupt two values after the first round's calls
  bool dry_run = false;
  std::size_t relay_max = 0;        // --relay-max: Options::relay_max_bytes (0: tpar's default)
  bool relay_scalar_sum = false;    // --relay-sum scalar: Options::relay_scalar_sum
  std::uint32_t relay_peers = 0;    // --relay-peers: the relay's floor, one device and K host-played peers
  tpar::GroupOptions group;
  bool explicit_devices = false;
  std::set<std::string> given;  // the flags on the command line, by their long names

  bool has(const char* flag) const { return given.count(flag) > 0; }
};

inline std::string algo_names() {
  std::string s = "auto";
  for (auto a : algo_choices) s += ", " + std::string(tpar::to_string(a));
  return s + " or all";
}

inline std::string wire_names() {
  std::string s = "auto";
  for (auto w : wire_choices) s += ", " + std::string(tpar::to_string(w));
  return s + " or all";
}

inline void print_help() {
  std::printf(
      "Usage: tpar-bench [options]\n"
      "Times tpar's AllReduce on the selected devices over a range of sizes (back-to-back,\n"
      "in place, f32 payload), then checks every result. Columns: bytes and count of the f32\n"
      "payload, wire, algorithm, sync, time per call (us), algbw = bytes/time and busbw =\n"
      "algbw*2(n-1)/n (GB/s), max error relative to sum|x| on random data, #wrong values on\n"
      "integer data (must be 0), host CPU time per call (us: every thread of the process, less\n"
      "the bench's own wait for the results), with --link the efficiency against the\n"
      "host-staging bound, and relay(us), the CPU per call of the relay's host thread (part of\n"
      "cpu(us), for rows whose calls took the relay). On one device there is nothing to reduce:\n"
      "the time is the call's overhead, and algbw and busbw are not given.\n"
      "%s, 3 a result checked wrong.\n\n"
      "Sizes (bytes, with K, M or G; each a multiple of 4, the f32 payload being whole values):\n"
      "  -b, --min-bytes SIZE  smallest payload (default 16K; 4 with --soak)\n"
      "  -e, --max-bytes SIZE  largest payload (default 256M on GPUs, 4M on lavapipe; 64M on\n"
      "                        GPUs with --soak); -b above -e is a usage error\n"
      "  -f, --factor N        multiply by N between sizes (default 4)\n"
      "  --sizes A,B,...       exactly these sizes (instead of -b, -e and -f)\n"
      "Runs:\n"
      "  -n, --iters N         timed calls per size (default: 200 up to 1M, 40 up to 16M, 10 above)\n"
      "  -w, --warmup N        untimed calls first (default 5)\n"
      "  -r, --repeat R        time R runs of N calls; report each figure's median over the\n"
      "                        runs (default 1)\n"
      "  --wire W              %s (default auto)\n"
      "  --algo A              %s (default auto)\n"
      "  --sync S              auto, native or proxy (default auto)\n"
      "  --link                measure host-staging bandwidth first, and report efficiency\n"
      "  --link-bytes SIZE     bytes per link copy (default 256M)\n"
      "  --link-window SIZE    device->host link copies cycle through SIZE of host memory per\n"
      "                        device (default: all of --link-bytes)\n"
      "  --piece-bytes SIZE    ChunkedRing: fixed f32 payload per pipelined piece, at least %zu;\n"
      "                        a chunk larger than 64 such pieces gets 64 larger ones\n"
      "                        (default: automatic, see --max-pieces)\n"
      "  --max-pieces N        ChunkedRing: at most N (1 to 64) pieces per chunk, each at least\n"
      "                        1 MiB on the wire (default 4)\n"
      "  --lanes N             ChunkedRing: pieces in flight per device, 1 to 64 (default 4)\n"
      "  --downloads Q         ChunkedRing: where downloads run: compute (in the combine's\n"
      "                        batch, the default) or separate (batches of their own on the\n"
      "                        second transfer queue, a second copy engine)\n"
      "  --defer K             timed calls go K to a submission: K calls with\n"
      "                        AllreduceArgs::defer, then flush() (default 1: each call\n"
      "                        submits itself)\n"
      "  --depth D             calls in flight, each with its own staging slots, 1 to 128\n"
      "                        (default: as many as 8 MiB of staging holds, 2 to 128; 2K up\n"
      "                        to 8 with --defer K)\n"
      "  --profile             after each row, one more call with GPU timestamps around every\n"
      "                        batch: per device and queue, batches, busy time and the span\n"
      "  --profile-out PREFIX  also write every batch to PREFIX-<bytes>-<wire>-<algo>.csv\n"
      "  --relay-max SIZE      the largest payload the relay takes (Options::relay_max_bytes,\n"
      "                        default 64K); with --algo relay, larger calls go as auto\n"
      "  --relay-sum MODE      how the relay's host thread sums: vector (default) or scalar\n"
      "                        (one value a step, to compare; Options::relay_scalar_sum)\n"
      "Other modes (instead of the table):\n"
      "  --link-only           only measure the host-staging bandwidth (--link-bytes,\n"
      "                        --link-window, --json)\n"
      "  --wake                only measure how late a host thread blocked in vkWaitSemaphores\n"
      "                        wakes after the GPU signals (what ProxyBridge pays per hop; -n)\n"
      "  --submit-cost         only measure the host CPU of vkQueueSubmit on device 0 by\n"
      "                        batches per submission (-n: batches per row, default 4096)\n"
      "  --soak SECONDS        random calls for SECONDS, every result checked: sizes from -b to\n"
      "                        -e (or --sizes), wires, algorithms, syncs (those --wire, --algo,\n"
      "                        --sync allow; all by default), deferred groups of 1 to --defer\n"
      "                        calls (default 8), on 1 to all of the selected devices; a\n"
      "                        summary line on stdout, progress on stderr every 10 s\n"
      "  --seed N              --soak's seed (default: from the clock; printed either way)\n"
      "  --soak-timeout S      --soak: each communicator's timeout in seconds (default 60 on\n"
      "                        GPUs, 120 elsewhere); short, a stall costs little\n"
      "  --inject-fault        --soak: change one result and one byte beside the calls' spans\n"
      "                        after the first calls: the soak must report both (a test of\n"
      "                        the test)\n"
      "  --chain STEPS         the boundary a decode step pays: per step a dispatch on every\n"
      "                        device, then the AllReduce of its span, the next dispatch\n"
      "                        reading the sum; STEPS steps enqueued, one host wait; per step\n"
      "                        the time, the same chain without the AllReduce, their\n"
      "                        difference, the host's enqueue time and CPU, vkQueueSubmit calls\n"
      "                        and semaphore waits per device; sizes 4K,16K,64K by default\n"
      "                        (-n runs, default 20; --algo; --relay-peers for one device)\n"
      "  --chain-work SIZE     --chain: bytes of weights each dispatch reads per device, as half\n"
      "                        a layer's matmul does (default 0: the dispatch only rewrites the span)\n"
      "  --chain-wiring W      --chain: streams (tpar::Stream, the default with semaphores),\n"
      "                        semaphores (ready and done points), both, threads (streams, a\n"
      "                        thread per device submitting its steps and its part of each\n"
      "                        call, the calls made on the main thread), all (the three), or\n"
      "                        gated (streams, the host waiting for each sum's inputs before\n"
      "                        submitting it: what a queue's wait on another device costs,\n"
      "                        not a way to run), ride (streams, each step's command buffer\n"
      "                        recorded with the relay call before it first, as a site\n"
      "                        submitted again every run: Stream::ride, what ggml-vulkan does\n"
      "                        with replay), streams,ride, ride-ordered (as ride, each step's\n"
      "                        command buffer ending with its barrier and the ride told so:\n"
      "                        no barrier before the relay's kernel, as ggml-vulkan with\n"
      "                        patch 0017) or ride,ride-ordered\n"
      "  --chain-warm SIZE     --chain with ride wirings: each step's command buffer also reads\n"
      "                        the first SIZE of the step's weights beside the riding call's\n"
      "                        kernel, while it waits for the sum (tpar::RideBeside), so they\n"
      "                        are in the GPU's cache when the step reads them (at most\n"
      "                        --chain-work; default 0: nothing beside)\n"
      "  --relay-peers K       the relay's floor: one device (the first selected) with K more\n"
      "                        played by the relay's host thread (1 to 31), every call through\n"
      "                        the relay, sizes 4K to 1M by default; the table as above, busbw\n"
      "                        for n = 1 + K, results checked against the peers' known values\n"
      "  --dry-run             check the flags and open the devices, then stop (exit 0 when a\n"
      "                        run could start)\n"
      "Output:\n"
      "  --csv, --json         machine-readable table on stdout\n"
      "  -q, --quiet           no progress on stderr\n"
      "  -h, --help            this text\n\n"
      "TPAR_SYNC, TPAR_ALGO and TPAR_WIRE apply where --sync, --algo and --wire are not given\n"
      "(a bad value is a usage error). TPAR_LOG=debug|info|warning|error sets what tpar logs.\n\n%s",
      tpar_cli::exit_status_help, wire_names().c_str(), algo_names().c_str(), tpar::wire_block * sizeof(float),
      tpar_cli::device_flags_help());
}

// The long name of a tpar-bench flag (its short form, if any, mapped), or empty.
inline std::string_view long_name(std::string_view a) {
  static constexpr std::pair<std::string_view, std::string_view> shorts[] = {
      {"-b", "--min-bytes"}, {"-e", "--max-bytes"}, {"-f", "--factor"}, {"-n", "--iters"},
      {"-w", "--warmup"},    {"-r", "--repeat"},    {"-q", "--quiet"},  {"-h", "--help"}};
  for (const auto& [s, l] : shorts)
    if (a == s) return l;
  return a;
}

// Each mode but the table takes only the flags that mean something to it (besides the
// device flags, --quiet and --dry-run): a flag it would ignore is a usage error.
inline void check_mode_flags(const Config& c) {
  struct Mode {
    const char* flag;
    std::vector<std::string_view> takes;
  };
  const Mode modes[] = {
      {"--chain", {"--min-bytes", "--max-bytes", "--factor", "--sizes", "--iters", "--warmup", "--repeat", "--wire", "--algo",
                   "--sync", "--depth", "--relay-max", "--relay-sum", "--relay-peers", "--chain-work", "--chain-wiring", "--chain-warm", "--csv",
                   "--json"}},
      {"--link-only", {"--link-bytes", "--link-window", "--json"}},
      {"--wake", {"--iters"}},
      {"--submit-cost", {"--iters"}},
      {"--soak", {"--min-bytes", "--max-bytes", "--sizes", "--wire", "--algo", "--sync", "--defer", "--depth",
                  "--piece-bytes", "--lanes", "--max-pieces", "--downloads", "--seed", "--inject-fault", "--soak-timeout"}},
      {"--relay-peers", {"--min-bytes", "--max-bytes", "--factor", "--sizes", "--iters", "--warmup", "--repeat", "--defer",
                         "--depth", "--relay-max", "--relay-sum", "--profile", "--profile-out", "--csv", "--json"}},
  };
  const std::vector<std::string_view> everywhere = {"--quiet", "--dry-run"};
  const Mode* chosen = nullptr;
  for (const auto& m : modes) {
    if (!c.has(m.flag)) continue;
    if (chosen && std::string_view(chosen->flag) == "--chain" && std::string_view(m.flag) == "--relay-peers") continue;
    if (chosen)
      tpar_cli::usage_error(program, std::string("choose one of --chain, --link-only, --wake, --submit-cost, --soak and --relay-peers (got ") +
                                         chosen->flag + " and " + m.flag + ")");
    chosen = &m;
  }
  for (const auto& f : c.given) {
    if (chosen && f == chosen->flag) continue;
    const bool common = std::find(everywhere.begin(), everywhere.end(), f) != everywhere.end();
    if (chosen && !common && std::find(chosen->takes.begin(), chosen->takes.end(), f) == chosen->takes.end())
      tpar_cli::usage_error(program, std::string(chosen->flag) + " does not take " + f);
    if (!chosen && (f == "--seed" || f == "--inject-fault" || f == "--soak-timeout"))
      tpar_cli::usage_error(program, f + " is for --soak");
    if ((!chosen || std::string_view(chosen->flag) != "--chain") && (f == "--chain-work" || f == "--chain-wiring" || f == "--chain-warm"))
      tpar_cli::usage_error(program, f + " is for --chain");
  }
}

// A payload size: a positive multiple of 4 bytes.
inline std::size_t parse_payload(std::string_view flag, std::string_view text) {
  const std::size_t b = tpar_cli::parse_size(program, flag, text);
  if (b < 4 || b % 4)
    tpar_cli::usage_error(program, std::string(flag) + " " + std::string(text) +
                                       ": sizes are whole f32 values, a multiple of 4 bytes and at least 4");
  return b;
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
      c.min_bytes = parse_payload(a, value());
    } else if (a == "-e" || a == "--max-bytes") {
      c.max_bytes = parse_payload(a, value());
    } else if (a == "-f" || a == "--factor") {
      c.factor = tpar_cli::parse_number<std::size_t>(program, a, value());
      if (c.factor < 2) tpar_cli::usage_error(program, "--factor must be at least 2");
    } else if (a == "--sizes") {
      c.sizes = tpar_cli::parse_list(program, a, value(), [&](std::string_view t) { return parse_payload(a, t); });
    } else if (a == "-n" || a == "--iters") {
      c.iters = tpar_cli::parse_number<int>(program, a, value());
      if (c.iters < 1) tpar_cli::usage_error(program, "--iters must be at least 1");
    } else if (a == "-r" || a == "--repeat") {
      c.repeat = tpar_cli::parse_number<int>(program, a, value());
      if (c.repeat < 1) tpar_cli::usage_error(program, "--repeat must be at least 1");
    } else if (a == "-w" || a == "--warmup") {
      c.warmup = tpar_cli::parse_number<int>(program, a, value());
      if (c.warmup < 0) tpar_cli::usage_error(program, "--warmup must be at least 0");
    } else if (a == "--wire") {
      const std::string_view w = value();
      if (w == "all") c.wires.assign(std::begin(wire_choices), std::end(wire_choices));
      else if (w == "auto") c.wires = {std::nullopt};
      else if (auto p = tpar::parse_wire(w)) c.wires = {*p};
      else tpar_cli::usage_error(program, "--wire takes " + wire_names());
    } else if (a == "--algo") {
      const std::string_view v = value();
      c.algos.clear();
      if (v == "all") c.algos.assign(std::begin(algo_choices), std::end(algo_choices));
      else if (v == "auto") c.algos = {tpar::AlgoChoice::automatic};
      for (auto choice : algo_choices)
        if (v == tpar::to_string(choice)) c.algos = {choice};
      if (c.algos.empty()) tpar_cli::usage_error(program, "--algo takes " + algo_names());
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
      c.link_bytes = parse_payload(a, value());
    } else if (a == "--piece-bytes") {
      c.piece_bytes = tpar_cli::parse_size(program, a, value());
      if (c.piece_bytes < tpar::wire_block * sizeof(float) || c.piece_bytes % 4)
        tpar_cli::usage_error(program, "--piece-bytes takes a multiple of 4 bytes, at least " +
                                           std::to_string(tpar::wire_block * sizeof(float)));
    } else if (a == "--max-pieces") {
      c.max_pieces = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (!tpar::pieces_range.holds(c.max_pieces)) tpar_cli::usage_error(program, "--max-pieces takes " + tpar::pieces_range.text());
    } else if (a == "--link-window") {
      c.link_window = parse_payload(a, value());
    } else if (a == "--lanes") {
      c.lanes = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (!tpar::pieces_range.holds(c.lanes)) tpar_cli::usage_error(program, "--lanes takes " + tpar::pieces_range.text());
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
      if (!tpar::depth_range.holds(c.depth)) tpar_cli::usage_error(program, "--depth takes " + tpar::depth_range.text());
    } else if (a == "--chain") {
      c.chain_steps = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (c.chain_steps < 1 || c.chain_steps > 100000) tpar_cli::usage_error(program, "--chain takes 1 to 100000 steps");
    } else if (a == "--chain-work") {
      c.chain_work = tpar_cli::parse_size(program, a, value());
      if (c.chain_work % 16 || c.chain_work > (std::size_t{1} << 34))
        tpar_cli::usage_error(program, "--chain-work takes a multiple of 16 bytes, at most 16G");
    } else if (a == "--chain-warm") {
      c.chain_warm = tpar_cli::parse_size(program, a, value());
      if (c.chain_warm % 16) tpar_cli::usage_error(program, "--chain-warm takes a multiple of 16 bytes");
    } else if (a == "--chain-wiring") {
      const std::string_view v = value();
      if (v == "streams") c.chain_wirings = {Wiring::streams};
      else if (v == "semaphores") c.chain_wirings = {Wiring::semaphores};
      else if (v == "both") c.chain_wirings = {Wiring::streams, Wiring::semaphores};
      else if (v == "gated") c.chain_wirings = {Wiring::gated};
      else if (v == "threads") c.chain_wirings = {Wiring::threads};
      else if (v == "all") c.chain_wirings = {Wiring::streams, Wiring::semaphores, Wiring::threads};
      else if (v == "ride") c.chain_wirings = {Wiring::ride};
      else if (v == "streams,ride") c.chain_wirings = {Wiring::streams, Wiring::ride};
      else if (v == "ride-ordered") c.chain_wirings = {Wiring::ride_ordered};
      else if (v == "ride,ride-ordered") c.chain_wirings = {Wiring::ride, Wiring::ride_ordered};
      else tpar_cli::usage_error(program, "--chain-wiring takes streams, semaphores, both, threads, all, gated, ride, streams,ride, "
                                          "ride-ordered or ride,ride-ordered");
    } else if (a == "--wake") {
      c.wake = true;
    } else if (a == "--submit-cost") {
      c.submit_cost = true;
    } else if (a == "--soak") {
      c.soak_seconds = tpar_cli::parse_number<double>(program, a, value());
      if (!(c.soak_seconds > 0 && c.soak_seconds <= 7 * 24 * 3600.0))
        tpar_cli::usage_error(program, "--soak takes a number of seconds, more than 0 and at most a week");
    } else if (a == "--soak-timeout") {
      c.soak_timeout = tpar_cli::parse_number<double>(program, a, value());
      if (!(c.soak_timeout >= 0.1 && c.soak_timeout <= 3600.0))
        tpar_cli::usage_error(program, "--soak-timeout takes seconds, 0.1 to 3600");
    } else if (a == "--seed") {
      c.seed = tpar_cli::parse_number<std::uint64_t>(program, a, value());
    } else if (a == "--inject-fault") {
      c.inject_fault = true;
    } else if (a == "--dry-run") {
      c.dry_run = true;
    } else if (a == "--relay-max") {
      c.relay_max = parse_payload(a, value());
      if (c.relay_max > (std::size_t{64} << 20)) tpar_cli::usage_error(program, "--relay-max takes at most 64M");
    } else if (a == "--relay-sum") {
      const std::string v(value());
      if (v != "vector" && v != "scalar") tpar_cli::usage_error(program, "--relay-sum takes vector or scalar");
      c.relay_scalar_sum = v == "scalar";
    } else if (a == "--relay-peers") {
      c.relay_peers = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (c.relay_peers < 1 || c.relay_peers > 31) tpar_cli::usage_error(program, "--relay-peers takes 1 to 31");
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
      continue;  // device flags suit every mode
    } else {
      tpar_cli::usage_error(program, "unknown option " + std::string(a));
    }
    c.given.insert(std::string(long_name(a)));
  }
  check_mode_flags(c);
  if (c.csv && c.json) tpar_cli::usage_error(program, "choose one of --csv and --json");
  if (c.link_only && c.csv) tpar_cli::usage_error(program, "--link-only prints a table or --json, not --csv");
  if (c.link_window && !c.link) tpar_cli::usage_error(program, "--link-window needs --link or --link-only");
  if (!c.sizes.empty() && (c.has("--min-bytes") || c.has("--max-bytes") || c.has("--factor")))
    tpar_cli::usage_error(program, "--sizes gives the sizes: it takes no -b, -e or -f");
  if (c.relay_peers && !c.has("--min-bytes")) c.min_bytes = 4 << 10;
  if (c.chain_warm > c.chain_work)
    tpar_cli::usage_error(program, "--chain-warm " + human_bytes(c.chain_warm) + " is more than --chain-work " +
                                       human_bytes(c.chain_work) + ": it reads the first part of the step's weights");
  if (c.chain_warm && std::none_of(c.chain_wirings.begin(), c.chain_wirings.end(),
                                   [](Wiring w) { return w == Wiring::ride || w == Wiring::ride_ordered; }))
    tpar_cli::usage_error(program, "--chain-warm reads beside a riding call: it needs --chain-wiring ride or ride-ordered");
  if (c.chain_steps && c.sizes.empty() && !c.has("--min-bytes") && !c.has("--max-bytes") && !c.has("--factor"))
    c.sizes = {4 << 10, 16 << 10, 64 << 10};
  if (c.has("--min-bytes") && c.has("--max-bytes") && c.min_bytes > c.max_bytes)
    tpar_cli::usage_error(program, "-b " + human_bytes(c.min_bytes) + " is above -e " + human_bytes(c.max_bytes) +
                                       ": no size lies between them");
  return c;
}

// The sizes the table runs (--sizes, or -b to -e by -f) on devices of this kind; an
// empty range is a usage error.
inline std::vector<std::size_t> table_sizes(const Config& c, bool gpu) {
  if (!c.sizes.empty()) return c.sizes;
  const std::size_t max = c.max_bytes              ? c.max_bytes
                          : c.relay_peers          ? std::size_t{1} << 20
                          : gpu                    ? std::size_t{256} << 20
                                                   : std::size_t{4} << 20;
  if (c.min_bytes > max) {
    if (c.has("--max-bytes"))
      tpar_cli::usage_error(program, "-e " + human_bytes(max) + " is below the smallest size, " + human_bytes(c.min_bytes) +
                                         " by default: give -b as well");
    tpar_cli::usage_error(program, "-b " + human_bytes(c.min_bytes) + " is above the largest size, " + human_bytes(max) +
                                       " by default on " + (gpu ? "GPUs" : "lavapipe") + ": give -e as well");
  }
  std::vector<std::size_t> sizes;
  for (std::size_t b = c.min_bytes; b <= max; b *= c.factor) {
    sizes.push_back(b);
    if (b > max / c.factor) break;  // the next size would pass max (or wrap around)
  }
  return sizes;
}

// Makes --sync, --algo and --wire win over TPAR_SYNC, TPAR_ALGO and TPAR_WIRE (tpar applies
// those over a communicator's options), then reads what is left of the environment: a bad
// value is a usage error before anything runs or prints.
inline tpar::Options apply_environment(const Config& c) {
  if (c.has("--sync")) ::unsetenv("TPAR_SYNC");
  if (c.has("--algo")) ::unsetenv("TPAR_ALGO");
  if (c.has("--wire")) ::unsetenv("TPAR_WIRE");
  return tpar_cli::environment_options(program);
}

}  // namespace tpar_bench
