// SPDX-License-Identifier: MIT
// A thread that runs callbacks in order, off the UCX worker thread: a transfer that failed over
// RDMA is retried over TCP from here, and that retry may block connecting, which the worker
// thread, progressing every other transfer, must never do.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace mori::io::ucx {

class Runner {
 public:
  Runner();
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  void post(std::function<void()> task);
  // Runs what is queued, then joins; later posts run on the calling thread.
  void stop();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mori::io::ucx
