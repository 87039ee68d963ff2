// SPDX-License-Identifier: MIT
// The RDMA backend's one UCP worker and the thread that owns it. Every UCX call after the
// context is made runs on this thread (the worker is UCS_THREAD_MODE_SINGLE, so a UCX built
// without multi-threading support works too): other threads hand it tasks. The thread drives
// ucp_worker_progress while work is in flight and sleeps in epoll on UCX's event fd (armed with
// ucp_worker_arm) and an eventfd for new tasks otherwise, so an idle engine costs no CPU.
// POLLING (MORI's PollCqMode) keeps progressing for spin_us after the last event before it
// sleeps, which saves a wake-up on fast fabrics; EVENT sleeps at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "net/socket.hpp"
#include "ucx/context.hpp"

namespace mori::io::ucx {

struct WorkerOptions {
  std::string name;
  bool polling = true;
  int64_t spin_us = 50;
};

// What the worker's owner does on the worker thread.
class WorkerClient {
 public:
  struct Tick {
    bool busy = false;                  // work in flight: keep progressing (or wake up soon)
    bool ready = false;                 // work to do now, not waiting for UCX: do not sleep
    net::Deadline wake = net::never();  // the next deadline to check
  };
  virtual ~WorkerClient() = default;
  virtual void on_start(ucp_worker_h worker) = 0;
  // After each progress pass: advance work, check deadlines.
  virtual Tick on_tick() = 0;
  // Once, when stop() begins: tear everything down. The thread then keeps progressing until
  // on_tick() is no longer busy (at most kStopGrace) and destroys the worker.
  virtual void on_stop() = 0;
};

class Worker {
 public:
  static constexpr auto kStopGrace = std::chrono::seconds(5);

  // Starts the thread and creates the worker on it; throws Error(Unsupported) naming UCX's
  // error when that fails.
  Worker(const Context& context, WorkerClient& client, const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The worker's UCP address, which a peer's ucp_ep_create needs.
  const std::string& address() const { return address_; }
  bool on_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Runs task on the worker thread soon. Returns false (task dropped) once stopping.
  bool post(std::function<void()> task);
  // Runs task on the worker thread and returns its result, rethrowing its Error; throws
  // Error(Unsupported) once stopping and Error(Timeout) when it did not run within timeout_ms.
  template <typename T>
  T call(std::function<T()> task, int64_t timeout_ms);

  // Idempotent; returns once the thread has torn down and destroyed the worker.
  void stop();

 private:
  void run(std::promise<void>* started);
  void run_tasks();
  void sleep(const WorkerClient::Tick& tick);
  void wake();  // tasks_mutex_ held (or the thread not yet started)

  const Context& context_;
  WorkerClient& client_;
  WorkerOptions options_;
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int ucx_fd_ = -1;

  std::mutex tasks_mutex_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<size_t> task_count_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  bool accepting_ = true;  // under tasks_mutex_
  std::mutex stop_mutex_;
  std::thread thread_;
};

template <typename T>
T Worker::call(std::function<T()> task, int64_t timeout_ms) {
  if (on_thread()) return task();
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    T value{};
    std::unique_ptr<Error> error;
  };
  auto shared = std::make_shared<Shared>();
  auto run = [shared, task = std::move(task)] {
    T value{};
    std::unique_ptr<Error> error;
    try {
      value = task();
    } catch (const Error& e) {
      error = std::make_unique<Error>(e);
    } catch (const std::exception& e) {
      error = std::make_unique<Error>(Code::Internal, e.what());
    }
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->value = std::move(value);
    shared->error = std::move(error);
    shared->finished = true;
    shared->done.notify_all();
  };
  if (!post(std::move(run))) throw Error(Code::Unsupported, "the RDMA backend is stopping");
  std::unique_lock<std::mutex> lock(shared->mutex);
  auto finished = [&] { return shared->finished; };
  if (timeout_ms < 0) {
    shared->done.wait(lock, finished);
  } else if (!shared->done.wait_for(lock, std::chrono::milliseconds(timeout_ms), finished)) {
    throw Error(Code::Timeout, "the RDMA worker thread did not answer within " + std::to_string(timeout_ms) + " ms");
  }
  if (shared->error) throw *shared->error;
  return std::move(shared->value);
}

}  // namespace mori::io::ucx
