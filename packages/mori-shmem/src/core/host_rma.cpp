// SPDX-License-Identifier: MIT
#include "core/host_rma.hpp"

#include <atomic>
#include <chrono>
#include <cstring>

#include "core/back_off.hpp"
#include "core/error.hpp"
#include "core/rma_apply.hpp"
#include "core/symmetric_alloc.hpp"
#include "heap/cuda_heap.hpp"

namespace mori::shmem::rma {

namespace {

// A range of the symmetric heap as PE pe holds it: its mapping in this process (P2P), or, for a
// PE reached through the remote transport, mapped == nullptr and the heap offset.
struct Target {
  uint8_t* mapped;
  uint64_t offset;
};

Target translate(PeState& state, const void* ptr, size_t nbytes, int pe, const char* argument) {
  check_pe(state, pe, "pe");
  const uint64_t offset = heap_offset(state, ptr, nbytes, argument);
  uint8_t* base = state.heap->peer_base(pe);
  if (base != nullptr) return {base + offset, offset};
  if (state.remote == nullptr) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "PE ", pe, " is neither mapped here nor reached by the remote transport");
  }
  return {nullptr, offset};
}

// Moves bytes between this PE's memory and a peer's mapping: memmove on the cpu backend, a driver
// copy on the cuda backend (either side may be GPU memory there).
void copy(const PeState& state, void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  if (state.cuda_heap != nullptr) {
    state.cuda_heap->context().copy(dst, src, nbytes);
  } else {
    std::memmove(dst, src, nbytes);
  }
}

// Host code cannot do an atomic read-modify-write on GPU memory; those go through a kernel.
void require_host_memory(const PeState& state, const char* operation) {
  if (state.cuda_heap != nullptr) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, operation,
                " on the cuda heap needs a kernel: use mori.shmem's Python API (it launches one) or the device API");
  }
}

void check_local(const void* ptr, size_t nbytes, const char* argument) {
  if (ptr == nullptr && nbytes > 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_POINTER, argument, " is NULL with nbytes=", nbytes);
  }
}

void check_aligned(const void* ptr, size_t width, const char* argument) {
  if (reinterpret_cast<uintptr_t>(ptr) % width != 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, argument, "=", ptr, " is not aligned to its ", width,
                "-byte type");
  }
}

template <typename T>
bool compare(T observed, int cmp, T value) {
  switch (cmp) {
    case MORI_SHMEM_CMP_EQ: return observed == value;
    case MORI_SHMEM_CMP_NE: return observed != value;
    case MORI_SHMEM_CMP_GT: return observed > value;
    case MORI_SHMEM_CMP_LE: return observed <= value;
    case MORI_SHMEM_CMP_LT: return observed < value;
    case MORI_SHMEM_CMP_GE: return observed >= value;
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "cmp=", cmp, " is not a comparison code (EQ=0 .. GE=5)");
}

// Loads ivar with acquire ordering and evaluates the condition; *observed gets the value. On the
// cuda backend ivar is GPU memory, read through a driver copy into a host word first.
bool check(const PeState& state, const void* ivar, int type, int cmp, uint64_t value, uint64_t* observed) {
  uint64_t staged = 0;
  if (state.cuda_heap != nullptr) {
    copy(state, &staged, ivar, type_width(type));
    ivar = &staged;
  }
  switch (type) {
    case MORI_SHMEM_TYPE_INT32: {
      int32_t v = __atomic_load_n(static_cast<const int32_t*>(ivar), __ATOMIC_ACQUIRE);
      *observed = widen(v);
      return compare<int32_t>(v, cmp, static_cast<int32_t>(value));
    }
    case MORI_SHMEM_TYPE_UINT32: {
      uint32_t v = __atomic_load_n(static_cast<const uint32_t*>(ivar), __ATOMIC_ACQUIRE);
      *observed = v;
      return compare<uint32_t>(v, cmp, static_cast<uint32_t>(value));
    }
    case MORI_SHMEM_TYPE_INT64: {
      int64_t v = __atomic_load_n(static_cast<const int64_t*>(ivar), __ATOMIC_ACQUIRE);
      *observed = static_cast<uint64_t>(v);
      return compare<int64_t>(v, cmp, static_cast<int64_t>(value));
    }
    default: {
      uint64_t v = __atomic_load_n(static_cast<const uint64_t*>(ivar), __ATOMIC_ACQUIRE);
      *observed = v;
      return compare<uint64_t>(v, cmp, value);
    }
  }
}

void apply_signal(const PeState& state, uint64_t* remote, uint64_t signal, int sig_op) {
  if (state.cuda_heap != nullptr) {
    if (sig_op != MORI_SHMEM_SIGNAL_SET) require_host_memory(state, "SIGNAL_ADD");
    // An aligned 8-byte copy lands whole, after every earlier copy on the same stream.
    copy(state, remote, &signal, sizeof(signal));
  } else if (sig_op == MORI_SHMEM_SIGNAL_SET) {
    __atomic_store_n(remote, signal, __ATOMIC_RELEASE);
  } else {
    __atomic_fetch_add(remote, signal, __ATOMIC_RELEASE);
  }
}

}  // namespace

void put(PeState& state, void* dest, const void* src, size_t nbytes, int pe) {
  const Target target = translate(state, dest, nbytes, pe, "dest");
  check_local(src, nbytes, "src");
  if (target.mapped == nullptr) {
    if (state.gpu_remote != nullptr) {
      state.gpu_remote->put(*state.remote, pe, target.offset, src, nbytes);
    } else {
      state.remote->put(pe, target.offset, src, nbytes);
    }
  } else {
    copy(state, target.mapped, src, nbytes);
  }
}

void get(PeState& state, void* dest, const void* src, size_t nbytes, int pe) {
  const Target target = translate(state, src, nbytes, pe, "src");
  check_local(dest, nbytes, "dest");
  if (target.mapped == nullptr) {
    if (state.gpu_remote != nullptr) {
      state.gpu_remote->get(*state.remote, pe, target.offset, dest, nbytes);
    } else {
      state.remote->get(pe, target.offset, dest, nbytes);
    }
  } else {
    copy(state, dest, target.mapped, nbytes);
  }
}

void put_signal(PeState& state, void* dest, const void* src, size_t nbytes, uint64_t* sig_addr, uint64_t signal,
                int sig_op, int pe) {
  check_signal_op(sig_op);
  check_aligned(sig_addr, sizeof(uint64_t), "sig_addr");
  const Target sig = translate(state, sig_addr, sizeof(uint64_t), pe, "sig_addr");
  if (sig.mapped == nullptr) {
    const Target data = translate(state, dest, nbytes, pe, "dest");
    check_local(src, nbytes, "src");
    if (state.gpu_remote != nullptr) {
      state.gpu_remote->put_signal(*state.remote, pe, data.offset, src, nbytes, sig.offset, signal, sig_op);
    } else {
      state.remote->put_signal(pe, data.offset, src, nbytes, sig.offset, signal, sig_op);
    }
    return;
  }
  if (sig_op == MORI_SHMEM_SIGNAL_ADD) require_host_memory(state, "SIGNAL_ADD");
  put(state, dest, src, nbytes, pe);
  apply_signal(state, reinterpret_cast<uint64_t*>(sig.mapped), signal, sig_op);
}

void signal_op(PeState& state, uint64_t* sig_addr, uint64_t signal, int sig_op, int pe) {
  check_signal_op(sig_op);
  check_aligned(sig_addr, sizeof(uint64_t), "sig_addr");
  const Target sig = translate(state, sig_addr, sizeof(uint64_t), pe, "sig_addr");
  if (sig.mapped == nullptr) {
    state.remote->signal(pe, sig.offset, signal, sig_op);
  } else {
    apply_signal(state, reinterpret_cast<uint64_t*>(sig.mapped), signal, sig_op);
  }
}

uint64_t atomic(PeState& state, void* dest, int amo, int type, uint64_t value, uint64_t compare_value, int pe) {
  const size_t width = type_width(type);
  check_aligned(dest, width, "dest");
  const Target target = translate(state, dest, width, pe, "dest");
  check_amo(amo);  // before anything moves, also for a remote PE
  if (target.mapped == nullptr) return state.remote->atomic(pe, target.offset, amo, type, value, compare_value);
  require_host_memory(state, "a host-side atomic");
  return apply_amo(target.mapped, amo, type, value, compare_value);
}

bool test(PeState& state, const void* ivar, int type, int cmp, uint64_t value) {
  const size_t width = type_width(type);
  check_aligned(ivar, width, "ivar");
  heap_offset(state, ivar, width, "ivar");
  uint64_t observed = 0;
  return check(state, ivar, type, cmp, value, &observed);
}

uint64_t wait_until(PeState& state, const void* ivar, int type, int cmp, uint64_t value, int64_t timeout_ms) {
  const size_t width = type_width(type);
  check_aligned(ivar, width, "ivar");
  heap_offset(state, ivar, width, "ivar");
  const double timeout_s = timeout_ms < 0 ? state.wait_timeout_s : static_cast<double>(timeout_ms) / 1000.0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  uint64_t observed = 0;
  // Spin first (a peer's store lands within microseconds), then yield, then sleep briefly so a
  // long wait does not burn a core that the signalling PE may need.
  constexpr uint64_t kSpinRounds = 2000;
  for (uint64_t spins = 0;; ++spins) {
    if (check(state, ivar, type, cmp, value, &observed)) return observed;
    if (spins >= kSpinRounds && std::chrono::steady_clock::now() > deadline) {
      throw_error(MORI_SHMEM_ERR_WAIT_TIMEOUT, "shmem_wait_until: ivar=", ivar, " still holds ", observed,
                  " after ", timeout_s, " s (waited for cmp=", cmp, " against ", value,
                  "); the peer that should signal it may be dead or stuck (MORI_SHMEM_WAIT_TIMEOUT)");
    }
    back_off(spins, kSpinRounds, 20000);
  }
}

void quiet(PeState& state) {
  if (state.proxy != nullptr) state.proxy->drain();  // what kernels posted counts as issued before
  if (state.remote != nullptr) state.remote->quiet();
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace mori::shmem::rma
