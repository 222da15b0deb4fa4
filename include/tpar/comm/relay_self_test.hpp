// tpar::relay_self_test(group, options) — the relay's self-test without a communicator.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/relay_self_test.hpp>
#include <tpar/core/options.hpp>
#include <tpar/vk/device_group.hpp>

#include <chrono>
#include <memory>

namespace tpar::inline v0 {

// The relay's self-test on `group`, as a communicator with `options` and the relay asked
// for runs it at creation (docs/relay.md, "The self-test"), without making one: every
// device tested in the form the relay runs there, the verdicts cached for the process as
// a communicator's are (a cached one says so). For reports (tpar-info --self-test), and
// for a host that wants the verdicts before it builds anything. Throws where the relay
// cannot run on the group at all (the gate's reason) and where a Vulkan call fails.
inline RelaySelfTest relay_self_test(const DeviceGroup& group, Options options = {}) {
  options.algo = AlgoChoice::relay;
  const auto setup = detail::RelaySetup::check(group, options);
  std::unique_ptr<detail::RelaySelfTestLeftovers> left;
  RelaySelfTest out = detail::relay_self_test(group, detail::relay_self_test_plan(setup), left);
  // A kernel that did not see the host's write ends at its spin bound; kept for good if not.
  if (left && !left->finished(setup.test_start_bound + std::chrono::seconds(2))) (void)left.release();
  return out;
}

}  // namespace tpar::inline v0
