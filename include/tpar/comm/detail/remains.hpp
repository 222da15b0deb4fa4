// What a destroyed communicator could not free yet: the Vulkan objects of work still on
// a queue (a ready point that never came, calls an abort ended on the host but not on
// the GPU). Nothing is freed under the GPU, and nothing is lost: each one is freed once
// its work is done, as seen without blocking whenever a communicator is made or
// destroyed. Process-wide, and never destroyed itself (at exit, work a driver still holds
// is left to it).
#pragma once

#include <tpar/core/log.hpp>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tpar::inline v0::detail {

class Remains {
 public:
  virtual ~Remains() = default;
  // Whether the GPU is through with everything held, asking without blocking (it may
  // submit a fence to find out, and say so the next time).
  virtual bool finished() = 0;
};

class RemainsList {
 public:
  void add(std::unique_ptr<Remains> r) {
    std::lock_guard lock(mutex_);
    list_.push_back(std::move(r));
  }
  // Frees every one whose work is done.
  void reap() noexcept {
    std::vector<std::unique_ptr<Remains>> done;
    {
      std::lock_guard lock(mutex_);
      if (list_.empty()) return;
      for (auto& r : list_) {
        bool finished = false;
        try {
          finished = r->finished();
        } catch (const std::exception& e) {
          log(LogLevel::error, std::string("checking what a destroyed communicator left on the GPU: ") + e.what());
        }
        if (finished) done.push_back(std::move(r));
      }
      list_.erase(std::remove(list_.begin(), list_.end(), nullptr), list_.end());
    }
    done.clear();  // outside the lock: freeing may log
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return list_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Remains>> list_;
};

inline RemainsList& remains() {
  static RemainsList* list = new RemainsList;  // never destroyed: see above
  return *list;
}

}  // namespace tpar::inline v0::detail
