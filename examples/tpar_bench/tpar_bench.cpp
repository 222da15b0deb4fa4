// tpar-bench: AllReduce performance and correctness in the manner of nccl-tests'
// all_reduce_perf. Times back-to-back in-place calls per size, then checks results:
// integer inputs must come out exact on every device, and random inputs are compared
// with a double-precision sum. `--link` first measures the host-staging copy bandwidth
// (device->host, host->device, both at once; each device alone and all together) and
// then reports each row's efficiency against the bound that bandwidth sets.
//
// The parts: options.hpp (the command line), sweep.hpp (the timed and checked table),
// link.hpp, probes.hpp and soak.hpp (the other modes), report.hpp (what is printed).
#include "bench.hpp"
#include "chain.hpp"
#include "link.hpp"
#include "options.hpp"
#include "probes.hpp"
#include "report.hpp"
#include "soak.hpp"
#include "sweep.hpp"

#include <algorithm>
#include <optional>
#include <string>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace tpar_bench {
namespace {

// Stops with a runtime failure (exit 1) before anything is printed where the devices
// cannot run what was asked: NativeImport where it cannot run, sizes past a device's limit.
void check_devices(const Config& cfg, const tpar::Options& env, const tpar::DeviceGroup& group) {
  const bool sync_flag = cfg.has("--sync");
  if ((sync_flag ? cfg.sync : env.sync) == tpar::SyncChoice::native) {
    const tpar::SyncGate gate = group.sync_gate();
    if (!gate.native_possible)
      die(std::string(sync_flag ? "--sync native" : "TPAR_SYNC=native") + ": NativeImport cannot run on these devices: " +
          gate.blocker + (sync_flag ? " (use --sync auto or proxy)" : " (set TPAR_SYNC to auto or proxy)"));
  }
  for (std::size_t d = 0; d < group.size(); ++d) {
    const std::size_t range = group[d].capabilities().max_storage_buffer_range;
    for (std::size_t b : cfg.sizes)
      if (b > range)
        die(human_bytes(b) + " is more than device " + std::to_string(d) + " can reduce in one call (maxStorageBufferRange " +
            human_bytes(range) + "): give a smaller -e or --sizes");
  }
}

}  // namespace
}  // namespace tpar_bench

int main(int argc, char** argv) {
  using namespace tpar_bench;
  Config cfg = parse(argc, argv);
  const tpar::Options env = apply_environment(cfg);
  try {
    if (cfg.relay_peers && !cfg.explicit_devices) cfg.group.select.first(1);  // the relay's floor: one device
    auto group = tpar_cli::open_group(cfg.group);
    if (!cfg.explicit_devices && !group[0].capabilities().is_gpu()) {
      // No GPU: four lavapipe virtual devices, so the AllReduce has something to do.
      cfg.group.select.virtual_devices(cfg.relay_peers ? 1 : 4);
      group = tpar_cli::open_group(cfg.group);
    }
    if (cfg.relay_peers && group.size() != 1)
      tpar_cli::usage_error(program, "--relay-peers runs on one device (its peers are played by the host): select one");
    const std::size_t n = group.size();
    const bool gpu = group[0].capabilities().is_gpu();
    if (cfg.soak_seconds > 0) {
      cfg.sizes = soak_sizes(cfg, gpu);
      check_devices(cfg, env, group);
      if (cfg.dry_run) return 0;
      return run_soak(cfg, env, std::move(group));
    }
    if (!cfg.link_only && !cfg.wake && !cfg.submit_cost) cfg.sizes = table_sizes(cfg, gpu);
    check_devices(cfg, env, group);
    if (cfg.dry_run) return 0;

    std::string names = group[0].capabilities().name;
    for (std::size_t d = 1; d < n; ++d)
      if (group[d].capabilities().name != names) names += ", " + group[d].capabilities().name;
    const std::string header = "tpar-bench " TPAR_VERSION_STRING ": " + std::to_string(n) + " device" + (n == 1 ? "" : "s") +
                               " (" + names + (group[0].is_virtual() ? ", virtual" : "") + ")";

    if (cfg.chain_steps) return run_chain(group, cfg, header);
    if (cfg.wake) {
      measure_wake(group, cfg.iters ? cfg.iters : 300);
      return 0;
    }
    if (cfg.submit_cost) {
      measure_submit(group, cfg.iters ? cfg.iters : 4096);
      return 0;
    }
    std::optional<LinkFigures> link;
    if (cfg.link) {
      link = measure_link(group, cfg.link_bytes, cfg.link_window, cfg.quiet);
      if (!cfg.csv && !cfg.json) print_link_table(*link, cfg, header, n);
      if (cfg.link_only) {
        if (cfg.json) print_link_json(*link, cfg, n);
        return 0;
      }
    }
    const std::size_t largest = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
    const bool all_ok = run_sweep(group, cfg, link, header, names, largest);
    return all_ok ? 0 : exit_wrong_results;
  } catch (const tpar::Error& e) {
    die(e.what());
  } catch (const tpar_example::Failure& e) {
    die(e.what());
  }
}
