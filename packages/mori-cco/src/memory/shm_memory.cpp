// SPDX-License-Identifier: MIT
// The cpu backend's flat memory: each rank's slot is a POSIX shared-memory file that every LSA
// rank maps, whole, at that rank's place in a reserved address range. Mapping past the end of a
// file is allowed (touching it is not), so slots are mapped once at creation and commit() only
// grows the owner's file; peers see the new bytes through the mapping they already have.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "memory/flat_memory.hpp"

namespace mori::cco {

namespace {

constexpr uint64_t kGranularity = 1ull << 20;  // commit steps: fewer, larger fallocate calls

std::string segment_name(const std::string& tag, int rank) { return "/mori-cco-" + tag + "-r" + std::to_string(rank); }

class ShmMemory final : public FlatMemory {
 public:
  ShmMemory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size)
      : group_(group), lsa_rank_(lsa_rank), lsa_size_(lsa_size) {
    per_rank_size_ = (per_rank_size + kGranularity - 1) / kGranularity * kGranularity;
    const uint64_t total = per_rank_size_ * static_cast<uint64_t>(lsa_size_);
    void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) fail_errno("reserving " + std::to_string(total) + " bytes of address space");
    base_ = reinterpret_cast<uintptr_t>(base);
    try {
      attach();
    } catch (...) {
      release();
      throw;
    }
  }

  ~ShmMemory() override { release(); }

  const char* backend() const override { return "cpu"; }
  int device() const override { return -1; }
  uintptr_t flat_base() const override { return base_; }
  uint64_t per_rank_size() const override { return per_rank_size_; }
  uint64_t granularity() const override { return kGranularity; }
  uint64_t committed() const override { return committed_; }

  void commit(uint64_t end) override {
    end = (end + kGranularity - 1) / kGranularity * kGranularity;
    if (end <= committed_) return;
    if (end > per_rank_size_) {
      fail(ccoOutOfMemory, "the slot needs ", end, " bytes but per_rank_vmm is ", per_rank_size_);
    }
    // Every rank learns whether every other one could grow, so all fail together rather than
    // some waiting in a barrier for a rank that threw.
    const int error = posix_fallocate(own_fd_, static_cast<off_t>(committed_), static_cast<off_t>(end - committed_));
    const auto errors = group_.allgather_value(error);
    for (int r = 0; r < group_.nranks(); ++r) {
      if (errors[r] != 0) {
        fail(errors[r] == ENOSPC ? ccoOutOfMemory : ccoSystemError, "rank ", r, " could not grow its shared memory to ",
             end, " bytes: ", std::strerror(errors[r]), errors[r] == ENOSPC ? " (is /dev/shm full?)" : "");
      }
    }
    committed_ = end;
  }

  void zero(uint64_t offset, uint64_t size) override {
    std::memset(reinterpret_cast<void*>(base_ + lsa_rank_ * per_rank_size_ + offset), 0, size);
  }

 protected:
  uint64_t own_slot_offset() const override { return lsa_rank_ * per_rank_size_; }

 private:
  void attach() {
    const std::string own = segment_name(group_.tag(), group_.rank());
    own_fd_ = shm_open(own.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (own_fd_ < 0) fail_errno("shm_open(" + own + ")");
    created_ = own;
    group_.barrier();
    const int first_world_rank = group_.rank() - lsa_rank_;
    for (int peer = 0; peer < lsa_size_; ++peer) {
      int fd = own_fd_;
      if (static_cast<uint64_t>(peer) != lsa_rank_) {
        const std::string name = segment_name(group_.tag(), first_world_rank + peer);
        fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) fail_errno("shm_open(" + name + ")");
      }
      void* slot = reinterpret_cast<void*>(base_ + peer * per_rank_size_);
      void* mapped = mmap(slot, per_rank_size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
      if (fd != own_fd_) close(fd);
      if (mapped == MAP_FAILED) fail_errno("mapping the slot of LSA rank " + std::to_string(peer));
    }
    // Everyone has opened every segment: unlink now so that a crash leaks nothing.
    group_.barrier();
    shm_unlink(created_.c_str());
    created_.clear();
  }

  void release() {
    if (!created_.empty()) shm_unlink(created_.c_str());
    if (own_fd_ >= 0) close(own_fd_);
    own_fd_ = -1;
    if (base_ != 0) munmap(reinterpret_cast<void*>(base_), per_rank_size_ * static_cast<uint64_t>(lsa_size_));
    base_ = 0;
  }

  Group& group_;
  const uint64_t lsa_rank_;
  const int lsa_size_;
  uint64_t per_rank_size_ = 0;
  uintptr_t base_ = 0;
  int own_fd_ = -1;
  std::string created_;
  uint64_t committed_ = 0;
};

}  // namespace

std::unique_ptr<FlatMemory> create_shm_memory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size) {
  return std::make_unique<ShmMemory>(group, lsa_rank, lsa_size, per_rank_size);
}

}  // namespace mori::cco
