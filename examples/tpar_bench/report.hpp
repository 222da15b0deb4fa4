// What tpar-bench prints: the host-staging table, the AllReduce table row by row as it
// runs (text), per-row profiles, and the whole table at the end (--csv, --json).
#pragma once

#include "bench.hpp"
#include "common/cli.hpp"
#include "link.hpp"
#include "options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace tpar_bench {

// One line of the table. algbw, busbw, eff and relay_cpu_us are negative where the row
// has none (one device; no --link; no relay call).
struct Row {
  std::size_t bytes, count;
  std::string wire, algo, sync;
  double time_us, algbw, busbw, max_err, cpu_us, eff;
  std::size_t wrong;
  double relay_cpu_us = -1;  // the relay's host thread, per call (part of cpu_us)
};

inline std::string combo_name(const LinkCombo& c, const LinkFigures& link) {
  std::string s;
  for (Path p : c.paths) s += (s.empty() ? "" : " + ") + path_name(p, link.transfer_queue);
  return s;
}

inline void print_link_table(const LinkFigures& link, const Config& cfg, const std::string& header, std::size_t n) {
  std::printf("# %s\n# host-staging bandwidth in GB/s per device (%s per transfer, through imported host memory);\n"
              "# a row of two paths runs both at once and counts the bytes of both\n",
              header.c_str(), human_bytes(cfg.link_bytes).c_str());
  if (cfg.link_window && cfg.link_window < cfg.link_bytes)
    std::printf("# device->host copies cycle through %s of host memory per device\n", human_bytes(cfg.link_window).c_str());
  int width = 62;
  for (const auto& c : link.combos) width = std::max(width, static_cast<int>(combo_name(c, link).size()));
  std::printf("# %-*s", width, "paths");
  for (std::size_t d = 0; d < n; ++d) std::printf(" %8s", ("dev " + std::to_string(d)).c_str());
  std::printf(" %12s\n", n > 1 ? "all at once" : "");
  for (const auto& c : link.combos) {
    std::printf("  %-*s", width, combo_name(c, link).c_str());
    for (double v : c.alone) std::printf(" %8.2f", v);
    if (n > 1) std::printf(" %12.2f", c.all);
    std::printf("\n");
  }
  std::printf("\n");
}

inline void print_link_json(const LinkFigures& link, const Config& cfg, std::size_t n) {
  std::printf("{\"devices\": %zu, \"link_bytes\": %zu, \"paths\": [", n, cfg.link_bytes);
  for (std::size_t i = 0; i < link.combos.size(); ++i) {
    const auto& c = link.combos[i];
    std::printf("%s{\"paths\": %s, \"alone\": [", i ? ", " : "", tpar_cli::json_string(combo_name(c, link)).c_str());
    for (std::size_t d = 0; d < n; ++d) std::printf("%s%.3f", d ? ", " : "", c.alone[d]);
    std::printf("], \"all_at_once\": %.3f}", c.all);
  }
  std::printf("]}\n");
}

// The text table's header (the device line unless the link table already gave it).
inline void print_table_header(const Config& cfg, const std::string& header, std::size_t n) {
  if (!cfg.link) std::printf("# %s\n", header.c_str());
  if (n == 1 && !cfg.relay_peers)
    std::printf("# one device: nothing to reduce, so no algbw or busbw; time(us) is the call's overhead\n");
  std::printf("# %12s %11s %5s %8s %12s %10s %9s %9s %9s %7s %8s %6s %9s\n", "bytes", "count", "wire", "algo", "sync", "time(us)",
              "algbw", "busbw", "max err", "#wrong", "cpu(us)", "eff", "relay(us)");
}

// A figure the row lacks (negative: see Row) as "-", null or nothing.
inline std::string figure(double v, const char* format, const char* absent) {
  if (v < 0) return absent;
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

inline void print_row(const Row& row) {
  std::printf("  %12zu %11zu %5s %8s %12s %10.1f %9s %9s %9.2e %7zu %8.1f %6s %9s\n", row.bytes, row.count, row.wire.c_str(),
              row.algo.c_str(), row.sync.c_str(), row.time_us, figure(row.algbw, "%.2f", "-").c_str(),
              figure(row.busbw, "%.2f", "-").c_str(), row.max_err, row.wrong, row.cpu_us,
              figure(row.eff * 100, "%5.0f%%", "-").c_str(), figure(row.relay_cpu_us, "%.1f", "-").c_str());
  std::fflush(stdout);
}

// One profiled call's batches: a summary line per row (text), its batches where there are
// few, and every batch to a CSV file with --profile-out.
inline void print_profile(const tpar::CallProfile& prof, const Config& cfg, std::size_t n, const Row& row) {
  std::string line = "#   profile: span " + std::to_string(int(prof.span_us())) + " us" + (prof.aligned ? "" : " (clocks not aligned)");
  for (std::size_t d = 0; d < n; ++d) {
    double busy[tpar::role_count] = {};
    int count[tpar::role_count] = {};
    double first_start[tpar::role_count] = {1e300, 1e300, 1e300}, last_end[tpar::role_count] = {};
    for (const auto& b : prof.devices[d]) {
      if (std::isnan(b.start_us)) continue;
      const int r = static_cast<int>(b.role);
      busy[r] += b.end_us - b.start_us;
      ++count[r];
      first_start[r] = std::min(first_start[r], b.start_us);
      last_end[r] = std::max(last_end[r], b.end_us);
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "; dev %zu: compute %d batches %.0f us busy [%.0f..%.0f], transfer %d batches %.0f us busy [%.0f..%.0f]",
                  d, count[0], busy[0], count[0] ? first_start[0] : 0.0, last_end[0], count[1], busy[1],
                  count[1] ? first_start[1] : 0.0, last_end[1]);
    line += buf;
    if (count[2]) {
      std::snprintf(buf, sizeof buf, ", download %d batches %.0f us busy [%.0f..%.0f]", count[2], busy[2], first_start[2], last_end[2]);
      line += buf;
    }
  }
  if (!cfg.csv && !cfg.json) std::printf("%s\n", line.c_str());
  if (prof.devices[0].size() <= 8 && !cfg.csv && !cfg.json)
    for (std::size_t d = 0; d < n; ++d) {
      std::printf("#     dev %zu:", d);
      for (const auto& b : prof.devices[d]) std::printf(" %s %.1f+%.1f |", b.what.c_str(), b.start_us, b.end_us - b.start_us);
      std::printf("\n");
    }
  if (!cfg.profile_out.empty()) {
    const std::string file = cfg.profile_out + "-" + std::to_string(row.bytes) + "-" + row.wire + "-" + row.algo + ".csv";
    if (std::FILE* f = std::fopen(file.c_str(), "w")) {
      std::fprintf(f, "device,batch,queue,what,start_us,end_us\n");
      for (std::size_t d = 0; d < n; ++d)
        for (std::size_t b = 0; b < prof.devices[d].size(); ++b) {
          const auto& t = prof.devices[d][b];
          std::fprintf(f, "%zu,%zu,%s,%s,%.3f,%.3f\n", d, b, std::string(tpar::to_string(t.role)).c_str(),
                       t.what.c_str(), t.start_us, t.end_us);
        }
      std::fclose(f);
    }
  }
}

// The end of the table: every row (--csv, --json) or the verdict line (text).
inline void print_rows(const std::vector<Row>& rows, const Config& cfg, std::size_t n, const std::string& names, bool all_ok) {
  if (cfg.csv) {
    std::printf("bytes,count,wire,algo,sync,time_us,algbw_gbps,busbw_gbps,max_err,wrong,cpu_us,efficiency,relay_cpu_us\n");
    for (const auto& r : rows)
      std::printf("%zu,%zu,%s,%s,%s,%.3f,%s,%s,%.3e,%zu,%.3f,%s,%s\n", r.bytes, r.count, r.wire.c_str(), r.algo.c_str(),
                  r.sync.c_str(), r.time_us, figure(r.algbw, "%.4f", "").c_str(), figure(r.busbw, "%.4f", "").c_str(),
                  r.max_err, r.wrong, r.cpu_us, figure(r.eff, "%f", "").c_str(), figure(r.relay_cpu_us, "%.3f", "").c_str());
  } else if (cfg.json) {
    std::printf("{\"devices\": %zu, \"names\": %s, \"rows\": [\n", n, tpar_cli::json_string(names).c_str());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::printf("  {\"bytes\": %zu, \"count\": %zu, \"wire\": \"%s\", \"algo\": \"%s\", \"sync\": \"%s\", \"time_us\": %.3f, "
                  "\"algbw_gbps\": %s, \"busbw_gbps\": %s, \"max_err\": %.3e, \"wrong\": %zu, \"cpu_us\": %.3f, "
                  "\"efficiency\": %s, \"relay_cpu_us\": %s}%s\n",
                  r.bytes, r.count, r.wire.c_str(), r.algo.c_str(), r.sync.c_str(), r.time_us,
                  figure(r.algbw, "%.4f", "null").c_str(), figure(r.busbw, "%.4f", "null").c_str(), r.max_err, r.wrong,
                  r.cpu_us, figure(r.eff, "%f", "null").c_str(), figure(r.relay_cpu_us, "%.3f", "null").c_str(),
                  i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
  } else {
    std::printf("# %s\n", all_ok ? "every result checked: correct on every device" : "WRONG RESULTS: see #wrong");
  }
}

}  // namespace tpar_bench
