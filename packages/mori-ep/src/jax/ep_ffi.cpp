// SPDX-License-Identifier: MIT
//
// mori.jax: EP dispatch and combine as one XLA FFI custom call target, "mori_ep" (MORI's name), for
// the CPU platform (the cpu backend's host code, reached through _C's C entry point
// mori_ep_cpu_run) and the CUDA platform (the JIT-compiled EP kernels, launched on XLA's stream
// through the CUDA driver). mori/jax/ffi_build.py compiles this file at first use against the
// installed jaxlib's FFI headers.
//
// Which op a call runs is found by its "ep_config" attribute (MORI's packed config): Python
// registers each mori.jax op under that key (mori_jax_register_op) with the op's fixed launch
// arguments, and the instantiate stage of every call site looks it up once (MORI's State pattern).
// Per call, the handler fills in the buffers XLA passes, runs the same steps as
// EpDispatchCombineOp (mori/ep/op.py), and copies the op's output rows from its symmetric region
// into XLA's result buffers.
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ep_args.h"
#include "mori/cuda_driver.hpp"
#include "xla/ffi/api/ffi.h"

#if XLA_FFI_API_MAJOR != 0 || XLA_FFI_API_MINOR < 2
#error "mori.jax needs XLA FFI API 0.2 or newer (mori-ep[jax] asks for jax >= 0.10)"
#endif

namespace ffi = xla::ffi;

// XLA's stream on the CUDA platform is a CUstream (the driver header's mirror: no CUDA header needed).
using mori::common::cuda::CUstream;

namespace {

// mori_ep_cpu_run's steps (src/c_abi.cpp).
enum Step { kDispatch = 0, kCombine = 1, kNetDispatchSend = 2, kNetDispatchRecv = 3, kNetCombineSend = 4, kNetCombineRecv = 5 };
using CpuRun = int (*)(int, const mori_ep_args_t*, int, int, char*, size_t);

constexpr int kMaxDtype = 8;

// What Python registers per op (mori/jax/registry.py mirrors it).
struct OpSpec {
  int32_t on_cuda;     // 0: cpu backend, 1: cuda backend
  int32_t inter_node;  // the inter-node kernel types: send then receive halves
  int32_t quant;       // combine wire format (MORI_EP_QUANT_*)
  int32_t pad_;
  uint64_t cpu_run;    // mori_ep_cpu_run
  uint64_t dispatch_kernel;              // CUfunction mori_ep_dispatch (cuda)
  uint64_t combine_stage[kMaxDtype];     // CUfunction mori_ep_combine_stage per dtype code (cuda)
  uint64_t combine_kernel[kMaxDtype];    // CUfunction mori_ep_combine per dtype code (cuda)
};

struct Op {
  mori_ep_args_t base;
  OpSpec spec;
};

std::mutex g_mutex;
std::unordered_map<std::string, std::shared_ptr<Op>> g_ops;

std::string KeyOf(const int32_t* words, int64_t count) {
  return std::string(reinterpret_cast<const char*>(words), static_cast<size_t>(count) * sizeof(int32_t));
}

// ---- CUDA driver: the shared loader of the root package (never linked: the CPU platform needs
// no CUDA). Empty when the driver is usable, else why not.
const std::string& CudaDriverFailure() { return mori::common::cuda::loaded().failure; }

// ---- the per-call arguments ------------------------------------------------------------------

int DtypeCode(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::BF16: return MORI_EP_DTYPE_BF16;
    case ffi::DataType::F32: return 2;
    case ffi::DataType::F16: return 3;
    case ffi::DataType::F8E4M3FN: return 4;
    case ffi::DataType::F8E4M3FNUZ: return 5;
    default: return 0;
  }
}

int64_t Align16(int64_t v) { return (v + 15) / 16 * 16; }

int64_t RowBytes(const ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  return dims.size() == 2 ? dims[1] * static_cast<int64_t>(ffi::ByteWidth(buffer.element_type())) : 0;
}

ffi::Error StepError(int code, const char* message) {
  // Prefixes that mori/jax/ops.py maps back to mori.ep's error classes.
  const char* kind = code == 1 ? "EpTimeoutError" : code == 2 ? "EpPeerLostError" : "EpError";
  return ffi::Error::Internal(std::string("mori_ep ") + kind + ": " + message);
}

// The op's error word (MORI_EP_CTRL_ERROR), read and cleared on the cpu backend after each call:
// the same check EpDispatchCombineOp._after_call makes.
ffi::Error CheckCpuError(const Op& op) {
  auto* word = reinterpret_cast<volatile uint32_t*>(op.base.region + MORI_EP_CTRL_ERROR);
  uint32_t code = *word;
  if (code == MORI_EP_OK) return ffi::Error::Success();
  *word = 0;
  switch (code) {
    case MORI_EP_ERR_TIMEOUT: return StepError(1, "a peer did not answer within MORI_EP_TIMEOUT");
    case MORI_EP_ERR_RECV_OVERFLOW:
      return ffi::Error::Internal(
          "mori_ep EpOverflowError: more rows arrived than max_num_tokens_to_recv() (raise max_total_recv_tokens); "
          "the excess rows were dropped");
    case MORI_EP_ERR_BAD_EXPERT:
      return ffi::Error::Internal("mori_ep EpInputError: indices held an expert id >= world_size * num_experts_per_rank");
    case MORI_EP_ERR_SHORT_INPUT:
      return ffi::Error::Internal("mori_ep EpInputError: combine input had fewer rows than total_recv");
    default: return StepError(3, "unknown error code in the op's control words");
  }
}

ffi::Error RunCpu(const Op& op, int step, const mori_ep_args_t& args, int dtype, int quant) {
  char message[512] = {0};
  int code = reinterpret_cast<CpuRun>(op.spec.cpu_run)(step, &args, dtype, quant, message, sizeof(message));
  if (code != 0) return StepError(code, message);
  return ffi::Error::Success();
}

// Copies `bytes` from the op's region at `offset` into an XLA result: memcpy on the host, an async
// device copy on XLA's stream on the GPU.
ffi::Error CopyOut(const Op& op, CUstream stream, void* dst, uint64_t offset, size_t bytes) {
  if (bytes == 0) return ffi::Error::Success();
  if (!op.spec.on_cuda) {
    std::memcpy(dst, reinterpret_cast<const void*>(op.base.region + offset), bytes);
    return ffi::Error::Success();
  }
  int rc = mori::common::cuda::loaded().driver.cuMemcpyDtoDAsync(reinterpret_cast<uint64_t>(dst),
                                                                  op.base.region + offset, bytes, stream);
  if (rc != 0) return ffi::Error::Internal("mori_ep EpError: cuMemcpyDtoDAsync failed: " + mori::common::cuda::describe(rc));
  return ffi::Error::Success();
}

ffi::Error Launch(uint64_t function, int grid, int block, const mori_ep_args_t& args, CUstream stream, const char* what) {
  if (function == 0) return ffi::Error::Internal(std::string("mori_ep EpError: no ") + what + " kernel loaded for this call");
  mori_ep_args_t copy = args;
  void* params[] = {&copy};
  int rc = mori::common::cuda::loaded().driver.cuLaunchKernel(
      reinterpret_cast<mori::common::cuda::CUfunction>(function), grid, 1, 1, block, 1, 1, 0, stream, params, nullptr);
  if (rc != 0) return ffi::Error::Internal(std::string("mori_ep EpError: launching ") + what + " failed: " + mori::common::cuda::describe(rc));
  return ffi::Error::Success();
}

template <class T>
ffi::ErrorOr<T> Attr(const ffi::Dictionary& attrs, const char* name) {
  auto value = attrs.get<T>(name);
  if (value.has_error()) return ffi::Unexpected(ffi::Error::InvalidArgument(std::string("mori_ep: attribute ") + name + " is missing or mistyped"));
  return value.value();
}

#define MORI_TRY(decl, expr)            \
  auto decl##_or = (expr);              \
  if (decl##_or.has_error()) return decl##_or.error(); \
  auto decl = decl##_or.value()

// Arguments: input [N, H], indices [N, K] int32, then weights [N, K] f32 when has_weights, scales
// [N, S] when has_scales. Results: out [R, H], out_indices [R, K], total_recv [], then out_weights
// [R, K] and out_scales [R, S] when given (MORI's order).
ffi::Error Dispatch(const Op& op, CUstream stream, const ffi::Dictionary& attrs, ffi::RemainingArgs args,
                    ffi::RemainingRets rets) {
  MORI_TRY(has_weights, Attr<int32_t>(attrs, "has_weights"));
  MORI_TRY(has_scales, Attr<int32_t>(attrs, "has_scales"));
  MORI_TRY(grid, Attr<int32_t>(attrs, "grid"));
  MORI_TRY(block, Attr<int32_t>(attrs, "block"));
  MORI_TRY(input, args.get<ffi::AnyBuffer>(0));
  MORI_TRY(indices, args.get<ffi::AnyBuffer>(1));
  MORI_TRY(out, rets.get<ffi::AnyBuffer>(0));
  MORI_TRY(out_indices, rets.get<ffi::AnyBuffer>(1));
  MORI_TRY(total, rets.get<ffi::AnyBuffer>(2));

  mori_ep_args_t a = op.base;
  a.input = reinterpret_cast<uint64_t>(input.untyped_data());
  a.indices = reinterpret_cast<uint64_t>(indices.untyped_data());
  a.num_tokens = static_cast<int32_t>(input.dimensions()[0]);
  a.hidden = static_cast<int32_t>(input.dimensions()[1]);
  a.row_bytes = a.wire_row_bytes = static_cast<int32_t>(RowBytes(input));
  int flags = 0;
  size_t next = 2;
  if (has_weights) {
    MORI_TRY(weights, args.get<ffi::AnyBuffer>(next++));
    a.weights = reinterpret_cast<uint64_t>(weights.untyped_data());
    flags |= MORI_EP_HAS_WEIGHTS;
  }
  if (has_scales) {
    MORI_TRY(scales, args.get<ffi::AnyBuffer>(next++));
    a.scales = reinterpret_cast<uint64_t>(scales.untyped_data());
    a.scale_bytes = static_cast<int32_t>(RowBytes(scales));
    flags |= MORI_EP_HAS_SCALES;
  }
  a.flags = flags;

  if (op.spec.on_cuda) {
    if (!CudaDriverFailure().empty()) return ffi::Error::Internal("mori_ep EpError: " + CudaDriverFailure());
    if (auto e = Launch(op.spec.dispatch_kernel, grid, block, a, stream, "mori_ep_dispatch"); e.failure()) return e;
  } else if (op.spec.inter_node) {
    a.record_bytes = static_cast<int32_t>(Align16(Align16(a.row_bytes) + 8 * a.topk + a.scale_bytes + 4));
    if (auto e = RunCpu(op, kNetDispatchSend, a, 0, 0); e.failure()) return e;
    if (auto e = RunCpu(op, kNetDispatchRecv, a, 0, 0); e.failure()) return e;
    if (auto e = CheckCpuError(op); e.failure()) return e;
  } else {
    if (auto e = RunCpu(op, kDispatch, a, 0, 0); e.failure()) return e;
    if (auto e = CheckCpuError(op); e.failure()) return e;
  }

  if (auto e = CopyOut(op, stream, out->untyped_data(), op.base.off_disp_tokens, out->size_bytes()); e.failure()) return e;
  if (auto e = CopyOut(op, stream, out_indices->untyped_data(), op.base.off_disp_indices, out_indices->size_bytes()); e.failure()) return e;
  if (auto e = CopyOut(op, stream, total->untyped_data(), MORI_EP_CTRL_TOTAL_RECV, sizeof(int32_t)); e.failure()) return e;
  size_t ret = 3;
  if (has_weights) {
    MORI_TRY(out_weights, rets.get<ffi::AnyBuffer>(ret++));
    if (auto e = CopyOut(op, stream, out_weights->untyped_data(), op.base.off_disp_weights, out_weights->size_bytes()); e.failure()) return e;
  }
  if (has_scales) {
    MORI_TRY(out_scales, rets.get<ffi::AnyBuffer>(ret++));
    if (auto e = CopyOut(op, stream, out_scales->untyped_data(), op.base.off_disp_scales, out_scales->size_bytes()); e.failure()) return e;
  }
  return ffi::Error::Success();
}

// Arguments: input [R', H] (the expert outputs of the received rows), indices [N, K] int32 (this
// PE's routing of the dispatch), then weights [R', K] f32 when has_weights. Results: out [M, H],
// then out_weights [M, K] when has_weights.
ffi::Error Combine(const Op& op, CUstream stream, const ffi::Dictionary& attrs, ffi::RemainingArgs args,
                   ffi::RemainingRets rets) {
  MORI_TRY(has_weights, Attr<int32_t>(attrs, "has_weights"));
  MORI_TRY(grid, Attr<int32_t>(attrs, "grid"));
  MORI_TRY(block, Attr<int32_t>(attrs, "block"));
  MORI_TRY(stage_grid, Attr<int32_t>(attrs, "stage_grid"));
  MORI_TRY(input, args.get<ffi::AnyBuffer>(0));
  MORI_TRY(indices, args.get<ffi::AnyBuffer>(1));
  MORI_TRY(out, rets.get<ffi::AnyBuffer>(0));
  int dtype = DtypeCode(input.element_type());
  if (dtype == 0 || dtype >= kMaxDtype) return ffi::Error::InvalidArgument("mori_ep EpInputError: combine input dtype is not supported");

  mori_ep_args_t a = op.base;
  a.num_tokens = static_cast<int32_t>(indices.dimensions()[0]);
  a.hidden = static_cast<int32_t>(input.dimensions()[1]);
  a.row_bytes = static_cast<int32_t>(RowBytes(input));
  a.wire_row_bytes = op.spec.quant != MORI_EP_QUANT_NONE ? a.hidden : a.row_bytes;
  a.input_rows = static_cast<int32_t>(input.dimensions()[0]);
  a.input = reinterpret_cast<uint64_t>(input.untyped_data());
  int flags = MORI_EP_EXTERNAL_INPUT;
  if (has_weights) {
    MORI_TRY(weights, args.get<ffi::AnyBuffer>(2));
    a.weights = reinterpret_cast<uint64_t>(weights.untyped_data());
    flags |= MORI_EP_HAS_WEIGHTS;
  }
  a.flags = flags;

  if (op.spec.on_cuda) {
    if (!CudaDriverFailure().empty()) return ffi::Error::Internal("mori_ep EpError: " + CudaDriverFailure());
    if (auto e = Launch(op.spec.combine_stage[dtype], stage_grid, block, a, stream, "mori_ep_combine_stage"); e.failure()) return e;
    if (auto e = Launch(op.spec.combine_kernel[dtype], grid, block, a, stream, "mori_ep_combine"); e.failure()) return e;
  } else if (op.spec.inter_node) {
    a.reply_bytes = static_cast<int32_t>(Align16(Align16(a.row_bytes) + 4 * a.topk));
    if (auto e = RunCpu(op, kNetCombineSend, a, dtype, op.spec.quant); e.failure()) return e;
    if (auto e = RunCpu(op, kNetCombineRecv, a, dtype, op.spec.quant); e.failure()) return e;
    if (auto e = CheckCpuError(op); e.failure()) return e;
  } else {
    if (auto e = RunCpu(op, kCombine, a, dtype, op.spec.quant); e.failure()) return e;
    if (auto e = CheckCpuError(op); e.failure()) return e;
  }

  if (auto e = CopyOut(op, stream, out->untyped_data(), op.base.off_comb_out, out->size_bytes()); e.failure()) return e;
  if (has_weights) {
    MORI_TRY(out_weights, rets.get<ffi::AnyBuffer>(1));
    if (auto e = CopyOut(op, stream, out_weights->untyped_data(), op.base.off_comb_out_weights, out_weights->size_bytes()); e.failure()) return e;
  }
  return ffi::Error::Success();
}

// ---- the handler and its state -----------------------------------------------------------

struct EpState {
  static ffi::TypeId id;
  std::shared_ptr<Op> op;
};
ffi::TypeId EpState::id = {};

ffi::ErrorOr<std::unique_ptr<EpState>> Instantiate(ffi::Dictionary attrs) {
  auto config = attrs.get<ffi::Span<const int32_t>>("ep_config");
  if (config.has_error()) return ffi::Unexpected(ffi::Error::InvalidArgument("mori_ep: attribute ep_config is missing"));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = g_ops.find(KeyOf(config->begin(), static_cast<int64_t>(config->size())));
  if (found == g_ops.end()) {
    return ffi::Unexpected(ffi::Error::Internal(
        "mori_ep EpConfigError: no mori.jax EpDispatchCombineOp of this config is open in this process "
        "(create it before tracing, and do not close it while its programs run)"));
  }
  auto state = std::make_unique<EpState>();
  state->op = found->second;
  return state;
}

ffi::Error Execute(CUstream stream, EpState* state, ffi::Dictionary attrs, ffi::RemainingArgs args,
                   ffi::RemainingRets rets) {
  const Op& op = *state->op;
  if (attrs.contains("dispatch_op")) return Dispatch(op, stream, attrs, args, rets);
  if (attrs.contains("combine_op")) return Combine(op, stream, attrs, args, rets);
  if (attrs.contains("get_src_token_id")) {
    MORI_TRY(out, rets.get<ffi::AnyBuffer>(0));
    return CopyOut(op, stream, out->untyped_data(), op.base.off_disp_src_pos, out->size_bytes());
  }
  if (attrs.contains("reset_op")) return ffi::Error::Success();  // the protocol resets its own state
  return ffi::Error::InvalidArgument("mori_ep: the call names no operation (dispatch_op, combine_op, get_src_token_id, reset_op)");
}

ffi::Error ExecuteCpu(EpState* state, ffi::Dictionary attrs, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  if (state->op->spec.on_cuda) return ffi::Error::InvalidArgument("mori_ep EpConfigError: this op runs on the cuda backend, the program on the CPU");
  return Execute(nullptr, state, attrs, args, rets);
}

ffi::Error ExecuteCuda(CUstream stream, EpState* state, ffi::Dictionary attrs, ffi::RemainingArgs args,
                       ffi::RemainingRets rets) {
  if (!state->op->spec.on_cuda) return ffi::Error::InvalidArgument("mori_ep EpConfigError: this op runs on the cpu backend, the program on CUDA");
  return Execute(stream, state, attrs, args, rets);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(MoriEpInstantiate, Instantiate, ffi::Ffi::BindInstantiate().Attrs());
XLA_FFI_DEFINE_HANDLER(MoriEpExecuteCpu, ExecuteCpu,
                       ffi::Ffi::Bind().Ctx<ffi::State<EpState>>().Attrs().RemainingArgs().RemainingRets());
XLA_FFI_DEFINE_HANDLER(MoriEpExecuteCuda, ExecuteCuda,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<CUstream>>()
                           .Ctx<ffi::State<EpState>>()
                           .Attrs()
                           .RemainingArgs()
                           .RemainingRets());

namespace {
const XLA_FFI_TypeInfo kStateTypeInfo = ffi::MakeTypeInfo<EpState>();
}

// ---- the C entry points mori/jax/ffi_build.py loads with ctypes -------------------------------

#define MORI_JAX_EXPORT __attribute__((visibility("default")))

extern "C" {

MORI_JAX_EXPORT void* mori_jax_instantiate() { return reinterpret_cast<void*>(MoriEpInstantiate); }
MORI_JAX_EXPORT void* mori_jax_execute_cpu() { return reinterpret_cast<void*>(MoriEpExecuteCpu); }
MORI_JAX_EXPORT void* mori_jax_execute_cuda() { return reinterpret_cast<void*>(MoriEpExecuteCuda); }
MORI_JAX_EXPORT void* mori_jax_type_id() { return &EpState::id; }
MORI_JAX_EXPORT void* mori_jax_type_info() { return const_cast<XLA_FFI_TypeInfo*>(&kStateTypeInfo); }
MORI_JAX_EXPORT int mori_jax_args_size() { return static_cast<int>(sizeof(mori_ep_args_t)); }
MORI_JAX_EXPORT int mori_jax_spec_size() { return static_cast<int>(sizeof(OpSpec)); }

// 0, or 1 when an op of this config is already open in this process.
MORI_JAX_EXPORT int mori_jax_register_op(const int32_t* config, int64_t count, const mori_ep_args_t* base, const OpSpec* spec) {
  auto op = std::make_shared<Op>();
  op->base = *base;
  op->spec = *spec;
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_ops.emplace(KeyOf(config, count), std::move(op)).second ? 0 : 1;
}

// Executables instantiated before keep their reference; new call sites no longer find the op.
MORI_JAX_EXPORT void mori_jax_unregister_op(const int32_t* config, int64_t count) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ops.erase(KeyOf(config, count));
}

}  // extern "C"
