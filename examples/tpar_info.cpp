// tpar-info: the Vulkan devices tpar sees, what each offers the AllReduce, and the
// transport tpar would choose for the group; with --self-test, every gate and self-test
// run on the devices and each transport timed (tpar_info_self_test.hpp).
#include <tpar/tpar.hpp>

#include "common/cli.hpp"
#include "tpar_info_self_test.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace {

const char* yes(bool b) { return b ? "yes" : "no"; }

std::string queue_families(const tpar::DeviceCapabilities& c) {
  std::string s;
  for (std::size_t f = 0; f < c.queue_families.size(); ++f) {
    const auto& q = c.queue_families[f];
    std::string flags;
    if (q.queueFlags & vk::QueueFlagBits::eGraphics) flags += "graphics+";
    if (q.queueFlags & vk::QueueFlagBits::eCompute) flags += "compute+";
    if (q.queueFlags & vk::QueueFlagBits::eTransfer) flags += "transfer+";
    if (!flags.empty()) flags.pop_back();
    s += (f ? ", " : "") + std::to_string(f) + "=" + flags + "x" + std::to_string(q.queueCount);
  }
  return s;
}

std::string staging_status(const tpar::DeviceGroup& g) {
  try {
    tpar::HostImport::check_support(g);
    return "HostImport: every device imports host memory, so one host allocation per device serves all of them";
  } catch (const tpar::Error& e) {
    return std::string("unavailable: ") + e.what();
  }
}

// What a communicator on this group would choose by default, TPAR_ALGO and TPAR_WIRE
// applied: one sentence each, shared by the text and the JSON.
std::string algorithm_text(const tpar::Options& o, const tpar::RelayGate& relay) {
  const std::string by_size = "OneShot while payload x (n-1) <= " + std::to_string(o.oneshot_max_bytes >> 20) + " MiB, ChunkedRing above";
  const std::string relay_part = "the relay up to " + std::to_string(o.relay_max_bytes >> 10) + " KiB, ";
  if (o.algo == tpar::AlgoChoice::relay) return relay_part + "larger calls " + by_size + " (TPAR_ALGO=relay)";
  if (o.algo != tpar::AlgoChoice::automatic)
    return std::string(tpar::to_string(o.algo)) + " for every size (TPAR_ALGO=" + std::string(tpar::to_string(o.algo)) + ")";
  const std::size_t automatic_max = std::min(o.relay_max_bytes, relay.automatic_max_bytes);
  return (relay.automatic ? "the relay up to " + std::to_string(automatic_max >> 10) +
                                " KiB for calls through a tpar::StreamAllreduce (as under llama.cpp); "
                          : std::string()) +
         by_size + " (TPAR_ALGO)";
}

std::string wire_text(const tpar::Options& o) {
  if (o.wire) return std::string(tpar::to_string(*o.wire)) + " for every size (TPAR_WIRE=" + std::string(tpar::to_string(*o.wire)) + ")";
  return "f32 below " + std::to_string(o.bf16_min_bytes >> 10) + " KiB, bf16 from there (TPAR_WIRE)";
}

void print_text(const tpar::DeviceGroup& g, const tpar::Options& o) {
  std::printf("tpar %s: %zu device%s\n\n", TPAR_VERSION_STRING, g.size(), g.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < g.size(); ++i) {
    const auto& d = g[i];
    const auto& c = d.capabilities();
    std::printf("device %zu: %s%s\n", i, c.name.c_str(), d.is_virtual() ? " (virtual)" : "");
    std::printf("  type                 %s, vendor 0x%04x, device 0x%04x, physical index %u\n",
                vk::to_string(c.type).c_str(), c.vendor_id, c.device_id, d.physical_index());
    std::printf("  driver               %s %s, Vulkan %s\n", c.driver_name.c_str(), c.driver_info.c_str(),
                tpar::api_version_string(c.api_version).c_str());
    std::printf("  driverUUID           %s\n", tpar::to_string(c.driver_uuid).c_str());
    std::printf("  deviceUUID           %s\n", tpar::to_string(c.device_uuid).c_str());
    std::printf("  queue families       %s\n", queue_families(c).c_str());
    std::printf("  compute queue        family %u\n", d.compute_queue().family());
    if (d.has_transfer_queue()) std::printf("  transfer queue       family %u (transfer-only)\n", d.transfer_queue().family());
    else std::printf("  transfer queue       none: uploads share the compute queue\n");
    std::printf("  host-memory import   %s", yes(d.enabled().external_memory_host));
    if (c.external_memory_host) std::printf(", alignment %llu", static_cast<unsigned long long>(c.host_import_alignment));
    std::printf("\n  timeline semaphores  %s\n", yes(c.timeline_semaphores));
    std::printf("  OPAQUE_FD timelines  export %s, import %s\n", yes(c.timeline_fd_exportable), yes(c.timeline_fd_importable));
    std::printf("  f16                  shaderFloat16 %s, 16-bit storage %s\n", yes(c.shader_float16), yes(c.storage_16bit));
    std::printf("  storage buffers      offset alignment %llu, max range %llu\n",
                static_cast<unsigned long long>(c.min_storage_offset_alignment),
                static_cast<unsigned long long>(c.max_storage_buffer_range));
    std::printf("  mappable device mem  %s", c.host_visible_device_local_heap ? "" : "none");
    if (c.host_visible_device_local_heap)
      std::printf("%llu MiB", static_cast<unsigned long long>(c.host_visible_device_local_heap >> 20));
    std::printf(", device clock in shaders %s%s\n", yes(d.enabled().shader_device_clock),
                c.shader_loops_bounded() ? ", shader loops bounded by the driver" : "");
    std::printf("  device-coherent mem  %s\n", d.enabled().device_coherent_memory ? "yes (VK_AMD_device_coherent_memory: the relay's words go there)"
                                         : c.device_coherent_memory ? "offered, not enabled by the host" : "no");
    std::printf("\n");
  }
  const auto gate = g.sync_gate();
  std::printf("transport for this group\n");
  std::printf("  cross-device sync    %s: %s\n", std::string(to_string(gate.choice)).c_str(), gate.reason.c_str());
  std::printf("  staging              %s\n", staging_status(g).c_str());
  const auto relay = g.relay_gate();
  std::printf("  relay                %s: %s\n", relay.automatic ? "automatic" : relay.possible ? "when asked for" : "unavailable",
              relay.reason.c_str());
  std::printf("  algorithm            %s\n", algorithm_text(o, relay).c_str());
  std::printf("  wire                 %s\n", wire_text(o).c_str());
}

void print_json(const tpar::DeviceGroup& g, const tpar::Options& o) {
  using tpar_cli::json_string;
  std::printf("{\n  \"tpar_version\": %s,\n  \"devices\": [\n", json_string(TPAR_VERSION_STRING).c_str());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const auto& d = g[i];
    const auto& c = d.capabilities();
    std::printf("    {\"index\": %zu, \"name\": %s, \"virtual\": %s, \"type\": %s, \"vendor_id\": %u, \"device_id\": %u,\n", i,
                json_string(c.name).c_str(), d.is_virtual() ? "true" : "false", json_string(vk::to_string(c.type)).c_str(),
                c.vendor_id, c.device_id);
    std::printf("     \"physical_index\": %u, \"driver\": %s, \"driver_info\": %s, \"api_version\": %s,\n", d.physical_index(),
                json_string(c.driver_name).c_str(), json_string(c.driver_info).c_str(),
                json_string(tpar::api_version_string(c.api_version)).c_str());
    std::printf("     \"driver_uuid\": %s, \"device_uuid\": %s,\n", json_string(tpar::to_string(c.driver_uuid)).c_str(),
                json_string(tpar::to_string(c.device_uuid)).c_str());
    std::printf("     \"queue_families\": %s, \"compute_family\": %u, \"transfer_family\": %s,\n",
                json_string(queue_families(c)).c_str(), d.compute_queue().family(),
                d.has_transfer_queue() ? std::to_string(d.transfer_queue().family()).c_str() : "null");
    std::printf("     \"host_import\": %s, \"host_import_alignment\": %llu, \"timeline_semaphores\": %s,\n",
                d.enabled().external_memory_host ? "true" : "false",
                static_cast<unsigned long long>(c.host_import_alignment), c.timeline_semaphores ? "true" : "false");
    std::printf("     \"timeline_fd_exportable\": %s, \"timeline_fd_importable\": %s, \"shader_float16\": %s, \"storage_16bit\": %s,\n",
                c.timeline_fd_exportable ? "true" : "false", c.timeline_fd_importable ? "true" : "false",
                c.shader_float16 ? "true" : "false", c.storage_16bit ? "true" : "false");
    std::printf("     \"min_storage_offset_alignment\": %llu, \"max_storage_buffer_range\": %llu,\n",
                static_cast<unsigned long long>(c.min_storage_offset_alignment),
                static_cast<unsigned long long>(c.max_storage_buffer_range));
    std::printf("     \"host_visible_device_local_bytes\": %llu, \"shader_device_clock\": %s, \"shader_loops_bounded\": %s,\n",
                static_cast<unsigned long long>(c.host_visible_device_local_heap), d.enabled().shader_device_clock ? "true" : "false",
                c.shader_loops_bounded() ? "true" : "false");
    std::printf("     \"device_coherent_memory\": %s}%s\n", d.enabled().device_coherent_memory ? "true" : "false",
                i + 1 < g.size() ? "," : "");
  }
  const auto gate = g.sync_gate();
  std::printf("  ],\n  \"sync\": {\"choice\": %s, \"native_possible\": %s, \"reason\": %s},\n",
              json_string(to_string(gate.choice)).c_str(), gate.native_possible ? "true" : "false",
              json_string(gate.reason).c_str());
  const auto relay = g.relay_gate();
  std::printf("  \"relay\": {\"possible\": %s, \"automatic\": %s, \"reason\": %s},\n", relay.possible ? "true" : "false",
              relay.automatic ? "true" : "false", json_string(relay.reason).c_str());
  std::printf("  \"staging\": %s,\n", json_string(staging_status(g)).c_str());
  std::printf("  \"algorithm\": {\"choice\": %s, \"oneshot_max_bytes\": %zu, \"relay_max_bytes\": %zu, \"text\": %s},\n",
              json_string(tpar::to_string(o.algo)).c_str(), o.oneshot_max_bytes, o.relay_max_bytes,
              json_string(algorithm_text(o, relay)).c_str());
  std::printf("  \"wire\": {\"choice\": %s, \"bf16_min_bytes\": %zu, \"text\": %s}\n}\n",
              json_string(o.wire ? tpar::to_string(*o.wire) : "auto").c_str(), o.bf16_min_bytes, json_string(wire_text(o)).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string program = "tpar-info";
  bool json = false, self_test = false;
  std::optional<std::size_t> iters;
  tpar::GroupOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "Usage: tpar-info [options]\n"
          "Lists the Vulkan devices tpar would use, what each offers the AllReduce (queues,\n"
          "host-memory import, shareable timeline semaphores, f16, host-visible device\n"
          "memory for the relay), and the transport tpar would choose for them as a group: its\n"
          "sync, staging, relay, and the algorithm and wire a communicator picks by default\n"
          "(TPAR_ALGO and TPAR_WIRE applied; a bad value is a usage error).\n\n"
          "With --self-test it opens the devices and proves what tpar's automatic choices rest on:\n"
          "NativeImport's self-test where the gate lets it be tried, the relay's self-test on every\n"
          "device (a running kernel sees the host's write into its memory, its values reach the\n"
          "host, every value checked both ways; docs/relay.md), then times OneShot, the relay and\n"
          "the ring at 4 KiB, 16 KiB and 1 MiB (each call waited for, every value checked on every\n"
          "device), and prints per device and transport the verdict, the reason, the latency and\n"
          "the choice tpar makes at each size: the table to send with a bug report.\n"
          "%s, 3 wrong results (--self-test)\n\n"
          "  --json                machine-readable output\n"
          "  --self-test           run the gates, the self-tests and the transports (above)\n"
          "  --iters N             calls timed per transport and size with --self-test (default 200)\n"
          "  -h, --help            this text\n\n%s",
          tpar_cli::exit_status_help, tpar_cli::device_flags_help());
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (a == "--self-test") {
      self_test = true;
    } else if (a == "--iters") {
      if (i + 1 >= argc) tpar_cli::usage_error(program, "--iters needs a value");
      iters = tpar_cli::parse_number<std::size_t>(program, a, argv[++i]);
      if (*iters < 1 || *iters > 100000) tpar_cli::usage_error(program, "--iters takes 1 to 100000 calls");
    } else if (!tpar_cli::parse_device_flag(program, argc, argv, i, options)) {
      tpar_cli::usage_error(program, "unknown option " + std::string(a));
    }
  }
  if (iters && !self_test) tpar_cli::usage_error(program, "--iters needs --self-test");
  const tpar::Options defaults = tpar_cli::environment_options(program);
  try {
    auto group = tpar_cli::open_group(options);
    if (self_test) {
      const auto report = tpar_info::run_self_test(group, defaults, iters.value_or(200));
      json ? tpar_info::print_json(group, report) : tpar_info::print_text(group, report);
      return report.wrong ? tpar_info::exit_wrong_results : report.failed ? tpar_cli::exit_runtime_failure : 0;
    }
    json ? print_json(group, defaults) : print_text(group, defaults);
  } catch (const tpar_example::Failure& e) {
    std::fprintf(stderr, "tpar-info: %s\n", e.what());
    return tpar_cli::exit_runtime_failure;
  } catch (const tpar::Error& e) {
    std::fprintf(stderr, "tpar-info: %s\n", e.what());
    return tpar_cli::exit_runtime_failure;
  }
  return 0;
}
