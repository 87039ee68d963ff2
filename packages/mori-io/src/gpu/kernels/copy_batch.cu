// SPDX-License-Identifier: MIT
// The P2P backend's copy kernels. mori_io_copy_batch moves every (dst, src, size) descriptor of
// a transfer in one launch, where one cuMemcpyAsync per descriptor would cost microseconds each in
// the driver (paged KV blocks come in thousands of 4-64 KiB pieces); the host cuts descriptors to
// at most kMaxPieceBytes, so each block's work is bounded and a grid of one block per piece
// balances. mori_io_copy_run moves one contiguous run passed by value (no descriptor to fetch
// from host memory first). Both report completion themselves by writing a sequence number into a
// host-mapped word, so the host records and queries no event: under MPS each of those driver calls
// costs about a microsecond, and the completion thread's queries contend with the submitter's.
// Compiled to PTX by gen_copy_batch_ptx.py (copy_batch_ptx.inc, checked in): mori-io builds
// without the CUDA toolkit and the driver JIT-compiles the PTX for whatever GPU it finds.

struct CopyDesc {
  unsigned long long dst;
  unsigned long long src;
  unsigned long long size;
};

// Bytes one block copies per piece of a run: 512 threads x 4 vectors of 16 bytes in flight at
// most, one vector each at least.
#define MORI_IO_RUN_PIECE (512ull * 4ull * 16ull)
#define MORI_IO_RUN_MIN_PIECE (512ull * 16ull)

// One block copies n bytes; loads of four vectors are issued before their stores so each thread
// keeps 64 bytes in flight, which a copy needs to approach HBM bandwidth.
__device__ __forceinline__ void copy_block(char* dst, const char* src, unsigned long long n) {
  const unsigned long long step = blockDim.x;
  unsigned long long done = 0;
  if (((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) & 15ull) == 0) {
    const unsigned long long vectors = n / 16;
    uint4* dst16 = reinterpret_cast<uint4*>(dst);
    const uint4* src16 = reinterpret_cast<const uint4*>(src);
    unsigned long long i = threadIdx.x;
    for (; i + 3 * step < vectors; i += 4 * step) {
      const uint4 a = src16[i];
      const uint4 b = src16[i + step];
      const uint4 c = src16[i + 2 * step];
      const uint4 d = src16[i + 3 * step];
      dst16[i] = a;
      dst16[i + step] = b;
      dst16[i + 2 * step] = c;
      dst16[i + 3 * step] = d;
    }
    if (i + step < vectors) {
      const uint4 a = src16[i];
      const uint4 b = src16[i + step];
      dst16[i] = a;
      dst16[i + step] = b;
      i += 2 * step;
    }
    for (; i < vectors; i += step) dst16[i] = src16[i];
    done = vectors * 16;
  } else if (((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) & 7ull) == 0) {
    const unsigned long long words = n / 8;
    unsigned long long* dst8 = reinterpret_cast<unsigned long long*>(dst);
    const unsigned long long* src8 = reinterpret_cast<const unsigned long long*>(src);
    for (unsigned long long i = threadIdx.x; i < words; i += step) dst8[i] = src8[i];
    done = words * 8;
  }
  for (unsigned long long i = done + threadIdx.x; i < n; i += step) dst[i] = src[i];
}

// A run's piece size on this grid: small runs are spread over every block (a 1 MiB run in 32 KiB
// pieces would leave most of the GPU idle and take four vector latencies per thread), large ones
// go in MORI_IO_RUN_PIECE pieces.
__device__ __forceinline__ unsigned long long run_piece(unsigned long long size) {
  unsigned long long piece = (size + gridDim.x - 1) / gridDim.x;
  piece = (piece + MORI_IO_RUN_MIN_PIECE - 1) / MORI_IO_RUN_MIN_PIECE * MORI_IO_RUN_MIN_PIECE;
  return piece < MORI_IO_RUN_PIECE ? piece : MORI_IO_RUN_PIECE;
}

// Block blockIdx.x's share of a run: pieces blockIdx.x, blockIdx.x + gridDim.x, ...
__device__ __forceinline__ void copy_run_share(unsigned long long dst, unsigned long long src,
                                               unsigned long long size) {
  const unsigned long long piece = run_piece(size);
  const unsigned long long pieces = (size + piece - 1) / piece;
  for (unsigned long long p = blockIdx.x; p < pieces; p += gridDim.x) {
    const unsigned long long at = p * piece;
    const unsigned long long n = size - at < piece ? size - at : piece;
    copy_block(reinterpret_cast<char*>(dst + at), reinterpret_cast<const char*>(src + at), n);
  }
}

// The last block to finish publishes `seq` to the host. After the block barrier, thread 0 counts
// the block in with a GPU-scope release (cumulative over the stores the barrier ordered before
// it, as in cooperative groups' grid sync); the last block's acquire of that count and then its
// one system-scope fence order every block's stores (the destination may be a peer GPU's memory)
// before the flag. A system fence in every block, let alone every thread, measured 0.6-0.9 us
// slower per transfer. The last block resets the counter for the slot's next use before
// publishing. A null flag means the host waits on an event instead.
__device__ __forceinline__ void signal_done(unsigned int* arrivals, unsigned long long* flag,
                                            unsigned long long seq) {
  if (flag == nullptr) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned int before;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(before) : "l"(arrivals) : "memory");
  if (before == gridDim.x - 1) {
    *reinterpret_cast<volatile unsigned int*>(arrivals) = 0;
    __threadfence_system();
    *reinterpret_cast<volatile unsigned long long*>(flag) = seq;
  }
}

extern "C" __global__ void __launch_bounds__(512)
    mori_io_copy_batch(const CopyDesc* descs, unsigned int count, unsigned int* arrivals, unsigned long long* flag,
                       unsigned long long seq) {
  for (unsigned int d = blockIdx.x; d < count; d += gridDim.x) {
    const CopyDesc c = descs[d];
    copy_block(reinterpret_cast<char*>(c.dst), reinterpret_cast<const char*>(c.src), c.size);
  }
  signal_done(arrivals, flag, seq);
}

extern "C" __global__ void __launch_bounds__(512)
    mori_io_copy_run(unsigned long long dst, unsigned long long src, unsigned long long size, unsigned int* arrivals,
                     unsigned long long* flag, unsigned long long seq) {
  copy_run_share(dst, src, size);
  signal_done(arrivals, flag, seq);
}

// ---- the resident copier -------------------------------------------------------------------
// A kernel that stays on the GPU while transfers keep coming and takes each one-run transfer from
// a ring in host-mapped memory, so posting a transfer costs a few stores instead of a launch
// (about 5 us under MPS). Block 0 polls the ring, copies the descriptor into device memory and
// releases the ticket to the other blocks there: loads of host memory cross PCIe one by one
// (about a microsecond each), so only block 0 makes them. All blocks copy their pieces; the last
// block to finish writes the entry's done word. After idle_ns without a ticket (or when the host
// asks it to quit) the kernel leaves, agreeing with the host through the state word which of them
// owns the next ticket (resident.cpp posts, then reads the state; the kernel announces LEAVING,
// then re-reads the ticket: one of them always sees the other).

struct ResidentEntry {  // 64 bytes, one cache line; mirrors resident.hpp
  unsigned long long dst;
  unsigned long long src;
  unsigned long long size;
  unsigned long long ticket;  // host: ticket + 1 once the fields above are written
  unsigned long long done;    // kernel: ticket + 1 once the bytes are copied
  unsigned long long pad[3];
};

#define MORI_IO_RESIDENT_STOPPED 0ull
#define MORI_IO_RESIDENT_RUNNING 1ull
#define MORI_IO_RESIDENT_LEAVING 2ull

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ld_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_volatile(unsigned long long* p, unsigned long long v) {
  *reinterpret_cast<volatile unsigned long long*>(p) = v;
}
__device__ __forceinline__ unsigned long long ld_volatile(const unsigned long long* p) {
  return *reinterpret_cast<const volatile unsigned long long*>(p);
}
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block 0's wait for ticket t; false when the kernel leaves instead. control[0] is the state,
// control[1] the host's quit request. On success the descriptor is in `mailbox` (device memory).
__device__ bool lead_wait(ResidentEntry* e, unsigned long long t, unsigned long long* control,
                          unsigned long long* released, unsigned long long* stop_word, unsigned long long generation,
                          unsigned long long idle_ns, unsigned long long* mailbox) {
  unsigned long long idle_since = 0;
  for (unsigned int spin = 1;; ++spin) {
    if (ld_acquire_sys(&e->ticket) == t + 1) {
      unsigned long long dst, src;  // one 16-byte load: each load of host memory is a PCIe round trip
      asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(dst), "=l"(src) : "l"(&e->dst) : "memory");
      mailbox[0] = dst;
      mailbox[1] = src;
      mailbox[2] = ld_volatile(&e->size);
      st_release_gpu(released, t + 1);
      return true;
    }
    if (spin % 16 != 0) continue;
    const unsigned long long now = global_ns();
    if (idle_since == 0) idle_since = now;
    const bool quit = ld_volatile(&control[1]) != 0;
    if (!quit && now - idle_since < idle_ns) continue;
    st_volatile(&control[0], MORI_IO_RESIDENT_LEAVING);
    __threadfence_system();
    if (!quit && ld_acquire_sys(&e->ticket) == t + 1) {  // posted meanwhile: the host waits for us
      st_volatile(&control[0], MORI_IO_RESIDENT_RUNNING);
      idle_since = 0;
      continue;  // takes it above
    }
    st_volatile(stop_word, generation);
    __threadfence_system();
    st_volatile(&control[0], MORI_IO_RESIDENT_STOPPED);
    return false;
  }
}

// The other blocks' wait: for block 0 to release ticket t, or to announce that the kernel leaves.
__device__ bool follow_wait(unsigned long long t, const unsigned long long* released,
                            const unsigned long long* stop_word, unsigned long long generation) {
  for (;;) {
    if (ld_acquire_gpu(released) >= t + 1) return true;
    if (ld_volatile(stop_word) == generation) return false;
    __nanosleep(64);
  }
}

extern "C" __global__ void __launch_bounds__(512)
    mori_io_copy_resident(ResidentEntry* entries, unsigned long long* control, unsigned long long* released,
                          unsigned long long* stop_word, unsigned int* arrivals, unsigned int capacity,
                          unsigned long long* mailboxes, unsigned long long first_ticket,
                          unsigned long long generation, unsigned long long idle_ns) {
  __shared__ bool go;
  __shared__ unsigned long long dst, src, size;
  for (unsigned long long t = first_ticket;; ++t) {
    ResidentEntry* e = entries + t % capacity;
    unsigned long long* mailbox = mailboxes + 3 * (t % capacity);  // reused once ticket t is done
    if (threadIdx.x == 0) {
      go = blockIdx.x == 0 ? lead_wait(e, t, control, released, stop_word, generation, idle_ns, mailbox)
                           : follow_wait(t, released, stop_word, generation);
      if (go) {
        dst = ld_volatile(&mailbox[0]);
        src = ld_volatile(&mailbox[1]);
        size = ld_volatile(&mailbox[2]);
      }
    }
    __syncthreads();
    if (!go) return;
    copy_run_share(dst, src, size);
    signal_done(arrivals + t % capacity, &e->done, t + 1);
    __syncthreads();  // go and the descriptor are rewritten for the next ticket
  }
}
