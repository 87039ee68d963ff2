// SPDX-License-Identifier: MIT
// Threads that stay up for the tcp conduit's striped transfers: starting a thread per transfer
// cost tens of microseconds, a sizeable share of a 1 MiB put on loopback (~200 us).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mori::shmem::remote {

class StripeCrew {
 public:
  explicit StripeCrew(size_t helpers);
  ~StripeCrew();
  StripeCrew(const StripeCrew&) = delete;
  StripeCrew& operator=(const StripeCrew&) = delete;

  // Runs part(0) on the caller and part(1..parts-1) on helpers, returns when all have, and then
  // rethrows the first error. parts <= helpers + 1. One call at a time; others wait their turn.
  void run(size_t parts, const std::function<void(size_t)>& part);

 private:
  void serve(size_t helper);

  std::mutex turn_;  // held for a whole run()
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  const std::function<void(size_t)>* part_ = nullptr;
  size_t parts_ = 0;
  uint64_t round_ = 0;
  size_t busy_ = 0;  // helpers still in this round
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace mori::shmem::remote
