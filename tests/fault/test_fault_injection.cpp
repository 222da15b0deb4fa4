// Every Vulkan failure tpar can meet, injected one at a time (tests/fault/vulkan_faults.hpp):
// for each phase (group creation, communicator creation, a OneShot call, a ring call,
// deferred calls, destruction with work in flight), each kind of call and each result it
// can fail with, the k-th such call fails, for k = 1, 2, 3, ... until a run meets no k-th
// call. Every run must end in success (sums exact) or a tpar::Error whose code is the
// injected result's; nothing may hang, crash or leak (Vulkan objects counted through the
// wrappers, file descriptors through /proc/self/fd); a call refused before anything
// reached a queue leaves the buffers as they were; after an error the communicator either
// reports failure() and refuses calls, or its next call is exact. The C API's codes are
// checked the same way. TPAR_FAULT_TABLE=path writes the table (docs/testing.md).
#include <doctest/doctest.h>
#include <tpar/c_api_impl.hpp>
#include <tpar/comm/detail/relay_self_test.hpp>

#include "fault/vulkan_faults.hpp"
#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/vk_env.hpp"

#include <dirent.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

using namespace tpar;
using namespace tpar_test;
using namespace std::chrono_literals;
using fault::Kind;

namespace {

enum class Phase { group, comm, relay_test, oneshot, ring, deferred, rerecord, destroy, long_ring };
constexpr Phase all_phases[] = {Phase::group,    Phase::comm,     Phase::relay_test, Phase::oneshot,
                                Phase::ring,     Phase::deferred, Phase::rerecord,   Phase::destroy};

const char* name_of(Phase p) {
  switch (p) {
    case Phase::group: return "group creation";
    case Phase::comm: return "communicator creation";
    case Phase::relay_test: return "communicator creation, the relay asked for (its self-test)";
    case Phase::oneshot: return "call, OneShot";
    case Phase::ring: return "call, ring";
    case Phase::deferred: return "deferred calls + flush";
    case Phase::rerecord: return "3 calls, adopted devices without update-after-bind";
    case Phase::destroy: return "destruction, work in flight";
    case Phase::long_ring: return "call, ring of 64 pieces a chunk (queues of over 64 batches)";
  }
  return "?";
}

// The results each kind of call can fail with.
std::vector<VkResult> results_of(Kind kind) {
  switch (kind) {
    case Kind::create: return {VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY};
    case Kind::bind: return {VK_ERROR_OUT_OF_DEVICE_MEMORY};
    case Kind::record: return {VK_ERROR_OUT_OF_HOST_MEMORY};
    case Kind::submit: return {VK_ERROR_DEVICE_LOST, VK_ERROR_OUT_OF_HOST_MEMORY};
    case Kind::wait: return {VK_TIMEOUT, VK_ERROR_DEVICE_LOST};
    case Kind::query: return {VK_ERROR_DEVICE_LOST};
    case Kind::signal: return {VK_ERROR_DEVICE_LOST};
    case Kind::external: return {VK_ERROR_OUT_OF_HOST_MEMORY};
    case Kind::enumerate: return {VK_ERROR_OUT_OF_HOST_MEMORY};
  }
  return {};
}

const char* short_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_DEVICE_LOST: return "DEVICE_LOST";
    case VK_TIMEOUT: return "TIMEOUT";
    default: return "?";
  }
}

ErrorCode code_for(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return ErrorCode::out_of_memory;
    case VK_ERROR_DEVICE_LOST: return ErrorCode::device_lost;
    case VK_TIMEOUT: return ErrorCode::timeout;
    default: return ErrorCode::vulkan_error;
  }
}

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

// Errors tpar logs (destruction reports what it could not do there).
struct LogCapture {
  std::mutex mutex;
  std::vector<std::string> errors;
  LogCapture() {
    set_log_sink([this](LogLevel level, std::string_view text) {
      if (level < LogLevel::error) return;
      std::lock_guard lock(mutex);
      errors.emplace_back(text);
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return errors.size();
  }
};

// Aborts the process, saying which run, where one runs past `limit`: a hang is a failure
// that no later check would see.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) : thread_([this, limit] {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      const auto started = started_;
      if (!cv_.wait_for(lock, limit, [&] { return stop_ || started_ != started; }) && !what_.empty()) {
        std::fprintf(stderr, "fault injection: no end after %lld s: %s\n", static_cast<long long>(limit.count()), what_.c_str());
        std::_Exit(3);
      }
    }
  }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::string what) {
    std::lock_guard lock(mutex_);
    what_ = std::move(what);
    ++started_;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t started_ = 0;
  std::string what_;
  std::thread thread_;
};

constexpr std::uint32_t devices = 2;
constexpr std::size_t small = 4096, large = 20000;
// Phase::long_ring: 64 pieces of 512 values a chunk at n=2, so that each device's queues
// get more batches than one vkQueueSubmit carries (Queue::max_batches_per_submit).
constexpr std::size_t long_piece_bytes = 2048, longest = devices * max_pieces_per_chunk * long_piece_bytes / sizeof(float);
static_assert(devices * max_pieces_per_chunk > Queue::max_batches_per_submit);

bool ring_phase(Phase p) { return p == Phase::ring || p == Phase::long_ring; }
std::size_t b_count(Phase p) { return p == Phase::ring ? large : p == Phase::long_ring ? longest : small; }

Options comm_options(Phase phase, SyncChoice sync) {
  Options o;
  o.sync = sync;
  o.timeout = 5s;  // every wait tpar makes is bounded by it; injected timeouts come at once
  o.algo = ring_phase(phase) ? AlgoChoice::ring : phase == Phase::relay_test ? AlgoChoice::relay : AlgoChoice::oneshot;
  o.piece_bytes = phase == Phase::long_ring ? long_piece_bytes : 8192;  // the ring's chunks in several pieces
  o.depth = 2;
  return o;
}

// The validation layer watches the failure paths where it is 1.3.296 or newer (and not
// turned off with TPAR_TEST_NO_VALIDATION): older ones stall 10 s at a time in their
// own timeline tracking under ProxyBridge's host signals (docs/testing.md), which would
// make every run slow and turn bounded waits into spurious timeouts. Its errors fail the
// run that caused them.
ValidationLog& validation() {
  static ValidationLog log;
  return log;
}

GroupOptions group_options() {
  GroupOptions g = test_options(validation(), devices);
  g.validation = g.validation && validation_layer_version() >= VK_MAKE_API_VERSION(0, 1, 3, 296);
  return g;
}

// The group's devices adopted as a host would hand them over, without
// update-after-bind: a call on buffers a plan has not seen records its kernels again.
DeviceGroup adopt_without_update_after_bind(DeviceGroup& group) {
  std::vector<AdoptedDevice> adopted(group.size());
  for (std::size_t i = 0; i < group.size(); ++i) {
    auto& d = group[i];
    auto& a = adopted[i];
    a.instance = group.instance();
    a.physical = d.physical();
    a.device = d.handle();
    a.compute_queue = d.compute_queue().handle();
    a.compute_family = d.compute_queue().family();
    a.enabled_extensions = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
    if (d.enabled().external_semaphore_fd) a.enabled_extensions.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
    a.update_after_bind_enabled = false;
  }
  return DeviceGroup::adopt(adopted);
}

// One run's verdict: a line for the table, and what went wrong (empty: nothing).
struct Verdict {
  std::string outcome = "success";
  std::string problem;
  // NativeImport's self-test judges sharing by whether a wait ends in time: a timeout
  // there means "cannot share", reported as unsupported (make_communicator then falls
  // back to ProxyBridge unless NativeImport was asked for).
  bool timeout_may_be_unsupported = false;
  void error(const Error& e, VkResult injected, const char* where) {
    outcome = std::string(where) + ": " + std::string(make_error_code(e.code_value()).message());
    if (std::string(e.what()).empty()) problem += std::string(where) + ": an error with no message; ";
    const bool unsupported_ok =
        timeout_may_be_unsupported && injected == VK_TIMEOUT && e.code_value() == ErrorCode::unsupported;
    if (e.code_value() != code_for(injected) && e.code_value() != ErrorCode::failed && !unsupported_ok)
      problem += std::string(where) + ": code '" + make_error_code(e.code_value()).message() + "' for an injected " +
                 short_name(injected) + " (" + e.what() + "); ";
  }
};

bool exact(Rig& rig, const std::vector<std::vector<float>>& x) {
  const auto expect = integer_sum(x);
  for (const auto& r : rig.read())
    if (!bit_identical(r, expect)) return false;
  return true;
}

bool untouched(Rig& rig, const std::vector<std::vector<float>>& x) {
  const auto got = rig.read();
  for (std::size_t d = 0; d < x.size(); ++d)
    if (!bit_identical(got[d], x[d])) return false;
  return true;
}

// After an error in a call: either the communicator says it failed and refuses the next
// call, or the next call (nothing injected any more) is exact.
void check_after_error(AnyCommunicator& comm, DeviceGroup& group, Rig& rig, Verdict& v) {
  const auto x = integer_inputs(devices, small, 99);
  if (comm.failure()) {
    try {
      (void)comm.allreduce(rig.spans());
      v.problem += "a failed communicator accepted a call; ";
    } catch (const Error& e) {
      if (e.code_value() != ErrorCode::failed) v.problem += std::string("a failed communicator refused with '") + e.what() + "'; ";
    }
    return;
  }
  Rig fresh(group, small);
  fresh.write(x);
  try {
    comm.allreduce(fresh.spans()).wait();
    if (!exact(fresh, x)) v.problem += "the call after the error is wrong, and failure() is not set; ";
  } catch (const Error& e) {
    v.problem += std::string("the call after the error failed (") + e.what() + ") and failure() was not set; ";
  }
}

// One run of the C++ API: every phase, the injection armed in one of them.
Verdict run_cpp(Phase phase, SyncChoice sync, Kind kind, VkResult result, std::uint64_t k) {
  Verdict v;
  // Also the relay's self-test: a wait for its kernel that "timed out" is a kernel that did
  // not finish, which refuses the relay asked for (unsupported), with the reason.
  v.timeout_may_be_unsupported = (sync == SyncChoice::native && phase == Phase::comm) || phase == Phase::relay_test;
  if (phase == Phase::relay_test) detail::relay_self_test_cache().clear();  // tested anew in every run
  auto armed = [&](Phase p, auto&& f) {
    if (p == phase) fault::arm(kind, result, k);
    struct Disarm {
      ~Disarm() { fault::disarm(); }
    } guard;
    return f();
  };
  LogCapture log;
  std::optional<DeviceGroup> group;
  try {
    armed(Phase::group, [&] { group = DeviceGroup::create(group_options()); });
  } catch (const Error& e) {
    v.error(e, result, "create");
    return v;
  }
  Rig a(*group, small), b(*group, b_count(phase));
  const auto xa = integer_inputs(devices, small, 1 + k), xb = integer_inputs(devices, b_count(phase), 2 + k);
  a.write(xa);
  b.write(xb);
  std::optional<DeviceGroup> adopted;
  if (phase == Phase::rerecord) adopted = adopt_without_update_after_bind(*group);
  DeviceGroup& used = adopted ? *adopted : *group;
  std::optional<AnyCommunicator> comm;
  try {
    const Phase creation = phase == Phase::relay_test ? Phase::relay_test : Phase::comm;
    armed(creation, [&] { comm.emplace(make_communicator(used, comm_options(phase, sync))); });
  } catch (const Error& e) {
    v.error(e, result, "create");
    return v;
  }
  if (phase == Phase::group || phase == Phase::comm || phase == Phase::relay_test) {
    try {
      comm->allreduce(a.spans()).wait();
      if (!exact(a, xa)) v.problem += "the first call after creation is wrong; ";
    } catch (const Error& e) {
      v.problem += std::string("the first call after a successful creation failed: ") + e.what() + "; ";
    }
    return v;
  }
  if (phase == Phase::destroy) {
    (void)comm->allreduce(a.spans());
    (void)comm->allreduce(b.spans(), {.defer = true});
    const std::size_t logged = log.count();
    armed(Phase::destroy, [&] { comm.reset(); });
    if (log.count() > logged) v.outcome = "destroy: logged an error";
    else if (!exact(a, xa) || !exact(b, xb)) v.problem += "destruction logged nothing, yet the calls in flight are wrong; ";
    return v;
  }
  // A call: OneShot (on a), ring (on b), two deferred calls (a, b) and a flush, or three
  // calls alternating a and b, the third recording its kernels again.
  const bool uses_a = !ring_phase(phase), uses_b = phase != Phase::oneshot;
  const std::uint64_t submits = fault::submits();
  bool from_wait = false;
  try {
    armed(phase, [&] {
      if (phase == Phase::deferred) {
        Ticket ta = comm->allreduce(a.spans(), {.defer = true});
        Ticket tb = comm->allreduce(b.spans(), {.defer = true});
        comm->flush();
        from_wait = true;
        ta.wait();
        tb.wait();
      } else if (phase == Phase::rerecord) {
        // a, b, then a + b (in place on a): each call waited for before the next.
        for (Rig* r : {&a, &b}) {
          from_wait = false;
          Ticket t = comm->allreduce(r->spans());
          from_wait = true;
          t.wait();
        }
        a.write(xb);
        from_wait = false;
        Ticket t = comm->allreduce(a.spans());
        from_wait = true;
        t.wait();
      } else {
        Rig& r = ring_phase(phase) ? b : a;
        Ticket t = comm->allreduce(r.spans());
        from_wait = true;
        t.wait();
      }
    });
    if ((uses_a && !exact(a, phase == Phase::rerecord ? xb : xa)) || (uses_b && !exact(b, xb)))
      v.problem += "a call that succeeded is wrong; ";
  } catch (const Error& e) {
    v.error(e, result, from_wait ? "wait" : "call");
    if (fault::submits() == submits) {
      // Refused before anything reached a queue: nothing changed.
      if ((uses_a && !untouched(a, xa)) || (uses_b && !untouched(b, xb)))
        v.problem += "a call refused before reaching a queue changed a buffer; ";
    }
    check_after_error(*comm, used, a, v);
  }
  return v;
}

// The same through the C API: each call's tpar_result must be TPAR_SUCCESS or the
// injected result's code (never TPAR_ERROR_INTERNAL), with a message, and a failed
// call leaves its out-pointer NULL.
Verdict run_c(Phase phase, Kind kind, VkResult result, std::uint64_t k) {
  Verdict v;
  LogCapture log;
  struct Handles {
    tpar_group* group = nullptr;
    tpar_comm* comm = nullptr;
    std::vector<tpar_ticket*> tickets;
    std::optional<Rig> a, b;
    ~Handles() {
      for (auto* t : tickets) tpar_ticket_free(t);
      tpar_comm_destroy(comm);
      a.reset();
      b.reset();
      tpar_group_destroy(group);
    }
  } h;
  auto ok = [&](tpar_result r, const char* where) {
    if (r == TPAR_SUCCESS) return true;
    v.outcome = std::string(where) + ": " + tpar_result_string(r);
    if (!*tpar_last_error_message()) v.problem += std::string(where) + ": no message; ";
    if (r != static_cast<int>(code_for(result)) && r != TPAR_ERROR_FAILED)
      v.problem += std::string(where) + ": " + tpar_result_string(r) + " for an injected " + short_name(result) + " (" +
                   tpar_last_error_message() + "); ";
    return false;
  };
  auto armed = [&](Phase p, auto&& f) {
    if (p == phase) fault::arm(kind, result, k);
    const tpar_result r = f();
    fault::disarm();
    return r;
  };
  tpar_group_options go{};
  go.virtual_count = devices;
  go.validation = group_options().validation;
  if (!ok(armed(Phase::group, [&] { return tpar_group_create(&go, &h.group); }), "create")) {
    if (h.group) v.problem += "a failed tpar_group_create set *out_group; ";
    return v;
  }
  DeviceGroup& group = h.group->group;
  h.a.emplace(group, small);
  h.b.emplace(group, small);
  const auto xa = integer_inputs(devices, small, 1 + k), xb = integer_inputs(devices, small, 2 + k);
  h.a->write(xa);
  h.b->write(xb);
  auto spans = [](Rig& r) {
    std::vector<tpar_buffer_span> out;
    for (const auto& s : r.spans()) out.push_back({static_cast<VkBuffer>(s.buffer), s.offset, s.count, s.buffer_size});
    return out;
  };
  const auto sa = spans(*h.a), sb = spans(*h.b);
  tpar_comm_options co{};
  co.sync = TPAR_SYNC_PROXY;
  co.algo = TPAR_ALGO_ONESHOT;
  co.timeout_ns = 5'000'000'000ull;
  if (!ok(armed(Phase::comm, [&] { return tpar_comm_create(h.group, &co, &h.comm); }), "create")) {
    if (h.comm) v.problem += "a failed tpar_comm_create set *out_comm; ";
    return v;
  }
  auto call = [&](const std::vector<tpar_buffer_span>& s, bool defer, tpar_result* r) {
    tpar_allreduce_args args{};
    args.flags = defer ? TPAR_ALLREDUCE_DEFER : 0;
    tpar_ticket* t = nullptr;
    *r = tpar_allreduce(h.comm, s.data(), devices, &args, &t);
    if (t) h.tickets.push_back(t);
    else if (*r == TPAR_SUCCESS) v.problem += "tpar_allreduce succeeded with no ticket; ";
    return t;
  };
  if (phase == Phase::group || phase == Phase::comm) {
    tpar_result r;
    tpar_ticket* t = call(sa, false, &r);
    if (r != TPAR_SUCCESS || tpar_ticket_wait(t, 0) != TPAR_SUCCESS || !exact(*h.a, xa))
      v.problem += std::string("the first call after a successful creation failed: ") + tpar_last_error_message() + "; ";
    return v;
  }
  if (phase == Phase::destroy) {
    tpar_result r;
    (void)call(sa, false, &r);
    (void)call(sb, true, &r);
    const std::size_t logged = log.count();
    (void)armed(Phase::destroy, [&] {
      tpar_comm_destroy(h.comm);
      return TPAR_SUCCESS;
    });
    h.comm = nullptr;
    if (log.count() > logged) v.outcome = "destroy: logged an error";
    else if (!exact(*h.a, xa) || !exact(*h.b, xb)) v.problem += "destruction logged nothing, yet the calls in flight are wrong; ";
    return v;
  }
  // A OneShot call, or two deferred calls and a flush.
  const std::uint64_t submits = fault::submits();
  const bool deferred = phase == Phase::deferred;
  tpar_result r = armed(phase, [&] {
    tpar_result r1 = TPAR_SUCCESS, r2 = TPAR_SUCCESS;
    tpar_ticket* ta = call(sa, deferred, &r1);
    if (r1 != TPAR_SUCCESS) return r1;
    if (deferred) {
      tpar_ticket* tb = call(sb, true, &r2);
      if (r2 != TPAR_SUCCESS) return r2;
      if (tpar_result f = tpar_comm_flush(h.comm); f != TPAR_SUCCESS) return f;
      if (tpar_result w = tpar_ticket_wait(tb, 0); w != TPAR_SUCCESS) return w;
    }
    return tpar_ticket_wait(ta, 0);
  });
  if (ok(r, "call")) {
    if (!exact(*h.a, xa) || (deferred && !exact(*h.b, xb))) v.problem += "a call that succeeded is wrong; ";
    return v;
  }
  if (fault::submits() == submits && (!untouched(*h.a, xa) || !untouched(*h.b, xb)))
    v.problem += "a call refused before reaching a queue changed a buffer; ";
  // Failed (tpar_comm_status says so) and refusing, or its next call exact.
  const tpar_result status = tpar_comm_status(h.comm);
  Rig fresh(group, small);
  const auto x = integer_inputs(devices, small, 99);
  fresh.write(x);
  tpar_result next;
  tpar_ticket* t = call(spans(fresh), false, &next);
  if (status != TPAR_SUCCESS) {
    if (next != TPAR_ERROR_FAILED) v.problem += std::string("a failed communicator answered a call with ") + tpar_result_string(next) + "; ";
  } else if (next != TPAR_SUCCESS || tpar_ticket_wait(t, 0) != TPAR_SUCCESS || !exact(fresh, x)) {
    v.problem += std::string("the call after the error failed, and tpar_comm_status said success: ") + tpar_last_error_message() + "; ";
  }
  for (auto* tk : h.tickets) tpar_ticket_free(tk);
  h.tickets.clear();
  tpar_comm_destroy(h.comm);  // before `fresh` goes: it waits for the work on it
  h.comm = nullptr;
  return v;
}

struct Row {
  std::string phase, kind, result;
  std::uint64_t injected = 0;
  std::map<std::string, int> outcomes;
  bool filtered = false;  // left out by TPAR_FAULT_ONLY: not run
};

std::string outcomes_text(const std::map<std::string, int>& m) {
  std::string s;
  for (const auto& [what, n] : m) s += (s.empty() ? "" : "; ") + what + " x" + std::to_string(n);
  return s.empty() ? "-" : s;
}

// Runs k = 1, 2, ... until a run meets no k-th call; checks every run.
template <class RunOnce>
Row sweep(const std::string& phase, Kind kind, VkResult result, Watchdog& watchdog, RunOnce&& run_once) {
  Row row{phase, std::string(fault::to_string(kind)), short_name(result)};
  // TPAR_FAULT_ONLY=text|text...: only the sweeps whose label contains one of them.
  if (const char* only = std::getenv("TPAR_FAULT_ONLY")) {
    const std::string label = phase + " / " + row.kind + " / " + row.result;
    std::istringstream parts(only);
    bool wanted = false;
    for (std::string part; std::getline(parts, part, '|');) wanted |= !part.empty() && label.find(part) != std::string::npos;
    if (!wanted) {
      row.filtered = true;
      return row;
    }
  }
  for (std::uint64_t k = 1;; ++k) {
    const std::string what = phase + " / " + row.kind + " / " + row.result + " / k=" + std::to_string(k);
    watchdog.start(what);
    const std::size_t fds = open_fds(), objects = fault::live_count();
    Verdict v = run_once(k);
    {
      auto& log = validation();
      std::lock_guard lock(log.mutex);
      for (const auto& e : log.errors) v.problem += "validation: " + e + "; ";
      log.errors.clear();
    }
    const bool hit = fault::fired();
    const std::string where = fault::fired_in();
    if (!hit) {
      CHECK_MESSAGE(v.outcome == "success", what << ": no injection, yet " << v.outcome);
    } else {
      ++row.injected;
      ++row.outcomes[v.outcome];
    }
    CHECK_MESSAGE(v.problem.empty(), what << " (" << where << "): " << v.problem);
    CHECK_MESSAGE(fault::live_count() == objects, what << " (" << where << "): Vulkan objects left: " << fault::live_objects());
    CHECK_MESSAGE(open_fds() == fds, what << " (" << where << "): " << open_fds() << " fds open, " << fds << " before");
    if (!hit) break;
    REQUIRE_MESSAGE(k < 2000, what << ": the sweep does not end");
  }
  return row;
}

void write_table(const std::vector<Row>& rows, const char* title) {
  std::ostringstream out;
  out << "| phase | kind | result | runs injected | outcomes |\n|---|---|---|---|---|\n";
  for (const auto& r : rows)
    out << "| " << r.phase << " | " << r.kind << " | " << r.result << " | " << r.injected << " | " << outcomes_text(r.outcomes)
        << " |\n";
  MESSAGE(std::string(title) << "\n" << out.str());
  if (const char* path = std::getenv("TPAR_FAULT_TABLE")) {
    std::ofstream f(path, std::ios::app);
    f << "### " << title << "\n\n" << out.str() << "\n";
  }
}

bool ready() {
  std::string why;
  if (!fault::install(&why)) {
    MESSAGE("[skipped] " << why);
    return false;
  }
  return true;
}

// A group that lives through the sweeps. Created before them, it makes (unless an earlier
// create did) the instance DeviceGroup keeps for the process's life to hold the drivers
// loaded (detail::anchor_drivers) before any sweep counts calls, objects or files: no
// sweep's k-th vkCreateInstance lands on that one. Its own instance keeps loaded what that one
// does not, the validation layer where the sweeps enable it. Before tpar kept the drivers
// loaded, this group was what did: the NVIDIA driver opened its device files when the
// loader loaded it and closed them when the last instance went, which a run's file count
// took for a leak, and after many such cycles in one process its next load found no
// usable ICD (H200, driver 580.159.04).
std::optional<DeviceGroup> keep_driver_loaded() {
  try {
    return DeviceGroup::create(group_options());
  } catch (const Error& e) {
    MESSAGE("no group to keep the driver loaded: " << e.what());
    return std::nullopt;
  }
}

std::vector<SyncChoice> syncs() {
  std::vector<SyncChoice> out{SyncChoice::proxy};
  const auto group = DeviceGroup::create(group_options());
  if (group.sync_gate().native_possible) out.push_back(SyncChoice::native);
  else MESSAGE("NativeImport is not possible here (" << group.sync_gate().reason << "): ProxyBridge only");
  return out;
}

}  // namespace

TEST_CASE("every Vulkan failure, injected one at a time, ends in success or a clear error: nothing hangs or leaks") {
  if (!ready()) return;
  const auto keeper = keep_driver_loaded();
  Watchdog watchdog(60s);
  bool any_run = false;
  for (SyncChoice sync : syncs()) {
    std::vector<Row> rows;
    for (Phase phase : all_phases) {
      if (phase == Phase::group && sync != SyncChoice::proxy) continue;  // the same for every sync
      for (Kind kind : fault::all_kinds)
        for (VkResult result : results_of(kind))
          rows.push_back(sweep(name_of(phase), kind, result, watchdog,
                               [&](std::uint64_t k) { return run_cpp(phase, sync, kind, result, k); }));
    }
    for (const auto& r : rows) any_run |= !r.filtered;
    write_table(rows, sync == SyncChoice::proxy ? "C++ API, ProxyBridge" : "C++ API, NativeImport");
  }
  if (!any_run) MESSAGE("[skipped] TPAR_FAULT_ONLY leaves out every row of this case");
}

// A call whose queues get more batches than one vkQueueSubmit carries: a failure at any
// of its vkQueueSubmit calls, the first part of a queue's batches submitted and the rest
// not, must end as any other (the values the rest would have signalled are signalled
// from the host, so that what reached the queues drains).
TEST_CASE("a call split over several vkQueueSubmit calls per queue, failing at each of them, ends in a clear error") {
  if (!ready()) return;
  const auto keeper = keep_driver_loaded();
  Watchdog watchdog(60s);
  std::vector<Row> rows;
  for (SyncChoice sync : syncs())
    for (VkResult result : results_of(Kind::submit))
      rows.push_back(sweep(std::string(name_of(Phase::long_ring)) + ", " + std::string(to_string(sync)), Kind::submit, result,
                           watchdog, [&](std::uint64_t k) { return run_cpp(Phase::long_ring, sync, Kind::submit, result, k); }));
  if (std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.filtered; })) {
    MESSAGE("[skipped] TPAR_FAULT_ONLY leaves out every row of this case");
    return;
  }
  for (const auto& r : rows) {
    if (r.filtered) {
      MESSAGE("left out by TPAR_FAULT_ONLY: " << r.phase << " / " << r.result);
      continue;
    }
    CHECK_MESSAGE(r.injected > 2 * devices * 2, r.phase << ": " << r.injected << " runs injected");
  }
  write_table(rows, "C++ API, a call of several vkQueueSubmit calls per queue");
}

// Queue::submit splits a long list into vkQueueSubmit calls of at most
// max_batches_per_submit, in order; where one fails, it says how many batches reached
// the queue, and those (only those) run.
TEST_CASE("Queue::submit splits a long list into vkQueueSubmit calls of at most 64 batches and says how many reached the queue when one fails") {
  if (!ready()) return;
  auto group = DeviceGroup::create(group_options());
  Device& dev = group[0];
  constexpr std::size_t count = 150;  // three calls: 64, 64, 22
  for (bool fail_second : {false, true}) {
    CAPTURE(fail_second);
    Timeline t(dev.handle());
    std::vector<std::uint64_t> values(count);
    std::vector<vk::TimelineSemaphoreSubmitInfo> ti(count);
    std::vector<vk::SubmitInfo> infos(count);
    const vk::Semaphore sem = t.handle();
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = i + 1;
      ti[i] = vk::TimelineSemaphoreSubmitInfo(0, nullptr, 1, &values[i]);
      infos[i] = vk::SubmitInfo(0, nullptr, nullptr, 0, nullptr, 1, &sem, &ti[i]);
    }
    const std::uint64_t before = fault::submits();
    if (fail_second) fault::arm(Kind::submit, VK_ERROR_OUT_OF_HOST_MEMORY, 2);
    std::size_t reached = 12345;
    const vk::Result r = dev.compute_queue().submit(infos, {}, &reached);
    fault::disarm();
    if (!fail_second) {
      CHECK(r == vk::Result::eSuccess);
      CHECK(reached == count);
      CHECK(fault::submits() - before == 3);
      const std::uint64_t want = count;
      CHECK(tpar::wait(dev.handle(), std::span(&sem, 1), std::span(&want, 1), 5s) == vk::Result::eSuccess);
    } else {
      CHECK(r == vk::Result::eErrorOutOfHostMemory);
      CHECK(reached == Queue::max_batches_per_submit);
      CHECK(fault::submits() - before == 1);
      const std::uint64_t want = Queue::max_batches_per_submit;
      REQUIRE(tpar::wait(dev.handle(), std::span(&sem, 1), std::span(&want, 1), 5s) == vk::Result::eSuccess);
      std::this_thread::sleep_for(50ms);  // what did not reach the queue never signals
      CHECK(t.value() == Queue::max_batches_per_submit);
    }
  }
}

TEST_CASE("the C API under the same failures: every status is success or the injected result's code, with a message") {
  if (!ready()) return;
  const auto keeper = keep_driver_loaded();
  Watchdog watchdog(60s);
  std::vector<Row> rows;
  for (Phase phase : {Phase::group, Phase::comm, Phase::oneshot, Phase::deferred, Phase::destroy})
    for (Kind kind : fault::all_kinds)
      for (VkResult result : results_of(kind))
        rows.push_back(sweep(name_of(phase), kind, result, watchdog, [&](std::uint64_t k) { return run_c(phase, kind, result, k); }));
  write_table(rows, "C API, ProxyBridge");
  if (std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.filtered; }))
    MESSAGE("[skipped] TPAR_FAULT_ONLY leaves out every row of this case");
}
