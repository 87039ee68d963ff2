// SPDX-License-Identifier: MIT
// MORI's TransferStatus: the handle an asynchronous transfer reports through. IO threads update
// it; application threads poll or wait on it (the bindings release the GIL around the waits).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace mori::io {

class TransferStatus;

// Something that can move a transfer on from the thread that waits for it: the TCP peer link,
// whose waiter reads its own response off the lane's socket instead of being woken by the lane's
// receiver thread (a hand-over that costs a small transfer as much as the wire).
class StatusDriver {
 public:
  virtual ~StatusDriver() = default;
  // Returns when `status` is final, `deadline` passed, or another thread already receives on the
  // lane (the caller then waits on the status as usual). A deadline in the past polls once.
  virtual void drive(uint32_t lane, const TransferStatus& status, std::chrono::steady_clock::time_point deadline) = 0;
};

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

  // Set by the TCP backend once the transfer's one frame is on `lane` of `driver`; may come from
  // another thread than the waiter's (a transfer that waited for its connection).
  void set_driver(std::weak_ptr<StatusDriver> driver, uint32_t lane) {
    std::lock_guard<std::mutex> lock(mutex_);
    driver_ = std::move(driver);
    driver_lane_ = lane;
    driven_.store(true, std::memory_order_release);
  }

  bool is_done() const { return final_.load(std::memory_order_acquire); }

  // The code, after reading whatever response already arrived for a driven transfer (without
  // blocking): a caller that polls sees its completion as soon as one that waits would.
  StatusCode poll() const {
    if (!is_done()) drive(std::chrono::steady_clock::now());
    return code();
  }

  // Blocks until the status is final or timeout_ms passed (negative waits without limit);
  // returns the code at that moment.
  StatusCode wait_for(int64_t timeout_ms) const {
    if (!is_done()) {
      drive(timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                           : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms));
    }
    // Spinning first spares the futex wake-up, which would otherwise cost a small transfer as
    // much as the transfer itself. A transfer with a progress hook (a GPU copy) is completed by
    // this thread's polling for as long as copies of a few hundred MiB take.
    if (timeout_ms != 0 && !is_done()) {
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
  void drive(std::chrono::steady_clock::time_point deadline) const {
    if (!driven_.load(std::memory_order_acquire)) return;  // P2P, RDMA: nothing to look up
    std::shared_ptr<StatusDriver> driver;
    uint32_t lane = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      driver = driver_.lock();
      lane = driver_lane_;
    }
    if (driver) driver->drive(lane, *this, deadline);
  }

  static constexpr auto kWaitSpin = std::chrono::microseconds(50);
  static constexpr auto kProgressSpin = std::chrono::milliseconds(1);
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::atomic<bool> final_{false};
  std::function<void()> progress_;
  std::weak_ptr<StatusDriver> driver_;
  uint32_t driver_lane_ = 0;
  std::atomic<bool> driven_{false};
  StatusCode code_ = StatusCode::INIT;
  std::string message_;
};

}  // namespace mori::io
