// SPDX-License-Identifier: MIT
// NOTE [ucx api]
// The slice of UCX's UCP API that the UCX conduit calls, and the loader that opens libucp with
// dlopen at run time (the libucx wheel's, or the system's), are the shared <mori/ucx_api.hpp> of
// the root package (mori.get_include()): libmori_shmem builds without UCX headers, and a machine
// without UCX still loads the library and falls back to the TCP conduit. The declarations keep
// ucp.h's own names; packages/mori/tests/native/check_ucx_abi.cpp checks them against the real
// ucp.h. This adds the load that raises mori-shmem's error and logs what it opened.
#pragma once

#include <mori/ucx_api.hpp>
#include <string>

namespace mori::shmem::ucx {

using namespace ::mori::common::ucx;

// Opens UCX once per process and returns its entry points: from dir (libucs, libucs_signal when
// there, libuct, libucp) or, when dir is empty, the libucp.so.0 the dynamic linker finds. Throws
// Error(UNSUPPORTED) saying what is missing. The libraries stay loaded: UCX cannot be unloaded.
const Api& load(const std::string& dir);

}  // namespace mori::shmem::ucx
