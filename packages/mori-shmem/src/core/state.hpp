// SPDX-License-Identifier: MIT
// The per-process PE state: one bootstrap, one heap, one allocator. A process is one PE at a
// time; finalize returns it to "not initialized" so init can run again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "bootstrap/bootstrap.hpp"
#include "heap/allocator.hpp"
#include "heap/shm_heap.hpp"

namespace mori::shmem {

// Bytes at the start of every heap kept for the library's own synchronisation words.
constexpr uint64_t kReservedHeapBytes = 4096;

struct PeState {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<SharedMemoryHeap> heap;
  std::unique_ptr<HeapAllocator> allocator;
  std::map<uintptr_t, size_t> registered_buffers;  // base -> size, non-overlapping
  bool check_symmetry = true;
  double wait_timeout_s = 300;

  int rank() const { return bootstrap->rank(); }
  int nranks() const { return bootstrap->nranks(); }
};

// Guards init/finalize and every allocator or registry change.
std::mutex& state_mutex();

// The live state; throws MORI_SHMEM_ERR_NOT_INITIALIZED naming `caller` when there is none.
PeState& require_state(const char* caller);
bool is_initialized();

void initialize(const mori_shmem_uniqueid_t& uid, int rank, int nranks);
void finalize();

}  // namespace mori::shmem
