// SPDX-License-Identifier: MIT
#include "heap/shm_heap.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::shmem {

namespace {

std::string segment_name(const Secret& secret, int pe) {
  char name[64];
  std::snprintf(name, sizeof(name), "/mori-shmem-%02x%02x%02x%02x%02x%02x%02x%02x-pe%d", secret[0], secret[1],
                secret[2], secret[3], secret[4], secret[5], secret[6], secret[7], pe);
  return name;
}

uint8_t* map_segment(const std::string& name, uint64_t size, bool create) {
  int flags = create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR;
  int fd = shm_open(name.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) throw_system_error("shm_open(" + name + ")");
  if (create && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int saved = errno;
    close(fd);
    shm_unlink(name.c_str());
    errno = saved;
    throw_system_error("ftruncate(" + name + ", " + std::to_string(size) + ")");
  }
  // Offsets are aligned relative to the base, so the base itself must be aligned to the largest
  // alignment malloc_align accepts: reserve a larger range, then map the segment at its aligned start.
  void* addr = MAP_FAILED;
  void* reservation = mmap(nullptr, size + kHeapBaseAlignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
  if (reservation != MAP_FAILED) {
    const auto start = reinterpret_cast<uintptr_t>(reservation);
    const uintptr_t aligned = (start + kHeapBaseAlignment - 1) & ~(uintptr_t(kHeapBaseAlignment) - 1);
    if (aligned > start) munmap(reservation, aligned - start);
    const uintptr_t tail = aligned + size;
    const uintptr_t end = start + size + kHeapBaseAlignment;
    if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
    addr = mmap(reinterpret_cast<void*>(aligned), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED,
                fd, 0);
  }
  int saved = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    if (create) shm_unlink(name.c_str());
    errno = saved;
    throw_system_error("mmap of " + name + " (" + std::to_string(size) + " bytes)");
  }
  return static_cast<uint8_t*>(addr);
}

void warn_if_tmpfs_too_small(uint64_t size, int nranks) {
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) != 0) return;
  const double capacity = static_cast<double>(fs.f_blocks) * static_cast<double>(fs.f_frsize);
  const double wanted = static_cast<double>(size) * nranks;
  if (wanted > capacity) {
    log::emit(log::Level::Warning, "the heaps of ", nranks, " PEs (", nranks, " x ", size,
              " bytes) exceed /dev/shm (", static_cast<uint64_t>(capacity),
              " bytes): pages are allocated on first touch, and filling them past /dev/shm ends in SIGBUS; "
              "lower MORI_SHMEM_HEAP_SIZE");
  }
}

}  // namespace

SharedMemoryHeap::SharedMemoryHeap(Bootstrap& bootstrap, uint64_t size, const Topology& topology)
    : rank_(bootstrap.rank()), size_(size), mappings_(bootstrap.nranks(), nullptr) {
  const int nranks = bootstrap.nranks();
  int local = 0;
  for (int pe = 0; pe < nranks; ++pe) local += topology.remote[pe] ? 0 : 1;
  if (rank_ == 0) warn_if_tmpfs_too_small(size, local);

  const std::string own_name = segment_name(bootstrap.secret(), rank_);
  mappings_[rank_] = map_segment(own_name, size, /*create=*/true);
  try {
    bootstrap.barrier("heap: segments created");
    for (int pe = 0; pe < nranks; ++pe) {
      if (pe != rank_ && !topology.remote[pe]) {
        mappings_[pe] = map_segment(segment_name(bootstrap.secret(), pe), size, /*create=*/false);
      }
    }
    bootstrap.barrier("heap: segments mapped");
  } catch (...) {
    shm_unlink(own_name.c_str());
    for (uint8_t* mapping : mappings_) {
      if (mapping != nullptr) munmap(mapping, size_);
    }
    throw;
  }
  shm_unlink(own_name.c_str());
}

SharedMemoryHeap::~SharedMemoryHeap() {
  for (uint8_t* mapping : mappings_) {
    if (mapping != nullptr) munmap(mapping, size_);
  }
}

}  // namespace mori::shmem
