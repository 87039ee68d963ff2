// SPDX-License-Identifier: MIT
#include "cuda/vmm_block.hpp"

namespace mori::shmem::cuda {

VmmBlock::VmmBlock(int ordinal, size_t bytes, const char* what) {
  const Driver& d = driver();
  CUmemAllocationProp prop{};
  prop.type = kMemAllocationPinned;
  prop.location.type = kMemLocationDevice;
  prop.location.id = ordinal;
  size_t granularity = 0;
  check(d.cuMemGetAllocationGranularity(&granularity, &prop, kGranularityRecommended), "cuMemGetAllocationGranularity",
        what);
  size_ = (bytes + granularity - 1) / granularity * granularity;
  try {
    check(d.cuMemCreate(&handle_, size_, &prop, 0), "cuMemCreate", what);
    check(d.cuMemAddressReserve(&address_, size_, 0, 0, 0), "cuMemAddressReserve", what);
    check(d.cuMemMap(address_, size_, 0, handle_, 0), "cuMemMap", what);
    mapped_ = true;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = kAccessReadWrite;
    check(d.cuMemSetAccess(address_, size_, &access, 1), "cuMemSetAccess", what);
    check(d.cuMemsetD8(address_, 0, size_), "cuMemsetD8", what);
  } catch (...) {
    release();
    throw;
  }
}

VmmBlock::~VmmBlock() { release(); }

void VmmBlock::release() noexcept {
  const Driver& d = driver();
  if (mapped_) d.cuMemUnmap(address_, size_);
  if (address_ != 0) d.cuMemAddressFree(address_, size_);
  if (handle_ != 0) d.cuMemRelease(handle_);
  mapped_ = false;
  address_ = 0;
  handle_ = 0;
}

}  // namespace mori::shmem::cuda
