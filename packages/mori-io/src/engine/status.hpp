// SPDX-License-Identifier: MIT
// MORI's TransferStatus: the handle an asynchronous transfer reports through. IO threads update
// it; application threads poll or wait on it (the bindings release the GIL around the waits).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mori::io {

// Values fixed by MORI's Python API.
enum class StatusCode : int {
  SUCCESS = 0,
  INIT = 1,
  IN_PROGRESS = 2,
  ERR_BEGIN = 10,
  ERR_INVALID_ARGS = 11,
  ERR_NOT_FOUND = 12,
  ERR_RDMA_OP = 13,
  ERR_BAD_STATE = 14,
  ERR_GPU_OP = 15,
};

inline bool is_error(StatusCode code) { return static_cast<int>(code) > static_cast<int>(StatusCode::ERR_BEGIN); }
inline bool is_final(StatusCode code) { return code == StatusCode::SUCCESS || is_error(code); }

class TransferStatus {
 public:
  TransferStatus() = default;
  explicit TransferStatus(StatusCode code) : final_(is_final(code)), code_(code) {}

  StatusCode code() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return code_;
  }
  std::string message() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return message_;
  }

  // The first error sticks, and a finished status stays finished: late reports of a transfer
  // that already failed (e.g. its other frames) cannot turn it back into a success.
  void update(StatusCode code, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (is_final(code_)) return;
      code_ = code;
      message_ = message;
      final_.store(is_final(code), std::memory_order_release);
    }
    cv_.notify_all();
  }
  void set_code(StatusCode code) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      code_ = code;
      final_.store(is_final(code), std::memory_order_release);
    }
    cv_.notify_all();
  }
  void set_message(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    message_ = message;
  }

  // Lets a waiting thread move the transfer on itself rather than wait for a backend thread to
  // notice its end: the P2P backend installs one that queries the transfer's copies and
  // completes it. Called from wait_for's spin on the waiting thread; set once, before the status
  // is handed out.
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }

  bool is_done() const { return final_.load(std::memory_order_acquire); }

  // Blocks until the status is final or timeout_ms passed (negative waits without limit);
  // returns the code at that moment.
  StatusCode wait_for(int64_t timeout_ms) const {
    // Spinning first spares the futex wake-up, which would otherwise cost a small transfer as
    // much as the transfer itself. A transfer with a progress hook (a GPU copy) is completed by
    // this thread's polling for as long as copies of a few hundred MiB take.
    if (timeout_ms != 0) {
      const auto spin_end = std::chrono::steady_clock::now() + (progress_ ? kProgressSpin : kWaitSpin);
      while (!final_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_end) {
        if (progress_) {
          progress_();
        } else {
          std::this_thread::yield();
        }
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    auto done = [this] { return is_final(code_); };
    if (timeout_ms < 0) {
      cv_.wait(lock, done);
    } else {
      cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done);
    }
    return code_;
  }

 private:
  static constexpr auto kWaitSpin = std::chrono::microseconds(50);
  static constexpr auto kProgressSpin = std::chrono::milliseconds(1);
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::atomic<bool> final_{false};
  std::function<void()> progress_;
  StatusCode code_ = StatusCode::INIT;
  std::string message_;
};

}  // namespace mori::io
