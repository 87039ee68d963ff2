// SPDX-License-Identifier: MIT
// Copy-engine transfers (MORI's SDMA path): bulk copies between flat-VA addresses that run off the
// compute units (cuda: cuMemcpyAsync on dedicated streams; cpu: worker threads), each optionally
// followed by a store of a monotonic count into a signal word that a kernel or thread can wait on.
// Queues are FIFO: a signal is stored only after every earlier copy of its queue completed.
#pragma once

#include <cstdint>
#include <memory>

namespace mori::cco {

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Enqueues the copy of nbytes from src to dst on queue `queue` (0 <= queue < queues) toward LSA
  // peer `peer`; when signal_addr != 0, then stores signal_value (8 bytes) at signal_addr.
  // Returns without waiting.
  virtual void put(int peer, int queue, uintptr_t dst, uintptr_t src, uint64_t nbytes, uintptr_t signal_addr,
                   uint64_t signal_value) = 0;
  // Waits until every operation enqueued on (peer, queue) completed; -1 means every peer / queue.
  // Throws the first error a queue met (the queue is then unusable).
  virtual void quiet(int peer, int queue) = 0;
  virtual int queues() const = 0;
};

std::unique_ptr<CopyEngine> create_thread_copy_engine(int lsa_size, int queues);
// Streams are created on `device`'s primary context.
std::unique_ptr<CopyEngine> create_stream_copy_engine(int device, int lsa_size, int queues);

}  // namespace mori::cco
