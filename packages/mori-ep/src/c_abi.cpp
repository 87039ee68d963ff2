// SPDX-License-Identifier: MIT
//
// A C entry point into the cpu backend for native callers outside Python: mori.jax's XLA FFI
// handler (src/jax/ep_ffi.cpp) runs the same dispatch/combine steps as EpDispatchCombineOp, in
// XLA's thread, through this one function, which it finds by dlsym in this extension. A plain C
// signature keeps the handler free of pybind11 and of this module's C++ ABI; failures come back as
// a code plus a message instead of a C++ exception crossing the library boundary.
#include <cstddef>
#include <cstdio>
#include <exception>

#include "cpu/ep_cpu.hpp"
#include "cpu/sync.hpp"

namespace {

void Message(char* err, size_t err_len, const char* text) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", text);
}

}  // namespace

// Steps (the CpuBackend methods of mori/ep/backends.py): 0 dispatch, 1 combine, 2 net dispatch send,
// 3 net dispatch recv, 4 net combine send, 5 net combine recv. Returns 0, or 1 for a wait that timed
// out, 2 for a lost peer, 3 for anything else (with `err` holding the message), 4 for an unknown step.
extern "C" __attribute__((visibility("default"))) int mori_ep_cpu_run(
    int step, const mori_ep_args_t* args, int dtype, int quant, char* err, size_t err_len) {
  using namespace mori::ep::cpu;
  try {
    switch (step) {
      case 0: Dispatch(*args); return 0;
      case 1: Combine(*args, dtype, quant); return 0;
      case 2: NetDispatchSend(*args); return 0;
      case 3: NetDispatchRecv(*args); return 0;
      case 4: NetCombineSend(*args, dtype, quant); return 0;
      case 5: NetCombineRecv(*args, dtype); return 0;
      default: Message(err, err_len, "unknown step"); return 4;
    }
  } catch (const WaitTimeout& exc) {
    Message(err, err_len, exc.what());
    return 1;
  } catch (const PeerFailure& exc) {
    Message(err, err_len, exc.what());
    return 2;
  } catch (const std::exception& exc) {
    Message(err, err_len, exc.what());
    return 3;
  }
}
