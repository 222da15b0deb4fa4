// Command-line pieces shared by tpar's example programs: device selection flags, a
// strict number parser, JSON string escaping, and the exit statuses every program keeps:
// 0 success, 1 runtime failure, 2 usage error (bad flags or TPAR_* values; a message on
// stderr that names what was wrong and what is valid, nothing on stdout).
#pragma once

#include <tpar/core/options.hpp>
#include <tpar/vk/device_group.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace tpar_cli {

inline constexpr int exit_runtime_failure = 1;
inline constexpr int exit_usage_error = 2;

// The line every program's --help ends its description with.
inline constexpr const char* exit_status_help = "exit status: 0 success, 1 runtime failure, 2 usage error";

[[noreturn]] inline void usage_error(const std::string& program, const std::string& what) {
  std::fprintf(stderr, "%s: %s (try --help)\n", program.c_str(), what.c_str());
  std::exit(exit_usage_error);
}

template <class T>
T parse_number(const std::string& program, std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    usage_error(program, std::string(flag) + " expects a number, got '" + std::string(text) + "'");
  return value;
}

// Sizes like 4096, 64K, 16M, 1G (binary units).
inline std::size_t parse_size(const std::string& program, std::string_view flag, std::string_view text) {
  const std::string given(text);
  std::size_t mult = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': mult = std::size_t{1} << 10; break;
      case 'M': case 'm': mult = std::size_t{1} << 20; break;
      case 'G': case 'g': mult = std::size_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) text.remove_suffix(1);
  }
  const std::size_t n = parse_number<std::size_t>(program, flag, text);
  if (n > std::numeric_limits<std::size_t>::max() / mult)
    usage_error(program, std::string(flag) + " " + given + " is too large");
  return n * mult;
}

// A comma-separated value of `flag`, each item read by `parse_item(text)`; an empty list
// is a usage error.
template <class Parse>
auto parse_list(const std::string& program, std::string_view flag, std::string_view list, Parse&& parse_item) {
  std::vector<decltype(parse_item(list))> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    out.push_back(parse_item(list.substr(0, comma)));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  if (out.empty()) usage_error(program, std::string(flag) + " needs a comma-separated list");
  return out;
}

inline const char* device_flags_help() {
  return "Devices (default: every GPU; lavapipe when there is none):\n"
         "  -g, --gpus N          the first N matching devices\n"
         "  --devices I,J,...     physical devices by index (see tpar-info)\n"
         "  --name TEXT           devices whose name contains TEXT\n"
         "  --virtual K           open the first matching device K times\n"
         "  --validation          enable the Khronos validation layer\n";
}

// Consumes a device-selection flag at argv[i] (and its value); false if not one.
inline bool parse_device_flag(const std::string& program, int argc, char** argv, int& i, tpar::GroupOptions& o) {
  const std::string_view a = argv[i];
  auto value = [&]() -> std::string_view {
    if (i + 1 >= argc) usage_error(program, std::string(a) + " needs a value");
    return argv[++i];
  };
  if (a == "-g" || a == "--gpus") {
    const auto n = parse_number<std::uint32_t>(program, a, value());
    if (n < 1) usage_error(program, std::string(a) + " takes 1 or more devices");
    o.select.first(n);
  } else if (a == "--devices") {
    o.select.with_indices(
        parse_list(program, a, value(), [&](std::string_view t) { return parse_number<std::uint32_t>(program, a, t); }));
  } else if (a == "--name") {
    o.select.with_name(std::string(value()));
  } else if (a == "--virtual") {
    const auto k = parse_number<std::uint32_t>(program, a, value());
    if (k < 1 || k > tpar::max_group_devices)
      usage_error(program, std::string(a) + " takes 1 to " + std::to_string(tpar::max_group_devices) + " devices");
    o.select.virtual_devices(k);
  } else if (a == "--validation") {
    o.validation = true;
  } else {
    return false;
  }
  return true;
}

// Options with TPAR_SYNC, TPAR_ALGO and TPAR_WIRE applied, read before any work: a bad
// value is a usage error.
inline tpar::Options environment_options(const std::string& program) {
  try {
    return tpar::Options{}.with_environment();
  } catch (const tpar::Error& e) {
    usage_error(program, e.what());
  }
}

// DeviceGroup::create; where -g asked for more devices than the machine has, the error
// says how to get them anyway.
inline tpar::DeviceGroup open_group(const tpar::GroupOptions& o) {
  try {
    return tpar::DeviceGroup::create(o);
  } catch (const tpar::Error& e) {
    if (e.code_value() != tpar::ErrorCode::no_match || !o.select.count || o.select.virtual_count) throw;
    const std::string k = std::to_string(*o.select.count);
    throw tpar::Error(e.code_value(), std::string(e.what()) + " (--virtual " + k + " opens the first device " + k +
                                          " times, as tpar's tests do on lavapipe)");
  }
}

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace tpar_cli
