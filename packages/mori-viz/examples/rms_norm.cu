// SPDX-License-Identifier: MIT
// The example's kernel: RMS-normalise each row of a [rows, cols] float matrix, one warp per row
// (grid-stride), with a trace slice around each phase. Built with MORI_VIZ_ENABLED=1 it records
// them; built without, the DEMO_* / MORI_VIZ_* lines compile to nothing.
#include "demo_slots.h"

extern "C" __global__ void rms_norm(void* trace, const float* in, float* out, int rows, int cols) {
  DEMO_VIZ_INIT(viz, trace);
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x / 32);
  int handled = 0;
  MORI_VIZ_BEGIN(viz, DEMO_SLOT_ROWS_ALL);
  for (int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    const float* src = in + (long long)row * cols;
    float* dst = out + (long long)row * cols;
    float sum = 0.0f;
    {
      MORI_VIZ_SCOPE(viz, DEMO_SLOT_ROWS_LOAD);
      for (int c = lane; c < cols; c += 32) sum += src[c] * src[c];
    }
    MORI_VIZ_BEGIN(viz, DEMO_SLOT_ROWS_REDUCE);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float scale = rsqrtf(sum / cols + 1e-6f);
    MORI_VIZ_END(viz, DEMO_SLOT_ROWS_REDUCE);
    MORI_VIZ_BEGIN_ARG(viz, DEMO_SLOT_ROWS_STORE, row);
    for (int c = lane; c < cols; c += 32) dst[c] = src[c] * scale;
    MORI_VIZ_END_ARG(viz, DEMO_SLOT_ROWS_STORE, row);
    ++handled;
  }
  MORI_VIZ_END(viz, DEMO_SLOT_ROWS_ALL);
  MORI_VIZ_INSTANT_ARG(viz, DEMO_SLOT_ROWS_DONE, handled);
}
