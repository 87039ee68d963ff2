// SPDX-License-Identifier: MIT
// mori.cco._C: the communicator core and the cpu backend's collectives, for mori/cco/*.py.
// Addresses cross as Python ints, dev comms as the bytes of mori_cco_dev_comm_t.
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "collective_args.h"
#include "core/communicator.hpp"
#include "core/error.hpp"
#include "core/settings.hpp"
#include "host/collectives.hpp"
#include "host/lsa_sync.hpp"
#include "mori_shmem/mori_shmem.h"

namespace py = pybind11;
using mori::cco::Communicator;

namespace {

mori_cco_dev_comm_t dev_comm_of(const py::bytes& raw) {
  const std::string bytes = raw;
  if (bytes.size() != sizeof(mori_cco_dev_comm_t)) {
    mori::cco::fail(ccoInvalidArgument, "dev_comm has ", bytes.size(), " bytes, expected ", sizeof(mori_cco_dev_comm_t));
  }
  mori_cco_dev_comm_t dc;
  std::memcpy(&dc, bytes.data(), sizeof(dc));
  return dc;
}

// A window crosses as its (offset, size) pair.
mori_cco_window_t window_of(const std::tuple<uint64_t, uint64_t>& pair) {
  return mori_cco_window_t{std::get<0>(pair), std::get<1>(pair)};
}

py::bytes bytes_of(const mori_cco_dev_comm_t& dc) {
  return py::bytes(reinterpret_cast<const char*>(&dc), sizeof(dc));
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
    if (slot == slots.end()) mori::cco::fail(ccoInvalidArgument, "reqs has no field ", name);
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

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "mori-cco native module: communicators over a flat address range, and the cpu backend's collectives.";
  // Kept for the life of the process: the translator is a plain function and cannot capture.
  static PyObject* by_status = py::object(py::module_::import("mori.cco.errors").attr("BY_STATUS")).release().ptr();
  static PyObject* base_error = py::object(py::module_::import("mori.cco.errors").attr("CcoError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const mori::cco::Error& error) {
      PyObject* cls = PyDict_GetItem(by_status, py::int_(error.status()).ptr());  // borrowed
      PyErr_SetString(cls != nullptr ? cls : base_error, error.what());
    }
  });

  py::class_<Communicator>(m, "Communicator")
      .def(py::init([](const py::bytes& uid, int nranks, int rank, uint64_t per_rank_size, int backend, int device) {
             const std::string raw = uid;
             if (raw.size() != sizeof(mori_shmem_uniqueid_t)) {
               mori::cco::fail(ccoInvalidArgument, "unique_id has ", raw.size(), " bytes, expected ",
                               sizeof(mori_shmem_uniqueid_t));
             }
             mori_shmem_uniqueid_t id;
             std::memcpy(id.internal, raw.data(), sizeof(id.internal));
             py::gil_scoped_release release;
             return std::make_unique<Communicator>(id, nranks, rank, per_rank_size, static_cast<ccoBackend>(backend),
                                                   device);
           }),
           py::arg("unique_id"), py::arg("nranks"), py::arg("rank"), py::arg("per_rank_size"), py::arg("backend"),
           py::arg("device"))
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("nranks", &Communicator::nranks)
      .def_property_readonly("lsa_rank", [](Communicator& c) { return c.topology().lsa_rank; })
      .def_property_readonly("lsa_size", [](Communicator& c) { return c.topology().lsa_size; })
      .def_property_readonly("node", [](Communicator& c) { return c.topology().node; })
      .def_property_readonly("num_nodes", [](Communicator& c) { return c.topology().num_nodes; })
      .def_property_readonly("host_ranks", [](Communicator& c) { return c.topology().host_ranks; })
      .def_property_readonly("backend", [](Communicator& c) { return std::string(c.memory().backend()); })
      .def_property_readonly("device", [](Communicator& c) { return c.memory().device(); })
      .def_property_readonly("flat_base", [](Communicator& c) { return c.memory().flat_base(); })
      .def_property_readonly("per_rank_size", [](Communicator& c) { return c.memory().per_rank_size(); })
      .def_property_readonly("own_slot", &Communicator::own_slot)
      .def(
          "alloc",
          [](Communicator& c, uint64_t size, uint64_t alignment) {
            return reinterpret_cast<uintptr_t>(c.alloc(size, alignment));
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "free", [](Communicator& c, uintptr_t ptr) { c.free(reinterpret_cast<void*>(ptr)); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "register_window",
          [](Communicator& c, uintptr_t ptr, uint64_t size) {
            const mori_cco_window_t w = c.register_window(reinterpret_cast<void*>(ptr), size);
            return std::make_tuple(w.offset, w.size);
          },
          py::call_guard<py::gil_scoped_release>())
      .def("deregister_window",
           [](Communicator& c, uint64_t offset, uint64_t size) { c.deregister_window(mori_cco_window_t{offset, size}); })
      .def("peer_ptr",
           [](Communicator& c, uintptr_t local, int pe) {
             return reinterpret_cast<uintptr_t>(c.peer_ptr(reinterpret_cast<void*>(local), pe));
           })
      .def("create_dev_comm",
           [](Communicator& c, const std::map<std::string, int>& fields) {
             const ccoDevCommRequirements reqs = requirements_of(fields);
             mori_cco_dev_comm_t dc;
             {
               py::gil_scoped_release release;
               dc = c.create_dev_comm(reqs);
             }
             return bytes_of(dc);
           })
      .def("destroy_dev_comm",
           [](Communicator& c, const py::bytes& dc) {
             const mori_cco_dev_comm_t value = dev_comm_of(dc);
             py::gil_scoped_release release;
             c.destroy_dev_comm(value);
           })
      .def("dev_comm_error",
           [](Communicator& c, const py::bytes& dc, bool clear) { return c.dev_comm_error(dev_comm_of(dc), clear); })
      .def("barrier", &Communicator::barrier, py::call_guard<py::gil_scoped_release>())
      .def("ce_put",
           [](Communicator& c, const py::bytes& dc, int peer, int queue, std::tuple<uint64_t, uint64_t> dst,
              uint64_t dst_offset, std::tuple<uint64_t, uint64_t> src, uint64_t src_offset, uint64_t nbytes) {
             const mori_cco_dev_comm_t value = dev_comm_of(dc);
             return c.ce_put(value, peer, queue, window_of(dst), dst_offset, window_of(src), src_offset, nbytes);
           })
      .def("ce_quiet", &Communicator::ce_quiet, py::arg("peer") = -1, py::arg("queue") = -1,
           py::call_guard<py::gil_scoped_release>())
      .def("gda_put",
           [](Communicator& c, const py::bytes& dc, int peer, std::tuple<uint64_t, uint64_t> dst, uint64_t dst_offset,
              std::tuple<uint64_t, uint64_t> src, uint64_t src_offset, uint64_t nbytes, int signal_id,
              uint64_t signal_value) {
             const mori_cco_dev_comm_t value = dev_comm_of(dc);
             py::gil_scoped_release release;
             c.gda_put(value, peer, window_of(dst), dst_offset, window_of(src), src_offset, nbytes, signal_id,
                       signal_value);
           })
      .def(
          "gda_get",
          [](Communicator& c, int peer, std::tuple<uint64_t, uint64_t> src, uint64_t src_offset,
             std::tuple<uint64_t, uint64_t> dst, uint64_t dst_offset, uint64_t nbytes) {
            c.gda_get(peer, window_of(src), src_offset, window_of(dst), dst_offset, nbytes);
          },
          py::call_guard<py::gil_scoped_release>())
      .def("gda_signal",
           [](Communicator& c, const py::bytes& dc, int peer, int signal_id, uint64_t value) {
             const mori_cco_dev_comm_t v = dev_comm_of(dc);
             py::gil_scoped_release release;
             c.gda_signal(v, peer, signal_id, value);
           })
      .def("read_signal",
           [](Communicator& c, const py::bytes& dc, int signal_id) { return c.read_signal(dev_comm_of(dc), signal_id); })
      .def("gda_flush", &Communicator::gda_flush, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("gda_conduit", [](Communicator& c) { return std::string(c.gda_conduit()); });

  m.def(
      "run_collective",
      [](uintptr_t args) { mori::cco::host::run_collective(*reinterpret_cast<const mori_cco_collective_args_t*>(args)); },
      py::call_guard<py::gil_scoped_release>(), "Runs one collective on the cpu backend; args = address of the struct.");
  m.def(
      "lsa_barrier",
      [](const py::bytes& dc, uint32_t index) {
        const mori_cco_dev_comm_t value = dev_comm_of(dc);
        py::gil_scoped_release release;
        mori::cco::host::lsa_barrier(value, index);
      },
      "The LSA barrier `index` of a dev comm, run by this host thread (cpu backend).");
  m.def(
      "wait_at_least",
      [](uintptr_t word, uint64_t least, uint64_t timeout_ns) {
        mori::cco::host::wait_at_least(reinterpret_cast<const uint64_t*>(word), least, timeout_ns, "wait");
      },
      py::call_guard<py::gil_scoped_release>(), "Waits until the uint64 at word (host memory) is >= least.");
  m.def("get_unique_id", [] {
    mori_shmem_uniqueid_t uid{};
    if (mori_shmem_get_unique_id(&uid) != MORI_SHMEM_SUCCESS) {
      mori::cco::fail(ccoSystemError, "creating a unique id: ", mori_shmem_last_error());
    }
    return py::bytes(uid.internal, sizeof(uid.internal));
  });
  m.def("scratch_bytes", [](int kind, uint64_t count, uint64_t elem_size, int world, int wire) {
    return mori_cco_scratch_bytes(kind, count, elem_size, world, wire);
  });
  m.def("slice_len", [](uint64_t count, int world) { return mori_cco_slice_len(count, world); });
  m.def("constants", &constants);
  m.def("settings", [] {
    py::list out;
    for (const auto& var : mori::cco::settings::registry()) {
      out.append(py::dict(py::arg("name") = var.name, py::arg("type") = var.type,
                          py::arg("default") = var.default_value, py::arg("doc") = var.doc,
                          py::arg("effective") = mori::cco::settings::effective(var.name)));
    }
    return out;
  });
  m.def("setting_size", [](const std::string& name) { return mori::cco::settings::get_size(name.c_str()); });
  m.def("setting_int", [](const std::string& name) { return mori::cco::settings::get_int(name.c_str()); });
  m.def("built_abi_version", [] { return MORI_SHMEM_ABI_VERSION; });
  m.def("loaded_abi_version", [] { return mori_shmem_abi_version(); });
  m.def("loaded_library_path", &loaded_library_path);
}
