// tp-mlp: a Megatron-style tensor-parallel MLP on n Vulkan devices, with tpar's
// AllReduce summing the partial outputs.
//
//   y = W_down . act(W_up . x)      x [T x H], W_up [I x H], W_down [H x I]
//
// The intermediate dimension I is split by tpar's planner (one SplitPlan that both
// weight matrices apply): device d holds rows [o_d, o_d + I_d) of W_up (column-parallel:
// a slice of the intermediate activations) and the same columns of W_down (row-parallel:
// a partial sum of every output). Each device computes its partial y_d, and the
// AllReduce, queued right behind the compute on the GPUs (ready points, no host round
// trip), leaves the sum on every device.
//
// The result is checked, every value on every device, against the same MLP run on
// device 0 alone with the full weights, within a derived bound (mlp_check.hpp); then the
// step is timed on one device and on n, with the AllReduce's share of the n-device step.
#include <tpar/tpar.hpp>
#include <tpar/plan/split_plan.hpp>  // not in tpar.hpp

#include "common/cli.hpp"
#include "mlp_check.hpp"
#include "mlp_gpu.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace {

using Clock = std::chrono::steady_clock;
using tp_mlp::Act;
const std::string program = "tp-mlp";

// Deliberate corruption of one device's slice, to prove the check catches it.
enum class Fault { none, up, down };

struct Config {
  std::int64_t hidden = 4096, intermediate = 14336;
  std::vector<std::uint32_t> tokens{1, 512};
  bool hidden_set = false, intermediate_set = false, tokens_set = false;
  int iters = 0, warmup = -1;
  bool check_only = false;
  std::int64_t granularity = 128;
  std::vector<double> weights;  // empty: equal
  Act act = Act::silu;
  std::optional<tpar::Wire> wire;  // the timed wire; nullopt: tpar's automatic choice
  bool wire_set = false;
  std::uint64_t seed = 42;
  Fault fault = Fault::none;
  bool quiet = false;
  tpar::GroupOptions group;
  bool explicit_devices = false;
};

void print_help() {
  std::printf(
      "Usage: tp-mlp [options]\n"
      "A tensor-parallel MLP, y = W_down . act(W_up . x), on n Vulkan devices: the intermediate\n"
      "dimension is split by tpar's planner, W_up by rows (column-parallel) and W_down by\n"
      "columns (row-parallel); each device computes a partial y and tpar's AllReduce sums\n"
      "them in place on every device. f32 weights, generated from a seed; tiled compute\n"
      "shaders, the activation fused into the up projection.\n\n"
      "First it checks every output value of every device against the same MLP run on\n"
      "device 0 alone with the full weights, within a bound derived from f32 rounding and\n"
      "the AllReduce's wire (a guarantee, not an estimate: see examples/tp_mlp/README.md),\n"
      "that each device's intermediate activations are device 0's (bit for bit when the\n"
      "devices are identical), and device 0's run against the MLP computed in double\n"
      "precision on the host (first, middle and last token). Then it times a step, median\n"
      "of --iters: on device 0 alone, on n devices, the speedup, and what the AllReduce adds\n"
      "to the n-device step (the step minus the same step without the AllReduce, both from\n"
      "the first submit until the host sees every device done; 'alone' is the AllReduce of\n"
      "the same size by itself).\n"
      "%s, 3 the check failed, 4 the validation\n"
      "layer (--validation) reported an error.\n\n"
      "Model:\n"
      "  --hidden H            hidden size (default 4096; 512 on CPU devices)\n"
      "  --intermediate I      intermediate size (default 14336; 1792 on CPU devices)\n"
      "  --tokens T,T,...      token counts per step (default 1,512: decode and prefill);\n"
      "                        up to 8 tokens use the matrix-vector kernel, more the tiled one\n"
      "  --act A               silu or gelu (tanh form) (default silu)\n"
      "  --seed N              seed of the generated weights and inputs (default 42)\n"
      "Split:\n"
      "  --granularity G       every split boundary on a multiple of G rows (default 128)\n"
      "  --weights A,B,...     relative share per device (default equal), e.g. 3,1\n"
      "Runs:\n"
      "  --check-only          only the check, and small defaults: --hidden 256\n"
      "                        --intermediate 1024 --tokens 1,8,72 unless given\n"
      "  -n, --iters N         timed steps per size (default 20; 3 on CPU devices)\n"
      "  -w, --warmup N        untimed steps first (default 3; 1 on CPU devices)\n"
      "  --wire W              AllReduce wire for the timed steps: auto, f32, bf16 or f16\n"
      "                        (default auto: f32 below 1 MiB, bf16 from there). The check\n"
      "                        runs with f32, and again with this wire when it differs.\n"
      "  --inject-fault P      corrupt the last device's slice of W_up or W_down (P = up or\n"
      "                        down) by one row: the check must fail (a test of the test)\n"
      "  -q, --quiet           no progress on stderr\n"
      "  -h, --help            this text\n\n"
      "TPAR_SYNC, TPAR_ALGO and TPAR_WIRE apply (TPAR_WIRE where --wire is not given); a bad\n"
      "value is a usage error. Without a GPU, tp-mlp runs on two lavapipe virtual devices.\n\n%s",
      tpar_cli::exit_status_help, tpar_cli::device_flags_help());
}

template <class T>
std::vector<T> parse_list(std::string_view flag, std::string_view list) {
  return tpar_cli::parse_list(program, flag, list, [&](std::string_view t) { return tpar_cli::parse_number<T>(program, flag, t); });
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) tpar_cli::usage_error(program, std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    } else if (a == "--hidden") {
      c.hidden = tpar_cli::parse_number<std::int64_t>(program, a, value());
      c.hidden_set = true;
    } else if (a == "--intermediate") {
      c.intermediate = tpar_cli::parse_number<std::int64_t>(program, a, value());
      c.intermediate_set = true;
    } else if (a == "--tokens") {
      c.tokens = parse_list<std::uint32_t>(a, value());
      c.tokens_set = true;
    } else if (a == "--act") {
      const std::string_view v = value();
      if (v == "silu") c.act = Act::silu;
      else if (v == "gelu") c.act = Act::gelu;
      else tpar_cli::usage_error(program, "--act takes silu or gelu");
    } else if (a == "--seed") {
      c.seed = tpar_cli::parse_number<std::uint64_t>(program, a, value());
    } else if (a == "--granularity") {
      c.granularity = tpar_cli::parse_number<std::int64_t>(program, a, value());
    } else if (a == "--weights") {
      c.weights = parse_list<double>(a, value());
    } else if (a == "--check-only") {
      c.check_only = true;
    } else if (a == "-n" || a == "--iters") {
      c.iters = tpar_cli::parse_number<int>(program, a, value());
      if (c.iters < 1) tpar_cli::usage_error(program, "--iters must be at least 1");
    } else if (a == "-w" || a == "--warmup") {
      c.warmup = tpar_cli::parse_number<int>(program, a, value());
      if (c.warmup < 0) tpar_cli::usage_error(program, "--warmup must be at least 0");
    } else if (a == "--wire") {
      const std::string_view v = value();
      if (v == "auto") c.wire = std::nullopt;
      else if (auto w = tpar::parse_wire(v)) c.wire = *w;
      else tpar_cli::usage_error(program, "--wire takes auto, f32, bf16 or f16");
      c.wire_set = true;
    } else if (a == "--inject-fault") {
      const std::string_view v = value();
      if (v == "up") c.fault = Fault::up;
      else if (v == "down") c.fault = Fault::down;
      else tpar_cli::usage_error(program, "--inject-fault takes up or down");
    } else if (a == "-q" || a == "--quiet") {
      c.quiet = true;
    } else if (tpar_cli::parse_device_flag(program, argc, argv, i, c.group)) {
      c.explicit_devices = true;
    } else {
      tpar_cli::usage_error(program, "unknown option " + std::string(a));
    }
  }
  if (c.check_only) {
    if (!c.hidden_set) c.hidden = 256;
    if (!c.intermediate_set) c.intermediate = 1024;
    if (!c.tokens_set) c.tokens = {1, 8, 72};
  }
  if (c.hidden < 1 || c.intermediate < 1) tpar_cli::usage_error(program, "--hidden and --intermediate must be at least 1");
  if (c.hidden > (std::int64_t{1} << 24) || c.intermediate > (std::int64_t{1} << 24))
    tpar_cli::usage_error(program, "--hidden and --intermediate must be at most 16777216");
  for (auto t : c.tokens)
    if (t < 1 || t > 65536) tpar_cli::usage_error(program, "--tokens must be between 1 and 65536");
  if (c.granularity < 1) tpar_cli::usage_error(program, "--granularity must be at least 1");
  return c;
}

void progress(const Config& cfg, const std::string& what) {
  if (!cfg.quiet) std::fprintf(stderr, "%s: %s\n", program.c_str(), what.c_str());
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Validation-layer errors while the group lives; --validation makes any of them fatal.
std::mutex validation_mutex;
std::vector<std::string> validation_errors;

const char* kernel_name(std::uint32_t tokens) { return tokens <= tp_mlp::skinny_max_tokens ? "matvec" : "tiled"; }

// Everything on the devices: device 0's reference (the whole MLP) and every device's shard.
struct Rig {
  std::vector<std::unique_ptr<tp_mlp::Gpu>> gpus;
  std::unique_ptr<tp_mlp::Shard> reference;
  std::vector<std::unique_ptr<tp_mlp::Shard>> shards;
  std::vector<tpar::Share> shares;
  std::vector<double> x_norm, up_row_norm, down_row_norm;  // per token, per W_up row, per W_down row
  std::vector<tpar::TimelinePoint> last_done;                // the last AllReduce's done points
};

struct SplitStep {
  tpar::Ticket ticket;
  std::vector<std::uint64_t> computed;  // per device: its compute's timeline value (0: none)
};

// One n-device step: every device's compute, then the AllReduce behind it on the GPUs.
SplitStep split_step(Rig& rig, tpar::AnyCommunicator& comm, std::uint32_t tokens, std::optional<tpar::Wire> wire,
                     std::int64_t hidden) {
  const std::size_t n = rig.shards.size();
  SplitStep s;
  s.computed.assign(n, 0);
  std::vector<tpar::TimelinePoint> ready(n);
  std::vector<tpar::BufferSpan> spans(n);
  bool contributes[64];
  for (std::size_t d = 0; d < n; ++d) {
    auto& shard = *rig.shards[d];
    const tpar::TimelinePoint* wait = rig.last_done.empty() ? nullptr : &rig.last_done[d];
    if (!shard.empty()) {
      s.computed[d] = shard.submit(tokens, wait ? std::span(wait, 1) : std::span<const tpar::TimelinePoint>{});
      ready[d] = {shard.gpu().timeline().handle(), s.computed[d]};
    }
    contributes[d] = !shard.empty();  // an empty share computed nothing: it counts as zeros
    spans[d] = {shard.output().buffer, 0, std::size_t(tokens) * std::size_t(hidden), shard.output().size};
  }
  tpar::AllreduceArgs args;
  args.ready = ready;
  args.contributes = std::span<const bool>(contributes, n);
  args.wire = wire;
  s.ticket = comm.allreduce(spans, args);
  rig.last_done = s.ticket.done();
  return s;
}

struct CheckRow {
  std::uint32_t tokens = 0;
  tpar::Wire wire = tpar::Wire::f32;
  double max_y = 0, max_err = 0, worst_ratio = 0;
  std::size_t outside = 0, disagree = 0, nonfinite = 0;
  std::size_t inter_differ = 0, inter_outside = 0;
  double inter_max_diff = 0;
  bool ok = true;
};

struct Reference {
  std::vector<float> act, y;
};

Reference run_reference(Rig& rig, std::uint32_t tokens, std::int64_t hidden, std::int64_t intermediate) {
  auto& gpu = rig.gpus[0];
  gpu->wait(rig.reference->submit(tokens));
  Reference r;
  r.act = gpu->download(rig.reference->activations().buffer, 0, std::size_t(tokens) * std::size_t(intermediate));
  r.y = gpu->download(rig.reference->output().buffer, 0, std::size_t(tokens) * std::size_t(hidden));
  return r;
}

// Device 0's single-device run against the exact MLP (double, on the host) for the
// first, middle and last token: catches a kernel that is wrong the same way everywhere.
struct ExactRow {
  std::size_t tokens_checked = 0, outside = 0, inter_outside = 0;
  double max_err = 0, worst_ratio = 0, inter_worst_ratio = 0;
  bool ok = true;
};

ExactRow check_exact(const Rig& rig, const Config& cfg, const Reference& ref, std::uint32_t tokens) {
  const std::size_t H = std::size_t(cfg.hidden), I = std::size_t(cfg.intermediate);
  std::vector<std::uint32_t> sample{0, tokens / 2, tokens - 1};
  sample.erase(std::unique(sample.begin(), sample.end()), sample.end());
  const tp_mlp::ExactMlp e = tp_mlp::exact_mlp(cfg.seed, cfg.hidden, cfg.intermediate, cfg.act, sample);
  ExactRow row;
  row.tokens_checked = sample.size();
  std::vector<double> ref_norm(sample.size()), delta_norm(sample.size()), exact_norm(sample.size());
  for (std::size_t s = 0; s < sample.size(); ++s) {
    const std::size_t t = sample[s];
    double rs = 0, ds = 0, es = 0;
    for (std::size_t i = 0; i < I; ++i) {
      const double got = ref.act[t * I + i], want = e.act[s * I + i], diff = std::fabs(got - want);
      rs += got * got;
      ds += diff * diff;
      es += want * want;
      const double bound = tp_mlp::intermediate_bound(cfg.act, cfg.hidden, rig.up_row_norm[i], rig.x_norm[t], want, got);
      if (!(diff <= bound)) ++row.inter_outside;
      row.inter_worst_ratio = std::max(row.inter_worst_ratio, diff / bound);
    }
    ref_norm[s] = std::sqrt(rs);
    delta_norm[s] = std::sqrt(ds);
    exact_norm[s] = std::sqrt(es);
  }
  const tp_mlp::OutputBound bound = tp_mlp::exact_bound(cfg.intermediate, ref_norm, delta_norm, exact_norm);
  for (std::size_t s = 0; s < sample.size(); ++s)
    for (std::size_t h = 0; h < H; ++h) {
      const double err = std::fabs(double(ref.y[sample[s] * H + h]) - e.y[s * H + h]);
      const double tol = bound.at(s, rig.down_row_norm[h]);
      if (!(err <= tol)) ++row.outside;
      row.max_err = std::max(row.max_err, err);
      row.worst_ratio = std::max(row.worst_ratio, err / tol);
    }
  row.ok = row.outside == 0 && row.inter_outside == 0;
  return row;
}

CheckRow check(Rig& rig, tpar::AnyCommunicator& comm, const Config& cfg, const Reference& ref, std::uint32_t tokens, tpar::Wire wire,
               bool identical_devices) {
  const std::size_t n = rig.shards.size();
  const std::size_t T = tokens, H = std::size_t(cfg.hidden), I = std::size_t(cfg.intermediate);
  SplitStep step = split_step(rig, comm, tokens, wire, cfg.hidden);
  step.ticket.wait();
  CheckRow row;
  row.tokens = tokens;
  row.wire = comm.last_call().wire;

  // Intermediate activations: each device's slice against the reference's columns.
  std::vector<double> ref_sq(T, 0.0), dev_sq(T, 0.0), delta_sq(T, 0.0);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < I; ++i) ref_sq[t] += double(ref.act[t * I + i]) * double(ref.act[t * I + i]);
  std::int64_t largest_share = 0;
  for (std::size_t d = 0; d < n; ++d) {
    auto& shard = *rig.shards[d];
    largest_share = std::max(largest_share, shard.rows());
    if (shard.empty()) continue;
    const std::size_t rows = std::size_t(shard.rows()), o = std::size_t(shard.offset());
    const std::vector<float> a = shard.gpu().download(shard.activations().buffer, 0, T * rows);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t r = 0; r < rows; ++r) {
        const float got = a[t * rows + r], want = ref.act[t * I + o + r];
        const double diff = std::fabs(double(got) - double(want));
        dev_sq[t] += double(got) * double(got);
        delta_sq[t] += diff * diff;
        if (std::memcmp(&got, &want, sizeof got) != 0) ++row.inter_differ;
        if (!std::isfinite(got)) ++row.nonfinite;
        row.inter_max_diff = std::max(row.inter_max_diff, diff);
        const double bound =
            tp_mlp::intermediate_bound(cfg.act, cfg.hidden, rig.up_row_norm[o + r], rig.x_norm[t], double(want), double(got));
        if (!(diff <= bound)) ++row.inter_outside;
      }
  }
  for (auto* v : {&ref_sq, &dev_sq, &delta_sq})
    for (auto& x : *v) x = std::sqrt(x);

  // Outputs: every value of every device against the reference, and the devices against
  // each other (tpar leaves the same bits on every device).
  tp_mlp::BoundInputs in;
  in.intermediate = cfg.intermediate;
  in.largest_share = largest_share;
  in.devices = n;
  in.wire_unit_roundoff = tpar::wire_unit_roundoff(row.wire);
  in.f16_wire = row.wire == tpar::Wire::f16;
  const double max_row = *std::max_element(rig.down_row_norm.begin(), rig.down_row_norm.end());
  const tp_mlp::OutputBound bound = tp_mlp::output_bound(in, ref_sq, dev_sq, delta_sq, max_row);
  std::vector<float> first;
  for (std::size_t d = 0; d < n; ++d) {
    auto& shard = *rig.shards[d];
    const tpar::TimelinePoint done = step.ticket.done(d);
    const std::vector<float> y = shard.gpu().download(shard.output().buffer, 0, T * H, std::span(&done, 1));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t h = 0; h < H; ++h) {
        const float got = y[t * H + h], want = ref.y[t * H + h];
        const double err = std::fabs(double(got) - double(want));
        const double tol = bound.at(t, rig.down_row_norm[h]);
        if (!std::isfinite(got)) ++row.nonfinite;
        if (!(err <= tol)) ++row.outside;
        row.max_err = std::max(row.max_err, err);
        row.worst_ratio = std::max(row.worst_ratio, err / tol);
        row.max_y = std::max(row.max_y, std::fabs(double(want)));
        if (d > 0 && std::memcmp(&got, &first[t * H + h], sizeof got) != 0) ++row.disagree;
      }
    if (d == 0) first = y;
  }
  row.ok = row.outside == 0 && row.disagree == 0 && row.nonfinite == 0 && row.inter_outside == 0 &&
           (!identical_devices || row.inter_differ == 0);
  return row;
}

struct TimeRow {
  std::uint32_t tokens = 0;
  double one = 0, one_gpu = 0, many = 0, many_gpu = 0, compute_only = 0, alone = 0;
  double added() const { return many - compute_only; }  // what the AllReduce adds to a step
  std::string wire, algo;
};

TimeRow time_steps(Rig& rig, tpar::AnyCommunicator& comm, const Config& cfg, std::uint32_t tokens, int warmup, int iters) {
  const std::size_t n = rig.shards.size();
  TimeRow row;
  row.tokens = tokens;
  std::vector<double> one, one_gpu, many, many_gpu, compute_only, alone;
  auto& gpu0 = *rig.gpus[0];
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    gpu0.wait(rig.reference->submit(tokens));
    const double ms = ms_since(t0);
    if (i < warmup) continue;
    one.push_back(ms);
    one_gpu.push_back(rig.reference->last_gpu_ms());
  }
  // The n-device step without the AllReduce, observed the same way (until the host sees
  // the last device finish): the AllReduce's part of a step is the difference. (The
  // host's view of each device's compute end is no measure of it: by the time the host
  // wakes, the AllReduce chained behind on the GPUs may be done.)
  // (Every earlier AllReduce was waited for: its ticket covers every device.)
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    std::vector<std::uint64_t> computed(n, 0);
    for (std::size_t d = 0; d < n; ++d)
      if (!rig.shards[d]->empty()) computed[d] = rig.shards[d]->submit(tokens);
    for (std::size_t d = 0; d < n; ++d)
      if (computed[d]) rig.shards[d]->gpu().wait(computed[d]);
    if (i >= warmup) compute_only.push_back(ms_since(t0));
  }
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    SplitStep s = split_step(rig, comm, tokens, cfg.wire, cfg.hidden);
    s.ticket.wait();
    const double total = ms_since(t0);
    if (i < warmup) continue;
    many.push_back(total);
    double slowest = 0;
    for (std::size_t d = 0; d < n; ++d)
      if (s.computed[d]) slowest = std::max(slowest, rig.shards[d]->last_gpu_ms());
    many_gpu.push_back(slowest);
  }
  row.wire = std::string(tpar::to_string(comm.last_call().wire));
  row.algo = std::string(comm.last_call().algorithm);
  // The AllReduce by itself, on zeros (repeated in-place sums of real data would grow
  // by n per call).
  std::vector<tpar::BufferSpan> spans(n);
  for (std::size_t d = 0; d < n; ++d) {
    auto& out = rig.shards[d]->output();
    rig.shards[d]->gpu().zero(out.buffer, out.size, std::span(&rig.last_done[d], 1));
    spans[d] = {out.buffer, 0, std::size_t(tokens) * std::size_t(cfg.hidden), out.size};
  }
  tpar::AllreduceArgs args;
  args.wire = cfg.wire;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = Clock::now();
    tpar::Ticket t = comm.allreduce(spans, args);
    t.wait();
    const double ms = ms_since(t0);
    rig.last_done = t.done();
    if (i >= warmup) alone.push_back(ms);
  }
  row.one = median(one);
  row.one_gpu = median(one_gpu);
  row.many = median(many);
  row.many_gpu = median(many_gpu);
  row.compute_only = median(compute_only);
  row.alone = median(alone);
  return row;
}

bool identical(const tpar::DeviceGroup& group) {
  const auto& a = group[0].capabilities();
  for (std::size_t d = 1; d < group.size(); ++d) {
    const auto& b = group[d].capabilities();
    if (a.vendor_id != b.vendor_id || a.device_id != b.device_id || a.driver_version != b.driver_version ||
        a.driver_uuid != b.driver_uuid || a.name != b.name)
      return false;
  }
  return true;
}

int run(Config& cfg) {
  cfg.group.application_name = "tp-mlp";
  cfg.group.on_validation = [](const tpar::ValidationMessage& m) {
    if (!m.is_error()) return;
    // The layer's own timeline tracking can stall on host-signalled timelines before
    // 1.3.296 (see tests/support/vk_env.hpp); that report is about the layer, not us.
    if (m.id == "UNASSIGNED-VkSemaphore-state-timeout") return;
    std::lock_guard lock(validation_mutex);
    validation_errors.push_back(m.id + ": " + m.text);
  };
  auto group = tpar_cli::open_group(cfg.group);
  if (!cfg.explicit_devices && !group[0].capabilities().is_gpu()) {
    // No GPU: two lavapipe virtual devices, so there is something to split across.
    cfg.group.select.virtual_devices(2);
    group = tpar_cli::open_group(cfg.group);
  }
  const std::size_t n = group.size();
  if (n > 64) throw tp_mlp::Failure("at most 64 devices");
  const bool gpu = group[0].capabilities().is_gpu();
  // CPU devices (lavapipe) run this MLP some thousand times slower than a GPU: unless
  // told otherwise, an 8x narrower one, with the same decode and prefill token counts.
  const bool cpu_defaults = !gpu && !cfg.check_only && !cfg.hidden_set && !cfg.intermediate_set;
  if (cpu_defaults) {
    cfg.hidden = 512;
    cfg.intermediate = 1792;
  }
  const int iters = cfg.iters ? cfg.iters : gpu ? 20 : 3;
  const int warmup = cfg.warmup >= 0 ? cfg.warmup : gpu ? 3 : 1;
  const std::int64_t H = cfg.hidden, I = cfg.intermediate;
  const std::uint32_t max_tokens = *std::max_element(cfg.tokens.begin(), cfg.tokens.end());

  // The split: one plan over the intermediate dimension, applied to both matrices that
  // meet along it (W_up's rows, W_down's columns), so their shares cannot disagree.
  if (!cfg.weights.empty() && cfg.weights.size() != n)
    tpar_cli::usage_error(program, "--weights has " + std::to_string(cfg.weights.size()) + " entries for " + std::to_string(n) +
                                       " devices");
  std::optional<tpar::SplitPlan> plan;
  std::vector<tpar::Share> up_shares, down_shares;
  try {
    const tpar::SplitWeights weights =
        cfg.weights.empty() ? tpar::SplitWeights::equal(n) : tpar::SplitWeights::from_ratios(cfg.weights);
    const std::array<tpar::TensorAxis, 2> axes{{{I, tpar::Granularity(cfg.granularity)},    // W_up: rows
                                                {I, tpar::Granularity(cfg.granularity)}}};  // W_down: columns
    plan.emplace(tpar::SplitPlan::for_tensors(weights, I, axes));
    up_shares = plan->apply(axes[0]);
    down_shares = plan->apply(axes[1]);
  } catch (const tpar::Error& e) {
    tpar_cli::usage_error(program, std::string("cannot split the intermediate dimension: ") + e.what());
  }
  if (up_shares != down_shares) throw tp_mlp::Failure("W_up and W_down got different shares from one plan");

  std::string names = group[0].capabilities().name;
  for (std::size_t d = 1; d < n; ++d)
    if (group[d].capabilities().name != names) names += ", " + group[d].capabilities().name;
  std::printf("# tp-mlp (tpar %s): %zu device%s (%s%s)\n", TPAR_VERSION_STRING, n, n == 1 ? "" : "s", names.c_str(),
              group[0].is_virtual() ? ", virtual" : "");
  std::printf("# MLP: y = W_down . %s(W_up . x), hidden %lld, intermediate %lld, f32 weights and activations, seed %llu\n",
              cfg.act == Act::silu ? "silu" : "gelu", static_cast<long long>(H), static_cast<long long>(I),
              static_cast<unsigned long long>(cfg.seed));
  std::printf("# split of the intermediate dimension (SplitPlan, granularity %lld, weights %s):\n",
              static_cast<long long>(plan->granularity().value()), cfg.weights.empty() ? "equal" : "as given");
  for (std::size_t d = 0; d < n; ++d)
    std::printf("#   device %zu: rows [%lld, %lld) of W_up, the same columns of W_down: %lld%s\n", d,
                static_cast<long long>(up_shares[d].offset), static_cast<long long>(up_shares[d].end()),
                static_cast<long long>(up_shares[d].size), up_shares[d].size == 0 ? " (computes nothing, counts as zeros)" : "");
  if (cpu_defaults)
    std::printf("# (CPU devices: hidden and intermediate default to 512 and 1792, 1/8 of 4096 and 14336; give\n"
                "#  --hidden and --intermediate for others)\n");
  if (cfg.fault != Fault::none)
    std::printf("# FAULT INJECTED: the last device's slice of %s starts one %s late (--inject-fault)\n",
                cfg.fault == Fault::up ? "W_up" : "W_down", cfg.fault == Fault::up ? "row" : "column");
  std::fflush(stdout);

  // Devices, weights and inputs.
  Rig rig;
  rig.shares = up_shares;
  for (std::size_t d = 0; d < n; ++d) rig.gpus.push_back(std::make_unique<tp_mlp::Gpu>(group[d]));
  const std::size_t x_bytes = std::size_t(max_tokens) * std::size_t(H) * sizeof(float);
  if (x_bytes > rig.gpus[0]->max_binding())
    throw tp_mlp::Failure(std::to_string(max_tokens) + " tokens of " + std::to_string(H) + " values exceed this device's " +
                          "maxStorageBufferRange: use fewer --tokens");
  const float su = tp_mlp::up_scale(H), sd = tp_mlp::down_scale(I);
  const std::uint64_t seed = cfg.seed;
  auto up_value = [seed, H, su](std::int64_t row, std::int64_t col) {
    return tp_mlp::generated(seed, tp_mlp::Tensor::w_up, std::uint64_t(row) * std::uint64_t(H) + std::uint64_t(col), su);
  };
  auto down_value = [seed, I, sd](std::int64_t row, std::int64_t col) {
    return tp_mlp::generated(seed, tp_mlp::Tensor::w_down, std::uint64_t(row) * std::uint64_t(I) + std::uint64_t(col), sd);
  };
  const std::size_t weight_bytes = 2 * std::size_t(H) * std::size_t(I) * sizeof(float);
  progress(cfg, "generating and uploading the weights: " + tp_mlp::mib(weight_bytes) + " for device 0's reference, " +
                    tp_mlp::mib(weight_bytes) + " split across the devices");
  rig.x_norm.assign(max_tokens, 0.0);
  std::vector<std::shared_ptr<tp_mlp::Buffer>> inputs;
  for (std::size_t d = 0; d < n; ++d) {
    auto x = std::make_shared<tp_mlp::Buffer>(group[d], x_bytes, false);
    rig.gpus[d]->upload(x->buffer, x_bytes, [&](float* out, std::size_t first, std::size_t count) {
      for (std::size_t i = 0; i < count; ++i) {
        out[i] = tp_mlp::generated(seed, tp_mlp::Tensor::x, first + i, 1.0f);
        if (d == 0) rig.x_norm[(first + i) / std::size_t(H)] += double(out[i]) * double(out[i]);
      }
    });
    inputs.push_back(std::move(x));
  }
  for (auto& v : rig.x_norm) v = std::sqrt(v);

  // Device 0's reference: the whole MLP, and the row norms the bound needs.
  rig.up_row_norm.assign(std::size_t(I), 0.0);
  rig.down_row_norm.assign(std::size_t(H), 0.0);
  {
    auto up = std::make_unique<tp_mlp::Matrix>(*rig.gpus[0], I, H, up_value,
                                               [&](std::int64_t r, double s) { rig.up_row_norm[std::size_t(r)] += s; });
    auto down = std::make_unique<tp_mlp::Matrix>(*rig.gpus[0], H, I, down_value,
                                                 [&](std::int64_t r, double s) { rig.down_row_norm[std::size_t(r)] += s; });
    rig.reference = std::make_unique<tp_mlp::Shard>(*rig.gpus[0], inputs[0], H, 0, I, max_tokens, std::move(up), std::move(down), cfg.act);
  }
  for (auto* v : {&rig.up_row_norm, &rig.down_row_norm})
    for (auto& x : *v) x = std::sqrt(x);

  // Each device: only its slices.
  std::size_t faulty = n;
  for (std::size_t d = 0; d < n; ++d)
    if (up_shares[d].size > 0) faulty = d;
  for (std::size_t d = 0; d < n; ++d) {
    const std::int64_t o = up_shares[d].offset, rows = up_shares[d].size;
    std::unique_ptr<tp_mlp::Matrix> up, down;
    if (rows > 0) {
      const std::int64_t shift_up = cfg.fault == Fault::up && d == faulty ? 1 : 0;
      const std::int64_t shift_down = cfg.fault == Fault::down && d == faulty ? 1 : 0;
      up = std::make_unique<tp_mlp::Matrix>(*rig.gpus[d], rows, H, [&](std::int64_t r, std::int64_t c) {
        return up_value((o + r + shift_up) % I, c);
      });
      down = std::make_unique<tp_mlp::Matrix>(*rig.gpus[d], H, rows, [&](std::int64_t r, std::int64_t c) {
        return down_value(r, (o + c + shift_down) % I);
      });
    }
    rig.shards.push_back(std::make_unique<tp_mlp::Shard>(*rig.gpus[d], inputs[d], H, o, rows, max_tokens, std::move(up),
                                                         std::move(down), cfg.act));
  }

  tpar::Options options;
  options.timeout = std::chrono::seconds(gpu ? 30 : 300);  // a lavapipe step of a large MLP takes seconds
  options.wire = cfg.wire;
  options = options.with_environment();  // as make_communicator will: the checked wire is the timed one
  auto comm = tpar::make_communicator(group, options);
  std::printf("# AllReduce: %s\n", std::string(tpar::to_string(comm.sync_kind())).c_str());

  // The check.
  const bool same_kind = identical(group);
  std::printf("# check: every output of every device against device 0 alone with the full weights; bound per value:\n"
              "#   ||W_down[h]|| (gamma(I+1)||a_ref[t]|| + (gamma(I_max+1) + n(u_wire+u)(1+gamma))||a_dev[t]|| + ||a_dev[t]-a_ref[t]||)\n"
              "#   intermediate activations: %s\n"
              "#   exact: device 0's own run against the MLP in double precision on the host (first, middle and last\n"
              "#   token): max err/bound of its intermediates and outputs\n",
              same_kind ? "identical devices, so each device's slice must equal device 0's bit for bit"
                        : "devices differ, so each slice within its f32/exp bound of device 0's");
  std::printf("# %6s %5s %7s %10s %10s %13s %9s %22s %8s %9s %6s\n", "tokens", "wire", "kernel", "max|y|", "max|err|", "max err/bound",
              "#outside", "intermediate", "devices", "exact", "result");
  bool all_ok = true;
  for (std::uint32_t tokens : cfg.tokens) {
    progress(cfg, "checking " + std::to_string(tokens) + " token" + (tokens == 1 ? "" : "s"));
    const Reference ref = run_reference(rig, tokens, H, I);
    const ExactRow exact = check_exact(rig, cfg, ref, tokens);
    if (!exact.ok) {
      all_ok = false;
      std::fprintf(stderr,
                   "%s: CHECK FAILED at %u tokens: device 0's single-device run is not the exact MLP: %zu outputs outside "
                   "their bound (worst %.3g x), %zu intermediates outside theirs (worst %.3g x)\n",
                   program.c_str(), tokens, exact.outside, exact.worst_ratio, exact.inter_outside, exact.inter_worst_ratio);
    }
    std::vector<tpar::Wire> wires{tpar::Wire::f32};
    const tpar::Wire timed = cfg.wire.value_or(options.wire_for(std::size_t(tokens) * std::size_t(H) * sizeof(float)));
    if (timed != tpar::Wire::f32) wires.push_back(timed);
    for (tpar::Wire w : wires) {
      const CheckRow r = check(rig, comm, cfg, ref, tokens, w, same_kind);
      char inter[64];
      if (r.inter_differ == 0) std::snprintf(inter, sizeof inter, "bit-identical");
      else std::snprintf(inter, sizeof inter, "%zu differ, max %.1e", r.inter_differ, r.inter_max_diff);
      std::printf("  %6u %5s %7s %10.3e %10.3e %13.3e %9zu %22s %8s %9.2e %6s\n", tokens, std::string(tpar::to_string(r.wire)).c_str(),
                  kernel_name(tokens), r.max_y, r.max_err, r.worst_ratio, r.outside, inter, r.disagree ? "DIFFER" : "agree",
                  std::max(exact.worst_ratio, exact.inter_worst_ratio), r.ok && exact.ok ? "ok" : "FAIL");
      std::fflush(stdout);
      if (!r.ok) {
        all_ok = false;
        std::fprintf(stderr,
                     "%s: CHECK FAILED at %u tokens, %s wire: %zu output values outside the bound (worst %.3g x the bound), "
                     "%zu differ between devices, %zu not finite; intermediates: %zu differ from device 0's, %zu outside their bound\n",
                     program.c_str(), tokens, std::string(tpar::to_string(r.wire)).c_str(), r.outside, r.worst_ratio, r.disagree,
                     r.nonfinite, r.inter_differ, r.inter_outside);
      }
    }
  }

  // The timing.
  if (!cfg.check_only) {
    std::printf("# timing: median of %d steps after %d warm-up, milliseconds, from the first submit until the host\n"
                "#   sees the step done; (gpu) = GPU time of the compute alone, slowest device; compute = the %zu-device\n"
                "#   step without the AllReduce; allreduce = what the AllReduce adds to the step (step - compute),\n"
                "#   share = allreduce / step; alone = the same AllReduce with no compute around it\n",
                iters, warmup, n);
    std::printf("# %6s %7s %18s %18s %8s %8s %10s %6s %8s %5s %8s\n", "tokens", "kernel", "1 device (gpu)",
                (std::to_string(n) + " devices (gpu)").c_str(), "speedup", "compute", "allreduce", "share", "alone", "wire", "algo");
    for (std::uint32_t tokens : cfg.tokens) {
      progress(cfg, "timing " + std::to_string(tokens) + " token" + (tokens == 1 ? "" : "s"));
      const TimeRow r = time_steps(rig, comm, cfg, tokens, warmup, iters);
      char one[32], many[32];
      std::snprintf(one, sizeof one, "%.3f (%.3f)", r.one, r.one_gpu);
      std::snprintf(many, sizeof many, "%.3f (%.3f)", r.many, r.many_gpu);
      std::printf("  %6u %7s %18s %18s %7.2fx %8.3f %10.3f %5.0f%% %8.3f %5s %8s\n", tokens, kernel_name(tokens), one, many,
                  r.one / r.many, r.compute_only, r.added(), 100.0 * r.added() / r.many, r.alone, r.wire.c_str(), r.algo.c_str());
      std::fflush(stdout);
    }
  }

  // Drain before the buffers go: the last AllReduce may still be in flight.
  for (std::size_t d = 0; d < n; ++d)
    if (!rig.last_done.empty()) {
      const vk::Semaphore sem = rig.last_done[d].semaphore;
      const std::uint64_t v = rig.last_done[d].value;
      (void)tpar::wait(group[d].handle(), sem, v, std::chrono::seconds(60));
    }
  for (std::size_t d = 0; d < n; ++d) (void)group[d].handle().waitIdle();

  std::size_t validation_count = 0;
  {
    std::lock_guard lock(validation_mutex);
    validation_count = validation_errors.size();
    for (const auto& e : validation_errors) std::fprintf(stderr, "%s: validation error: %s\n", program.c_str(), e.c_str());
  }
  std::printf("# %s\n", all_ok ? "check passed: every output of every device within its bound of the single-device result"
                               : "CHECK FAILED: see the rows marked FAIL");
  if (validation_count) {
    std::printf("# %zu validation error%s (see stderr)\n", validation_count, validation_count == 1 ? "" : "s");
    return 4;
  }
  return all_ok ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg = parse(argc, argv);
  if (cfg.wire_set) ::unsetenv("TPAR_WIRE");      // --wire wins over it
  (void)tpar_cli::environment_options(program);  // a bad TPAR_* is a usage error before any output
  try {
    return run(cfg);
  } catch (const tpar::Error& e) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
  } catch (const tp_mlp::Failure& e) {
    std::fprintf(stderr, "%s: %s%s\n", program.c_str(), e.what(),
                 e.out_of_memory() ? ": try smaller --hidden/--intermediate/--tokens" : "");
  }
  return 1;
}
