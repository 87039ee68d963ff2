// SPDX-License-Identifier: MIT
// The P2P backend's batch copy: one launch moves every (dst, src, size) descriptor of a transfer,
// where one cuMemcpyAsync per descriptor would cost microseconds each in the driver (paged KV
// blocks come in thousands of 4-64 KiB pieces). The host cuts descriptors to at most
// kMaxPieceBytes, so each block's work is bounded and a grid of one block per piece balances.
// Compiled to PTX by gen_copy_batch_ptx.py (copy_batch_ptx.inc, checked in): mori-io builds
// without the CUDA toolkit and the driver JIT-compiles the PTX for whatever GPU it finds.

struct CopyDesc {
  unsigned long long dst;
  unsigned long long src;
  unsigned long long size;
};

extern "C" __global__ void __launch_bounds__(512) mori_io_copy_batch(const CopyDesc* descs, unsigned int count) {
  for (unsigned int d = blockIdx.x; d < count; d += gridDim.x) {
    const CopyDesc c = descs[d];
    char* dst = reinterpret_cast<char*>(c.dst);
    const char* src = reinterpret_cast<const char*>(c.src);
    const unsigned long long n = c.size;
    unsigned long long done = 0;
    if (((c.dst | c.src) & 15ull) == 0) {
      const unsigned long long vectors = n / 16;
      uint4* dst16 = reinterpret_cast<uint4*>(dst);
      const uint4* src16 = reinterpret_cast<const uint4*>(src);
      for (unsigned long long i = threadIdx.x; i < vectors; i += blockDim.x) dst16[i] = src16[i];
      done = vectors * 16;
    } else if (((c.dst | c.src) & 7ull) == 0) {
      const unsigned long long words = n / 8;
      unsigned long long* dst8 = reinterpret_cast<unsigned long long*>(dst);
      const unsigned long long* src8 = reinterpret_cast<const unsigned long long*>(src);
      for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) dst8[i] = src8[i];
      done = words * 8;
    }
    for (unsigned long long i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
}
