// SPDX-License-Identifier: MIT
// UCX, opened at run time. The hand-declared slice of UCP the RDMA backend uses (ucp.h's own
// names) and the loader are the shared <mori/ucx_api.hpp> of the root package (mori.get_include()),
// checked against the real ucp.h by packages/mori/tests/native/check_ucx_abi.cpp: the wheel builds
// without UCX headers and a machine without UCX still imports mori.io. RAPIDS' libucx wheel (pip
// install libucx-cu12) ships libucs, libuct and libucp under libucx/lib; they are opened in that
// order with RTLD_LOCAL, as the wheel's own libucx/load.py does, so no UCX symbol enters the global
// namespace. Without a directory the system's libucp.so.0 is opened by soname.
#pragma once

#include <mori/ucx_api.hpp>
#include <string>

namespace mori::io::ucx {

using namespace ::mori::common::ucx;

// The bound API. lib_dir empty: the system's libucp.so.0. Loaded once per process; a later call
// with another directory gets the library already loaded. Throws Error(Unsupported) naming what
// is missing (library, symbol, version); a failed attempt is not cached.
const Api& load(const std::string& lib_dir);

}  // namespace mori::io::ucx
