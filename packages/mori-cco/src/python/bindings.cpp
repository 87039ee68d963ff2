// SPDX-License-Identifier: MIT
// mori.cco._C: a thin pybind11 layer over the C++ API of libmori_cco (mori_cco/cco.hpp), the one
// C++ programs use. A communicator crosses as an opaque Comm handle, addresses as Python ints, dev
// comms as the bytes of mori_cco_dev_comm_t, windows as (offset, size) pairs. A failed call raises
// the class mori.cco.errors.BY_STATUS gives its status, with ccoGetLastError()'s message.
// Collective and potentially long calls release the GIL.
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "collective_args.h"
#include "mori_cco/cco.hpp"
#include "mori_shmem/mori_shmem.h"

namespace py = pybind11;

namespace {

// Leaked on purpose: Python objects must not be destroyed after the interpreter is gone.
py::object& error_classes() {  // mori.cco.errors.BY_STATUS
  static auto* classes = new py::object();
  return *classes;
}
py::object& base_error() {  // mori.cco.errors.CcoError
  static auto* error = new py::object();
  return *error;
}

[[noreturn]] void raise_error(int status, const std::string& message) {
  py::object cls = error_classes().attr("get")(status, base_error());
  PyErr_SetString(cls.ptr(), message.c_str());
  throw py::error_already_set();
}

void check(int status) {
  if (status != ccoSuccess) raise_error(status, ccoGetLastError());
}

// Releases the GIL around a C call and raises after reacquiring it (on the same thread, whose
// ccoGetLastError() holds the message).
template <typename Call>
void call_unlocked(Call&& call) {
  int status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  check(status);
}

// A communicator handle: owns its ccoComm_t until comm_destroy (or, as a fallback, collection).
struct Comm {
  ccoComm_t handle = nullptr;
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (handle != nullptr) ccoCommDestroy(handle);
  }
};

ccoComm_t live(const Comm& comm) {
  if (comm.handle == nullptr) raise_error(ccoInvalidArgument, "the communicator was destroyed");
  return comm.handle;
}

void* as_ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }
uintptr_t as_int(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr); }

ccoDevComm dev_comm_of(const py::bytes& raw) {
  const std::string bytes = raw;
  if (bytes.size() != sizeof(ccoDevComm)) {
    raise_error(ccoInvalidArgument, "dev_comm has " + std::to_string(bytes.size()) + " bytes, expected " +
                                        std::to_string(sizeof(ccoDevComm)));
  }
  ccoDevComm dc;
  std::memcpy(&dc, bytes.data(), sizeof(dc));
  return dc;
}

ccoWindow_t window_of(const std::tuple<uint64_t, uint64_t>& pair) {
  return ccoWindow_t{std::get<0>(pair), std::get<1>(pair)};
}

ccoDevCommRequirements requirements_of(const std::map<std::string, int>& fields) {
  ccoDevCommRequirements reqs = CCO_DEV_COMM_REQUIREMENTS_INITIALIZER;
  const std::map<std::string, int*> slots = {
      {"gda_connection_type", &reqs.gdaConnectionType}, {"gda_context_count", &reqs.gdaContextCount},
      {"gda_signal_count", &reqs.gdaSignalCount},       {"gda_counter_count", &reqs.gdaCounterCount},
      {"gda_queue_depth", &reqs.gdaQueueDepth},         {"gda_traffic_class", &reqs.gdaTrafficClass},
      {"lsa_barrier_count", &reqs.lsaBarrierCount},     {"rail_gda_barrier_count", &reqs.railGdaBarrierCount},
      {"sdma_queue_count", &reqs.sdmaQueueCount},       {"barrier_count", &reqs.barrierCount},
  };
  for (const auto& [name, value] : fields) {
    const auto slot = slots.find(name);
    if (slot == slots.end()) raise_error(ccoInvalidArgument, "reqs has no field " + name);
    *slot->second = value;
  }
  return reqs;
}

std::map<std::string, long long> constants() {
  return {
      {"DEV_COMM_SIZE", sizeof(mori_cco_dev_comm_t)},
      {"COLLECTIVE_ARGS_SIZE", sizeof(mori_cco_collective_args_t)},
      {"DEV_COMM_MAGIC", MORI_CCO_DEV_COMM_MAGIC},
      {"DEV_COMM_VERSION", MORI_CCO_DEV_COMM_VERSION},
      {"FP8_BLOCK", MORI_CCO_FP8_BLOCK},
  };
}

std::string loaded_library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&mori_shmem_abi_version), &info) == 0 || info.dli_fname == nullptr) {
    throw std::runtime_error("dladdr could not locate mori_shmem_abi_version in any loaded object");
  }
  return info.dli_fname;
}

py::dict info_of(const Comm& comm) {
  ccoCommInfo info{};
  check(ccoCommGetInfo(live(comm), &info));
  py::dict out;
  out["rank"] = info.rank;
  out["nranks"] = info.worldSize;
  out["lsa_rank"] = info.lsaRank;
  out["lsa_size"] = info.lsaSize;
  out["node_start"] = info.myNodeStart;
  out["node"] = info.node;
  out["num_nodes"] = info.numNodes;
  out["host_ranks"] = info.hostRanks;
  out["backend"] = info.backend == ccoBackendCuda ? "cuda" : "cpu";
  out["device"] = info.device;
  out["flat_base"] = as_int(info.flatBase);
  out["per_rank_size"] = info.perRankSize;
  out["own_slot"] = as_int(info.localSlot);
  out["gda_conduit"] = std::string(info.gdaConduit);
  return out;
}

py::list settings() {
  int count = 0;
  check(ccoSettingCount(&count));
  py::list out;
  for (int i = 0; i < count; ++i) {
    ccoSetting setting{};
    check(ccoSettingGet(i, &setting));
    out.append(py::dict(py::arg("name") = setting.name, py::arg("type") = setting.type,
                        py::arg("default") = setting.defaultValue, py::arg("doc") = setting.doc,
                        py::arg("effective") = setting.value));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native layer of mori.cco over libmori_cco's C++ API (use mori.cco's classes instead).";
  error_classes() = py::module_::import("mori.cco.errors").attr("BY_STATUS");
  base_error() = py::module_::import("mori.cco.errors").attr("CcoError");

  py::class_<Comm>(m, "Comm", "An opaque communicator handle (ccoComm_t).")
      .def_property_readonly("is_valid", [](const Comm& c) { return c.handle != nullptr; });

  m.def("get_unique_id", [] {
    ccoUniqueId id{};
    check(ccoGetUniqueId(&id));
    return py::bytes(id.internal, sizeof(id.internal));
  });
  m.def(
      "comm_create",
      [](const py::bytes& unique_id, int nranks, int rank, size_t per_rank_size, int backend, int device) {
        const std::string raw = unique_id;
        ccoUniqueId id{};
        if (raw.size() != sizeof(id.internal)) {
          raise_error(ccoInvalidArgument, "unique_id has " + std::to_string(raw.size()) + " bytes, expected " +
                                              std::to_string(sizeof(id.internal)));
        }
        std::memcpy(id.internal, raw.data(), sizeof(id.internal));
        auto comm = std::make_unique<Comm>();
        call_unlocked([&] {
          return ccoCommCreate(id, nranks, rank, per_rank_size, &comm->handle, static_cast<ccoBackend>(backend),
                               device);
        });
        return comm;
      },
      py::arg("unique_id"), py::arg("nranks"), py::arg("rank"), py::arg("per_rank_size"), py::arg("backend"),
      py::arg("device"));
  m.def("comm_destroy", [](Comm& comm) {
    ccoComm_t handle = live(comm);
    comm.handle = nullptr;
    call_unlocked([&] { return ccoCommDestroy(handle); });
  });
  m.def("comm_info", &info_of, "The communicator's fixed description (ccoCommGetInfo) as a dict.");

  m.def("mem_alloc", [](const Comm& comm, size_t size, size_t alignment) {
    ccoComm_t handle = live(comm);
    void* ptr = nullptr;
    call_unlocked([&] { return ccoMemAllocAligned(handle, size, alignment, &ptr); });
    return as_int(ptr);
  });
  m.def("mem_free", [](const Comm& comm, uintptr_t ptr) {
    ccoComm_t handle = live(comm);
    call_unlocked([&] { return ccoMemFree(handle, as_ptr(ptr)); });
  });
  m.def("window_register_ptr", [](const Comm& comm, uintptr_t ptr, size_t size) {
    ccoComm_t handle = live(comm);
    ccoWindow_t window{};
    call_unlocked([&] { return ccoWindowRegister(handle, as_ptr(ptr), size, &window); });
    return std::make_tuple(window.offset, window.size);
  });
  m.def("window_deregister", [](const Comm& comm, uint64_t offset, uint64_t size) {
    check(ccoWindowDeregister(live(comm), ccoWindow_t{offset, size}));
  });
  m.def("get_peer_ptr", [](const Comm& comm, uintptr_t local, int pe) {
    void* peer = nullptr;
    check(ccoGetPeerPtr(live(comm), as_ptr(local), pe, &peer));
    return as_int(peer);
  });

  m.def("dev_comm_create", [](const Comm& comm, const std::map<std::string, int>& fields) {
    ccoComm_t handle = live(comm);
    const ccoDevCommRequirements reqs = requirements_of(fields);
    ccoDevComm dc{};
    call_unlocked([&] { return ccoDevCommCreate(handle, &reqs, &dc); });
    return py::bytes(reinterpret_cast<const char*>(&dc), sizeof(dc));
  });
  m.def("dev_comm_destroy", [](const Comm& comm, const py::bytes& dev_comm) {
    ccoComm_t handle = live(comm);
    const ccoDevComm dc = dev_comm_of(dev_comm);
    call_unlocked([&] { return ccoDevCommDestroy(handle, &dc); });
  });
  m.def("dev_comm_error", [](const Comm& comm, const py::bytes& dev_comm, bool clear) {
    const ccoDevComm dc = dev_comm_of(dev_comm);
    uint32_t code = 0;
    check(ccoDevCommError(live(comm), &dc, clear ? 1 : 0, &code));
    return code;
  });
  m.def("barrier_all", [](const Comm& comm) {
    ccoComm_t handle = live(comm);
    call_unlocked([&] { return ccoBarrierAll(handle); });
  });

  m.def("copy_engine_put",
        [](const Comm& comm, const py::bytes& dev_comm, int peer, int queue, std::tuple<uint64_t, uint64_t> dst,
           uint64_t dst_offset, std::tuple<uint64_t, uint64_t> src, uint64_t src_offset, uint64_t nbytes) {
          const ccoDevComm dc = dev_comm_of(dev_comm);
          uint64_t reached = 0;
          check(ccoCopyEnginePut(live(comm), &dc, peer, queue, window_of(dst), dst_offset, window_of(src),
                                 src_offset, nbytes, &reached));
          return reached;
        });
  m.def(
      "copy_engine_quiet",
      [](const Comm& comm, int peer, int queue) {
        ccoComm_t handle = live(comm);
        call_unlocked([&] { return ccoCopyEngineQuiet(handle, peer, queue); });
      },
      py::arg("comm"), py::arg("peer") = -1, py::arg("queue") = -1);

  m.def("gda_put", [](const Comm& comm, const py::bytes& dev_comm, int peer, std::tuple<uint64_t, uint64_t> dst,
                      uint64_t dst_offset, std::tuple<uint64_t, uint64_t> src, uint64_t src_offset, uint64_t nbytes,
                      int signal_id, uint64_t signal_value) {
    ccoComm_t handle = live(comm);
    const ccoDevComm dc = dev_comm_of(dev_comm);
    call_unlocked([&] {
      return ccoGdaPut(handle, &dc, peer, window_of(dst), dst_offset, window_of(src), src_offset, nbytes, signal_id,
                       signal_value);
    });
  });
  m.def("gda_get", [](const Comm& comm, int peer, std::tuple<uint64_t, uint64_t> src, uint64_t src_offset,
                      std::tuple<uint64_t, uint64_t> dst, uint64_t dst_offset, uint64_t nbytes) {
    ccoComm_t handle = live(comm);
    call_unlocked(
        [&] { return ccoGdaGet(handle, peer, window_of(src), src_offset, window_of(dst), dst_offset, nbytes); });
  });
  m.def("gda_signal", [](const Comm& comm, const py::bytes& dev_comm, int peer, int signal_id, uint64_t value) {
    ccoComm_t handle = live(comm);
    const ccoDevComm dc = dev_comm_of(dev_comm);
    call_unlocked([&] { return ccoGdaSignal(handle, &dc, peer, signal_id, value); });
  });
  m.def("gda_flush", [](const Comm& comm) {
    ccoComm_t handle = live(comm);
    call_unlocked([&] { return ccoGdaFlush(handle); });
  });
  m.def("read_signal", [](const Comm& comm, const py::bytes& dev_comm, int signal_id) {
    const ccoDevComm dc = dev_comm_of(dev_comm);
    uint64_t value = 0;
    check(ccoReadSignal(live(comm), &dc, signal_id, &value));
    return value;
  });

  m.def(
      "run_collective",
      [](uintptr_t args) {
        call_unlocked([&] { return ccoCollectiveRunHost(as_ptr(args), sizeof(mori_cco_collective_args_t)); });
      },
      "Runs one collective on the cpu backend; args = address of a mori_cco_collective_args_t.");
  m.def(
      "wait_at_least",
      [](uintptr_t word, uint64_t least, uint64_t timeout_ns) {
        call_unlocked([&] { return ccoWaitValue64(reinterpret_cast<const uint64_t*>(word), least, timeout_ns); });
      },
      "Waits until the uint64 at word (host memory) is >= least.");
  m.def("scratch_bytes", [](int kind, uint64_t count, uint64_t elem_size, int world, int wire) {
    return mori_cco_scratch_bytes(kind, count, elem_size, world, wire);
  });
  m.def("constants", &constants);
  m.def("settings", &settings);
  m.def("setting_size", [](const std::string& name) {
    uint64_t value = 0;
    check(ccoSettingGetSize(name.c_str(), &value));
    return value;
  });
  m.def("setting_int", [](const std::string& name) {
    int64_t value = 0;
    check(ccoSettingGetInt(name.c_str(), &value));
    return value;
  });
  m.def("built_abi_version", [] { return MORI_SHMEM_ABI_VERSION; });
  m.def("loaded_abi_version", [] { return mori_shmem_abi_version(); });
  m.def("loaded_library_path", &loaded_library_path);
}
