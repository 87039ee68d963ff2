// SPDX-License-Identifier: MIT
// The cpu backend's copy engine: one worker thread per (peer, queue), started at its first put,
// so queues run concurrently and in order, as copy-engine streams do on the GPU.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/copy_engine.hpp"
#include "core/error.hpp"

namespace mori::cco {

namespace {

struct Op {
  uintptr_t dst;
  uintptr_t src;
  uint64_t nbytes;
  uintptr_t signal_addr;
  uint64_t signal_value;
};

class Queue {
 public:
  ~Queue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  void push(const Op& op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
      ops_.push_back(op);
      ++pending_;
    }
    wake_.notify_all();
  }

  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !ops_.empty(); });
      if (ops_.empty()) return;
      const Op op = ops_.front();
      ops_.pop_front();
      lock.unlock();
      std::memcpy(reinterpret_cast<void*>(op.dst), reinterpret_cast<const void*>(op.src), op.nbytes);
      // Release: a peer that sees the count also sees the bytes.
      if (op.signal_addr != 0) {
        __atomic_store_n(reinterpret_cast<uint64_t*>(op.signal_addr), op.signal_value, __ATOMIC_RELEASE);
      }
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::deque<Op> ops_;
  uint64_t pending_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

class ThreadCopyEngine final : public CopyEngine {
 public:
  ThreadCopyEngine(int lsa_size, int queues) : lsa_size_(lsa_size), queues_(queues), queue_(lsa_size * queues) {
    for (auto& queue : queue_) queue = std::make_unique<Queue>();
  }

  void put(int peer, int queue, uintptr_t dst, uintptr_t src, uint64_t nbytes, uintptr_t signal_addr,
           uint64_t signal_value) override {
    check(peer, queue, false);
    queue_[peer * queues_ + queue]->push(Op{dst, src, nbytes, signal_addr, signal_value});
  }

  void quiet(int peer, int queue) override {
    check(peer, queue, true);
    for (int p = 0; p < lsa_size_; ++p) {
      for (int q = 0; q < queues_; ++q) {
        if ((peer < 0 || p == peer) && (queue < 0 || q == queue)) queue_[p * queues_ + q]->drain();
      }
    }
  }

  int queues() const override { return queues_; }

 private:
  void check(int peer, int queue, bool allow_all) const {
    if (peer < (allow_all ? -1 : 0) || peer >= lsa_size_) {
      fail(ccoInvalidArgument, "peer=", peer, " is outside [0, lsa_size=", lsa_size_, ")");
    }
    if (queue < (allow_all ? -1 : 0) || queue >= queues_) {
      fail(ccoInvalidArgument, "queue=", queue, " is outside [0, ", queues_, ")");
    }
  }

  const int lsa_size_;
  const int queues_;
  std::vector<std::unique_ptr<Queue>> queue_;
};

}  // namespace

std::unique_ptr<CopyEngine> create_thread_copy_engine(int lsa_size, int queues) {
  return std::make_unique<ThreadCopyEngine>(lsa_size, queues);
}

}  // namespace mori::cco
