// SPDX-License-Identifier: MIT
// The tests' traced kernel: every warp records kernel/outer around `inner_iters` kernel/inner
// slices (each one a clock64 spin of `spin_cycles` plus a grid-stride update of `data`), one
// kernel/scoped slice through MORI_VIZ_SCOPE, and a kernel/done instant carrying its block index.
// Each trace macro sits on its own line: test_device_compile.py deletes those lines to get the
// same kernel without instrumentation and compares the PTX of the two.
#include "test_slots.h"

extern "C" __global__ void traced_kernel(void* trace, float* data, int n, int inner_iters, long long spin_cycles) {
  TEST_VIZ_INIT(viz, trace);
  MORI_VIZ_BEGIN(viz, TEST_SLOT_KERNEL_OUTER);
  const int stride = gridDim.x * blockDim.x;
  for (int it = 0; it < inner_iters; ++it) {
    MORI_VIZ_BEGIN_ARG(viz, TEST_SLOT_KERNEL_INNER, it);
    const long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) data[i] = data[i] * 2.0f + 1.0f;
    MORI_VIZ_END_ARG(viz, TEST_SLOT_KERNEL_INNER, it);
  }
  MORI_VIZ_END(viz, TEST_SLOT_KERNEL_OUTER);
  {
    MORI_VIZ_SCOPE(viz, TEST_SLOT_KERNEL_SCOPED);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) data[i] -= 1.0f;
  }
  MORI_VIZ_INSTANT_ARG(viz, TEST_SLOT_KERNEL_DONE, blockIdx.x);
}
