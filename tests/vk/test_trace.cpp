// The trace (vk/trace.hpp): run with TPAR_TRACE naming a file (tests/CMakeLists.txt sets
// it). A window over a stream's submissions and an AllReduce gives host spans, and GPU
// spans for every command buffer, ggml's and tpar's alike, each after its submission and
// inside the window, tpar's labelled; outside a window nothing is recorded and nothing
// is stamped.
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>
#include <tpar/comm/stream.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/vk_env.hpp"

#include <fstream>
#include <sstream>
#include <string>

using namespace tpar;
using namespace tpar_test;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("a trace window: host spans, and GPU spans of the host's work and tpar's batches") {
  Trace& trace = Trace::instance();
  if (!trace.enabled()) {
    MESSAGE("[skipped] TPAR_TRACE is not set for this run");
    return;
  }
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  Options o;
  o.timeout = test_timeout;
  auto comm = make_communicator(env.group(), o);
  Rig rig(env.group(), 4096);
  const auto inputs = integer_inputs(2, 4096, 3);
  rig.write(inputs);
  std::vector<std::unique_ptr<Stream>> streams;
  for (std::size_t d = 0; d < 2; ++d) {
    Queue& q = env.group()[d].compute_queue();
    TraceQueue t;
    t.name = "device " + std::to_string(d);
    t.timestamp_bits = env.group()[d].capabilities().queue_families[q.family()].timestampValidBits;
    t.period_ns = env.group()[d].capabilities().timestamp_period_ns;
    streams.push_back(std::make_unique<Stream>(env.group()[d].handle(), q.handle(), q.family(), q.shared_lock(), t));
  }
  if (env.group()[0].capabilities().queue_families[env.group()[0].compute_queue().family()].timestampValidBits == 0) {
    MESSAGE("[skipped] the device's queue writes no timestamps");
    return;
  }
  {
    StreamAllreduce<AnyCommunicator> ar(comm, {streams[0].get(), streams[1].get()});
    // Outside the window: one call, nothing recorded.
    ar.allreduce(rig.spans()).wait(test_timeout);
    CHECK_FALSE(trace.on());
    rig.write(inputs);
    trace.begin_window();
    CHECK(trace.on());
    {
      auto span = trace.span("test span");
      ar.allreduce(rig.spans()).wait(test_timeout);
    }
    trace.step();
    trace.end_window("the test");
    CHECK_FALSE(trace.on());
  }
  const auto expect = integer_sum(inputs);
  for (const auto& r : rig.read()) CHECK(bit_identical(r, expect));
  const std::string json = read_file(trace.path());
  REQUIRE_FALSE(json.empty());
  CHECK(json.find("\"traceEvents\"") != std::string::npos);
  CHECK(count_of(json, "\"name\":\"test span\"") == 1);
  CHECK(count_of(json, "\"name\":\"vkQueueSubmit\"") >= 2);  // a submission per device at least
  // tpar's batches of the one call, on both devices: OneShot's publish and sum on each.
  CHECK(count_of(json, "\"name\":\"tpar oneshot transfer\"") == 2);
  CHECK(count_of(json, "\"name\":\"tpar oneshot compute (waits on peers)\"") == 2);
  CHECK(json.find("\"steps\":1") != std::string::npos);
  CHECK(json.find("\"truncated\":false") != std::string::npos);
  CHECK(json.find("\"lost_stamps\":0") != std::string::npos);
  CHECK(json.find("\"why_closed\":\"the test\"") != std::string::npos);
}
