// SPDX-License-Identifier: MIT
// The cuda copy engine: one non-blocking stream per (LSA peer, queue). A stream runs its work in
// order, so a signal stored by cuStreamWriteValue64 after a copy is seen only once that copy (and
// every earlier one of the queue) completed; the default write flags keep the memory fence before
// the store, so a waiter that sees the signal also sees the data.
#include <mutex>
#include <vector>

#include "core/copy_engine.hpp"
#include "core/error.hpp"
#include "cuda/driver.hpp"

namespace mori::cco {

namespace {

using cuda::check;
using cuda::CUstream;

class StreamCopyEngine final : public CopyEngine {
 public:
  StreamCopyEngine(int device, int lsa_size, int queues);
  ~StreamCopyEngine() override;
  StreamCopyEngine(const StreamCopyEngine&) = delete;
  StreamCopyEngine& operator=(const StreamCopyEngine&) = delete;

  void put(int peer, int queue, uintptr_t dst, uintptr_t src, uint64_t nbytes, uintptr_t signal_addr,
           uint64_t signal_value) override;
  void quiet(int peer, int queue) override;
  int queues() const override { return queues_; }

 private:
  size_t index(int peer, int queue) const {
    return static_cast<size_t>(peer) * static_cast<size_t>(queues_) + static_cast<size_t>(queue);
  }
  CUstream stream(int peer, int queue);  // with mutex_ held

  int device_;
  int lsa_size_;
  int queues_;
  std::mutex mutex_;
  std::vector<CUstream> streams_;  // [peer][queue], null until first used: most pairs never are
};

StreamCopyEngine::StreamCopyEngine(int device, int lsa_size, int queues)
    : device_(device), lsa_size_(lsa_size), queues_(queues) {
  if (lsa_size < 1) fail(ccoInvalidArgument, "lsa_size must be >= 1, got ", lsa_size);
  if (queues < 1) fail(ccoInvalidArgument, "queues must be >= 1, got ", queues);
  cuda::make_current(device);  // rejects a missing driver or device now rather than at the first put
  streams_.assign(static_cast<size_t>(lsa_size) * static_cast<size_t>(queues), nullptr);
}

StreamCopyEngine::~StreamCopyEngine() {
  // Best effort on teardown. cuStreamDestroy lets work already queued finish before the stream's
  // resources go, so no copy is cut short.
  try {
    cuda::make_current(device_);
    const cuda::Driver& d = cuda::driver();
    for (CUstream s : streams_) {
      if (s != nullptr) d.cuStreamDestroy(s);
    }
  } catch (...) {
  }
}

CUstream StreamCopyEngine::stream(int peer, int queue) {
  CUstream& s = streams_[index(peer, queue)];
  if (s == nullptr) {
    CUstream created = nullptr;
    // Non-blocking: copies must not serialise with the legacy default stream the user may use.
    check(cuda::driver().cuStreamCreate(&created, cuda::kStreamNonBlocking), "cuStreamCreate for LSA peer ", peer,
          " queue ", queue, " on CUDA device ", device_);
    s = created;
  }
  return s;
}

void StreamCopyEngine::put(int peer, int queue, uintptr_t dst, uintptr_t src, uint64_t nbytes, uintptr_t signal_addr,
                           uint64_t signal_value) {
  if (peer < 0 || peer >= lsa_size_) fail(ccoInvalidArgument, "peer ", peer, " is out of range [0, ", lsa_size_, ")");
  if (queue < 0 || queue >= queues_) {
    fail(ccoInvalidArgument, "queue ", queue, " is out of range [0, ", queues_, ")");
  }
  if (nbytes > 0 && (dst == 0 || src == 0)) {
    fail(ccoInvalidArgument, "a copy of ", nbytes, " bytes needs non-null addresses, got dst 0x", std::hex, dst,
         " src 0x", src);
  }
  if (signal_addr % sizeof(uint64_t) != 0) {
    fail(ccoInvalidArgument, "signal_addr 0x", std::hex, signal_addr, " must be 8-byte aligned");
  }
  if (nbytes == 0 && signal_addr == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  cuda::make_current(device_);
  const cuda::Driver& d = cuda::driver();
  const CUstream s = stream(peer, queue);
  if (nbytes > 0) {
    check(d.cuMemcpyAsync(static_cast<cuda::CUdeviceptr>(dst), static_cast<cuda::CUdeviceptr>(src), nbytes, s),
          "cuMemcpyAsync of ", nbytes, " bytes to LSA peer ", peer, " on queue ", queue);
  }
  if (signal_addr != 0) {
    check(d.cuStreamWriteValue64(s, static_cast<cuda::CUdeviceptr>(signal_addr), signal_value,
                                 cuda::kStreamWriteValueDefault),
          "cuStreamWriteValue64 of the signal for LSA peer ", peer, " on queue ", queue);
  }
}

void StreamCopyEngine::quiet(int peer, int queue) {
  if (peer < -1 || peer >= lsa_size_) {
    fail(ccoInvalidArgument, "peer ", peer, " is out of range [0, ", lsa_size_, ") (or -1 for every peer)");
  }
  if (queue < -1 || queue >= queues_) {
    fail(ccoInvalidArgument, "queue ", queue, " is out of range [0, ", queues_, ") (or -1 for every queue)");
  }
  struct Selected {
    int peer;
    int queue;
    CUstream stream;
  };
  std::vector<Selected> selected;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int p = peer < 0 ? 0 : peer; p < (peer < 0 ? lsa_size_ : peer + 1); ++p) {
      for (int q = queue < 0 ? 0 : queue; q < (queue < 0 ? queues_ : queue + 1); ++q) {
        if (CUstream s = streams_[index(p, q)]) selected.push_back({p, q, s});
      }
    }
  }
  // Waited on without the lock, so other threads keep enqueueing meanwhile; streams live until
  // destruction, so the handles stay valid.
  cuda::make_current(device_);
  const cuda::Driver& d = cuda::driver();
  for (const Selected& s : selected) {
    check(d.cuStreamSynchronize(s.stream), "cuStreamSynchronize of LSA peer ", s.peer, " queue ", s.queue,
          " (a copy or signal store failed)");
  }
}

}  // namespace

std::unique_ptr<CopyEngine> create_stream_copy_engine(int device, int lsa_size, int queues) {
  return std::make_unique<StreamCopyEngine>(device, lsa_size, queues);
}

}  // namespace mori::cco
