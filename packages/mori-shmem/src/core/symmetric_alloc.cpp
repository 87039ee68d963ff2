// SPDX-License-Identifier: MIT
#include "core/symmetric_alloc.hpp"

#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace mori::shmem {

namespace {

// What each PE reports to the others after its local step of a malloc or free.
struct Outcome {
  int32_t status;
  int32_t pad;
  uint64_t offset;
  uint64_t size;
  char message[240];
};

Outcome local_outcome(mori_shmem_status_t status, uint64_t offset, uint64_t size, const std::string& message) {
  Outcome outcome{};
  outcome.status = status;
  outcome.offset = offset;
  outcome.size = size;
  std::strncpy(outcome.message, message.c_str(), sizeof(outcome.message) - 1);
  return outcome;
}

std::vector<Outcome> exchange(PeState& state, const Outcome& mine, const char* what) {
  std::vector<Outcome> all(state.nranks());
  state.bootstrap->allgather(&mine, all.data(), sizeof(Outcome), what);
  return all;
}

// The first PE whose local step failed, or -1.
int first_failure(const std::vector<Outcome>& all) {
  for (size_t pe = 0; pe < all.size(); ++pe) {
    if (all[pe].status != MORI_SHMEM_SUCCESS) return static_cast<int>(pe);
  }
  return -1;
}

}  // namespace

uint64_t heap_offset(const PeState& state, const void* ptr, size_t nbytes, const char* argument) {
  const auto base = reinterpret_cast<uintptr_t>(state.heap->local_base());
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  const uint64_t size = state.heap->size();
  if (addr < base || addr - base > size || nbytes > size - (addr - base)) {
    throw_error(MORI_SHMEM_ERR_INVALID_POINTER, argument, "=", ptr, " (", nbytes,
                " bytes) is not inside this PE's symmetric heap [", reinterpret_cast<void*>(base), ", ",
                reinterpret_cast<void*>(base + size), ")");
  }
  return addr - base;
}

void check_pe(const PeState& state, int pe, const char* argument) {
  if (pe < 0 || pe >= state.nranks()) {
    throw_error(MORI_SHMEM_ERR_PE_OUT_OF_RANGE, argument, "=", pe, " is outside [0, npes=", state.nranks(), ")");
  }
}

void* symmetric_malloc(PeState& state, size_t size, size_t alignment, const char* caller) {
  std::lock_guard<std::mutex> lock(state_mutex());
  Outcome mine{};
  try {
    if (alignment > state.heap->base_alignment()) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "alignment=", alignment, " exceeds ",
                  state.heap->base_alignment(), ", the alignment of this ", state.heap->backend(),
                  " heap's base (the largest that stays symmetric)");
    }
    mine = local_outcome(MORI_SHMEM_SUCCESS, state.allocator->allocate(size, alignment), size, "");
  } catch (const Error& error) {
    mine = local_outcome(error.status(), 0, size, error.what());
  }
  if (!state.check_symmetry) {
    if (mine.status != MORI_SHMEM_SUCCESS) throw Error(static_cast<mori_shmem_status_t>(mine.status), mine.message);
    return state.heap->local_base() + mine.offset;
  }
  const std::vector<Outcome> all = exchange(state, mine, caller);
  const int failed = first_failure(all);
  if (failed >= 0) {
    if (mine.status == MORI_SHMEM_SUCCESS) state.allocator->release(mine.offset);
    const Outcome& bad = all[failed];
    if (failed == state.rank()) throw Error(static_cast<mori_shmem_status_t>(bad.status), bad.message);
    throw_error(static_cast<mori_shmem_status_t>(bad.status), caller, " failed on PE ", failed, ": ", bad.message);
  }
  for (int pe = 0; pe < state.nranks(); ++pe) {
    if (all[pe].offset != mine.offset || all[pe].size != mine.size) {
      state.allocator->release(mine.offset);
      throw_error(MORI_SHMEM_ERR_SYMMETRY, caller, ": PEs diverged: PE ", state.rank(), " asked for ", mine.size,
                  " bytes and got heap offset ", mine.offset, ", PE ", pe, " asked for ", all[pe].size,
                  " bytes and got offset ", all[pe].offset,
                  "; every PE must make the same sequence of malloc/free calls");
    }
  }
  return state.heap->local_base() + mine.offset;
}

void symmetric_free(PeState& state, void* ptr) {
  std::lock_guard<std::mutex> lock(state_mutex());
  Outcome mine{};
  try {
    const uint64_t offset = heap_offset(state, ptr, 0, "ptr");
    state.allocator->release(offset);
    mine = local_outcome(MORI_SHMEM_SUCCESS, offset, 0, "");
  } catch (const Error& error) {
    std::string message = std::string("shmem_free(") + std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                          "): " + error.what();
    mine = local_outcome(error.status(), 0, 0, message);
  }
  if (!state.check_symmetry) {
    if (mine.status != MORI_SHMEM_SUCCESS) throw Error(static_cast<mori_shmem_status_t>(mine.status), mine.message);
    return;
  }
  // A free cannot be rolled back without risking a second owner, so PEs that freed keep it freed
  // and every PE reports the failure.
  const std::vector<Outcome> all = exchange(state, mine, "shmem_free");
  const int failed = first_failure(all);
  if (failed >= 0) {
    const Outcome& bad = all[failed];
    if (failed == state.rank()) throw Error(static_cast<mori_shmem_status_t>(bad.status), bad.message);
    throw_error(static_cast<mori_shmem_status_t>(bad.status), "shmem_free failed on PE ", failed, ": ", bad.message);
  }
  for (int pe = 0; pe < state.nranks(); ++pe) {
    if (all[pe].offset != mine.offset) {
      throw_error(MORI_SHMEM_ERR_SYMMETRY, "shmem_free: PEs diverged: PE ", state.rank(), " freed heap offset ",
                  mine.offset, ", PE ", pe, " freed offset ", all[pe].offset);
    }
  }
}

}  // namespace mori::shmem
