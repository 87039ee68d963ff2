// SPDX-License-Identifier: MIT
#include "core/group.hpp"

#include "core/error.hpp"

namespace mori::cco {

namespace {

int to_cco_status(int shmem_status) {
  switch (shmem_status) {
    case MORI_SHMEM_ERR_INVALID_ARGUMENT:
      return ccoInvalidArgument;
    case MORI_SHMEM_ERR_TIMEOUT:
      return ccoTimeout;
    case MORI_SHMEM_ERR_PEER_LOST:
    case MORI_SHMEM_ERR_AUTH:
      return ccoPeerLost;
    case MORI_SHMEM_ERR_SYMMETRY:
      return ccoSymmetryError;
    case MORI_SHMEM_ERR_UNSUPPORTED:
      return ccoUnsupported;
    case MORI_SHMEM_ERR_SYSTEM:
      return ccoSystemError;
    default:
      return ccoInternalError;
  }
}

}  // namespace

void check_shmem(int status, const char* what) {
  if (status != MORI_SHMEM_SUCCESS) fail(to_cco_status(status), what, ": ", mori_shmem_last_error());
}

Group::Group(const mori_shmem_uniqueid_t& uid, int rank, int nranks, double timeout_s) : rank_(rank), nranks_(nranks) {
  check_shmem(mori_shmem_bootstrap_group_create(&uid, rank, nranks, timeout_s, &group_), "bootstrap");
  char tag[17] = {};
  check_shmem(mori_shmem_bootstrap_group_tag(group_, tag, sizeof(tag)), "bootstrap tag");
  tag_ = tag;
}

Group::~Group() { mori_shmem_bootstrap_group_destroy(group_); }

void Group::allgather(const void* send, void* recv, size_t bytes_per_rank) {
  check_shmem(mori_shmem_bootstrap_group_allgather(group_, send, recv, bytes_per_rank), "bootstrap allgather");
}

void Group::barrier() { check_shmem(mori_shmem_bootstrap_group_barrier(group_), "bootstrap barrier"); }

std::vector<std::vector<int>> Group::exchange_fds(const std::vector<int>& fds) {
  const size_t count = fds.size();
  std::vector<int> flat(count * static_cast<size_t>(nranks_), -1);
  check_shmem(mori_shmem_bootstrap_group_exchange_fds(group_, fds.data(), static_cast<int>(count), flat.data()),
        "exchanging memory handles");
  std::vector<std::vector<int>> received(static_cast<size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    received[r].assign(flat.begin() + static_cast<long>(r * count), flat.begin() + static_cast<long>((r + 1) * count));
  }
  return received;
}

}  // namespace mori::cco
