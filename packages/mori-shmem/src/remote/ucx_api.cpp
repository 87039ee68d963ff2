// SPDX-License-Identifier: MIT
#include "remote/ucx_api.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::shmem::ucx {

const Api& load(const std::string& dir) {
  bool opened = false;
  try {
    const Api& api = ::mori::common::ucx::load(dir, &opened);
    if (opened) {
      log::emit(log::Level::Debug, "UCX ", api.major, ".", api.minor, ".", api.release, " from ", api.origin);
    } else if (!dir.empty() && api.dir != dir) {
      log::emit(log::Level::Debug, "UCX stays the one loaded first (", api.origin, "), not ", dir);
    }
    return api;
  } catch (const Unavailable& e) {
    if (dir.empty()) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, e.what(), "; install libucx-cu12 or set MORI_SHMEM_UCX_DIR");
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, e.what());
  }
}

}  // namespace mori::shmem::ucx
