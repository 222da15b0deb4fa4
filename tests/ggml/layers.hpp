// A stack of "layers" the way ggml's meta backend runs them: per layer, every device's
// subgraph writes its partial sum of the layer's row-parallel output, the comm hook is
// called (no host wait), and the next subgraph reads the sum. Each subgraph first copies
// the previous layer's sum into a history slot (standing for the next op's read), then
// writes its partial for this layer: one of K integer patterns with a layer-dependent
// patch, or NaN garbage on a device that computes nothing (its tensor then lacks the
// COMPUTE flag). A layer may instead hold a tensor the hook must decline (f16, or a
// strided view); the model then checks that nothing was enqueued and runs the fallback
// the meta backend would (host sync, host sum). verify() checks every reduced layer,
// on every device, bit for bit against the host's sum.
#pragma once

#include "toy_ggml.hpp"

#include "support/numerics.hpp"

#include <algorithm>
#include <numeric>

namespace toy {

enum class Step { reduce, f16, strided };

struct Plan {
  std::function<std::size_t(std::size_t layer)> count = [](std::size_t) { return std::size_t{4096}; };
  std::function<Step(std::size_t layer)> step = [](std::size_t) { return Step::reduce; };
  std::function<bool(std::size_t layer, std::size_t device)> contributes = [](std::size_t, std::size_t) { return true; };
  std::size_t patterns = 3;
};

class Layers {
 public:
  Layers(Host& host, std::size_t layers, Plan plan) : host_(host), n_(host.size()), layers_(layers), plan_(std::move(plan)) {
    offset_ = std::max<std::size_t>(256, host[0].storage_alignment);
    std::size_t history = 0;
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t c = plan_.count(l);
      max_count_ = std::max(max_count_, c);
      slot_.push_back(history);
      if (plan_.step(l) == Step::reduce) history += c * 4;
    }
    const std::size_t k = plan_.patterns, bytes = max_count_ * 4;
    const auto x = tpar_test::integer_inputs(n_ * k, max_count_, 1000 + max_count_ + n_);
    for (std::size_t d = 0; d < n_; ++d) {
      Backend& b = host[d];
      arena_.push_back(std::make_unique<Buffer>(b.device, b.physical, offset_ + bytes + 64));
      patterns_.push_back(std::make_unique<Buffer>(b.device, b.physical, k * bytes));
      history_.push_back(std::make_unique<Buffer>(b.device, b.physical, std::max<std::size_t>(history, 4)));
      for (std::size_t j = 0; j < k; ++j) patterns_[d]->write(j * bytes, x[d * k + j]);
      pattern_data_.emplace_back(x.begin() + static_cast<std::ptrdiff_t>(d * k), x.begin() + static_cast<std::ptrdiff_t>((d + 1) * k));
      tensors_.emplace_back();
    }
  }

  std::size_t size() const { return layers_; }
  Buffer& arena(std::size_t d) { return *arena_[d]; }
  std::size_t offset() const { return offset_; }

  bool contributes(std::size_t layer, std::size_t d) const { return plan_.step(layer) != Step::reduce || plan_.contributes(layer, d); }

  // Device d's partial for `layer` (count(layer) values), as its subgraph writes it.
  std::vector<float> partial(std::size_t layer, std::size_t d) const {
    const std::size_t c = plan_.count(layer);
    const auto& p = pattern_data_[d][(layer + d) % plan_.patterns];
    std::vector<float> v(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(c));
    const auto [first, len] = patch(layer);
    std::fill_n(v.begin() + static_cast<std::ptrdiff_t>(first), len, patch_value(layer, d));
    return v;
  }

  // The subgraphs of `layer` (layer == size(): only the copy of the last sum). `gates`:
  // per device a point the subgraph also waits for.
  void graph(std::size_t layer, const std::vector<tpar::TimelinePoint>& gates = {}) {
    const bool snapshot = layer > 0 && plan_.step(layer - 1) == Step::reduce && !declined_last_;
    for (std::size_t d = 0; d < n_; ++d) {
      const bool last = layer == layers_;
      const Step step = last ? Step::reduce : plan_.step(layer);
      const std::size_t c = last ? 0 : plan_.count(layer);
      const bool computes = !last && contributes(layer, d);
      Tensor& t = tensors_[d];
      if (!last) {
        t = step == Step::f16 ? tensor(arena_[d].get(), offset_, static_cast<std::int64_t>(c), 1, Type::f16)
                              : tensor(arena_[d].get(), offset_, static_cast<std::int64_t>(c));
        if (step == Step::strided) {  // every other block of 512 values
          t.ne[0] = 512;
          t.ne[1] = static_cast<std::int64_t>(c / 1024);
          t.nb[1] = 1024 * 4;
          t.nb[2] = t.nb[3] = t.nb[1] * static_cast<std::size_t>(t.ne[1]);
        }
        t.flags = computes ? flag_compute : 0u;
      }
      host_[d].compute(
          [&](vk::CommandBuffer cb) {
            if (snapshot) {
              const std::size_t prev = plan_.count(layer - 1) * 4;
              copy(cb, *arena_[d], offset_, *history_[d], slot_[layer - 1], prev);
              transfer_barrier(cb);
            }
            if (last) return;
            if (step == Step::f16) {
              fill(cb, *arena_[d], offset_, c * 2, 0x3C003C00u);  // 1.0 in f16
            } else if (computes) {
              copy(cb, *patterns_[d], ((layer + d) % plan_.patterns) * max_count_ * 4, *arena_[d], offset_, c * 4);
              transfer_barrier(cb);
              const auto [first, len] = patch(layer);
              fill(cb, *arena_[d], offset_ + first * 4, len * 4, patch_value(layer, d));
            } else {
              fill(cb, *arena_[d], offset_, c * 4, 0x7FC00000u);  // NaN: garbage
            }
          },
          gates.empty() ? tpar::TimelinePoint{} : gates[d]);
    }
    declined_last_ = false;
  }

  std::vector<Tensor*> tensors() {
    std::vector<Tensor*> t;
    for (auto& x : tensors_) t.push_back(&x);
    return t;
  }

  // Calls the hook for `layer` and checks what it did. A declined call enqueued nothing
  // (no done point handed over, no submission through a backend's queue lock); the model
  // then runs the meta backend's fallback.
  template <class T>
  void reduce(Meta<T>& meta, std::size_t layer) {
    std::vector<int> handed, locks;
    for (std::size_t d = 0; d < n_; ++d) {
      handed.push_back(host_[d].handed);
      locks.push_back(host_[d].queue_locks);
    }
    const auto declined_before = meta.comm().stats().declined;
    const bool accepted = meta.reduce(tensors());
    const Step step = plan_.step(layer);
    CAPTURE(layer);
    CHECK(accepted == (step == Step::reduce));
    if (accepted) return;
    declined_last_ = true;
    CHECK(meta.comm().stats().declined == declined_before + 1);
    CHECK(meta.comm().last_decline().find(step == Step::f16 ? "is not f32" : "is not contiguous") != std::string::npos);
    for (std::size_t d = 0; d < n_; ++d) {
      CHECK(host_[d].handed == handed[d]);
      CHECK(host_[d].queue_locks == locks[d]);
    }
    fallback(layer);
  }

  // After graph(size()): every reduced layer's sum as each device's next subgraph saw it.
  void verify() {
    host_.synchronize();
    std::size_t wrong = 0;
    for (std::size_t layer = 0; layer < layers_; ++layer) {
      if (plan_.step(layer) != Step::reduce) continue;
      const std::size_t c = plan_.count(layer);
      std::vector<float> expect(c, 0.0f);
      for (std::size_t d = 0; d < n_; ++d)
        if (contributes(layer, d)) {
          const auto p = partial(layer, d);
          for (std::size_t i = 0; i < c; ++i) expect[i] += p[i];
        }
      for (std::size_t d = 0; d < n_; ++d) {
        const auto got = history_[d]->read(slot_[layer], c);
        if (!tpar_test::bit_identical(got, expect) && wrong++ < 4) {
          std::size_t i = 0;
          while (i < c && std::memcmp(&got[i], &expect[i], 4) == 0) ++i;
          FAIL_CHECK("layer " << layer << " (" << c << " values), device " << d << ": value " << i << " is " << got[i]
                              << ", expected " << expect[i]);
        }
      }
    }
    CHECK(wrong == 0);
  }

 private:
  // What ggml's meta backend does with a declined call: synchronise, sum on the host,
  // write the sum back. Checks on the way that tpar left the tensors untouched.
  void fallback(std::size_t layer) {
    host_.synchronize();
    const std::size_t c = plan_.count(layer);
    if (plan_.step(layer) == Step::f16) {
      for (std::size_t d = 0; d < n_; ++d) {
        const auto* words = reinterpret_cast<const std::uint32_t*>(arena_[d]->mapped + offset_);
        CHECK(std::all_of(words, words + c / 2, [](std::uint32_t w) { return w == 0x3C003C00u; }));
      }
      return;
    }
    std::vector<std::vector<float>> now;
    for (std::size_t d = 0; d < n_; ++d) {
      now.push_back(arena_[d]->read(offset_, c));
      CHECK(tpar_test::bit_identical(now[d], partial(layer, d)));  // untouched
    }
    auto viewed = [](std::size_t i) { return (i / 512) % 2 == 0; };
    std::vector<float> sum(c, 0.0f);
    for (std::size_t d = 0; d < n_; ++d)
      for (std::size_t i = 0; i < c; ++i)
        if (viewed(i)) sum[i] += now[d][i];
    for (std::size_t d = 0; d < n_; ++d) {
      float* f = arena_[d]->floats(offset_);
      for (std::size_t i = 0; i < c; ++i)
        if (viewed(i)) f[i] = sum[i];
    }
  }

  std::pair<std::size_t, std::size_t> patch(std::size_t layer) const {
    const std::size_t c = plan_.count(layer);
    const std::size_t len = std::min<std::size_t>(16, c);
    return {(layer * 97) % (c - len + 1), len};
  }
  static float patch_value(std::size_t layer, std::size_t d) { return float(int(layer % 7) - 3 + int(d)); }

  Host& host_;
  std::size_t n_, layers_;
  Plan plan_;
  std::size_t offset_ = 256, max_count_ = 0;
  std::vector<std::size_t> slot_;
  bool declined_last_ = false;
  std::vector<std::unique_ptr<Buffer>> arena_, patterns_, history_;
  std::vector<std::vector<std::vector<float>>> pattern_data_;
  std::vector<Tensor> tensors_;
};

// Gates: per device a timeline the host signals (to 1) when it chooses.
struct Gates {
  Host& host;
  std::vector<vk::Semaphore> semaphores;
  explicit Gates(Host& h) : host(h) {
    for (std::size_t d = 0; d < h.size(); ++d) semaphores.push_back(make_timeline(h[d].device));
  }
  ~Gates() {
    for (std::size_t d = 0; d < host.size(); ++d) host[d].device.destroySemaphore(semaphores[d]);
  }
  std::vector<tpar::TimelinePoint> points() const {
    std::vector<tpar::TimelinePoint> p;
    for (auto s : semaphores) p.push_back({s, 1});
    return p;
  }
  void open() {
    for (std::size_t d = 0; d < host.size(); ++d) {
      vk::SemaphoreSignalInfo s(semaphores[d], 1);
      REQUIRE(host[d].device.signalSemaphore(&s) == vk::Result::eSuccess);
    }
  }
};

// Runs every layer: graph, then the hook. The first subgraph waits for a gate the host
// opens only after the first call returned, so that call cannot have waited on the host.
template <class T>
void run_layers(Host& host, Meta<T>& meta, Layers& model) {
  Gates gates(host);
  for (std::size_t layer = 0; layer < model.size(); ++layer) {
    model.graph(layer, layer == 0 ? gates.points() : std::vector<tpar::TimelinePoint>{});
    model.reduce(meta, layer);
    if (layer == 0) {
      for (std::size_t d = 0; d < host.size(); ++d) {
        std::uint64_t v = 0;
        REQUIRE(host[d].device.getSemaphoreCounterValue(host[d].timeline, &v) == vk::Result::eSuccess);
        CHECK(v == 0);  // the first subgraph has not run yet
      }
      gates.open();
    }
  }
  model.graph(model.size());
  model.verify();
}

}  // namespace toy
