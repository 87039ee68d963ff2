// SPDX-License-Identifier: MIT
// The cuda backend of FlatMemory. One virtual range of lsa_size * per_rank_size bytes is reserved
// up front; each commit() backs the new part of every slot: the owner creates one physical chunk,
// maps it into its own slot and shares it as a POSIX fd, and every peer imports and maps it at the
// same slot offset. Chunks are never freed before destruction, so addresses stay valid for kernels.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "cuda/driver.hpp"
#include "memory/flat_memory.hpp"

namespace mori::cco {

namespace {

using cuda::check;
using cuda::CUdeviceptr;
using cuda::CUmemGenericAllocationHandle;

static_assert(sizeof(size_t) == sizeof(uint64_t), "slot sizes are passed to the driver as size_t");

uint64_t round_up(uint64_t value, uint64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Each rank's outcome of one local step of commit(), allgathered so that the ranks fail or succeed
// together: no rank then waits for fds a failed peer never sends, nor keeps a range its peers
// dropped. The sizes let every rank check that the others grow the same layout.
struct Vote {
  int32_t status;
  int32_t reserved;
  uint64_t per_rank_size;
  uint64_t end;
  char message[240];
};

// Runs step; on failure records the error in vote and returns it, to be rethrown once every rank
// has voted.
template <typename Step>
std::exception_ptr attempt(Step&& step, Vote& vote) {
  try {
    step();
    return nullptr;
  } catch (const Error& e) {
    vote.status = e.status();
    std::strncpy(vote.message, e.what(), sizeof(vote.message) - 1);
  } catch (const std::bad_alloc&) {
    vote.status = ccoOutOfMemory;
    std::strncpy(vote.message, "host memory exhausted", sizeof(vote.message) - 1);
  } catch (const std::exception& e) {
    vote.status = ccoInternalError;
    std::strncpy(vote.message, e.what(), sizeof(vote.message) - 1);
  }
  return std::current_exception();
}

class VmmMemory final : public FlatMemory {
 public:
  VmmMemory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size, int device);
  ~VmmMemory() override;
  VmmMemory(const VmmMemory&) = delete;
  VmmMemory& operator=(const VmmMemory&) = delete;

  // The getters read cached values and never call the driver, so they need no current context.
  const char* backend() const override { return "cuda"; }
  int device() const override { return device_; }
  uintptr_t flat_base() const override { return static_cast<uintptr_t>(base_); }
  uint64_t per_rank_size() const override { return per_rank_size_; }
  uint64_t granularity() const override { return granularity_; }
  uint64_t committed() const override { return committed_; }
  void commit(uint64_t end) override;
  void zero(uint64_t offset, uint64_t size) override;
  uint64_t read_word(uint64_t offset) override;

 protected:
  uint64_t own_slot_offset() const override { return static_cast<uint64_t>(lsa_rank_) * per_rank_size_; }

 private:
  struct Mapping {
    CUdeviceptr address;
    uint64_t size;
    CUmemGenericAllocationHandle handle;
    bool mapped;
  };

  void require_committed(const char* what, uint64_t offset, uint64_t size) const;
  CUdeviceptr slot(int lsa_rank) const { return base_ + static_cast<uint64_t>(lsa_rank) * per_rank_size_; }
  uint64_t reserved_bytes() const { return static_cast<uint64_t>(lsa_size_) * per_rank_size_; }
  int map_own(uint64_t begin, uint64_t end);
  void map_peers(uint64_t begin, uint64_t end, std::vector<std::vector<int>>& fds);
  void enable_access(size_t first);
  void agree(const Vote& mine, const std::exception_ptr& failure, const char* step);
  void release_from(size_t first);

  Group& group_;
  int lsa_rank_;
  int lsa_size_;
  int device_;
  uint64_t granularity_ = 0;
  uint64_t per_rank_size_ = 0;
  uint64_t committed_ = 0;
  CUdeviceptr base_ = 0;
  std::vector<Mapping> mappings_;  // every chunk mapped into the range, own and peers'
};

VmmMemory::VmmMemory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size, int device)
    : group_(group), lsa_rank_(lsa_rank), lsa_size_(lsa_size), device_(device) {
  if (lsa_size < 1) fail(ccoInvalidArgument, "lsa_size must be >= 1, got ", lsa_size);
  if (lsa_rank < 0 || lsa_rank >= lsa_size) {
    fail(ccoInvalidArgument, "lsa_rank ", lsa_rank, " is out of range [0, ", lsa_size, ")");
  }
  if (per_rank_size == 0) fail(ccoInvalidArgument, "per_rank_size must be > 0, got 0");
  // Slots are shared by fd within one host, so the group must be exactly the LSA team.
  if (group.nranks() != lsa_size) {
    fail(ccoUnsupported, "the cuda backend's flat memory spans one host: the group has ", group.nranks(),
         " ranks but the LSA team ", lsa_size);
  }
  if (group.rank() != lsa_rank) {
    fail(ccoInternalError, "lsa_rank ", lsa_rank, " differs from the group rank ", group.rank());
  }
  cuda::make_current(device);  // also rejects an ordinal with no device behind it
  const cuda::Driver& d = cuda::driver();
  cuda::CUdevice handle = 0;
  check(d.cuDeviceGet(&handle, device), "cuDeviceGet of CUDA device ", device);
  int vmm = 0;
  int posix_fd = 0;
  check(d.cuDeviceGetAttribute(&vmm, cuda::kAttrVmmSupported, handle),
        "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) of CUDA device ", device);
  check(d.cuDeviceGetAttribute(&posix_fd, cuda::kAttrPosixFdSupported, handle),
        "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) of CUDA device ", device);
  if (vmm == 0) {
    fail(ccoUnsupported, "CUDA device ", device,
         " does not support virtual memory management (cuMemCreate / cuMemMap), which the cuda backend's flat "
         "address range needs");
  }
  if (posix_fd == 0) {
    fail(ccoUnsupported, "CUDA device ", device,
         " cannot export memory as POSIX file descriptors, which the cuda backend uses to share slots between "
         "the ranks of a host");
  }
  const cuda::CUmemAllocationProp prop = cuda::exportable_device_memory(device);
  size_t granularity = 0;
  check(d.cuMemGetAllocationGranularity(&granularity, &prop, cuda::kGranularityRecommended),
        "cuMemGetAllocationGranularity of CUDA device ", device);
  granularity_ = std::max<uint64_t>(granularity, 1);
  const uint64_t limit = std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(lsa_size) / 2;
  if (per_rank_size > limit) {
    fail(ccoInvalidArgument, "per_rank_size ", per_rank_size, " is too large: the limit for ", lsa_size,
         " LSA ranks is ", limit);
  }
  per_rank_size_ = round_up(per_rank_size, granularity_);
  check(d.cuMemAddressReserve(&base_, reserved_bytes(), granularity_, 0, 0), "cuMemAddressReserve of ",
        reserved_bytes(), " bytes (", lsa_size, " LSA ranks x per_rank_size ", per_rank_size_,
        ") on CUDA device ", device);
}

VmmMemory::~VmmMemory() {
  // Teardown is best effort: a second error here would hide the first, and the driver reclaims
  // whatever is left when the process exits.
  try {
    cuda::make_current(device_);
    const cuda::Driver& d = cuda::driver();
    d.cuCtxSynchronize();  // kernels and copies still in flight may touch the range
    release_from(0);
    d.cuMemAddressFree(base_, reserved_bytes());
  } catch (...) {
  }
}

void VmmMemory::commit(uint64_t end) {
  if (end > per_rank_size_) {
    fail(ccoOutOfMemory, "cannot commit ", end, " bytes of a slot: per_rank_size is ", per_rank_size_,
         " bytes (raise the per-rank size)");
  }
  end = round_up(end, granularity_);
  if (end <= committed_) return;
  cuda::make_current(device_);
  const uint64_t begin = committed_;
  const size_t first = mappings_.size();
  mappings_.reserve(first + static_cast<size_t>(lsa_size_));  // push_back must not throw mid-step
  int own_fd = -1;
  std::vector<std::vector<int>> received;
  try {
    Vote vote{ccoSuccess, 0, per_rank_size_, end, {}};
    std::exception_ptr failure = attempt([&] { own_fd = map_own(begin, end); }, vote);
    agree(vote, failure, "growing the slots");
    received = group_.exchange_fds({own_fd});
    close(own_fd);
    own_fd = -1;
    vote = Vote{ccoSuccess, 0, per_rank_size_, end, {}};
    failure = attempt(
        [&] {
          map_peers(begin, end, received);
          enable_access(first);
        },
        vote);
    // Also the barrier: no rank returns before every rank mapped every slot.
    agree(vote, failure, "mapping the peers' slots");
  } catch (...) {
    if (own_fd >= 0) close(own_fd);
    for (const std::vector<int>& fds : received) {
      for (int fd : fds) {
        if (fd >= 0) close(fd);
      }
    }
    release_from(first);
    throw;
  }
  committed_ = end;
}

// Creates and maps this rank's chunk for [begin, end) of its slot; returns it exported as an fd.
int VmmMemory::map_own(uint64_t begin, uint64_t end) {
  const cuda::Driver& d = cuda::driver();
  const uint64_t bytes = end - begin;
  const cuda::CUmemAllocationProp prop = cuda::exportable_device_memory(device_);
  CUmemGenericAllocationHandle handle = 0;
  const cuda::CUresult created = d.cuMemCreate(&handle, bytes, &prop, 0);
  if (created == cuda::kErrorOutOfMemory) {
    fail(ccoOutOfMemory, "cuMemCreate of ", bytes, " bytes on CUDA device ", device_,
         " ran out of device memory (growing LSA rank ", lsa_rank_, "'s slot from ", begin, " to ", end, " bytes)");
  }
  check(created, "cuMemCreate of ", bytes, " bytes on CUDA device ", device_);
  mappings_.push_back({slot(lsa_rank_) + begin, bytes, handle, false});
  check(d.cuMemMap(mappings_.back().address, bytes, 0, handle, 0), "cuMemMap of LSA rank ", lsa_rank_,
        "'s own slot range [", begin, ", ", end, ")");
  mappings_.back().mapped = true;
  int fd = -1;
  check(d.cuMemExportToShareableHandle(&fd, handle, cuda::kHandleTypePosixFd, 0),
        "cuMemExportToShareableHandle (POSIX fd) of LSA rank ", lsa_rank_, "'s slot range [", begin, ", ", end, ")");
  return fd;
}

// Imports and maps every peer's chunk for [begin, end); closes each fd once imported (set to -1).
void VmmMemory::map_peers(uint64_t begin, uint64_t end, std::vector<std::vector<int>>& fds) {
  const cuda::Driver& d = cuda::driver();
  for (int peer = 0; peer < lsa_size_; ++peer) {
    if (peer == lsa_rank_) continue;
    std::vector<int>& peer_fds = fds[static_cast<size_t>(peer)];
    if (peer_fds.size() != 1 || peer_fds[0] < 0) {
      fail(ccoInternalError, "LSA rank ", peer, " sent ", peer_fds.size(), " fds for its slot range, expected 1");
    }
    CUmemGenericAllocationHandle handle = 0;
    const cuda::CUresult imported = d.cuMemImportFromShareableHandle(
        &handle, reinterpret_cast<void*>(static_cast<uintptr_t>(peer_fds[0])), cuda::kHandleTypePosixFd);
    close(peer_fds[0]);  // the imported handle holds its own reference to the memory
    peer_fds[0] = -1;
    check(imported, "cuMemImportFromShareableHandle of LSA rank ", peer, "'s slot range [", begin, ", ", end, ")");
    mappings_.push_back({slot(peer) + begin, end - begin, handle, false});
    check(d.cuMemMap(mappings_.back().address, end - begin, 0, handle, 0), "cuMemMap of LSA rank ", peer,
          "'s slot range [", begin, ", ", end, ") on CUDA device ", device_);
    mappings_.back().mapped = true;
  }
}

void VmmMemory::enable_access(size_t first) {
  const cuda::Driver& d = cuda::driver();
  cuda::CUmemAccessDesc access{};
  access.location.type = cuda::kMemLocationDevice;
  access.location.id = device_;
  access.flags = cuda::kAccessReadWrite;
  for (size_t i = first; i < mappings_.size(); ++i) {
    const Mapping& m = mappings_[i];
    check(d.cuMemSetAccess(m.address, m.size, &access, 1), "cuMemSetAccess (read/write for CUDA device ", device_,
          ") of flat-range bytes [", m.address - base_, ", ", m.address - base_ + m.size, ")");
  }
}

void VmmMemory::agree(const Vote& mine, const std::exception_ptr& failure, const char* step) {
  const std::vector<Vote> votes = group_.allgather_value(mine);
  if (failure) std::rethrow_exception(failure);  // the own error is the most specific one
  for (int r = 0; r < lsa_size_; ++r) {
    const Vote& vote = votes[static_cast<size_t>(r)];
    if (vote.status != ccoSuccess) {
      const std::string message(vote.message, strnlen(vote.message, sizeof(vote.message)));
      fail(vote.status, step, " failed on LSA rank ", r, ": ", message);
    }
  }
  for (int r = 0; r < lsa_size_; ++r) {
    const Vote& vote = votes[static_cast<size_t>(r)];
    if (vote.per_rank_size != mine.per_rank_size || vote.end != mine.end) {
      fail(ccoSymmetryError, "commit(): LSA rank ", r, " has per_rank_size ", vote.per_rank_size, " and commits up to ",
           vote.end, " bytes, but LSA rank ", lsa_rank_, " has ", mine.per_rank_size, " and ", mine.end);
    }
  }
}

// Unmaps and releases mappings_[first..], newest first. Errors are ignored: this runs on teardown
// and while unwinding another error.
void VmmMemory::release_from(size_t first) {
  const cuda::Driver& d = cuda::driver();
  while (mappings_.size() > first) {
    const Mapping& m = mappings_.back();
    if (m.mapped) d.cuMemUnmap(m.address, m.size);
    d.cuMemRelease(m.handle);
    mappings_.pop_back();
  }
}

void VmmMemory::require_committed(const char* what, uint64_t offset, uint64_t size) const {
  if (offset > committed_ || size > committed_ - offset) {
    fail(ccoInvalidArgument, what, ": offset ", offset, " + size ", size, " exceeds the ", committed_,
         " committed bytes of the slot");
  }
}

void VmmMemory::zero(uint64_t offset, uint64_t size) {
  if (size == 0) return;
  require_committed("zero()", offset, size);
  cuda::make_current(device_);
  const cuda::Driver& d = cuda::driver();
  check(d.cuMemsetD8(slot(lsa_rank_) + offset, 0, size), "cuMemsetD8 of slot bytes [", offset, ", ", offset + size,
        ") on CUDA device ", device_);
  check(d.cuCtxSynchronize(), "cuCtxSynchronize after zeroing slot bytes [", offset, ", ", offset + size, ")");
}

// The host cannot load device memory, so the word comes over with a copy. cuMemcpyDtoH returns
// once the copy is done, and it is ordered after earlier work on the legacy default stream.
uint64_t VmmMemory::read_word(uint64_t offset) {
  require_committed("read_word()", offset, sizeof(uint64_t));
  cuda::make_current(device_);
  uint64_t word = 0;
  check(cuda::driver().cuMemcpyDtoH(&word, slot(lsa_rank_) + offset, sizeof(word)),
        "cuMemcpyDtoH of the word at slot offset ", offset, " on CUDA device ", device_);
  return word;
}

}  // namespace

std::unique_ptr<FlatMemory> create_vmm_memory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size,
                                              int device) {
  return std::make_unique<VmmMemory>(group, lsa_rank, lsa_size, per_rank_size, device);
}

}  // namespace mori::cco
