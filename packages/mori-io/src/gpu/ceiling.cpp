// SPDX-License-Identifier: MIT
#include "gpu/ceiling.hpp"

#include <chrono>

#include "core/error.hpp"
#include "gpu/device.hpp"

namespace mori::io::gpu {

std::vector<double> time_device_copies(int device, uintptr_t dst, uintptr_t src, uint64_t bytes, int warmup,
                                       int iters, bool host_timed) {
  if (iters < 1) throw Error(Code::InvalidArgument, "iters=" + std::to_string(iters) + " must be >= 1");
  KeepCurrentContext keep;  // runs on the application's thread
  inspect(dst, bytes, device);
  inspect(src, bytes, device);
  const cuda::Driver& d = cuda::driver();
  ChannelLease channel(device);
  // Timing events of their own: the pooled ones are made with timing disabled.
  cuda::CUevent start = nullptr;
  cuda::CUevent stop = nullptr;
  cuda::check(d.cuEventCreate(&start, cuda::kEventDefault), "cuEventCreate", "timing device copies");
  cuda::check(d.cuEventCreate(&stop, cuda::kEventDefault), "cuEventCreate", "timing device copies");
  std::vector<double> seconds;
  try {
    for (int i = 0; i < warmup + iters; ++i) {
      if (host_timed) {
        const auto begin = std::chrono::steady_clock::now();
        cuda::check(d.cuMemcpyDtoDAsync(dst, src, bytes, channel->stream), "cuMemcpyDtoDAsync", "timing device copies");
        cuda::check(d.cuStreamSynchronize(channel->stream), "cuStreamSynchronize", "timing device copies");
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - begin;
        if (i >= warmup) seconds.push_back(took.count());
        continue;
      }
      cuda::check(d.cuEventRecord(start, channel->stream), "cuEventRecord", "timing device copies");
      cuda::check(d.cuMemcpyDtoDAsync(dst, src, bytes, channel->stream), "cuMemcpyDtoDAsync", "timing device copies");
      cuda::check(d.cuEventRecord(stop, channel->stream), "cuEventRecord", "timing device copies");
      cuda::check(d.cuEventSynchronize(stop), "cuEventSynchronize", "timing device copies");
      float ms = 0;
      cuda::check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime", "timing device copies");
      if (i >= warmup) seconds.push_back(double(ms) / 1e3);
    }
  } catch (...) {
    d.cuEventDestroy(start);
    d.cuEventDestroy(stop);
    throw;
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  return seconds;
}

}  // namespace mori::io::gpu
