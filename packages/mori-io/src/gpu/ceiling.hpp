// SPDX-License-Identifier: MIT
// The device-to-device copy ceilings the benchmark divides by: cuMemcpyDtoDAsync of the same size
// on one of mori-io's streams (no engine, no socket, no IPC), timed with CUDA events (what the
// copy engine takes) or on the host from the call to the end of cuStreamSynchronize (what any
// host-initiated copy that waits for its completion takes).
#pragma once

#include <cstdint>
#include <vector>

namespace mori::io::gpu {

// Seconds of each of `iters` timed copies of `bytes` from src to dst (device memory of device),
// after `warmup` untimed ones. Throws Error(Unsupported/InvalidArgument/System).
std::vector<double> time_device_copies(int device, uintptr_t dst, uintptr_t src, uint64_t bytes, int warmup,
                                       int iters, bool host_timed);

}  // namespace mori::io::gpu
