// AnyCommunicator — the communicator chosen at run time: the sync policy from the
// group's capabilities (and TPAR_SYNC), the algorithm by size (and TPAR_ALGO), the wire
// by size (and TPAR_WIRE). For hosts that do not want to pick policies at compile time.
#pragma once

#include <tpar/comm/communicator.hpp>
#include <tpar/sync/native_import.hpp>

#include <memory>
#include <mutex>

namespace tpar::inline v0 {

class AnyCommunicator {
 public:
  AnyCommunicator(AnyCommunicator&&) noexcept = default;
  AnyCommunicator& operator=(AnyCommunicator&&) noexcept = default;

  Ticket allreduce(std::span<const BufferSpan> spans, const AllreduceArgs& args = {}) {
    return impl_->allreduce(spans, args);
  }
  Ticket allreduce(std::initializer_list<BufferSpan> spans, const AllreduceArgs& args = {}) {
    return impl_->allreduce(std::span<const BufferSpan>(spans.begin(), spans.size()), args);
  }
  // Submits the deferred calls (AllreduceArgs::defer); see Communicator::flush.
  void flush() { impl_->flush(); }
  std::size_t deferred() const { return impl_->deferred(); }
  // What tpar::StreamAllreduce asks of the communicator: see Communicator::port.
  detail::StreamPort& port() { return impl_->port(); }
  const DeviceGroup& group() const { return impl_->group(); }
  std::size_t size() const { return impl_->size(); }
  SyncKind sync_kind() const { return kind_; }
  const Options& options() const { return impl_->options(); }
  std::optional<Error> failure() const { return impl_->failure(); }
  // See Communicator::abort (from any thread).
  void abort() noexcept { impl_->abort(); }
  std::uint64_t staging_bytes() const { return impl_->staging_bytes(); }
  std::uint32_t in_flight() const { return impl_->in_flight(); }
  const CallInfo& last_call() const { return impl_->last_call(); }
  RelayStats relay_stats() const { return impl_->relay_stats(); }
  const RelaySelfTest& relay_self_test() const { return impl_->relay_self_test(); }
  bool relay_automatic() const { return impl_->relay_automatic(); }
  PlanStats plan_stats() const { return impl_->plan_stats(); }
  ScheduleRequest schedule_request(std::size_t count, std::optional<Wire> wire = std::nullopt,
                                   std::uint32_t contributing = ~0u) const {
    return impl_->schedule_request(count, wire, contributing);
  }
  CallProfile profile() { return impl_->profile(); }
  // Why this sync policy was chosen, in a sentence.
  const std::string& sync_reason() const { return reason_; }

  template <CrossDeviceSync Sync>
  static AnyCommunicator make(DeviceGroup group, const Options& options, std::string reason) {
    return AnyCommunicator(std::make_unique<Communicator<Sync>>(std::move(group), options), Sync::kind, std::move(reason));
  }

 private:
  AnyCommunicator(std::unique_ptr<detail::CommunicatorInterface> impl, SyncKind kind, std::string reason)
      : impl_(std::move(impl)), kind_(kind), reason_(std::move(reason)) {}

  std::unique_ptr<detail::CommunicatorInterface> impl_;
  SyncKind kind_;
  std::string reason_;
};

// Builds the communicator `options` (with TPAR_SYNC, TPAR_ALGO, TPAR_WIRE applied) and
// the group's capabilities allow. Asking for NativeImport where the group cannot use it
// is an error that says why.
inline AnyCommunicator make_communicator(DeviceGroup group, Options options = {}) {
  // Who asked for a sync: the environment where it set one, else the caller's options.
  const char* const sync_env = detail::env_value("TPAR_SYNC");
  options = options.with_environment();
  options.validate_enums();
  const std::string asked = sync_env ? "TPAR_SYNC=" + std::string(sync_env) : "the sync option";
  const SyncGate gate = group.sync_gate();
  if (options.sync == SyncChoice::native && !gate.native_possible)
    throw Error(ErrorCode::unsupported, "NativeImport was asked for (" + asked + ") but cannot run here: " + gate.blocker);
  if (options.sync == SyncChoice::proxy)
    return AnyCommunicator::make<ProxyBridge>(std::move(group), options, "ProxyBridge was asked for (" + asked + ")");
  if (gate.native_possible) {
    try {
      return AnyCommunicator::make<NativeImport>(group, options, gate.reason);
    } catch (const detail::RelayRefusal&) {
      throw;  // the relay's refusal, whatever the sync
    } catch (const Error& e) {
      if (options.sync == SyncChoice::native || e.code() != ErrorCode::unsupported) throw;
      log(LogLevel::warning, std::string(e.what()) + "; using ProxyBridge instead");
      return AnyCommunicator::make<ProxyBridge>(std::move(group), options,
                                                std::string("NativeImport failed its self-test (") + e.what() + "), so ProxyBridge");
    }
  }
  return AnyCommunicator::make<ProxyBridge>(std::move(group), options, gate.reason);
}

}  // namespace tpar::inline v0
