#include <doctest/doctest.h>
#include <tpar/core/error.hpp>
#include <tpar/core/options.hpp>
#include <tpar/core/detail/platform.hpp>
#include <tpar/detail/wire_codec.hpp>
#include <tpar/staging/capacity.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>

using namespace tpar;

TEST_CASE("Error carries a code, the VkResult and the message") {
  Error e(ErrorCode::timeout, "waited 10 ms", vk::Result::eTimeout);
  CHECK(e.code() == ErrorCode::timeout);
  CHECK(e.code().category().name() == std::string("tpar"));
  CHECK(e.vk_result() == vk::Result::eTimeout);
  CHECK(std::string(e.what()).find("waited 10 ms") != std::string::npos);
  CHECK_THROWS_AS(detail::check(vk::Result::eErrorDeviceLost, "submit"), Error);
  try {
    detail::check(vk::Result::eErrorOutOfDeviceMemory, "allocate");
  } catch (const Error& err) {
    CHECK(err.code() == ErrorCode::out_of_memory);
  }
}

TEST_CASE("environment overrides are parsed and unknown values rejected with the valid ones") {
  ::setenv("TPAR_WIRE", "f16", 1);
  ::setenv("TPAR_ALGO", "ring", 1);
  ::setenv("TPAR_SYNC", "proxy", 1);
  auto o = Options{}.with_environment();
  CHECK(o.wire == Wire::f16);
  CHECK(o.algo == AlgoChoice::ring);
  CHECK(o.sync == SyncChoice::proxy);
  // The environment as set is refused with invalid_argument, naming the valid values.
  auto refused = [](const char* valid) {
    try {
      (void)Options{}.with_environment();
      FAIL("no error; expected one naming " << valid);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(valid) != std::string::npos);
    }
  };
  ::setenv("TPAR_WIRE", "fp8", 1);
  refused("auto, f32, bf16, f16");
  ::setenv("TPAR_WIRE", "auto", 1);
  ::setenv("TPAR_SYNC", "nvlink", 1);
  CHECK_THROWS_AS((void)Options{}.with_environment(), Error);
  ::setenv("TPAR_SYNC", "auto", 1);
  ::setenv("TPAR_ALGO", "relay", 1);
  CHECK(Options{}.with_environment().algo == AlgoChoice::relay);
  ::setenv("TPAR_ALGO", "tree", 1);
  refused("auto, ring, oneshot, relay");
  ::unsetenv("TPAR_WIRE");
  ::unsetenv("TPAR_ALGO");
  ::unsetenv("TPAR_SYNC");
  CHECK(Options{}.with_environment().algo == AlgoChoice::automatic);
  CHECK(Options{}.with_environment().stream_hold == 16);
  ::setenv("TPAR_STREAM_HOLD", "1", 1);
  CHECK(Options{}.with_environment().stream_hold == 1);
  ::setenv("TPAR_STREAM_HOLD", "1024", 1);
  CHECK(Options{}.with_environment().stream_hold == 1024);
  for (const char* bad : {"0", "1025", "-3", "8x", " 8", "many"}) {
    CAPTURE(bad);
    ::setenv("TPAR_STREAM_HOLD", bad, 1);
    refused("1 to 1024");
  }
  ::setenv("TPAR_STREAM_HOLD", "", 1);  // empty: unset
  CHECK(Options{}.with_environment().stream_hold == 16);
  ::unsetenv("TPAR_STREAM_HOLD");
  CHECK(Options{}.with_environment().relay_threads == 2);
  ::setenv("TPAR_RELAY_THREADS", "1", 1);
  CHECK(Options{}.with_environment().relay_threads == 1);
  ::setenv("TPAR_RELAY_THREADS", "16", 1);
  CHECK(Options{}.with_environment().relay_threads == 16);
  for (const char* bad : {"0", "17", "-1", "2x", " 2", "all"}) {
    CAPTURE(bad);
    ::setenv("TPAR_RELAY_THREADS", bad, 1);
    refused("1 to 16");
  }
  ::unsetenv("TPAR_RELAY_THREADS");
  CHECK(Options{}.with_environment().relay_ride);
  ::setenv("TPAR_RELAY_RIDE", "0", 1);
  CHECK_FALSE(Options{}.with_environment().relay_ride);
  ::setenv("TPAR_RELAY_RIDE", "1", 1);
  CHECK(Options{}.with_environment().relay_ride);
  for (const char* bad : {"2", "on", "off", "00", " 1", "yes"}) {
    CAPTURE(bad);
    ::setenv("TPAR_RELAY_RIDE", bad, 1);
    refused("0 or 1");
  }
  ::setenv("TPAR_RELAY_RIDE", "", 1);  // empty: unset
  CHECK(Options{}.with_environment().relay_ride);
  ::unsetenv("TPAR_RELAY_RIDE");
  CHECK(Options{}.with_environment().relay_max_bytes == 65536);
  for (auto [given, bytes] : {std::pair{"256K", 262144}, std::pair{"1M", 1048576}, std::pair{"4", 4}, std::pair{"64M", 67108864},
                              std::pair{"4096", 4096}, std::pair{"32k", 32768}}) {
    CAPTURE(given);
    ::setenv("TPAR_RELAY_MAX", given, 1);
    CHECK(Options{}.with_environment().relay_max_bytes == static_cast<std::size_t>(bytes));
  }
  for (const char* bad : {"0", "6", "65M", "64KB", "K", "-4", " 64K", "1G", "99999999999999999999", "17592186044417M"}) {
    CAPTURE(bad);
    ::setenv("TPAR_RELAY_MAX", bad, 1);
    refused("a size of 4 bytes to 64M");
  }
  ::unsetenv("TPAR_RELAY_MAX");
}

TEST_CASE("every environment override of the table applies its values and refuses the rest, naming them") {
  // One value each row takes, and one it does not: a row that applied nothing, or took
  // anything, or listed no valid values in its error, fails here.
  const std::map<std::string_view, std::pair<const char*, const char*>> sample{
      {"TPAR_SYNC", {"proxy", "nvlink"}},        {"TPAR_ALGO", {"oneshot", "tree"}},  {"TPAR_WIRE", {"bf16", "fp8"}},
      {"TPAR_DEPTH", {"7", "129"}},              {"TPAR_RELAY_MAX", {"16K", "3"}},    {"TPAR_RELAY_SUM", {"scalar", "fast"}},
      {"TPAR_RELAY_THREADS", {"3", "17"}},        {"TPAR_RELAY_RIDE", {"0", "2"}},     {"TPAR_STREAM_HOLD", {"5", "1025"}}};
  CHECK(detail::env_options().size() == sample.size());
  const Options base;
  // The members the environment sets.
  const auto same = [](const Options& a, const Options& b) {
    return a.sync == b.sync && a.algo == b.algo && a.wire == b.wire && a.depth == b.depth &&
           a.relay_max_bytes == b.relay_max_bytes && a.relay_scalar_sum == b.relay_scalar_sum &&
           a.relay_threads == b.relay_threads && a.relay_ride == b.relay_ride && a.stream_hold == b.stream_hold;
  };
  for (const detail::EnvOption& row : detail::env_options()) {
    CAPTURE(row.env);
    REQUIRE(sample.count(row.env) == 1);
    const std::string env(row.env);
    const auto [good, bad] = sample.at(row.env);
    ::setenv(env.c_str(), good, 1);
    const Options set = base.with_environment();
    CHECK_FALSE(same(set, base));  // the value changed something
    Options by_row = base;
    CHECK(row.apply(by_row, good));
    CHECK(same(by_row, set));
    ::setenv(env.c_str(), bad, 1);
    try {
      (void)base.with_environment();
      FAIL("accepted " << bad);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()) == env + "=" + bad + " is not valid; use one of: " + row.valid());
    }
    Options untouched = base;
    CHECK_FALSE(row.apply(untouched, bad));
    CHECK(same(untouched, base));
    ::setenv(env.c_str(), "", 1);  // empty: unset
    CHECK(same(base.with_environment(), base));
    ::unsetenv(env.c_str());
  }
  CHECK(detail::choice_names(all_sync_choices) == "auto, native, proxy");
  CHECK(detail::choice_names(all_algo_choices) == "auto, ring, oneshot, relay");
  CHECK(depth_range.text() == "1 to 128");
  CHECK(stream_hold_range.holds(1024));
  CHECK_FALSE(stream_hold_range.holds(1025));
}

TEST_CASE("the default wire is f32 for small payloads and bf16 for large ones") {
  Options o;
  CHECK(o.wire_for(16 << 10) == Wire::f32);
  CHECK(o.wire_for(8 << 20) == Wire::bf16);
  o.wire = Wire::f16;
  CHECK(o.wire_for(16) == Wire::f16);
}

TEST_CASE("bf16 rounds to nearest even, keeps NaN and infinity, and saturates instead of overflowing") {
  using namespace detail;
  CHECK(bf16_encode(1.0f) == 0x3F80u);
  CHECK(bf16_encode(bits_f32(0x3F808000u)) == 0x3F80u);  // tie -> even
  CHECK(bf16_encode(bits_f32(0x3F818000u)) == 0x3F82u);  // tie -> even (up)
  CHECK(bf16_encode(bits_f32(0x3F808001u)) == 0x3F81u);
  CHECK(bf16_encode(std::numeric_limits<float>::infinity()) == 0x7F80u);
  CHECK(std::isnan(bf16_decode(bf16_encode(std::nanf("")))));
  CHECK(bf16_encode(std::numeric_limits<float>::max()) == 0x7F7Fu);
  CHECK(bf16_encode(-std::numeric_limits<float>::max()) == 0xFF7Fu);
}

TEST_CASE("f16 blocks scale so nothing finite overflows, and round within 2^-11") {
  using namespace detail;
  std::mt19937 rng(7);
  for (float magnitude : {1e-30f, 1e-6f, 1.0f, 7e4f, 1e20f, 3.0e38f}) {
    std::vector<float> x(1000);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : x) v = u(rng) * magnitude;
    std::vector<std::uint32_t> w(wire_words(Wire::f16, x.size()));
    encode_piece(Wire::f16, x.data(), x.size(), w.data());
    std::vector<float> y(x.size());
    decode_piece(Wire::f16, w.data(), x.size(), y.data());
    float block_max = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (i % wire_block == 0) {
        block_max = 0;
        for (std::size_t j = i; j < std::min(x.size(), i + wire_block); ++j) block_max = std::max(block_max, std::fabs(x[j]));
      }
      REQUIRE(std::isfinite(y[i]));
      const double err = std::fabs(double(y[i]) - double(x[i]));
      CHECK(err <= std::ldexp(std::fabs(double(x[i])), -11) + std::ldexp(double(block_max), -38));
    }
  }
  // Infinities and NaN keep their kind; they do not disturb the block's scale.
  float x[4] = {1e10f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), std::nanf("")};
  std::uint32_t w[3];
  encode_piece(Wire::f16, x, 4, w);
  float y[4];
  decode_piece(Wire::f16, w, 4, y);
  CHECK(std::fabs(y[0] - 1e10f) <= 1e10f / 2048);
  CHECK(y[1] == std::numeric_limits<float>::infinity());
  CHECK(y[2] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(y[3]));
}

TEST_CASE("staging capacity: shrinks after a prefill, and stops following a server's alternating steps") {
  const std::uint64_t prompt = 8 << 20, token = 64 << 10;  // a prompt chunk's call, a decode call
  // One prefill, then decode: shrinks after 64 decode calls, as it always did.
  {
    Capacity c;
    CHECK(c.update(prompt).has_value());
    int shrunk_at = -1;
    for (int i = 0; i < 200 && shrunk_at < 0; ++i)
      if (c.update(token)) shrunk_at = i;
    CHECK(shrunk_at == 63);
    CHECK(c.current() < prompt / 4);
  }
  // A server: 64 calls of a prompt chunk, then 64 decode calls, again and again. Each
  // shrink that the next prompt undoes doubles the wait, until the staging stays.
  {
    Capacity c;
    int changes = 0, late_changes = 0;
    for (int cycle = 0; cycle < 40; ++cycle)
      for (int i = 0; i < 128; ++i) {
        const bool changed = c.update(i < 64 ? prompt : token).has_value();
        changes += changed;
        late_changes += changed && cycle >= 20;
      }
    MESSAGE(changes << " staging changes in 40 cycles, patience " << c.patience() << " calls");
    CHECK(changes <= 8);
    CHECK(late_changes == 0);
    CHECK(c.current() >= prompt);
    CHECK(c.patience() >= 128);
  }
  // The doubling is bounded: a long quiet stretch still shrinks it.
  {
    Capacity c;
    for (int cycle = 0; cycle < 40; ++cycle)
      for (int i = 0; i < 128; ++i) c.update(i < 64 ? prompt : token);
    bool shrank = false;
    for (std::size_t i = 0; i <= (Capacity::window << Capacity::max_doublings) && !shrank; ++i) shrank = c.update(token).has_value();
    CHECK(shrank);
  }
}

TEST_CASE("the platform's paths: staging pages, thread names, the loader") {
  namespace os = detail::os;
  // Zeroed, page-aligned, writable pages, as HostImport maps for every device to import.
  const std::size_t bytes = 3 * 4096 + 17;
  auto* p = static_cast<unsigned char*>(os::map_pages(bytes));
  REQUIRE(p);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 4096 == 0);
  bool zero = true;
  for (std::size_t i = 0; i < bytes; ++i) zero = zero && p[i] == 0;
  CHECK(zero);
  p[0] = 1;
  p[bytes - 1] = 2;
  CHECK(p[0] + p[bytes - 1] == 3);
  os::unmap_pages(p, bytes);
  os::unmap_pages(nullptr, 0);  // nothing to unmap: nothing happens

  // A thread's name, cut to the 15 characters Linux keeps.
  std::string seen;
  std::thread([&] {
    os::name_this_thread("tpar-name-check-longer-than-15");
#if defined(__linux__)
    char buf[32] = {};
    if (::pthread_getname_np(::pthread_self(), buf, sizeof buf) == 0) seen = buf;
#endif
  }).join();
#if defined(__linux__)
  CHECK(seen == "tpar-name-check");
#endif

  // No such library: null, not a crash.
  CHECK(os::open_library("/nonexistent/libtpar-none.so") == nullptr);
  CHECK_FALSE(os::loader_hint.empty());
}
