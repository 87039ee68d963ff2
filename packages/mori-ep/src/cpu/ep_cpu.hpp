// SPDX-License-Identifier: MIT
// The cpu backend of dispatch and combine: the same protocol as the CUDA kernels
// (src/device/ep_intranode.cu), run by the calling process's thread on host memory.
#pragma once

#include "../device/ep_args.h"

namespace mori::ep::cpu {

// Both throw WaitTimeout when a peer does not answer in time, and record receive overflows and
// bad expert ids in the region's error word like the kernels do.
void Dispatch(const mori_ep_args_t& a);
void Combine(const mori_ep_args_t& a, int dtype, int quant);

}  // namespace mori::ep::cpu
