// CommRelay — the relay as one communicator holds it: its setup, checked at creation
// (RelaySetup), its self-test, the host side made with the first relay call (RelayHub),
// and the fallback to OneShot where the automatic choice took it and it cannot run.
// Asked for (TPAR_ALGO=relay), it has no fallback: what fails, fails the creation or the
// call.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/comm/detail/relay_setup.hpp>
#include <tpar/comm/detail/relay_self_test.hpp>
#include <tpar/comm/ticket.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/log.hpp>
#include <tpar/core/options.hpp>
#include <tpar/vk/device_group.hpp>

#include <memory>
#include <string>

namespace tpar::inline v0::detail {

class CommRelay {
 public:
  CommRelay() = default;
  CommRelay(const CommRelay&) = delete;
  CommRelay& operator=(const CommRelay&) = delete;

  // Throws on bad relay options, and where the relay is asked for but the group cannot
  // run it (RelaySetup::check).
  void set_up(const DeviceGroup& group, const Options& options) { setup_ = RelaySetup::check(group, options); }

  // The relay's self-test, where the relay may be used at all (chosen automatically or
  // asked for). Failed, the automatic choice keeps to OneShot (logged at info: which
  // device, its driver, what was not seen); asked for, the communicator is refused with
  // the reason, as TPAR_SYNC=native is where NativeImport's fails.
  void test(const DeviceGroup& group) {
    if (!setup_.needs_test()) return;
    try {
      test_ = detail::relay_self_test(group, relay_self_test_plan(setup_), leftovers_);
    } catch (const Error& e) {
      if (setup_.asked) throw;
      test_ = {};
      test_.ran = true;
      test_.reason = std::string("the relay's self-test could not run (") + e.what() + ")";
      setup_.off = true;
      log(LogLevel::warning, test_.reason + "; calls that would take the relay take OneShot");
      return;
    }
    if (test_.passed) return;
    if (setup_.asked) throw RelayRefusal(ErrorCode::unsupported, "the relay was asked for (TPAR_ALGO=relay) but " + test_.reason);
    setup_.off = true;
    log(LogLevel::info, test_.reason + "; calls that would take the relay take OneShot" +
                            (test_.conclusive ? std::string(" (TPAR_ALGO=relay is refused on these devices)")
                                              : std::string(" for this communicator (not a verdict: the next one tests again)")));
  }

  // The relay's host side, made with its first call. Where the automatic choice took the
  // relay and it cannot be made (its memory), calls go on without it (false); asked for,
  // the call fails with nothing enqueued.
  bool ensure(const DeviceGroup& group, std::size_t count, const Options& options, const std::shared_ptr<Health>& health) {
    if (count * sizeof(float) > options.relay_max_bytes)
      throw Error(ErrorCode::invalid_argument, "the relay takes calls up to relay_max_bytes (" +
                                                   std::to_string(options.relay_max_bytes) + " bytes); this one has " +
                                                   std::to_string(count * sizeof(float)));
    if (hub_) return true;
    try {
      hub_ = std::make_unique<RelayHub>(group, setup_.config, [h = health](const Error& e) { h->fail(e); });
      // A failure anywhere (a ticket's timeout, a lost device) ends the relay's calls at
      // once: no kernel waits on, and no late sum reaches a buffer after the error.
      health->set_hook([hub = hub_.get()] { hub->abort(); });
      // A host wait returns a relay call as done only where no kernel gave up on its sum.
      health->set_verify([hub = hub_.get()] { hub->verify(); });
    } catch (const Error& e) {
      if (setup_.asked) throw;
      log(LogLevel::warning, std::string("the relay is unavailable (") + e.what() + "); small calls take OneShot");
      setup_.off = true;
      return false;
    }
    return true;
  }

  // The host side, or null before the first relay call.
  RelayHub* hub() const { return hub_.get(); }
  // Ends the relay's calls now, where it was made (RelayHub::abort).
  void abort() {
    if (hub_) hub_->abort();
  }

  // What the self-test found at creation (ran is false where it did not run).
  const RelaySelfTest& self_test() const { return test_; }
  // Whether the automatic choice may take the relay: the gate allows it, its self-test
  // passed, its memory was made.
  bool automatic() const { return setup_.gate.automatic && !setup_.off; }
  // The relay's part of a schedule request (RelaySetup::fill).
  void fill(ScheduleRequest& rq, const Options& options) const { setup_.fill(rq, options); }

  // The slot sets the calls of `schedule` take turns in: the staging's own, or where the
  // relay carries them, the relay's (max_slot_sets, in its slots and publish areas): its
  // calls in flight do not depend on how large the staging is, so after a prefill has
  // grown the staging to a few large sets, decode's relay calls still have all of theirs.
  static std::uint32_t slot_sets(const Schedule& schedule, std::uint32_t staging_sets, const Options& options) {
    return takes_relay(schedule) ? options.max_slot_sets() : staging_sets;
  }

  // What outlives the communicator where work on the queues still uses it (detail::remains()).
  std::unique_ptr<RelayHub> take_hub() { return std::move(hub_); }
  std::unique_ptr<RelaySelfTestLeftovers> take_leftovers() { return std::move(leftovers_); }

 private:
  RelaySetup setup_;
  std::unique_ptr<RelayHub> hub_;  // made by the first relay call
  RelaySelfTest test_;
  std::unique_ptr<RelaySelfTestLeftovers> leftovers_;  // self-test kernels still running
};

}  // namespace tpar::inline v0::detail
