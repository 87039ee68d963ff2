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
#include "heap/cuda_heap.hpp"
#include "heap/symmetric_heap.hpp"
#include "mori_shmem/device_state.h"
#include "remote/conduit.hpp"
#include "remote/device_proxy.hpp"
#include "remote/gpu_remote_io.hpp"

namespace mori::shmem {

// Bytes at the start of every heap kept for the library's own synchronisation words.
constexpr uint64_t kReservedHeapBytes = MORI_SHMEM_SYNC_BYTES;

struct PeState {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<SymmetricHeap> heap;
  CudaHeap* cuda_heap = nullptr;  // = heap on the cuda backend, else null
  std::unique_ptr<HeapAllocator> allocator;
  // Set when some PE is not load/store reachable (NOTE [remote transport]); the cuda backend then
  // also stages through pinned memory and runs the device proxy (NOTE [device proxy]).
  std::unique_ptr<remote::HeapAccess> remote_heap;
  std::unique_ptr<remote::Conduit> remote;  // TCP or UCX (remote/conduit.hpp)
  std::unique_ptr<remote::DeviceProxy> proxy;
  remote::GpuRemoteIo* gpu_remote = nullptr;  // = remote_heap on the cuda backend
  std::map<uintptr_t, size_t> registered_buffers;  // base -> size, non-overlapping
  bool check_symmetry = true;
  double wait_timeout_s = 300;
  double device_spin_timeout_s = 60;

  int rank() const { return bootstrap->rank(); }
  int nranks() const { return bootstrap->nranks(); }
};

// Every setting of the remote transport (MORI_SHMEM_REMOTE_*, MORI_SOCKET_IFNAME), read before
// any network step so that a bad value fails on every PE alike.
remote::ConduitConfig read_conduit_config(double wait_timeout_s);

// Guards init/finalize and every allocator or registry change.
std::mutex& state_mutex();

// The live state; throws MORI_SHMEM_ERR_NOT_INITIALIZED naming `caller` when there is none.
PeState& require_state(const char* caller);
bool is_initialized();
// The backend init would pick now ("cpu" or "cuda"), from MORI_SHMEM_BACKEND and the machine.
const char* planned_backend();

void initialize(const mori_shmem_uniqueid_t& uid, int rank, int nranks);
void finalize();

}  // namespace mori::shmem
