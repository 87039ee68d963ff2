// SPDX-License-Identifier: MIT
#include "ucx/loader.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::io::ucx {

const Api& load(const std::string& lib_dir) {
  bool opened = false;
  try {
    const Api& api = ::mori::common::ucx::load(lib_dir, &opened);
    if (opened) {
      MORI_IO_LOG(Info, "loaded UCX " << api.major << "." << api.minor << "." << api.release << " from "
                                      << (lib_dir.empty() ? std::string("the system") : lib_dir));
    } else if (lib_dir != api.dir) {
      MORI_IO_LOG(Info, "UCX is already loaded from '" << api.dir << "'; ignoring '" << lib_dir << "'");
    }
    return api;
  } catch (const Unavailable& e) {
    const std::string hint = lib_dir.empty() ? " (pip install libucx-cu12, or set MORI_IO_UCX_LIB_DIR)" : "";
    throw Error(Code::Unsupported, e.what() + hint);
  }
}

}  // namespace mori::io::ucx
