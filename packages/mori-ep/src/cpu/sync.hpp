// SPDX-License-Identifier: MIT
// Cross-process words of the cpu backend: the regions live in POSIX shared memory mapped by every
// PE, so the protocol's atomics are plain host atomics on that memory. Waits for a peer poll with
// a growing pause (PEs usually outnumber cores in tests) and give up after the op's timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

namespace mori::ep::cpu {

class WaitTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// mori-shmem could not carry a put or signal to a peer (lost connection, bad address).
class PeerFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename T>
inline T LoadAcquire(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

template <typename T>
inline void StoreRelease(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

template <typename T>
inline T FetchAdd(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}

// Waits until done(LoadAcquire(p)) and returns that value; throws WaitTimeout naming `what`
// after timeout_ns (0 = wait forever).
template <typename T, typename Pred>
T WaitFor(const T* p, Pred done, uint64_t timeout_ns, const std::string& what) {
  T v = LoadAcquire(p);
  if (done(v)) return v;
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(1);
  for (unsigned spin = 0;; ++spin) {
    v = LoadAcquire(p);
    if (done(v)) return v;
    if (spin < 64) continue;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(200)) pause *= 2;
    const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    if (timeout_ns != 0 && static_cast<uint64_t>(waited.count()) >= timeout_ns) {
      throw WaitTimeout(what + " after " + std::to_string(waited.count() / 1000000) + " ms");
    }
  }
}

}  // namespace mori::ep::cpu
