// The logging sink: where tpar sends what a person may want to know (a fallback it
// chose and why, resources it had to leak rather than free under the GPU).
#pragma once

#include <tpar/core/config.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace tpar::inline v0 {

enum class LogLevel { debug, info, warning, error };

constexpr std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "?";
}

using LogSink = std::function<void(LogLevel, std::string_view)>;

namespace detail {

struct LogState {
  std::mutex mutex;
  LogSink sink;
  LogLevel threshold = LogLevel::warning;
  LogState() {
    // TPAR_LOG=debug|info|warning|error lowers or raises what the default sink prints.
    // Another value keeps the default and says so, once (this runs once per process),
    // straight to stderr: no sink can be installed before this state exists.
    if (const char* env = std::getenv("TPAR_LOG"); env && *env) {
      if (!std::strcmp(env, "debug")) threshold = LogLevel::debug;
      else if (!std::strcmp(env, "info")) threshold = LogLevel::info;
      else if (!std::strcmp(env, "warning")) threshold = LogLevel::warning;
      else if (!std::strcmp(env, "error")) threshold = LogLevel::error;
      else
        std::fprintf(stderr, "tpar warning: TPAR_LOG=%s is not valid; use one of: debug, info, warning, error (warning is used)\n",
                     env);
    }
  }
};

// Made on first use: the first message, set_log_sink, or a DeviceGroup being opened or
// adopted (so that a bad TPAR_LOG is reported before any work).
inline LogState& log_state() {
  static LogState state;
  return state;
}

}  // namespace detail

// Replaces the sink (nullptr restores the default, which prints warnings and errors
// to stderr; TPAR_LOG=debug|info|warning|error sets its threshold).
inline void set_log_sink(LogSink sink) {
  auto& state = detail::log_state();
  std::lock_guard lock(state.mutex);
  state.sink = std::move(sink);
}

// The level from which the default sink prints (TPAR_LOG; warning unless set): a sink
// that forwards to a host's logger may apply it too.
inline LogLevel log_threshold() {
  auto& state = detail::log_state();
  std::lock_guard lock(state.mutex);
  return state.threshold;
}

// A level no enumerator names is logged as an error: logging never throws (it runs on
// failure paths and in destructors), and a message must not vanish below the threshold.
inline void log(LogLevel level, std::string_view message) {
  if (to_string(level) == "?") level = LogLevel::error;
  auto& state = detail::log_state();
  std::lock_guard lock(state.mutex);
  if (state.sink) {
    state.sink(level, message);
  } else if (level >= state.threshold) {
    const std::string_view name = to_string(level);
    std::fprintf(stderr, "tpar %.*s: %.*s\n", static_cast<int>(name.size()), name.data(), static_cast<int>(message.size()),
                 message.data());
  }
}

}  // namespace tpar::inline v0
