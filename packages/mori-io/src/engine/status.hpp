// SPDX-License-Identifier: MIT
// MORI's TransferStatus: the handle an asynchronous transfer reports through. IO threads update
// it; application threads poll or wait on it (the bindings release the GIL around the waits).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

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
  explicit TransferStatus(StatusCode code) : code_(code) {}

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
    }
    cv_.notify_all();
  }
  void set_code(StatusCode code) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      code_ = code;
    }
    cv_.notify_all();
  }
  void set_message(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    message_ = message;
  }

  // Blocks until the status is final or timeout_ms passed (negative waits without limit);
  // returns the code at that moment.
  StatusCode wait_for(int64_t timeout_ms) const {
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
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  StatusCode code_ = StatusCode::INIT;
  std::string message_;
};

}  // namespace mori::io
