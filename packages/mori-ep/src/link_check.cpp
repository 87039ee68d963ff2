// SPDX-License-Identifier: MIT
//
// mori.ep._C, link layer only: reports which mori-shmem ABI this extension was compiled against
// and which libmori_shmem.so it actually bound to at run time, so mori/ep/__init__.py can refuse
// to import against a mismatched or duplicated library.
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include <pybind11/pybind11.h>

#include "mori_shmem/mori_shmem.h"

namespace {

int built_abi_version() { return MORI_SHMEM_ABI_VERSION; }

int loaded_abi_version() { return mori_shmem_abi_version(); }

// The path of the object that defines mori_shmem_abi_version in this process, i.e. the copy of
// libmori_shmem.so this extension's undefined symbols resolved to.
std::string loaded_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&mori_shmem_abi_version), &info) == 0 || info.dli_fname == nullptr) {
    throw std::runtime_error("dladdr could not locate mori_shmem_abi_version in any loaded object");
  }
  return info.dli_fname;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "mori-ep native module (link layer only; the EP API lands later).";
  m.def("built_abi_version", &built_abi_version,
        "MORI_SHMEM_ABI_VERSION from <mori_shmem/mori_shmem.h> at the time mori-ep was compiled.");
  m.def("loaded_abi_version", &loaded_abi_version,
        "mori_shmem_abi_version() of the libmori_shmem.so linked at run time.");
  m.def("loaded_library_path", &loaded_library_path,
        "Path of the libmori_shmem.so that defines mori_shmem_abi_version in this process.");
}
