// SPDX-License-Identifier: MIT
//
// mori.ep._C: the cpu backend of dispatch/combine (src/cpu), the layout constants of ep_args.h
// for Python to check its mirror against, and the link layer: which mori-shmem ABI this extension
// was compiled against and which libmori_shmem.so it bound to at run time, so mori/ep/__init__.py
// can refuse to import against a mismatched or duplicated library.
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>

#include "cpu/ep_cpu.hpp"
#include "cpu/sync.hpp"

#include "mori_shmem/mori_shmem.h"

namespace {

int built_abi_version() { return MORI_SHMEM_ABI_VERSION; }

int loaded_abi_version() { return mori_shmem_abi_version(); }

// The path of the object that defines mori_shmem_abi_version in this process, i.e. the copy of
// libmori_shmem.so this extension's undefined symbols resolved to.
std::string loaded_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&mori_shmem_abi_version), &info) == 0 || info.dli_fname == nullptr) {
    throw std::runtime_error("dladdr could not locate mori_shmem_abi_version in any loaded object");
  }
  return info.dli_fname;
}

const mori_ep_args_t& ArgsAt(uintptr_t address) { return *reinterpret_cast<const mori_ep_args_t*>(address); }

std::map<std::string, long long> Constants() {
  return {
      {"ARGS_VERSION", MORI_EP_ARGS_VERSION},
      {"ARGS_SIZE", sizeof(mori_ep_args_t)},
      {"CTRL_BYTES", MORI_EP_CTRL_BYTES},
      {"CTRL_ERROR", MORI_EP_CTRL_ERROR},
      {"CTRL_TOTAL_RECV", MORI_EP_CTRL_TOTAL_RECV},
      {"CTRL_NET_HOP_SIGNAL", MORI_EP_CTRL_NET_HOP_SIGNAL},
      {"CTRL_NET_REPLY_SIGNAL", MORI_EP_CTRL_NET_REPLY_SIGNAL},
      {"MAX_WORLD_SIZE", MORI_EP_MAX_WORLD_SIZE},
      {"MAX_TOPK", MORI_EP_MAX_TOPK},
  };
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "mori-ep native module: the cpu backend of dispatch/combine and the link layer.";
  pybind11::register_exception<mori::ep::cpu::WaitTimeout>(m, "WaitTimeout", PyExc_TimeoutError);
  m.def(
      "dispatch", [](uintptr_t args) { mori::ep::cpu::Dispatch(ArgsAt(args)); },
      pybind11::call_guard<pybind11::gil_scoped_release>(), "Dispatch on the cpu backend; args = address of a mori_ep_args_t.");
  m.def(
      "combine", [](uintptr_t args, int dtype, int quant) { mori::ep::cpu::Combine(ArgsAt(args), dtype, quant); },
      pybind11::call_guard<pybind11::gil_scoped_release>(), "Combine on the cpu backend; args = address of a mori_ep_args_t.");
  pybind11::register_exception<mori::ep::cpu::PeerFailure>(m, "PeerFailure", PyExc_RuntimeError);
  m.def(
      "net_dispatch_send", [](uintptr_t args) { mori::ep::cpu::NetDispatchSend(ArgsAt(args)); },
      pybind11::call_guard<pybind11::gil_scoped_release>(), "Inter-node dispatch, send half (pack, send).");
  m.def(
      "net_dispatch_recv", [](uintptr_t args) { mori::ep::cpu::NetDispatchRecv(ArgsAt(args)); },
      pybind11::call_guard<pybind11::gil_scoped_release>(), "Inter-node dispatch, receive half (forward).");
  m.def(
      "net_combine_send",
      [](uintptr_t args, int dtype, int quant) { mori::ep::cpu::NetCombineSend(ArgsAt(args), dtype, quant); },
      pybind11::call_guard<pybind11::gil_scoped_release>(), "Inter-node combine, send half (stage, reduce, send).");
  m.def(
      "net_combine_recv", [](uintptr_t args, int dtype) { mori::ep::cpu::NetCombineRecv(ArgsAt(args), dtype); },
      pybind11::call_guard<pybind11::gil_scoped_release>(), "Inter-node combine, receive half (sum).");
  m.def("constants", &Constants, "The layout constants of ep_args.h.");
  m.def("built_abi_version", &built_abi_version,
        "MORI_SHMEM_ABI_VERSION from <mori_shmem/mori_shmem.h> at the time mori-ep was compiled.");
  m.def("loaded_abi_version", &loaded_abi_version,
        "mori_shmem_abi_version() of the libmori_shmem.so linked at run time.");
  m.def("loaded_library_path", &loaded_library_path,
        "Path of the libmori_shmem.so that defines mori_shmem_abi_version in this process.");
}
