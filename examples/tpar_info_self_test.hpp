// tpar-info --self-test: every gate and self-test on the user's devices, each transport
// timed at the sizes decode and prefill use, and the choice tpar makes at each size, as a
// table (or JSON) a user sends with a bug report.
#pragma once

#include <tpar/tpar.hpp>

#include "common/cli.hpp"
#include "common/vk_buffer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpar_info {

inline constexpr int exit_wrong_results = 3;
inline constexpr std::size_t report_sizes[] = {std::size_t{4} << 10, std::size_t{16} << 10, std::size_t{1} << 20};

struct TransportRow {
  std::string transport;  // oneshot, relay, ring
  std::size_t bytes = 0;
  std::string verdict;    // ok, wrong, error, refused, unavailable
  std::string reason;
  std::size_t calls = 0;
  double median_us = 0, p90_us = 0, min_us = 0;
};

struct ChoiceRow {
  std::size_t bytes = 0;
  std::string plain, streamed;
};

struct Report {
  tpar::SyncGate sync_gate;
  std::string sync_choice, sync_reason, native_test;  // native_test: passed / failed: why / not run: why
  std::string staging;
  tpar::RelayGate relay_gate;
  tpar::RelaySelfTest relay_test;   // with the relay asked for (every device tested in the relay's form there)
  std::string relay_test_error;     // where the relay could not even be asked for
  bool relay_automatic = false;     // what a communicator's streamed calls get
  std::vector<TransportRow> rows;
  std::vector<ChoiceRow> choices;
  std::size_t iters = 0;
  bool wrong = false, failed = false;
};

inline std::string size_text(std::size_t bytes) {
  return bytes >= (std::size_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB";
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// `iters` calls of `bytes` through `comm`, each waited for, every value checked on every
// device: small integers, so every order of summation gives the same f32.
inline TransportRow measure(tpar::AnyCommunicator& comm, tpar::DeviceGroup& group, std::string transport, std::size_t bytes,
                            std::size_t iters) {
  TransportRow row;
  row.transport = std::move(transport);
  row.bytes = bytes;
  const std::size_t n = group.size(), count = bytes / sizeof(float);
  std::vector<std::unique_ptr<tpar_example::Buffer>> buffers;
  std::vector<tpar::BufferSpan> spans;
  for (std::size_t d = 0; d < n; ++d) {
    buffers.push_back(std::make_unique<tpar_example::Buffer>(group[d], bytes, true));
    spans.push_back({buffers.back()->buffer, 0, count, buffers.back()->size});
  }
  const auto input = [](std::size_t d, std::size_t i) { return static_cast<float>(i % 7 + d + 1); };
  const auto expect = [&](std::size_t i) { return static_cast<float>(n * (i % 7) + n * (n + 1) / 2); };
  std::vector<double> us;
  const std::size_t warmup = 3;
  try {
    for (std::size_t k = 0; k < warmup + iters; ++k) {
      for (std::size_t d = 0; d < n; ++d) {
        auto* v = static_cast<float*>(buffers[d]->mapped);
        for (std::size_t i = 0; i < count; ++i) v[i] = input(d, i);
      }
      const auto t0 = std::chrono::steady_clock::now();
      comm.allreduce(spans).wait();
      const auto t1 = std::chrono::steady_clock::now();
      if (k >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      if (k == 0 && comm.last_call().algorithm != row.transport)
        row.reason = "calls of this size take " + std::string(comm.last_call().algorithm);
      for (std::size_t d = 0; d < n && row.verdict.empty(); ++d) {
        const auto* v = static_cast<const float*>(buffers[d]->mapped);
        for (std::size_t i = 0; i < count; ++i)
          if (v[i] != expect(i)) {
            row.verdict = "wrong";
            row.reason = "call " + std::to_string(k + 1) + ": value " + std::to_string(i) + " on device " + std::to_string(d) +
                         " is " + std::to_string(v[i]) + ", not " + std::to_string(expect(i));
            break;
          }
      }
      if (!row.verdict.empty()) break;
    }
  } catch (const tpar::Error& e) {
    row.verdict = "error";
    row.reason = e.what();
  }
  row.calls = us.size();
  row.median_us = percentile(us, 0.5);
  row.p90_us = percentile(us, 0.9);
  row.min_us = us.empty() ? 0 : *std::min_element(us.begin(), us.end());
  if (row.verdict.empty()) row.verdict = "ok";
  return row;
}

inline Report run_self_test(tpar::DeviceGroup& group, const tpar::Options& defaults, std::size_t iters) {
  Report r;
  r.iters = iters;
  const std::size_t n = group.size();
  r.sync_gate = group.sync_gate();
  r.relay_gate = group.relay_gate();
  try {
    tpar::HostImport::check_support(group);
    r.staging = "HostImport: every device imports host memory";
  } catch (const tpar::Error& e) {
    r.staging = std::string("unavailable: ") + e.what();
  }

  // The communicator a program gets by default: its sync (NativeImport's self-test where
  // the gate lets it be tried), the relay's self-test where the automatic choice may take it.
  std::optional<tpar::AnyCommunicator> automatic;
  try {
    automatic.emplace(tpar::make_communicator(group, defaults));
    r.sync_choice = std::string(tpar::to_string(automatic->sync_kind()));
    r.sync_reason = automatic->sync_reason();
    r.relay_automatic = automatic->relay_automatic();
    if (automatic->relay_self_test().ran) r.relay_test = automatic->relay_self_test();
  } catch (const tpar::Error& e) {
    r.sync_choice = "none";
    r.sync_reason = std::string("no communicator: ") + e.what();
    r.failed = true;
  }
  if (!r.sync_gate.native_possible) r.native_test = "not run: " + r.sync_gate.blocker;
  else if (r.sync_choice == "NativeImport") r.native_test = "passed";
  else r.native_test = "failed: " + r.sync_reason;

  // The relay asked for: its self-test on every device, in the form the relay runs there.
  tpar::Options relay_options = defaults;
  relay_options.algo = tpar::AlgoChoice::relay;
  relay_options.relay_max_bytes = std::max(relay_options.relay_max_bytes, report_sizes[2]);
  std::optional<tpar::AnyCommunicator> relay;
  if (n > 1 && r.relay_gate.possible) {
    try {
      relay.emplace(tpar::make_communicator(group, relay_options));
      r.relay_test = relay->relay_self_test();
    } catch (const tpar::Error& e) {
      r.relay_test_error = e.what();
      // Each device's verdict (those that refused it are cached: read back, not run again).
      try {
        r.relay_test = tpar::relay_self_test(group, relay_options);
      } catch (const tpar::Error&) {
      }
    }
  }

  // Each transport at each size.
  if (n > 1) {
    for (const char* transport : {"oneshot", "relay", "ring"}) {
      std::optional<tpar::AnyCommunicator> own;
      tpar::AnyCommunicator* comm = nullptr;
      std::string unavailable;
      const std::string name = transport;
      if (name == "relay") {
        if (relay) comm = &*relay;
        else unavailable = r.relay_gate.possible ? r.relay_test_error : r.relay_gate.reason;
      } else {
        tpar::Options o = defaults;
        o.algo = name == "oneshot" ? tpar::AlgoChoice::oneshot : tpar::AlgoChoice::ring;
        try {
          own.emplace(tpar::make_communicator(group, o));
          comm = &*own;
        } catch (const tpar::Error& e) {
          unavailable = e.what();
        }
      }
      for (std::size_t bytes : report_sizes) {
        if (!comm) {
          TransportRow row;
          row.transport = name;
          row.bytes = bytes;
          row.verdict = name == "relay" && r.relay_gate.possible ? "refused" : "unavailable";
          row.reason = unavailable;
          r.rows.push_back(row);
          continue;
        }
        if (comm->failure()) {
          TransportRow row;
          row.transport = name;
          row.bytes = bytes;
          row.verdict = "error";
          row.reason = std::string("the communicator failed earlier: ") + comm->failure()->what();
          r.rows.push_back(row);
          continue;
        }
        r.rows.push_back(measure(*comm, group, name, bytes, iters));
        r.wrong |= r.rows.back().verdict == "wrong";
        r.failed |= r.rows.back().verdict == "error";
      }
    }
  }

  // What tpar chooses by itself: for plain calls, and for calls through a
  // tpar::StreamAllreduce (as under llama.cpp), the only ones the relay is chosen for.
  if (automatic) {
    for (std::size_t bytes : report_sizes) {
      ChoiceRow c;
      c.bytes = bytes;
      const auto pick = [&] {
        if (n < 2) return std::string("none (a single device)");
        return std::string(tpar::BySize::build(automatic->schedule_request(bytes / sizeof(float))).algorithm);
      };
      c.plain = pick();
      automatic->port().set_before_wait([] {});  // as a stream does
      c.streamed = pick();
      automatic->port().set_before_wait({});
      r.choices.push_back(c);
    }
  }
  return r;
}

inline const char* verdict_of(const tpar::RelaySelfTest::Device& v) { return v.passed ? "passed" : v.conclusive ? "failed" : "undecided"; }

inline std::string us_text(double us) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", us);
  return text;
}

inline void print_text(const tpar::DeviceGroup& g, const Report& r) {
  std::printf("tpar %s self-test: %zu device%s\n\n", TPAR_VERSION_STRING, g.size(), g.size() == 1 ? "" : "s");
  std::printf("devices\n");
  for (std::size_t d = 0; d < g.size(); ++d) {
    const auto& c = g[d].capabilities();
    std::printf("  %zu  %s%s; driver %s %s (driverID %s, driverVersion 0x%08x); deviceUUID %s\n", d, c.name.c_str(),
                g[d].is_virtual() ? " (virtual)" : "", c.driver_name.c_str(), c.driver_info.c_str(), vk::to_string(c.driver_id).c_str(),
                c.driver_version, tpar::to_string(c.device_uuid).c_str());
  }
  std::printf("\ngates and self-tests\n");
  std::printf("  sync                 %s: %s\n", r.sync_choice.c_str(), r.sync_reason.c_str());
  std::printf("  NativeImport test    %s\n", r.native_test.c_str());
  std::printf("  staging              %s\n", r.staging.c_str());
  std::printf("  relay gate           %s: %s\n",
              r.relay_gate.automatic ? "automatic" : r.relay_gate.possible ? "when asked for" : "unavailable", r.relay_gate.reason.c_str());
  if (!r.relay_test.ran) {
    std::printf("  relay self-test      not run: %s\n", g.size() < 2 ? "a single device" : r.relay_gate.reason.c_str());
  } else {
    std::printf("  relay self-test      %s in %.1f ms: %s\n", r.relay_test.passed ? "passed" : "failed",
                std::chrono::duration<double, std::milli>(r.relay_test.took).count(), r.relay_test.reason.c_str());
    for (std::size_t d = 0; d < r.relay_test.devices.size(); ++d) {
      const auto& v = r.relay_test.devices[d];
      const std::string seen = us_text(std::chrono::duration<double, std::micro>(v.seen).count()) + " us";
      std::printf("    device %zu           %s (%s%s): %s; %s\n", d, verdict_of(v),
                  v.kernel_waits ? ("its kernel waits; the write seen after " + seen).c_str()
                                 : ("its queue waits; the sum collected " + seen + " after the write").c_str(),
                  v.cached ? "; an earlier test's verdict" : "", v.reason.c_str(), v.memory.c_str());
    }
  }
  if (!r.relay_test_error.empty()) std::printf("  relay asked for      refused: %s\n", r.relay_test_error.c_str());
  std::printf("  relay automatic      %s\n", r.relay_automatic ? "yes: streamed calls up to the gate's size take it"
                                                               : "no: every call keeps to OneShot and ChunkedRing");

  std::printf("\ntransports (%zu calls each, one at a time, each waited for; every value checked on every device)\n", r.iters);
  std::printf("  %-9s %-8s %-8s %10s %10s %10s  %s\n", "transport", "size", "verdict", "median_us", "p90_us", "min_us", "reason");
  for (const auto& row : r.rows)
    std::printf("  %-9s %-8s %-8s %10s %10s %10s  %s\n", row.transport.c_str(), size_text(row.bytes).c_str(), row.verdict.c_str(),
                row.calls ? us_text(row.median_us).c_str() : "-", row.calls ? us_text(row.p90_us).c_str() : "-",
                row.calls ? us_text(row.min_us).c_str() : "-", row.reason.c_str());
  if (r.rows.empty()) std::printf("  (a single device: nothing to reduce across)\n");

  std::printf("\nwhat tpar chooses (TPAR_ALGO and TPAR_WIRE applied)\n");
  std::printf("  %-8s %-12s %s\n", "size", "plain calls", "calls through a tpar::StreamAllreduce (as under llama.cpp)");
  for (const auto& c : r.choices) std::printf("  %-8s %-12s %s\n", size_text(c.bytes).c_str(), c.plain.c_str(), c.streamed.c_str());
  std::printf("\nSend this table (or --json) with a bug report: docs/relay.md, \"The self-test\", says what each line means.\n");
}

inline void print_json(const tpar::DeviceGroup& g, const Report& r) {
  using tpar_cli::json_string;
  const auto boolean = [](bool b) { return b ? "true" : "false"; };
  std::printf("{\n  \"tpar_version\": %s,\n  \"self_test\": true,\n  \"calls\": %zu,\n  \"devices\": [\n",
              json_string(TPAR_VERSION_STRING).c_str(), r.iters);
  for (std::size_t d = 0; d < g.size(); ++d) {
    const auto& c = g[d].capabilities();
    const tpar::RelaySelfTest::Device* v = d < r.relay_test.devices.size() ? &r.relay_test.devices[d] : nullptr;
    char version[16];
    std::snprintf(version, sizeof version, "0x%08x", c.driver_version);
    std::printf("    {\"index\": %zu, \"name\": %s, \"virtual\": %s, \"driver\": %s, \"driver_info\": %s, \"driver_id\": %s, "
                "\"driver_version\": %s, \"device_uuid\": %s,\n",
                d, json_string(c.name).c_str(), boolean(g[d].is_virtual()), json_string(c.driver_name).c_str(),
                json_string(c.driver_info).c_str(), json_string(vk::to_string(c.driver_id)).c_str(), json_string(version).c_str(),
                json_string(tpar::to_string(c.device_uuid)).c_str());
    std::printf("     \"relay_self_test\": %s, \"relay_self_test_reason\": %s, \"kernel_waits\": %s, \"seen_us\": %s, "
                "\"memory\": %s, \"cached\": %s}%s\n",
                json_string(v ? verdict_of(*v) : "not run").c_str(), json_string(v ? v->reason : "").c_str(),
                boolean(v && v->kernel_waits), v ? us_text(std::chrono::duration<double, std::micro>(v->seen).count()).c_str() : "null",
                json_string(v ? v->memory : "").c_str(), boolean(v && v->cached), d + 1 < g.size() ? "," : "");
  }
  std::printf("  ],\n  \"sync\": {\"choice\": %s, \"reason\": %s, \"native_import_test\": %s},\n", json_string(r.sync_choice).c_str(),
              json_string(r.sync_reason).c_str(), json_string(r.native_test).c_str());
  std::printf("  \"staging\": %s,\n", json_string(r.staging).c_str());
  std::printf("  \"relay\": {\"possible\": %s, \"gate_automatic\": %s, \"reason\": %s, \"self_test\": %s, \"self_test_reason\": %s, "
              "\"self_test_ms\": %.3f, \"refused\": %s, \"automatic\": %s},\n",
              boolean(r.relay_gate.possible), boolean(r.relay_gate.automatic), json_string(r.relay_gate.reason).c_str(),
              json_string(!r.relay_test.ran ? "not run" : r.relay_test.passed ? "passed" : "failed").c_str(),
              json_string(r.relay_test.reason).c_str(), std::chrono::duration<double, std::milli>(r.relay_test.took).count(),
              json_string(r.relay_test_error).c_str(), boolean(r.relay_automatic));
  std::printf("  \"transports\": [\n");
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    std::printf("    {\"transport\": %s, \"bytes\": %zu, \"verdict\": %s, \"calls\": %zu, \"median_us\": %s, \"p90_us\": %s, "
                "\"min_us\": %s, \"reason\": %s}%s\n",
                json_string(row.transport).c_str(), row.bytes, json_string(row.verdict).c_str(), row.calls,
                row.calls ? us_text(row.median_us).c_str() : "null", row.calls ? us_text(row.p90_us).c_str() : "null",
                row.calls ? us_text(row.min_us).c_str() : "null", json_string(row.reason).c_str(), i + 1 < r.rows.size() ? "," : "");
  }
  std::printf("  ],\n  \"choices\": [\n");
  for (std::size_t i = 0; i < r.choices.size(); ++i)
    std::printf("    {\"bytes\": %zu, \"plain\": %s, \"streamed\": %s}%s\n", r.choices[i].bytes, json_string(r.choices[i].plain).c_str(),
                json_string(r.choices[i].streamed).c_str(), i + 1 < r.choices.size() ? "," : "");
  std::printf("  ]\n}\n");
}

}  // namespace tpar_info
