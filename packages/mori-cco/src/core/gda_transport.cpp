// SPDX-License-Identifier: MIT
#include "core/gda_transport.hpp"

namespace mori::cco {

GdaTransport::GdaTransport(Group& group, uint8_t* slot, uint64_t slot_size, int cuda_device,
                           const std::vector<uint8_t>& reach, uint64_t words_offset, double timeout_s) {
  mori_shmem_remote_region_attr_t attr{};
  attr.base = slot;
  attr.size = slot_size;
  attr.cuda_device = cuda_device;
  attr.reach = reach.data();
  attr.proxy_words = words_offset;
  check_shmem(mori_shmem_remote_region_create(group.handle(), &attr, timeout_s, &region_),
              "connecting to the ranks of other nodes");
  check_shmem(mori_shmem_remote_region_info(region_, &proxy_ring_, &conduit_), "remote region info");
}

GdaTransport::~GdaTransport() { mori_shmem_remote_region_destroy(region_); }

void GdaTransport::put(int rank, uint64_t offset, const void* src, uint64_t bytes, uint64_t signal_offset,
                       uint64_t signal) {
  check_shmem(mori_shmem_remote_region_put(region_, rank, offset, src, bytes, signal_offset, signal,
                                           MORI_SHMEM_SIGNAL_ADD),
              "gda put");
}

void GdaTransport::get(int rank, uint64_t offset, void* dest, uint64_t bytes) {
  check_shmem(mori_shmem_remote_region_get(region_, rank, offset, dest, bytes), "gda get");
}

void GdaTransport::signal_add(int rank, uint64_t signal_offset, uint64_t value) {
  check_shmem(mori_shmem_remote_region_signal(region_, rank, signal_offset, value, MORI_SHMEM_SIGNAL_ADD),
              "gda signal");
}

void GdaTransport::quiet() { check_shmem(mori_shmem_remote_region_quiet(region_), "gda flush"); }

}  // namespace mori::cco
