// tpar::Error — every failure tpar reports: an ErrorCode (std::error_code), the
// VkResult where Vulkan gave one, and a message a person can act on.
#pragma once

#include <tpar/core/config.hpp>

#include <string>
#include <system_error>

namespace tpar::inline v0 {

enum class ErrorCode : int {
  no_loader = 1,     // the Vulkan loader library could not be loaded
  no_driver,         // the loader found no usable Vulkan driver (instance creation failed)
  no_devices,        // Vulkan works but reports no physical device
  no_match,          // a device selection matched nothing
  missing_feature,   // a device lacks a feature or extension tpar needs
  invalid_argument,  // bad input: nothing was enqueued or changed
  out_of_memory,     // host or device memory exhausted
  device_lost,       // a device was lost during an operation
  timeout,           // a bounded wait expired
  failed,            // the communicator failed earlier and must be rebuilt
  unsupported,       // the request is valid but this policy/device cannot do it
  vulkan_error,      // any other Vulkan failure
  aborted,           // the communicator was aborted (Communicator::abort): its calls end unfinished
};

namespace detail {

class ErrorCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "tpar"; }
  std::string message(int code) const override {
    switch (static_cast<ErrorCode>(code)) {
      case ErrorCode::no_loader: return "Vulkan loader not found";
      case ErrorCode::no_driver: return "no Vulkan driver";
      case ErrorCode::no_devices: return "no Vulkan devices";
      case ErrorCode::no_match: return "device selection matched nothing";
      case ErrorCode::missing_feature: return "device lacks a required feature";
      case ErrorCode::invalid_argument: return "invalid argument";
      case ErrorCode::out_of_memory: return "out of memory";
      case ErrorCode::device_lost: return "device lost";
      case ErrorCode::timeout: return "timed out";
      case ErrorCode::failed: return "communicator failed";
      case ErrorCode::unsupported: return "unsupported";
      case ErrorCode::vulkan_error: return "Vulkan error";
      case ErrorCode::aborted: return "communicator aborted";
    }
    return "unknown tpar error";
  }
};

}  // namespace detail

inline const std::error_category& error_category() noexcept {
  static const detail::ErrorCategory category;
  return category;
}

inline std::error_code make_error_code(ErrorCode code) noexcept {
  return {static_cast<int>(code), error_category()};
}

class Error : public std::system_error {
 public:
  Error(ErrorCode code, const std::string& message, vk::Result result = vk::Result::eSuccess)
      : std::system_error(make_error_code(code), message), message_(message), result_(result) {}

  // The message alone (std::system_error would append the code's generic text).
  const char* what() const noexcept override { return message_.c_str(); }
  ErrorCode code_value() const noexcept { return static_cast<ErrorCode>(code().value()); }
  // The VkResult behind this error, or eSuccess when it did not come from Vulkan.
  vk::Result vk_result() const noexcept { return result_; }

 private:
  std::string message_;
  vk::Result result_;
};

namespace detail {

inline ErrorCode code_for(vk::Result r) noexcept {
  switch (r) {
    case vk::Result::eErrorOutOfHostMemory:
    case vk::Result::eErrorOutOfDeviceMemory: return ErrorCode::out_of_memory;
    case vk::Result::eErrorDeviceLost: return ErrorCode::device_lost;
    case vk::Result::eTimeout: return ErrorCode::timeout;
    default: return ErrorCode::vulkan_error;
  }
}

// Throws tpar::Error unless r is eSuccess; `what` names the action that failed.
inline void check(vk::Result r, const std::string& what) {
  if (r != vk::Result::eSuccess)
    throw Error(code_for(r), what + ": " + vk::to_string(r), r);
}

inline void check(VkResult r, const std::string& what) { check(vk::Result(r), what); }

}  // namespace detail
}  // namespace tpar::inline v0

template <>
struct std::is_error_code_enum<tpar::ErrorCode> : std::true_type {};
