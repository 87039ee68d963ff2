// SPDX-License-Identifier: MIT
#include "remote/gpu_remote_io.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/host_rma.hpp"

namespace mori::shmem::remote {

namespace {

// A chunk: the copy of one overlaps the socket transfer of the next, so the first and last copies
// are the only ones a transfer waits for. A transfer is cut into about four chunks, from 256 KiB
// (below, a copy's fixed cost outweighs the overlap) to 4 MiB (near the link's rate); a lane
// holds two of the largest.
constexpr size_t kChunkBytes = 4 << 20;
constexpr size_t kMinChunkBytes = 256 << 10;

size_t chunk_for(uint64_t nbytes) {
  const uint64_t quarter = (nbytes / 4 + 4095) & ~uint64_t(4095);
  return size_t(std::min<uint64_t>(kChunkBytes, std::max<uint64_t>(kMinChunkBytes, quarter)));
}
// Lanes in flight at once: a PE serving its peers' streams and putting on its own. The first two
// are made at init: a PE's own transfers and one peer's then never allocate.
constexpr size_t kMaxLanes = 8;
constexpr size_t kInitialLanes = 2;

// mori_shmem_amo_b32 / _b64(addr, op, value, compare, out): *out = the old value of the word at
// addr after applying op (0 load, 1 store, 2 add, 3 and, 4 or, 5 xor, 6 exchange, 7 compare-and-
// swap), all at system scope. One thread; the caller synchronises.
std::string amo_kernel(int bits) {
  const std::string b = "b" + std::to_string(bits), u = "u" + std::to_string(bits);
  std::string ptx = ".visible .entry mori_shmem_amo_" + b + "(.param .u64 p_addr, .param .u32 p_op, .param ." + b +
                    " p_value, .param ." + b + " p_compare, .param .u64 p_out)\n{\n"
                    "  .reg .pred %p<8>;\n  .reg .u64 %addr, %out;\n  .reg .u32 %op;\n  .reg ." + b +
                    " %v, %c, %r;\n"
                    "  ld.param.u64 %addr, [p_addr];\n  ld.param.u32 %op, [p_op];\n"
                    "  ld.param." + b + " %v, [p_value];\n  ld.param." + b + " %c, [p_compare];\n"
                    "  ld.param.u64 %out, [p_out];\n  mov." + b + " %r, 0;\n";
  const char* ops[] = {"ld.acquire.sys.global.B %r, [%addr];",
                       "st.release.sys.global.B [%addr], %v;",
                       "atom.sys.global.add.U %r, [%addr], %v;",
                       "atom.sys.global.and.B %r, [%addr], %v;",
                       "atom.sys.global.or.B %r, [%addr], %v;",
                       "atom.sys.global.xor.B %r, [%addr], %v;",
                       "atom.sys.global.exch.B %r, [%addr], %v;",
                       "atom.sys.global.cas.B %r, [%addr], %c, %v;"};
  for (int i = 0; i < 8; ++i) {
    std::string op = ops[i];
    op.replace(op.find(i == 2 ? ".U" : ".B"), 2, "." + (i == 2 ? u : b));
    ptx += "  setp.eq.u32 %p" + std::to_string(i) + ", %op, " + std::to_string(i) + ";\n  @%p" +
           std::to_string(i) + " " + op + "\n";
  }
  ptx += "  st.global." + b + " [%out], %r;\n  membar.sys;\n  ret;\n}\n";
  return ptx;
}

// MORI_SHMEM_AMO_* -> (kernel op, operand) for the kernel above.
int kernel_op(int amo, uint64_t* value) {
  switch (amo) {
    case MORI_SHMEM_AMO_FETCH: return 0;
    case MORI_SHMEM_AMO_SET:
    case MORI_SHMEM_SIGNAL_SET: return 1;
    case MORI_SHMEM_AMO_INC:
    case MORI_SHMEM_AMO_FETCH_INC: *value = 1; return 2;
    case MORI_SHMEM_AMO_ADD:
    case MORI_SHMEM_SIGNAL_ADD:
    case MORI_SHMEM_AMO_FETCH_ADD: return 2;
    case MORI_SHMEM_AMO_AND:
    case MORI_SHMEM_AMO_FETCH_AND: return 3;
    case MORI_SHMEM_AMO_OR:
    case MORI_SHMEM_AMO_FETCH_OR: return 4;
    case MORI_SHMEM_AMO_XOR:
    case MORI_SHMEM_AMO_FETCH_XOR: return 5;
    case MORI_SHMEM_AMO_SWAP: return 6;
    case MORI_SHMEM_AMO_COMPARE_SWAP: return 7;
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "amo=", amo, " is not an atomic operation code");
}

}  // namespace

PinnedBuffer::PinnedBuffer(const cuda::DeviceContext& context, size_t bytes) : size_(bytes) {
  const cuda::Driver& d = cuda::driver();
  context.bind();
  const cuda::RelaxedCapture relaxed;  // lanes are made on first need, which may fall in a capture
  void* host = nullptr;
  cuda::check(d.cuMemHostAlloc(&host, bytes, cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
              "cuMemHostAlloc", "allocating pinned staging memory for the remote transport");
  host_ = static_cast<uint8_t*>(host);
  cuda::CUdeviceptr device = 0;
  const cuda::CUresult mapped = d.cuMemHostGetDevicePointer(&device, host, 0);
  if (mapped != cuda::kSuccess) {
    d.cuMemFreeHost(host);
    cuda::check(mapped, "cuMemHostGetDevicePointer", "mapping pinned memory into the GPU");
  }
  device_ = device;
}

PinnedBuffer::~PinnedBuffer() {
  if (host_ != nullptr) cuda::driver().cuMemFreeHost(host_);
}

StagingLane::StagingLane(const cuda::DeviceContext& context, size_t half)
    : half_bytes(half),
      buffer(context, 2 * half),
      streams{cuda::CopyStream(context), cuda::CopyStream(context)} {}

StagingLanes::StagingLanes(const cuda::DeviceContext& context, size_t half_bytes, size_t max_lanes,
                           size_t initial_lanes)
    : context_(context), half_bytes_(half_bytes), max_lanes_(max_lanes) {
  for (size_t i = 0; i < initial_lanes; ++i) {
    all_.push_back(std::make_unique<StagingLane>(context_, half_bytes_));
    idle_.push_back(all_.back().get());
  }
}

StagingLanes::Lease StagingLanes::take() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!idle_.empty()) {
      StagingLane* lane = idle_.back();
      idle_.pop_back();
      return Lease(*this, lane);
    }
    if (all_.size() < max_lanes_) {
      all_.push_back(std::make_unique<StagingLane>(context_, half_bytes_));
      return Lease(*this, all_.back().get());
    }
    // Every lane is busy moving bytes, each bounded by its own socket deadline.
    freed_.wait(lock);
  }
}

void StagingLanes::give_back(StagingLane* lane) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(lane);
  }
  freed_.notify_one();
}

GpuRemoteIo::GpuRemoteIo(const cuda::DeviceContext& context, uint8_t* heap_base, uint64_t heap_size)
    : context_(context),
      heap_(heap_base),
      heap_size_(heap_size),
      lanes_(context, kChunkBytes, kMaxLanes, kInitialLanes),
      answer_(context, 64) {
  const std::string ptx = ".version 7.0\n.target sm_70\n.address_size 64\n" + amo_kernel(32) + amo_kernel(64);
  const cuda::Driver& d = cuda::driver();
  context_.bind();
  cuda::check(d.cuModuleLoadData(&module_, ptx.c_str()), "cuModuleLoadData", "loading the remote-atomic kernel");
  cuda::check(d.cuModuleGetFunction(&amo32_, module_, "mori_shmem_amo_b32"), "cuModuleGetFunction",
              "finding the remote-atomic kernel");
  cuda::check(d.cuModuleGetFunction(&amo64_, module_, "mori_shmem_amo_b64"), "cuModuleGetFunction",
              "finding the remote-atomic kernel");
}

GpuRemoteIo::~GpuRemoteIo() {
  if (module_ != nullptr) {
    context_.bind();
    cuda::driver().cuModuleUnload(module_);
  }
}

void GpuRemoteIo::receive_staged(StagingLane& lane, Socket& socket, uint64_t offset, uint64_t length,
                                 const Deadline& deadline, int* last) {
  const size_t step = chunk_for(length);
  int half = 0;
  for (uint64_t done = 0; done < length; half ^= 1) {
    const size_t chunk = std::min<uint64_t>(step, length - done);
    lane.streams[half].synchronize();  // the copy out of this half, two chunks ago, is done
    socket.recv_all(lane.half(half), chunk, deadline, "a put's payload");
    lane.streams[half].copy_async(heap_ + offset + done, lane.half(half), chunk);
    *last = half;
    done += chunk;
  }
  lane.streams[half].synchronize();  // the other half: every chunk but the last is in place
}

void GpuRemoteIo::receive(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) {
  auto lane = lanes_.take();
  int last = 0;
  receive_staged(*lane, socket, offset, length, deadline, &last);
  lane->streams[last].synchronize();
}

void GpuRemoteIo::receive_then_signal(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline,
                                      uint64_t signal_offset, uint64_t value, int sig_op) {
  rma::check_signal_op(sig_op);
  if (sig_op != MORI_SHMEM_SIGNAL_SET) {
    receive(socket, offset, length, deadline);
    signal(signal_offset, value, sig_op);
    return;
  }
  // The set follows the last chunk's copy on its stream: one wait for both.
  auto lane = lanes_.take();
  int last = 0;
  receive_staged(*lane, socket, offset, length, deadline, &last);
  lane->streams[last].write_word_async(heap_ + signal_offset, value);
  lane->streams[last].synchronize();
}

template <typename SendChunk>
void GpuRemoteIo::send_staged(const uint8_t* local, size_t nbytes, SendChunk&& send_chunk) {
  auto lane = lanes_.take();
  const size_t step = chunk_for(nbytes);
  lane->streams[0].copy_async(lane->half(0), local, std::min(step, nbytes));
  int half = 0;
  for (size_t done = 0; done < nbytes; half ^= 1) {
    const size_t chunk = std::min(step, nbytes - done);
    lane->streams[half].synchronize();
    const size_t next = done + chunk;
    if (next < nbytes) lane->streams[half ^ 1].copy_async(lane->half(half ^ 1), local + next, std::min(step, nbytes - next));
    send_chunk(lane->half(half), done, chunk);
    done = next;
  }
}

void GpuRemoteIo::send(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) {
  send_staged(heap_ + offset, length, [&](const uint8_t* staged, size_t, size_t chunk) {
    socket.send_all(staged, chunk, deadline, "a get's data");
  });
}

void GpuRemoteIo::signal(uint64_t offset, uint64_t value, int sig_op) {
  rma::check_signal_op(sig_op);
  // Both come after every copy into the heap that came before them (receive returns once its
  // copies are done). A set is a fenced stream write, which needs no SM: the waiter may be one of
  // the grids that fill them (PEs sharing a GPU). An add needs the atomic kernel.
  if (sig_op == MORI_SHMEM_SIGNAL_SET) {
    context_.write_word(heap_ + offset, value);  // the conduit checked it is an aligned heap word
    return;
  }
  amo(offset, sig_op, MORI_SHMEM_TYPE_UINT64, value, 0);
}

uint64_t GpuRemoteIo::amo(uint64_t offset, int amo_code, int type, uint64_t value, uint64_t compare) {
  const size_t width = rma::amo_width(type);
  unsigned op = static_cast<unsigned>(kernel_op(amo_code, &value));
  uint64_t address = reinterpret_cast<uint64_t>(heap_ + offset);
  uint64_t out = answer_.device();
  std::lock_guard<std::mutex> lock(amo_mutex_);  // one answer word
  if (width == 4) {
    uint32_t v = static_cast<uint32_t>(value), c = static_cast<uint32_t>(compare);
    void* params[] = {&address, &op, &v, &c, &out};
    context_.launch_single(amo32_, params);
    const uint32_t old = *reinterpret_cast<volatile uint32_t*>(answer_.host());
    return type == MORI_SHMEM_TYPE_INT32 ? static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(old)))
                                         : old;
  }
  void* params[] = {&address, &op, &value, &compare, &out};
  context_.launch_single(amo64_, params);
  return *reinterpret_cast<volatile uint64_t*>(answer_.host());
}

void GpuRemoteIo::put(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes) {
  send_staged(static_cast<const uint8_t*>(local), nbytes, [&](const uint8_t* staged, size_t begin, size_t chunk) {
    conduit.put(pe, offset + begin, staged, chunk);  // returns once the bytes are sent
  });
}

void GpuRemoteIo::get(Conduit& conduit, int pe, uint64_t offset, void* local, size_t nbytes) {
  auto lane = lanes_.take();
  uint8_t* dest = static_cast<uint8_t*>(local);
  const size_t step = chunk_for(nbytes);
  int half = 0;
  for (size_t done = 0; done < nbytes; half ^= 1) {
    const size_t chunk = std::min(step, nbytes - done);
    lane->streams[half].synchronize();  // this half's copy out, two chunks ago, is done
    conduit.get(pe, offset + done, lane->half(half), chunk);
    lane->streams[half].copy_async(dest + done, lane->half(half), chunk);
    done += chunk;
  }
  lane->streams[0].synchronize();
  lane->streams[1].synchronize();
}

void GpuRemoteIo::put_signal(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes,
                             uint64_t signal_offset, uint64_t signal, int sig_op) {
  // All but the last chunk go as plain puts, which quiet completes before the last chunk travels
  // with the signal: the signal may not overtake data on another stream.
  if (nbytes == 0) {
    conduit.put_signal(pe, offset, local, 0, signal_offset, signal, sig_op);
    return;
  }
  const size_t last = nbytes > kChunkBytes ? nbytes - (nbytes - 1) % kChunkBytes - 1 : 0;
  if (last > 0) {
    put(conduit, pe, offset, local, last);
    conduit.quiet();
  }
  // The rest travels as one request (one stream, the signal applied after its bytes): staged whole.
  auto lane = lanes_.take();
  lane->streams[0].copy_async(lane->half(0), static_cast<const uint8_t*>(local) + last, nbytes - last);
  lane->streams[0].synchronize();
  conduit.put_signal(pe, offset + last, lane->half(0), nbytes - last, signal_offset, signal, sig_op);
}

}  // namespace mori::shmem::remote
