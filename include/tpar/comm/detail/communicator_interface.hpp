// CommunicatorInterface — what every Communicator<Sync, Algo, Staging> offers, as one
// abstract type: Communicator implements it (a final class, so calls on a concrete one
// stay direct), and AnyCommunicator holds the one chosen at run time through it.
#pragma once

#include <tpar/algo/request.hpp>
#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/stream_port.hpp>
#include <tpar/comm/profile.hpp>
#include <tpar/comm/ticket.hpp>
#include <tpar/core/buffer_span.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/options.hpp>
#include <tpar/core/wire.hpp>
#include <tpar/vk/device_group.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace tpar::inline v0::detail {

class CommunicatorInterface {
 public:
  virtual ~CommunicatorInterface() = default;
  virtual Ticket allreduce(std::span<const BufferSpan> spans, const AllreduceArgs& args) = 0;
  virtual void flush() = 0;
  virtual std::size_t deferred() const = 0;
  virtual StreamPort& port() = 0;
  virtual const DeviceGroup& group() const = 0;
  virtual std::size_t size() const = 0;
  virtual const Options& options() const = 0;
  virtual std::optional<Error> failure() const = 0;
  virtual void abort() noexcept = 0;
  virtual std::uint64_t staging_bytes() const = 0;
  virtual std::uint32_t in_flight() const = 0;
  virtual const CallInfo& last_call() const = 0;
  virtual RelayStats relay_stats() const = 0;
  virtual const RelaySelfTest& relay_self_test() const = 0;
  virtual bool relay_automatic() const = 0;
  virtual PlanStats plan_stats() const = 0;
  virtual ScheduleRequest schedule_request(std::size_t count, std::optional<Wire> wire, std::uint32_t contributing) const = 0;
  virtual CallProfile profile() = 0;

 protected:
  CommunicatorInterface() = default;
  CommunicatorInterface(const CommunicatorInterface&) = default;
  CommunicatorInterface& operator=(const CommunicatorInterface&) = default;
};

}  // namespace tpar::inline v0::detail
