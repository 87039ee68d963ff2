// SPDX-License-Identifier: MIT
// Kernels of test_jit.py. Plain C types only, so NVRTC compiles it without host headers.
// VALUE_T is a template constant (a #define the JIT renders); float unless the test says.

#ifndef VALUE_T
#define VALUE_T float
#endif

// Passed by value; the host mirror is a ctypes.Structure with the same fields.
struct Affine {
  float a;
  float b;
  int n;
};

// Read by affine_from_global after the host fills it with Module.write_global.
__device__ float mori_test_coeffs[2];

extern "C" __global__ void affine_fill(VALUE_T* out, VALUE_T a, VALUE_T b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * (VALUE_T)i + b;
}

extern "C" __global__ void affine_struct(float* out, Affine p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) out[i] = p.a * (float)i + p.b;
}

extern "C" __global__ void affine_from_global(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mori_test_coeffs[0] * (float)i + mori_test_coeffs[1];
}

// Writes i + offset through a 64-bit index computed from a Python int argument.
extern "C" __global__ void iota_i64(long long* out, long long offset, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = offset + i;
}

// Stages the block's values through dynamic shared memory of `shared_floats` floats, so a launch
// may ask for more than the 48 KiB default; each thread writes its element reversed in the block.
extern "C" __global__ void reverse_in_shared(const float* in, float* out, int shared_floats) {
  extern __shared__ float stage[];
  int t = threadIdx.x;
  int base = blockIdx.x * blockDim.x;
  stage[t] = in[base + t];
  stage[shared_floats - 1 - t] = 0.0f;  // touch the far end of the allocation
  __syncthreads();
  out[base + t] = stage[blockDim.x - 1 - t];
}
