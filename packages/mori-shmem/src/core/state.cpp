// SPDX-License-Identifier: MIT
#include "core/state.hpp"

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "cuda/cuda_driver.hpp"
#include "heap/shm_heap.hpp"

namespace mori::shmem {

namespace {

std::unique_ptr<PeState> g_state;
// Lets RMA calls check for a live state without taking the mutex.
std::atomic<PeState*> g_live{nullptr};
// NOTE [one PE per process]: the state is per process, so a second thread that joins as another
// rank (MORI's single-process multi-thread mode) would wait for the mutex while the first waits
// for it at the rendezvous, until both time out. Instead the second is refused at once, and the
// first, whose peer will never come, says so when its rendezvous times out.
std::atomic<bool> g_initializing{false};
std::thread::id g_state_thread;       // who initialized g_state (under state_mutex)
std::atomic<int> g_refused_rank{-1};  // the rank a concurrent thread asked for, for the first one's error

constexpr const char* kOnePePerProcess =
    "; mori-shmem runs one PE per process (MORI's single-process multi-thread mode, one PE per thread, is not "
    "supported): start one process per PE";

enum class Backend { Cpu, Cuda };

Backend choose_backend() {
  const std::string backend = env::get_choice("MORI_SHMEM_BACKEND");
  if (backend == "cpu") return Backend::Cpu;
  if (backend == "cuda") {
    cuda::driver();  // throws UNSUPPORTED with the reason when there is no usable driver
    return Backend::Cuda;
  }
  return cuda::available() ? Backend::Cuda : Backend::Cpu;
}

// The conduit (both backends) and, on the cuda backend, the staging and the device proxy.
void start_remote_transport(PeState& state, const Topology& topology, const remote::ConduitConfig& config) {
  if (state.cuda_heap != nullptr) {
    auto io = std::make_unique<remote::GpuRemoteIo>(state.cuda_heap->context(), state.heap->local_base(),
                                                    state.heap->size());
    state.gpu_remote = io.get();
    state.remote_heap = std::move(io);
  } else {
    state.remote_heap = std::make_unique<remote::HostHeapAccess>(state.heap->local_base(), state.heap->size());
  }
  const remote::LocalHeap heap{*state.remote_heap, state.heap->local_base(), state.cuda_heap != nullptr};
  state.remote = remote::make_conduit(*state.bootstrap, topology.remote, heap, config);
  if (state.cuda_heap != nullptr) {
    state.proxy = std::make_unique<remote::DeviceProxy>(state.cuda_heap->context(), *state.remote, *state.gpu_remote,
                                                        state.heap->local_base(), state.rank(), state.wait_timeout_s);
    state.cuda_heap->set_proxy_ring(state.proxy->ring_address());
  }
}

}  // namespace

namespace {

// MORI_SHMEM_REMOTE_STREAMS when set, else MORI's MORI_NUM_QP_PER_PE when set (what MORI's users set
// for the same purpose), else MORI_SHMEM_REMOTE_STREAMS's default.
int remote_streams() {
  const char* own = std::getenv("MORI_SHMEM_REMOTE_STREAMS");
  if (own == nullptr || own[0] == '\0') {
    const int64_t qps = env::get_int("MORI_NUM_QP_PER_PE");
    if (qps != 0) {
      if (qps < 1 || qps > 64) {
        throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_NUM_QP_PER_PE=", qps,
                    " must be in [1, 64]: the tcp conduit's connections per remote PE (0 leaves it unset)");
      }
      return static_cast<int>(qps);
    }
  }
  return static_cast<int>(env::get_int("MORI_SHMEM_REMOTE_STREAMS"));
}

// The heap mode: MORI_SHMEM_MODE, except that with PEs on other nodes the unset default becomes
// vmm_heap. The device proxy's copies then run in a CUDA context of their own
// (DeviceContext::WorkScope), which reaches cuMemCreate'd memory without the application
// context's lock. A static heap keeps the proxy in the application's context (its kernels could
// not address cuMemAlloc'd memory from another), and so the hang a launch waiting for the GPU
// can cause (docs/user-guide/shmem.md, CUDA backend notes).
CudaHeap::Mode cuda_heap_mode(const std::string& setting, const Topology& topology, int rank) {
  const CudaHeap::Mode mode = parse_cuda_heap_mode(setting);
  if (!topology.any_remote || mode == CudaHeap::Mode::Vmm) return mode;
  if (!env::is_set("MORI_SHMEM_MODE")) {
    if (rank == 0) log::emit(log::Level::Info, "PEs on other nodes: the heap is a vmm_heap (MORI_SHMEM_MODE unset)");
    return CudaHeap::Mode::Vmm;
  }
  if (rank == 0) {
    log::emit(log::Level::Warning, "MORI_SHMEM_MODE=", setting,
              " with PEs on other nodes: the device proxy then shares this process's CUDA context, whose calls "
              "wait for each other, and can hang behind a kernel launch that waits for the GPU; vmm_heap avoids "
              "that (docs/user-guide/shmem.md, CUDA backend notes)");
  }
  return mode;
}

}  // namespace

remote::ConduitConfig read_conduit_config(double wait_timeout_s) {
  remote::ConduitConfig config;
  config.choice = env::get_choice("MORI_SHMEM_REMOTE_CONDUIT");
  config.streams = remote_streams();
  config.timeout_s = wait_timeout_s;
  const int64_t serve_spin_us = env::get_int("MORI_SHMEM_REMOTE_SERVE_SPIN_US");
  if (serve_spin_us < 0 || serve_spin_us > 1000) {
    throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_REMOTE_SERVE_SPIN_US=", serve_spin_us,
                " must be in [0, 1000] microseconds");
  }
  config.serve_spin_us = static_cast<int>(serve_spin_us);
  config.ifname = env::get_string("MORI_SOCKET_IFNAME");
  config.ucx_dir = env::get_string("MORI_SHMEM_UCX_DIR");
  config.ucx_atomics = env::get_choice("MORI_SHMEM_UCX_ATOMICS");
  config.rdma_devices = env::get_string("MORI_RDMA_DEVICES");
  return config;
}

std::mutex& state_mutex() {
  static std::mutex mutex;
  return mutex;
}

PeState& require_state(const char* caller) {
  PeState* state = g_live.load(std::memory_order_acquire);
  if (state == nullptr) {
    throw_error(MORI_SHMEM_ERR_NOT_INITIALIZED, caller,
                ": mori-shmem is not initialized; call shmem_init_attr (or shmem_torch_process_group_init) first");
  }
  return *state;
}

const char* planned_backend() { return choose_backend() == Backend::Cuda ? "cuda" : "cpu"; }

bool is_initialized() { return g_live.load(std::memory_order_acquire) != nullptr; }

static void initialize_locked(const mori_shmem_uniqueid_t& uid, int rank, int nranks);

void initialize(const mori_shmem_uniqueid_t& uid, int rank, int nranks) {
  bool idle = false;
  if (!g_initializing.compare_exchange_strong(idle, true)) {
    g_refused_rank.store(rank);
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "shmem_init_attr(rank=", rank,
                "): another thread of this process is initializing a PE", kOnePePerProcess);
  }
  struct Done {
    ~Done() { g_initializing.store(false); }
  } done;
  g_refused_rank.store(-1);
  try {
    initialize_locked(uid, rank, nranks);
  } catch (const Error& error) {
    const int refused = g_refused_rank.exchange(-1);
    if (refused < 0 || error.status() != MORI_SHMEM_ERR_TIMEOUT) throw;
    throw Error(error.status(), std::string(error.what()) + " (another thread of this process asked to be rank " +
                                    std::to_string(refused) + kOnePePerProcess + ")");
  }
}

static void initialize_locked(const mori_shmem_uniqueid_t& uid, int rank, int nranks) {
  std::lock_guard<std::mutex> lock(state_mutex());
  if (g_state && g_state_thread != std::this_thread::get_id()) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "shmem_init_attr(rank=", rank, "): another thread of this process is "
                "already PE ", g_state->rank(), " of ", g_state->nranks(), kOnePePerProcess);
  }
  if (g_state) {
    throw_error(MORI_SHMEM_ERR_ALREADY_INITIALIZED, "shmem_init_attr: this process is already PE ", g_state->rank(),
                " of ", g_state->nranks(), "; call shmem_finalize before initializing again");
  }
  if (nranks < 1) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "nranks=", nranks, " must be at least 1");
  if (rank < 0 || rank >= nranks) {
    throw_error(MORI_SHMEM_ERR_PE_OUT_OF_RANGE, "rank=", rank, " is outside [0, nranks=", nranks, ")");
  }
  // Read every setting before touching the network, so a bad value fails alone and at once.
  const Backend backend = choose_backend();
  const std::string cuda_mode = env::get_choice("MORI_SHMEM_MODE");
  env::get_choice("MORI_SHMEM_HEAP_TYPE");  // validated only: both types are ordinary device memory
  const int device = static_cast<int>(env::get_int("MORI_SHMEM_DEVICE"));
  const uint64_t heap_size = env::get_size("MORI_SHMEM_HEAP_SIZE");
  const double bootstrap_timeout = env::get_seconds("MORI_BOOTSTRAP_TIMEOUT");
  auto state = std::make_unique<PeState>();
  state->check_symmetry = env::get_bool("MORI_SHMEM_CHECK_SYMMETRY");
  state->wait_timeout_s = env::get_seconds("MORI_SHMEM_WAIT_TIMEOUT");
  state->device_spin_timeout_s = env::get_seconds("MORI_SHMEM_DEVICE_SPIN_TIMEOUT");
  const remote::ConduitConfig conduit = read_conduit_config(state->wait_timeout_s);
  if (heap_size <= kReservedHeapBytes) {
    throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_HEAP_SIZE=", env::effective("MORI_SHMEM_HEAP_SIZE"),
                " is too small: the heap must exceed the ", kReservedHeapBytes, " bytes the library reserves");
  }

  state->bootstrap = connect_tcp_bootstrap(uid, rank, nranks, bootstrap_timeout);
  // Every PE must pick the same backend, or their heaps could not reach each other.
  const uint8_t mine = backend == Backend::Cuda ? 1 : 0;
  std::vector<uint8_t> all(nranks);
  state->bootstrap->allgather(&mine, all.data(), 1, "init: backend");
  for (int pe = 0; pe < nranks; ++pe) {
    if (all[pe] != mine) {
      throw_error(MORI_SHMEM_ERR_SYMMETRY, "PE ", pe, " chose the ", all[pe] ? "cuda" : "cpu", " backend and PE ",
                  rank, " the ", mine ? "cuda" : "cpu", " one; set MORI_SHMEM_BACKEND the same on every PE");
    }
  }
  const Topology topology = exchange_topology(*state->bootstrap);
  if (backend == Backend::Cuda) {
    auto heap = std::make_unique<CudaHeap>(*state->bootstrap, heap_size, cuda_heap_mode(cuda_mode, topology, rank),
                                           device, bootstrap_timeout, state->wait_timeout_s, topology);
    state->cuda_heap = heap.get();
    state->heap = std::move(heap);
  } else {
    state->heap = std::make_unique<SharedMemoryHeap>(*state->bootstrap, heap_size, topology);
  }
  if (topology.any_remote) start_remote_transport(*state, topology, conduit);
  state->allocator = std::make_unique<HeapAllocator>(state->heap->size(), kReservedHeapBytes);
  log::emit(log::Level::Info, "PE ", rank, " of ", nranks, " initialized: ", state->heap->backend(), " heap of ",
            state->heap->size(), " bytes at ", static_cast<void*>(state->heap->local_base()));
  g_state = std::move(state);
  g_state_thread = std::this_thread::get_id();
  g_live.store(g_state.get(), std::memory_order_release);
}

void finalize() {
  std::lock_guard<std::mutex> lock(state_mutex());
  if (!g_state) throw_error(MORI_SHMEM_ERR_NOT_INITIALIZED, "shmem_finalize: mori-shmem is not initialized");
  // Peers may still be reading this PE's heap; unmap only once everyone is done with it.
  std::unique_ptr<PeState> state = std::move(g_state);
  g_live.store(nullptr, std::memory_order_release);
  if (state->proxy) state->proxy->drain();
  if (state->remote) state->remote->quiet();  // nothing of ours may still be on its way to a peer
  state->bootstrap->barrier("finalize");
  // After the barrier no peer sends to us any more.
  state->proxy.reset();
  state->remote.reset();
  state->remote_heap.reset();
}

}  // namespace mori::shmem
