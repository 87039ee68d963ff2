// SPDX-License-Identifier: MIT
// The device-to-device copy ceiling the benchmark divides by: cuMemcpyDtoDAsync of the same size
// on one of mori-io's streams, timed with CUDA events (no engine, no socket, no IPC).
#pragma once

#include <cstdint>
#include <vector>

namespace mori::io::gpu {

// Seconds of each of `iters` timed copies of `bytes` from src to dst (device memory of device),
// after `warmup` untimed ones. Throws Error(Unsupported/InvalidArgument/System).
std::vector<double> time_device_copies(int device, uintptr_t dst, uintptr_t src, uint64_t bytes, int warmup,
                                       int iters);

}  // namespace mori::io::gpu
