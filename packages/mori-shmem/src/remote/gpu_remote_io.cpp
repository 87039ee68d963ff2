// SPDX-License-Identifier: MIT
#include "remote/gpu_remote_io.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rma_apply.hpp"

namespace mori::shmem::remote {

namespace {

// NOTE [staging pipeline]. Outbound: 8 MiB in 4 slots, a window of a transfer at a time, each on
// the wire as its pieces land (NOTE [streamed staging]). Inbound: 2 MiB in 4 slots for each connection
// being served (a TCP stream, which the conduit stripes transfers of 512 KiB and more over), at
// most 8 such sets at once. (Slots of 128 KiB, 8 to a set, were slower on the GPU: 9-12 % less
// proxy throughput at 1-16 MiB, docs/benchmarks/shmem.md.)
constexpr size_t kOutboundSlots = 4, kOutboundSlotBytes = 2 << 20;
constexpr size_t kInboundSlots = 4, kInboundSlotBytes = 512 << 10, kInboundSets = 8;

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

GpuRemoteIo::GpuRemoteIo(const cuda::DeviceContext& context, uint8_t* heap_base, uint64_t heap_size)
    : context_(context),
      heap_(heap_base),
      heap_size_(heap_size),
      inbound_(context, kInboundSlots, kInboundSlotBytes, kInboundSets),
      outbound_(context, kOutboundSlots, kOutboundSlotBytes),
      answer_(context, 64) {
  const std::string ptx = ".version 7.0\n.target sm_70\n.address_size 64\n" + amo_kernel(32) + amo_kernel(64);
  const cuda::Driver& d = cuda::driver();
  const cuda::DeviceContext::WorkScope work(context_);  // launch_single runs it there
  cuda::check(d.cuModuleLoadData(&module_, ptx.c_str()), "cuModuleLoadData", "loading the remote-atomic kernel");
  cuda::check(d.cuModuleGetFunction(&amo32_, module_, "mori_shmem_amo_b32"), "cuModuleGetFunction",
              "finding the remote-atomic kernel");
  cuda::check(d.cuModuleGetFunction(&amo64_, module_, "mori_shmem_amo_b64"), "cuModuleGetFunction",
              "finding the remote-atomic kernel");
}

GpuRemoteIo::~GpuRemoteIo() {
  const std::string times = times_.summary();
  if (!times.empty()) log::emit(log::Level::Debug, "remote transport staging: ", times);
  if (module_ == nullptr) return;
  try {
    const cuda::DeviceContext::WorkScope work(context_);
    cuda::driver().cuModuleUnload(module_);
  } catch (const std::exception& e) {
    log::emit(log::Level::Warning, "remote transport: could not unload the remote-atomic kernel: ", e.what());
  }
}

void GpuRemoteIo::receive(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) {
  const StagingPool::Lease slots = inbound_.take(deadline);
  slots->receive_into(
      heap_ + offset, length,
      [&](uint8_t* host, uint64_t, size_t bytes) { socket.recv_all(host, bytes, deadline, "a put's payload"); },
      times_, {kInCopy, kInWire});
}

void GpuRemoteIo::send(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) {
  const StagingPool::Lease slots = inbound_.take(deadline);
  slots->send_from(
      heap_ + offset, length,
      [&](const uint8_t* host, uint64_t, size_t bytes) { socket.send_all(host, bytes, deadline, "a get's data"); },
      times_, {kInCopy, kInWire});
}

void GpuRemoteIo::receive_signalled(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline,
                                    uint64_t signal_offset, uint64_t value, int sig_op) {
  if (sig_op != MORI_SHMEM_SIGNAL_SET || length > kInboundSlotBytes) {
    HeapAccess::receive_signalled(socket, offset, length, deadline, signal_offset, value, sig_op);
    return;
  }
  const StagingPool::Lease slots = inbound_.take(deadline);
  slots->receive_then_set(
      heap_ + offset, length,
      [&](uint8_t* host, uint64_t, size_t bytes) { socket.recv_all(host, bytes, deadline, "a put's payload"); },
      heap_ + signal_offset, value, times_, {kInCopy, kInWire});
}

void GpuRemoteIo::signal(uint64_t offset, uint64_t value, int sig_op) {
  rma::check_signal_op(sig_op);
  // Both come after every copy into the heap that came before them: receive() returns once its
  // staging copies are done, and the PE's stream orders the rest. A set is
  // a fenced stream write, which needs no SM: the waiter may be one of the grids that fill them
  // (PEs sharing a GPU). An add needs the atomic kernel.
  if (sig_op == MORI_SHMEM_SIGNAL_SET) {
    std::lock_guard<std::mutex> lock(word_mutex_);
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
  std::lock_guard<std::mutex> lock(word_mutex_);
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

void GpuRemoteIo::put(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes,
                      const std::function<void()>& on_staged) {
  std::lock_guard<std::mutex> lock(outbound_mutex_);
  outbound_.send_streamed(
      static_cast<const uint8_t*>(local), nbytes, [&](size_t bytes) { return conduit.stripe_bytes(pe, bytes); },
      [&](const uint8_t* host, uint64_t begin, size_t bytes, const Staged& staged) {
        conduit.put_staged(pe, offset + begin, host, bytes, staged);
      },
      times_, {kOutCopy, kOutWire}, on_staged);
  if (nbytes == 0 && on_staged) on_staged();
}

void GpuRemoteIo::get(Conduit& conduit, int pe, uint64_t offset, void* local, size_t nbytes) {
  std::lock_guard<std::mutex> lock(outbound_mutex_);
  outbound_.receive_into(
      static_cast<uint8_t*>(local), nbytes,
      [&](uint8_t* host, uint64_t begin, size_t bytes) { conduit.get(pe, offset + begin, host, bytes); },
      times_, {kOutCopy, kOutWire});
}

void GpuRemoteIo::put_signal(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes,
                             uint64_t signal_offset, uint64_t signal, int sig_op,
                             const std::function<void()>& on_staged) {
  // Windows of the staging slots: every one but the last goes as a plain put, then a quiet
  // completes them at the target before the last travels with the signal (which may not overtake
  // data sent on another stream).
  std::lock_guard<std::mutex> lock(outbound_mutex_);
  if (nbytes == 0) {
    if (on_staged) on_staged();
    conduit.put_signal(pe, offset, nullptr, 0, signal_offset, signal, sig_op);
    return;
  }
  outbound_.send_streamed(
      static_cast<const uint8_t*>(local), nbytes, [&](size_t bytes) { return conduit.stripe_bytes(pe, bytes); },
      [&](const uint8_t* host, uint64_t begin, size_t bytes, const Staged& staged) {
        if (begin + bytes < nbytes) {
          conduit.put_staged(pe, offset + begin, host, bytes, staged);
          return;
        }
        if (begin > 0) conduit.quiet();
        conduit.put_signal_staged(pe, offset + begin, host, bytes, signal_offset, signal, sig_op, staged);
      },
      times_, {kOutCopy, kOutWire}, on_staged);
}

}  // namespace mori::shmem::remote
