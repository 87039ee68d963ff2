// SPDX-License-Identifier: MIT
// Opens UCX at run time. RAPIDS' libucx wheel (pip install libucx-cu12) ships libucs, libuct and
// libucp under libucx/lib; they are preloaded in that order with RTLD_LOCAL, as the wheel's own
// libucx/load.py does, so libucp's dependencies resolve to the same directory and no UCX symbol
// enters the global namespace (another copy of UCX in the process keeps its own). Without a
// directory the system's libucp.so.0 is opened by soname.
#pragma once

#include <string>

#include "ucx/ucp_api.hpp"

namespace mori::io::ucx {

// UCX older than this lacks request-parameter fields the backend relies on (memh in
// ucp_request_param_t).
constexpr unsigned kMinMajor = 1;
constexpr unsigned kMinMinor = 13;

// The bound API. lib_dir empty: the system's libucp.so.0. Loaded once per process; a later call
// with another directory gets the library already loaded. Throws Error(Unsupported) naming what
// is missing (library, symbol, version); a failed attempt is not cached.
const Api& load(const std::string& lib_dir);

// "Connection reset by remote peer (UCS_ERR_CONNECTION_RESET)"; never throws.
std::string describe(const Api& api, ucs_status_t status);

}  // namespace mori::io::ucx
