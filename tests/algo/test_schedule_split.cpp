// The split of a schedule into each device's leading part and the rest
// (sync/schedule_split.hpp): on the algorithms' own schedules, and on hand-made ones where
// a peer's wait falls just inside or just outside the leading part.
#include <doctest/doctest.h>
#include <tpar/algo/chunked_ring.hpp>
#include <tpar/algo/one_shot.hpp>
#include <tpar/algo/relay.hpp>
#include <tpar/sync/schedule_split.hpp>

#include <vector>

using namespace tpar;

namespace {

ScheduleRequest request(std::uint32_t devices, std::size_t count) {
  ScheduleRequest rq;
  rq.devices = devices;
  rq.count = count;
  return rq;
}

// Two devices: device 0 runs [upload, compute], device 1 one compute batch that waits on
// device 0's upload (`on_upload`) or on its compute batch.
Schedule two_devices(bool on_upload) {
  Schedule s;
  s.devices.resize(2);
  Batch upload;
  upload.role = Role::transfer;
  Batch compute;
  compute.role = Role::compute;
  s.devices[0].batches = {upload, compute};
  Batch waiting;
  waiting.role = Role::compute;
  waiting.waits.push_back(on_upload ? BatchRef{0, Role::transfer, 0} : BatchRef{0, Role::compute, 0});
  s.devices[1].batches = {waiting};
  return s;
}

}  // namespace

TEST_CASE("a peer's wait within the leading part or past it") {
  const Schedule upload = two_devices(true), compute = two_devices(false);
  const std::vector<std::size_t> first_only = {1, 0}, both = {2, 0}, none = {0, 0};
  CHECK(peer_waits_within(upload, first_only));
  CHECK_FALSE(peer_waits_within(upload, none));
  CHECK_FALSE(peer_waits_within(compute, first_only));  // device 0's batch 1: past its leading part
  CHECK(peer_waits_within(compute, both));
  // Waits on the device's own batches never count.
  Schedule own = upload;
  own.devices[0].batches[1].waits.push_back({0, Role::transfer, 0});
  CHECK(peer_waits_within(own, first_only));
  CHECK_FALSE(waits_on_host_only(upload));
  own.devices[1].batches[0].waits.clear();
  CHECK(waits_on_host_only(own));
}

TEST_CASE("the leading part ends at the first wait on a peer or on the relay") {
  Schedule s = two_devices(true);
  CHECK(leading_batches(s, 0) == 2);
  CHECK(leading_batches(s, 1) == 0);
  s.devices[0].batches[1].wait_relay = true;
  CHECK(leading_batches(s, 0) == 1);
  s.devices[0].batches[1].wait_relay = false;
  s.devices[0].batches[1].waits.push_back({0, Role::transfer, 0});  // its own upload
  CHECK(leading_batches(s, 0) == 2);
}

TEST_CASE("OneShot splits per device, the ring does not, the relay waits on its host thread only") {
  for (std::uint32_t n : {2u, 3u, 4u}) {
    CAPTURE(n);
    const Schedule one = OneShot::build(request(n, 4096));
    CHECK(splits_per_device(one));
    CHECK_FALSE(waits_on_host_only(one));
    for (std::uint32_t d = 0; d < n; ++d) CHECK(leading_batches(one, d) == 1);  // the publish; the sum waits on the peers

    const Schedule ring = ChunkedRing::build(request(n, 1 << 16));
    CHECK_FALSE(splits_per_device(ring));
    CHECK_FALSE(waits_on_host_only(ring));

    ScheduleRequest rq = request(n, 1024);
    const Schedule relay = Relay::build(rq);
    CHECK(waits_on_host_only(relay));
    rq.relay.queue_waits = ~0u;  // the sum awaited at the queue: the second batch waits on the host thread
    const Schedule queued = Relay::build(rq);
    CHECK(waits_on_host_only(queued));
    for (std::uint32_t d = 0; d < n; ++d) CHECK(leading_batches(queued, d) == 1);
  }
}
