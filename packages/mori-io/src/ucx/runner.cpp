// SPDX-License-Identifier: MIT
#include "ucx/runner.hpp"

#include <pthread.h>

namespace mori::io::ucx {

Runner::Runner() : thread_([this] { loop(); }) {}

Runner::~Runner() { stop(); }

void Runner::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      tasks_.push_back(std::move(task));
      wake_.notify_one();
      return;
    }
  }
  task();
}

void Runner::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Runner::loop() {
  pthread_setname_np(pthread_self(), "mori-io-retry");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and everything queued ran
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace mori::io::ucx
