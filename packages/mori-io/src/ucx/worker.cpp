// SPDX-License-Identifier: MIT
#include "ucx/worker.hpp"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "ucx/loader.hpp"

namespace mori::io::ucx {

namespace {

// While transfers are in flight the thread also wakes this often, so a transport that does not
// signal some completion through the event fd delays it by at most this much.
constexpr int64_t kBusyWakeMs = 5;
// Idle, it still wakes now and then; nothing depends on it.
constexpr int64_t kIdleWakeMs = 1000;

}  // namespace

Worker::Worker(const Context& context, WorkerClient& client, const WorkerOptions& options)
    : context_(context), client_(client), options_(options) {
  std::promise<void> started;
  std::future<void> ready = started.get_future();
  thread_ = std::thread([this, &started] { run(&started); });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

Worker::~Worker() { stop(); }

bool Worker::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(tasks_mutex_);
  if (!accepting_) return false;
  tasks_.push_back(std::move(task));
  task_count_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with sleep(): either the thread sees the task before it sleeps, or it sees this write.
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
  return true;
}

void Worker::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void Worker::stop() {
  std::lock_guard<std::mutex> join_lock(stop_mutex_);
  {
    std::lock_guard<std::mutex> lock(tasks_mutex_);
    if (!accepting_) return;
    accepting_ = false;
    stopping_.store(true);
    wake();
  }
  if (thread_.joinable()) thread_.join();
}

void Worker::run_tasks() {
  if (task_count_.load(std::memory_order_acquire) == 0) return;
  std::deque<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(tasks_mutex_);
    batch.swap(tasks_);
    task_count_.store(0, std::memory_order_release);
  }
  for (auto& task : batch) {
    try {
      task();
    } catch (const std::exception& e) {  // a task must not take the thread (and the process) down
      MORI_IO_LOG(Error, "UCX worker '" << options_.name << "': a task failed: " << e.what());
    }
  }
}

void Worker::sleep(const WorkerClient::Tick& tick) {
  sleeping_.store(true, std::memory_order_seq_cst);
  if (task_count_.load(std::memory_order_seq_cst) != 0 || stopping_.load()) {
    sleeping_.store(false);
    return;
  }
  const Api& api = context_.api();
  if (api.ucp_worker_arm(worker_) == UCS_ERR_BUSY) {  // events arrived since the last progress
    sleeping_.store(false);
    return;
  }
  int64_t wait_ms = tick.busy ? kBusyWakeMs : kIdleWakeMs;
  if (tick.wake != net::never()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(tick.wake - net::Clock::now()).count();
    wait_ms = std::max<int64_t>(0, std::min<int64_t>(wait_ms, left + 1));
  }
  epoll_event events[2];
  int n = epoll_wait(epoll_fd_, events, 2, static_cast<int>(wait_ms));
  sleeping_.store(false);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == wake_fd_) {
      uint64_t count = 0;
      ssize_t ignored = ::read(wake_fd_, &count, sizeof(count));
      (void)ignored;
    }
  }
}

void Worker::run(std::promise<void>* started) {
  pthread_setname_np(pthread_self(), "mori-io-ucx");
  const Api& api = context_.api();
  try {
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_NAME;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    params.name = options_.name.c_str();
    ucs_status_t status = api.ucp_worker_create(context_.handle(), &params, &worker_);
    if (status != UCS_OK) throw Error(Code::Unsupported, "ucp_worker_create failed: " + describe(api, status));
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    context_.check(api.ucp_worker_query(worker_, &attr), "ucp_worker_query");
    address_.assign(reinterpret_cast<const char*>(attr.address), attr.address_length);
    api.ucp_worker_release_address(worker_, attr.address);
    context_.check(api.ucp_worker_get_efd(worker_, &ucx_fd_), "ucp_worker_get_efd");
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (wake_fd_ < 0 || epoll_fd_ < 0) throw Error(Code::System, std::string("eventfd/epoll: ") + std::strerror(errno));
    for (int fd : {ucx_fd_, wake_fd_}) {
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.fd = fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
        throw Error(Code::System, std::string("epoll_ctl: ") + std::strerror(errno));
      }
    }
    client_.on_start(worker_);
  } catch (...) {
    if (worker_ != nullptr) api.ucp_worker_destroy(worker_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    started->set_exception(std::current_exception());
    return;
  }
  started->set_value();

  bool stop_begun = false;
  auto stop_deadline = net::never();
  auto last_event = net::Clock::now();
  const auto spin = std::chrono::microseconds(options_.polling ? options_.spin_us : 0);
  for (;;) {
    run_tasks();
    unsigned events = 0;
    while (unsigned n = api.ucp_worker_progress(worker_)) events += n;
    WorkerClient::Tick tick;
    try {
      tick = client_.on_tick();
    } catch (const std::exception& e) {
      MORI_IO_LOG(Error, "UCX worker '" << options_.name << "': " << e.what());
      tick.busy = true;
    }
    const auto now = net::Clock::now();
    if (stopping_.load() && !stop_begun) {
      run_tasks();  // queued before stop(): they fail fast against a stopping owner
      client_.on_stop();
      stop_begun = true;
      stop_deadline = now + kStopGrace;
      continue;
    }
    if (stop_begun) {
      if (!tick.busy) break;
      if (now > stop_deadline) {
        MORI_IO_LOG(Warning, "UCX worker '" << options_.name << "' still had work in flight "
                                            << std::chrono::duration_cast<std::chrono::seconds>(kStopGrace).count()
                                            << " s after stop began; destroying it anyway");
        break;
      }
    }
    if (events > 0 || tick.ready) {
      last_event = now;
      continue;
    }
    if (tick.busy && now - last_event < spin) {
      // Yielding keeps the spin cheap where cores are short: the peer's or the waiting
      // application's thread, which this transfer needs next, gets the core at once.
      std::this_thread::yield();
      continue;
    }
    sleep(tick);
    last_event = net::Clock::now();
  }
  api.ucp_worker_destroy(worker_);
  worker_ = nullptr;
  ::close(epoll_fd_);
  ::close(wake_fd_);  // post() no longer writes to it: accepting_ went false before the loop ended
}

}  // namespace mori::io::ucx
