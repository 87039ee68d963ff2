// SPDX-License-Identifier: MIT
// Passing file descriptors between the PEs of one host (the vmm heap shares GPU memory as POSIX
// fds from cuMemExportToShareableHandle). The fds travel with SCM_RIGHTS over abstract Unix
// sockets named after the job; a PE accepts a connection only from a process of its own job
// (the peer's pid, checked with SO_PEERCRED, must be one the bootstrap reported).
#pragma once

#include <cstdint>
#include <vector>

#include "bootstrap/bootstrap.hpp"

namespace mori::shmem::cuda {

// COLLECTIVE. Every PE offers the same number of fds; returns received[pe] = PE pe's fds, as new
// descriptors owned by the caller (received[my rank] is empty). PEs with remote[pe] set (on
// another host, where fds cannot go) are neither sent to nor waited for, and their list stays
// empty; `remote` is empty or has one entry per PE, and must be symmetric across the job. Throws
// MORI_SHMEM_ERR_TIMEOUT when a peer does not deliver within timeout_s.
std::vector<std::vector<int>> exchange_fds(Bootstrap& bootstrap, const std::vector<int>& fds, double timeout_s,
                                           const std::vector<uint8_t>& remote = {});

}  // namespace mori::shmem::cuda
