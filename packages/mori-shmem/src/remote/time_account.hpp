// SPDX-License-Identifier: MIT
// Where the device proxy's time goes (issue #32: a request took about 1 ms and nothing said why):
// wall time summed per phase, logged once at debug level when the PE finalizes. Adding to it
// costs two clock reads per phase, which the proxy pays whether or not debug logging is on, so
// a run at MORI_LOG_LEVEL=debug times the same code as any other.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

namespace mori::shmem::remote {

inline uint64_t monotonic_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Phases are indexes into `names`; add() may run on several threads at once.
template <size_t N>
class TimeAccount {
 public:
  explicit TimeAccount(std::array<const char*, N> names) : names_(names) {}

  void add(size_t phase, uint64_t ns) {
    ns_[phase].fetch_add(ns, std::memory_order_relaxed);
    count_[phase].fetch_add(1, std::memory_order_relaxed);
  }

  // "name: count x, total ms (mean us); ..." for the phases that ran.
  std::string summary() const {
    std::ostringstream out;
    out.setf(std::ios::fixed);
    out.precision(1);
    const char* sep = "";
    for (size_t i = 0; i < N; ++i) {
      const uint64_t n = count_[i].load(std::memory_order_relaxed);
      if (n == 0) continue;
      const double ns = static_cast<double>(ns_[i].load(std::memory_order_relaxed));
      out << sep << names_[i] << ": " << n << " x, " << ns / 1e6 << " ms (" << ns / 1e3 / n << " us each)";
      sep = "; ";
    }
    return out.str();
  }

 private:
  std::array<const char*, N> names_;
  std::array<std::atomic<uint64_t>, N> ns_{};
  std::array<std::atomic<uint64_t>, N> count_{};
};

}  // namespace mori::shmem::remote
