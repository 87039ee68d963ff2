// SPDX-License-Identifier: MIT
// The exported C functions: each one runs its body under `guarded` (mori/c_api_guard.hpp), which
// turns a C++ exception into a status code and the thread-local message that mori_shmem_last_error()
// returns.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>
#include <new>
#include <string>

#include "bootstrap/bootstrap.hpp"
#include "core/env.hpp"
#include "core/error.hpp"
#include "core/host_rma.hpp"
#include "core/rma_apply.hpp"
#include "core/state.hpp"
#include "core/symmetric_alloc.hpp"
#include "cuda/cuda_driver.hpp"
#include "cuda/fd_exchange.hpp"
#include "mori/c_api_guard.hpp"
#include "mori_shmem/mori_shmem.h"
#include "remote/region.hpp"

using namespace mori::shmem;

namespace {

thread_local std::string t_last_error;

template <typename Body>
int guarded(Body&& body) {
  return mori::common::guarded_call<Error>({MORI_SHMEM_SUCCESS, MORI_SHMEM_ERR_SYSTEM, MORI_SHMEM_ERR_INTERNAL},
                                           t_last_error, std::forward<Body>(body));
}

CudaHeap& require_cuda(PeState& state, const char* caller) {
  if (state.cuda_heap == nullptr) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, caller, ": this PE runs the ", state.heap->backend(),
                " backend; device-side calls need MORI_SHMEM_BACKEND=cuda (or auto on a machine with a GPU)");
  }
  return *state.cuda_heap;
}

template <typename T>
void require_out(T* out, const char* name) {
  if (out == nullptr) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, name, " must not be NULL");
}

}  // namespace

extern "C" {

int mori_shmem_abi_version(void) { return MORI_SHMEM_ABI_VERSION; }
const char* mori_shmem_version(void) { return MORI_SHMEM_VERSION; }
const char* mori_shmem_last_error(void) { return t_last_error.c_str(); }

int mori_shmem_get_unique_id(mori_shmem_uniqueid_t* uid) {
  return guarded([&] {
    require_out(uid, "uid");
    create_unique_id(uid);
  });
}

int mori_shmem_set_attr_uniqueid_args(int rank, int nranks, const mori_shmem_uniqueid_t* uid,
                                      mori_shmem_init_attr_t* attr) {
  return guarded([&] {
    require_out(uid, "uid");
    require_out(attr, "attr");
    decode_unique_id(*uid);
    attr->rank = rank;
    attr->nranks = nranks;
    attr->uid = *uid;
    attr->mpi_comm = nullptr;
  });
}

int mori_shmem_init_attr(unsigned int flags, mori_shmem_init_attr_t* attr) {
  return guarded([&] {
    require_out(attr, "attr");
    if (flags == MORI_SHMEM_INIT_WITH_MPI_COMM) {
      throw_error(MORI_SHMEM_ERR_UNSUPPORTED,
                  "MORI_SHMEM_INIT_WITH_MPI_COMM: libmori_shmem does not link MPI; use mori.shmem.shmem_mpi_init() "
                  "(mpi4py) or broadcast a unique id over your communicator and use MORI_SHMEM_INIT_WITH_UNIQUEID");
    }
    if (flags != MORI_SHMEM_INIT_WITH_UNIQUEID) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "flags=", flags,
                  " is not an init flag (MORI_SHMEM_INIT_WITH_MPI_COMM=0, MORI_SHMEM_INIT_WITH_UNIQUEID=1)");
    }
    initialize(attr->uid, attr->rank, attr->nranks);
  });
}

int mori_shmem_finalize(void) { return guarded([] { finalize(); }); }
int mori_shmem_is_initialized(void) { return is_initialized() ? 1 : 0; }

int mori_shmem_my_pe(void) {
  int pe = -1;
  guarded([&] { pe = require_state("shmem_mype").rank(); });
  return pe;
}

int mori_shmem_n_pes(void) {
  int n = -1;
  guarded([&] { n = require_state("shmem_npes").nranks(); });
  return n;
}

const char* mori_shmem_backend(void) {
  const char* name = "cpu";
  guarded([&] { name = is_initialized() ? require_state("shmem_backend").heap->backend() : planned_backend(); });
  return name;
}

int mori_shmem_cuda_available(void) { return cuda::available() ? 1 : 0; }

int mori_shmem_barrier_all(void) {
  return guarded([] {
    PeState& state = require_state("shmem_barrier_all");
    rma::quiet(state);
    state.bootstrap->barrier("shmem_barrier_all");
  });
}

int mori_shmem_bootstrap_allgather(const void* send, void* recv, size_t bytes_per_pe) {
  return guarded([&] {
    PeState& state = require_state("mori_shmem_bootstrap_allgather");
    if (bytes_per_pe > 0) {
      require_out(send, "send");
      require_out(recv, "recv");
    }
    state.bootstrap->allgather(send, recv, bytes_per_pe, "mori_shmem_bootstrap_allgather");
  });
}

int mori_shmem_bootstrap_broadcast(void* buf, size_t bytes, int root) {
  return guarded([&] {
    PeState& state = require_state("mori_shmem_bootstrap_broadcast");
    check_pe(state, root, "root");
    if (bytes > 0) require_out(buf, "buf");
    state.bootstrap->broadcast(buf, bytes, root, "mori_shmem_bootstrap_broadcast");
  });
}

}  // extern "C"

struct mori_shmem_bootstrap_group {
  std::unique_ptr<Bootstrap> bootstrap;
};

namespace {

Bootstrap& require_group(mori_shmem_bootstrap_group_t group) {
  if (group == nullptr || group->bootstrap == nullptr) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "group is NULL or destroyed");
  }
  return *group->bootstrap;
}

}  // namespace

extern "C" {

int mori_shmem_bootstrap_group_create(const mori_shmem_uniqueid_t* uid, int rank, int nranks, double timeout_s,
                                      mori_shmem_bootstrap_group_t* out) {
  return guarded([&] {
    require_out(uid, "uid");
    require_out(out, "out");
    *out = nullptr;
    if (nranks < 1) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "nranks=", nranks, " must be at least 1");
    if (rank < 0 || rank >= nranks) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "rank=", rank, " is outside [0, nranks=", nranks, ")");
    }
    const double timeout = timeout_s > 0 ? timeout_s : env::get_seconds("MORI_BOOTSTRAP_TIMEOUT");
    auto group = std::make_unique<mori_shmem_bootstrap_group>();
    group->bootstrap = connect_tcp_bootstrap(*uid, rank, nranks, timeout);
    *out = group.release();
  });
}

int mori_shmem_bootstrap_group_destroy(mori_shmem_bootstrap_group_t group) {
  return guarded([&] { delete group; });
}

int mori_shmem_bootstrap_group_allgather(mori_shmem_bootstrap_group_t group, const void* send, void* recv,
                                         size_t bytes_per_rank) {
  return guarded([&] {
    Bootstrap& bootstrap = require_group(group);
    if (bytes_per_rank > 0) {
      require_out(send, "send");
      require_out(recv, "recv");
    }
    bootstrap.allgather(send, recv, bytes_per_rank, "bootstrap group allgather");
  });
}

int mori_shmem_bootstrap_group_barrier(mori_shmem_bootstrap_group_t group) {
  return guarded([&] { require_group(group).barrier("bootstrap group barrier"); });
}

int mori_shmem_bootstrap_group_exchange_fds(mori_shmem_bootstrap_group_t group, const int* fds, int count,
                                            int* received) {
  return guarded([&] {
    Bootstrap& bootstrap = require_group(group);
    if (count < 0) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "count=", count, " must not be negative");
    if (count > 0) {
      require_out(fds, "fds");
      require_out(received, "received");
    }
    const std::vector<int> own(fds, fds + count);
    const auto by_rank =
        cuda::exchange_fds(bootstrap, own, env::get_seconds("MORI_BOOTSTRAP_TIMEOUT"));
    for (int r = 0; r < bootstrap.nranks(); ++r) {
      for (int i = 0; i < count; ++i) {
        received[static_cast<size_t>(r) * count + i] = r == bootstrap.rank() ? -1 : by_rank[r][i];
      }
    }
  });
}

int mori_shmem_bootstrap_group_tag(mori_shmem_bootstrap_group_t group, char* buf, size_t len) {
  return guarded([&] {
    const Secret& secret = require_group(group).secret();
    require_out(buf, "buf");
    if (len < 17) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "len=", len, " is below the 17 bytes of a tag");
    for (int i = 0; i < 8; ++i) std::snprintf(buf + 2 * i, 3, "%02x", secret[i]);
  });
}

}  // extern "C"

struct mori_shmem_remote_region {
  std::unique_ptr<remote::RemoteRegion> region;
};

namespace {

remote::RemoteRegion& require_region(mori_shmem_remote_region_t region) {
  if (region == nullptr || region->region == nullptr) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "region is NULL or destroyed");
  }
  return *region->region;
}

}  // namespace

extern "C" {

int mori_shmem_remote_region_create(mori_shmem_bootstrap_group_t group, const mori_shmem_remote_region_attr_t* attr,
                                    double timeout_s, mori_shmem_remote_region_t* out) {
  return guarded([&] {
    Bootstrap& bootstrap = require_group(group);
    require_out(attr, "attr");
    require_out(out, "out");
    *out = nullptr;
    if (attr->size > 0) require_out(attr->base, "attr->base");
    require_out(attr->reach, "attr->reach");
    remote::RegionSpec spec;
    spec.base = static_cast<uint8_t*>(attr->base);
    spec.size = attr->size;
    spec.cuda_device = attr->cuda_device;
    spec.reach.assign(attr->reach, attr->reach + bootstrap.nranks());
    spec.proxy_words = attr->proxy_words;
    const double timeout = timeout_s > 0 ? timeout_s : env::get_seconds("MORI_SHMEM_WAIT_TIMEOUT");
    auto handle = std::make_unique<mori_shmem_remote_region>();
    handle->region = std::make_unique<remote::RemoteRegion>(bootstrap, std::move(spec), timeout);
    *out = handle.release();
  });
}

int mori_shmem_remote_region_destroy(mori_shmem_remote_region_t region) {
  return guarded([&] { delete region; });
}

int mori_shmem_remote_region_put(mori_shmem_remote_region_t region, int rank, uint64_t offset, const void* src,
                                 uint64_t nbytes, uint64_t signal_offset, uint64_t signal, int sig_op) {
  return guarded([&] {
    remote::RemoteRegion& r = require_region(region);
    if (nbytes > 0) require_out(src, "src");
    if (signal_offset == UINT64_MAX) {
      r.put(rank, offset, src, nbytes);
      return;
    }
    rma::check_signal_op(sig_op);
    r.put_signal(rank, offset, src, nbytes, signal_offset, signal, sig_op);
  });
}

int mori_shmem_remote_region_get(mori_shmem_remote_region_t region, int rank, uint64_t offset, void* dest,
                                 uint64_t nbytes) {
  return guarded([&] {
    remote::RemoteRegion& r = require_region(region);
    if (nbytes > 0) require_out(dest, "dest");
    r.get(rank, offset, dest, nbytes);
  });
}

int mori_shmem_remote_region_signal(mori_shmem_remote_region_t region, int rank, uint64_t signal_offset,
                                    uint64_t signal, int sig_op) {
  return guarded([&] {
    remote::RemoteRegion& r = require_region(region);
    rma::check_signal_op(sig_op);
    r.signal(rank, signal_offset, signal, sig_op);
  });
}

int mori_shmem_remote_region_quiet(mori_shmem_remote_region_t region) {
  return guarded([&] { require_region(region).quiet(); });
}

int mori_shmem_remote_region_info(mori_shmem_remote_region_t region, uint64_t* proxy_ring, const char** conduit) {
  return guarded([&] {
    remote::RemoteRegion& r = require_region(region);
    if (proxy_ring != nullptr) *proxy_ring = r.proxy_ring();
    if (conduit != nullptr) *conduit = r.conduit_name();
  });
}

int mori_shmem_malloc_align(size_t alignment, size_t size, void** out) {
  return guarded([&] {
    require_out(out, "out");
    PeState& state = require_state("shmem_malloc");
    *out = size == 0 ? nullptr : symmetric_malloc(state, size, alignment, "shmem_malloc");
  });
}

int mori_shmem_malloc(size_t size, void** out) {
  return mori_shmem_malloc_align(HeapAllocator::kMinAlignment, size, out);
}

int mori_shmem_ext_malloc_with_flags(size_t size, unsigned int /*flags: one heap type for all, as MORI's heaps*/,
                                     void** out) {
  return mori_shmem_malloc_align(HeapAllocator::kMinAlignment, size, out);
}

int mori_shmem_free(void* ptr) {
  return guarded([&] {
    PeState& state = require_state("shmem_free");
    if (ptr != nullptr) symmetric_free(state, ptr);
  });
}

int mori_shmem_heap_info(mori_shmem_heap_info_t* info) {
  return guarded([&] {
    require_out(info, "info");
    PeState& state = require_state("shmem_heap_info");
    std::lock_guard<std::mutex> lock(state_mutex());
    info->base = reinterpret_cast<uintptr_t>(state.heap->local_base());
    info->size = state.heap->size();
    info->reserved = state.allocator->reserved();
    info->used = state.allocator->used();
    info->largest_free = state.allocator->largest_free();
    info->num_allocations = state.allocator->num_allocations();
    info->backend = state.heap->backend();
  });
}

int mori_shmem_buffer_register(void* ptr, size_t size) {
  return guarded([&] {
    PeState& state = require_state("shmem_buffer_register");
    if (ptr == nullptr || size == 0) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "shmem_buffer_register: ptr=", ptr, " size=", size,
                  ": a registered buffer needs a non-NULL pointer and a size > 0");
    }
    std::lock_guard<std::mutex> lock(state_mutex());
    const auto begin = reinterpret_cast<uintptr_t>(ptr);
    auto next = state.registered_buffers.lower_bound(begin);
    const bool overlaps_next = next != state.registered_buffers.end() && next->first < begin + size;
    const bool overlaps_prev = next != state.registered_buffers.begin() &&
                               std::prev(next)->first + std::prev(next)->second > begin;
    if (overlaps_next || overlaps_prev) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "shmem_buffer_register: [", ptr, ", +", size,
                  ") overlaps a buffer that is already registered");
    }
    state.registered_buffers.emplace(begin, size);
  });
}

int mori_shmem_buffer_deregister(void* ptr, size_t size) {
  return guarded([&] {
    PeState& state = require_state("shmem_buffer_deregister");
    std::lock_guard<std::mutex> lock(state_mutex());
    auto it = state.registered_buffers.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == state.registered_buffers.end() || it->second != size) {
      throw_error(MORI_SHMEM_ERR_INVALID_POINTER, "shmem_buffer_deregister: [", ptr, ", +", size,
                  ") was not registered with shmem_buffer_register (pointer and size must match)");
    }
    state.registered_buffers.erase(it);
  });
}

int mori_shmem_ptr_p2p(const void* dest, int my_pe, int dest_pe, void** out) {
  return guarded([&] {
    require_out(out, "out");
    PeState& state = require_state("shmem_ptr_p2p");
    check_pe(state, my_pe, "my_pe");
    check_pe(state, dest_pe, "dest_pe");
    *out = nullptr;
    const auto base = reinterpret_cast<uintptr_t>(state.heap->local_base());
    const auto addr = reinterpret_cast<uintptr_t>(dest);
    if (addr < base || addr >= base + state.heap->size()) return;
    if (dest_pe == my_pe) {
      *out = const_cast<void*>(dest);
    } else if (uint8_t* peer = state.heap->peer_base(dest_pe)) {
      *out = peer + (addr - base);  // null for a PE reached through the remote transport
    }
  });
}

int mori_shmem_pe_transport(int pe, int* out) {
  return guarded([&] {
    require_out(out, "out");
    PeState& state = require_state("shmem_pe_transport");
    check_pe(state, pe, "pe");
    *out = pe == state.rank()                       ? MORI_SHMEM_TRANSPORT_SELF
           : state.heap->peer_base(pe) != nullptr ? MORI_SHMEM_TRANSPORT_P2P
                                                  : MORI_SHMEM_TRANSPORT_REMOTE;
  });
}

int mori_shmem_remote_endpoint(char* buf, size_t len) {
  return guarded([&] {
    require_out(buf, "buf");
    PeState& state = require_state("shmem_remote_endpoint");
    const std::string endpoint = state.remote ? state.remote->endpoint() : "";
    if (endpoint.size() + 1 > len) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "len=", len, " is too small for the endpoint (",
                  endpoint.size() + 1, " bytes)");
    }
    std::memcpy(buf, endpoint.c_str(), endpoint.size() + 1);
  });
}

int mori_shmem_putmem(void* dest, const void* src, size_t nbytes, int pe) {
  return guarded([&] { rma::put(require_state("shmem_putmem"), dest, src, nbytes, pe); });
}

int mori_shmem_getmem(void* dest, const void* src, size_t nbytes, int pe) {
  return guarded([&] { rma::get(require_state("shmem_getmem"), dest, src, nbytes, pe); });
}

int mori_shmem_putmem_signal(void* dest, const void* src, size_t nbytes, uint64_t* sig_addr, uint64_t signal,
                             int sig_op, int pe) {
  return guarded([&] {
    rma::put_signal(require_state("shmem_putmem_signal"), dest, src, nbytes, sig_addr, signal, sig_op, pe);
  });
}

int mori_shmem_signal_op(uint64_t* sig_addr, uint64_t signal, int sig_op, int pe) {
  return guarded([&] { rma::signal_op(require_state("shmem_signal_op"), sig_addr, signal, sig_op, pe); });
}

int mori_shmem_atomic(void* dest, int amo, int type, uint64_t value, uint64_t compare, int pe, uint64_t* fetched) {
  return guarded([&] {
    uint64_t old = rma::atomic(require_state("shmem_atomic"), dest, amo, type, value, compare, pe);
    if (fetched != nullptr) *fetched = old;
  });
}

int mori_shmem_wait_until(const void* ivar, int type, int cmp, uint64_t value, int64_t timeout_ms,
                          uint64_t* observed) {
  return guarded([&] {
    uint64_t seen = rma::wait_until(require_state("shmem_wait_until"), ivar, type, cmp, value, timeout_ms);
    if (observed != nullptr) *observed = seen;
  });
}

int mori_shmem_test(const void* ivar, int type, int cmp, uint64_t value, int* satisfied) {
  return guarded([&] {
    require_out(satisfied, "satisfied");
    *satisfied = rma::test(require_state("shmem_test"), ivar, type, cmp, value) ? 1 : 0;
  });
}

int mori_shmem_fence(void) {
  return guarded([] {
    rma::quiet(require_state("shmem_fence"));
  });
}

int mori_shmem_quiet(void) {
  return guarded([] {
    rma::quiet(require_state("shmem_quiet"));
  });
}

int mori_shmem_get_device_state(mori_shmem_device_state_t* out) {
  return guarded([&] {
    require_out(out, "out");
    PeState& state = require_state("shmem_get_device_state");
    *out = require_cuda(state, "mori_shmem_get_device_state").device_state(state.device_spin_timeout_s);
  });
}

int mori_shmem_cuda_device(int* ordinal) {
  return guarded([&] {
    require_out(ordinal, "ordinal");
    *ordinal = require_cuda(require_state("shmem_cuda_device"), "mori_shmem_cuda_device").context().ordinal();
  });
}

int mori_shmem_device_error(int clear, uint32_t* code) {
  return guarded([&] {
    require_out(code, "code");
    CudaHeap& heap = require_cuda(require_state("shmem_device_error"), "mori_shmem_device_error");
    uint8_t* word = heap.local_base() + MORI_SHMEM_SYNC_ERROR_OFFSET;
    heap.context().copy(code, word, sizeof(*code));
    if (clear != 0 && *code != MORI_SHMEM_DEVICE_OK) {
      const uint32_t ok = MORI_SHMEM_DEVICE_OK;
      heap.context().copy(word, &ok, sizeof(ok));
    }
  });
}

int mori_shmem_env_count(void) { return static_cast<int>(env::registry().size()); }

int mori_shmem_env_entry(int index, const char** name, const char** type, const char** default_value,
                         const char** doc, const char** effective_value) {
  // The effective value must outlive the call: keep one string per entry.
  static thread_local std::vector<std::string> effective_values;
  return guarded([&] {
    const auto& vars = env::registry();
    if (index < 0 || index >= static_cast<int>(vars.size())) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "index=", index, " is outside [0, ", vars.size(), ")");
    }
    effective_values.resize(vars.size());
    const env::Var& var = vars[index];
    effective_values[index] = env::effective(var.name);
    if (name) *name = var.name;
    if (type) *type = env::type_name(var.type);
    if (default_value) *default_value = var.default_value;
    if (doc) *doc = var.doc;
    if (effective_value) *effective_value = effective_values[index].c_str();
  });
}

int mori_shmem_parse_size(const char* text, uint64_t* bytes) {
  return guarded([&] {
    require_out(text, "text");
    require_out(bytes, "bytes");
    *bytes = env::parse_size(text);
  });
}

}  // extern "C"
