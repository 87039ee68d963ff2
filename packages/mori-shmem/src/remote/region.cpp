// SPDX-License-Identifier: MIT
#include "remote/region.hpp"

#include "core/error.hpp"
#include "core/state.hpp"
#include "mori_shmem/device_state.h"
#include "mori_shmem/mori_shmem.h"

namespace mori::shmem::remote {

namespace {
// The proxy words are laid out as the heap's sync words, so the device proxy code serves both.
constexpr uint64_t kProxyWordsBytes = MORI_SHMEM_SYNC_PROXY_TAIL_OFFSET + 8;
}  // namespace

RemoteRegion::RemoteRegion(Bootstrap& bootstrap, RegionSpec spec, double timeout_s)
    : rank_(bootstrap.rank()), spec_(std::move(spec)) {
  if (spec_.reach.size() != static_cast<size_t>(bootstrap.nranks())) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "reach has ", spec_.reach.size(), " entries, the group ",
                bootstrap.nranks(), " ranks");
  }
  spec_.reach[rank_] = 0;
  const bool gpu = spec_.cuda_device >= 0;
  if (gpu) {
    if (spec_.proxy_words % 8 != 0 || spec_.proxy_words + kProxyWordsBytes > spec_.size) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "proxy_words=", spec_.proxy_words, " must be 8-byte aligned with ",
                  kProxyWordsBytes, " bytes before the range's end (size ", spec_.size, ")");
    }
    context_ = std::make_unique<cuda::DeviceContext>(spec_.cuda_device, rank_, timeout_s, false);
    auto io = std::make_unique<GpuRemoteIo>(*context_, spec_.base, spec_.size);
    gpu_io_ = io.get();
    access_ = std::move(io);
  } else {
    access_ = std::make_unique<HostHeapAccess>(spec_.base, spec_.size);
  }
  ConduitConfig config = read_conduit_config(timeout_s);
  conduit_ = make_conduit(bootstrap, spec_.reach, LocalHeap{*access_, spec_.base, gpu}, config);
  if (gpu) {
    proxy_ = std::make_unique<DeviceProxy>(*context_, *conduit_, *gpu_io_, spec_.base + spec_.proxy_words, rank_,
                                           timeout_s);
  }
}

RemoteRegion::~RemoteRegion() {
  try {
    quiet();  // nothing of ours may still be on its way to a peer
  } catch (const std::exception&) {
    // A lost peer has nothing left to receive; the range may go.
  }
  proxy_.reset();
  conduit_.reset();
}

void RemoteRegion::check(int rank, uint64_t offset, uint64_t nbytes, uint64_t align, const char* what) const {
  if (rank < 0 || static_cast<size_t>(rank) >= spec_.reach.size() || spec_.reach[rank] == 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, what, ": rank=", rank, " is not reached through this region");
  }
  if (offset > spec_.size || nbytes > spec_.size - offset || offset % align != 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, what, ": ", nbytes, " bytes at offset ", offset,
                " do not fit the region's ", spec_.size, " bytes", align > 1 ? " (or are not 8-byte aligned)" : "");
  }
}

void RemoteRegion::put(int rank, uint64_t offset, const void* src, uint64_t nbytes) {
  check(rank, offset, nbytes, 1, "put");
  if (gpu_io_ != nullptr) {
    gpu_io_->put(*conduit_, rank, offset, src, nbytes);
  } else {
    conduit_->put(rank, offset, src, nbytes);
  }
}

void RemoteRegion::put_signal(int rank, uint64_t offset, const void* src, uint64_t nbytes, uint64_t signal_offset,
                              uint64_t signal, int sig_op) {
  check(rank, offset, nbytes, 1, "put_signal");
  check(rank, signal_offset, 8, 8, "put_signal's signal");
  if (gpu_io_ != nullptr) {
    gpu_io_->put_signal(*conduit_, rank, offset, src, nbytes, signal_offset, signal, sig_op);
  } else {
    conduit_->put_signal(rank, offset, src, nbytes, signal_offset, signal, sig_op);
  }
}

void RemoteRegion::get(int rank, uint64_t offset, void* dest, uint64_t nbytes) {
  check(rank, offset, nbytes, 1, "get");
  if (gpu_io_ != nullptr) {
    gpu_io_->get(*conduit_, rank, offset, dest, nbytes);
  } else {
    conduit_->get(rank, offset, dest, nbytes);
  }
}

void RemoteRegion::signal(int rank, uint64_t signal_offset, uint64_t signal, int sig_op) {
  check(rank, signal_offset, 8, 8, "signal");
  conduit_->signal(rank, signal_offset, signal, sig_op);
}

void RemoteRegion::quiet() {
  if (proxy_) proxy_->drain();
  conduit_->quiet();
}

}  // namespace mori::shmem::remote
