// SPDX-License-Identifier: MIT
// mori.io._C: pybind11 bindings of the native engine. Pointers travel as Python ints; every
// mori::io::Error becomes the Python class mori.io.errors registered for its code. Calls that
// can block (connecting, waiting, deregistering) release the GIL.
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/remote.hpp"
#include "core/status.hpp"
#include "engine/engine.hpp"
#include "engine/wait.hpp"
#include "gpu/ceiling.hpp"
#include "gpu/device.hpp"
#include "p2p/p2p.hpp"
#include "rdma/rdma.hpp"
#include "ucx/loader.hpp"

namespace py = pybind11;
using mori::io::BackendType;
using mori::io::Code;
using mori::io::Engine;
using mori::io::Error;
using mori::io::MemoryLocation;
using mori::io::RemoteMemory;
using mori::io::StatusCode;
using mori::io::TransferStatus;

namespace {

// Leaked on purpose: Python objects must outlive nothing that runs after interpreter teardown.
std::map<int, py::object>& error_classes() {
  static auto* classes = new std::map<int, py::object>();
  return *classes;
}

[[noreturn]] void raise(Code code, const std::string& message) {
  auto it = error_classes().find(static_cast<int>(code));
  PyErr_SetString(it != error_classes().end() ? it->second.ptr() : PyExc_RuntimeError, message.c_str());
  throw py::error_already_set();
}

// Entry i of `name` as an unsigned 64-bit int, or InvalidArgumentError naming it.
uint64_t u64_at(const py::handle& item, const char* name, size_t i) {
  PyObject* index = PyNumber_Index(item.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    raise(Code::InvalidArgument, std::string(name) + "[" + std::to_string(i) + "]=" + std::string(py::repr(item)) +
                                     " is not an int");
  }
  unsigned long long value = PyLong_AsUnsignedLongLong(index);
  Py_DECREF(index);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    raise(Code::InvalidArgument, std::string(name) + "[" + std::to_string(i) + "]=" + std::string(py::repr(item)) +
                                     " must be in [0, 2**64)");
  }
  return value;
}

// Lists, tuples, ranges and 1-D integer buffers (numpy arrays) of offsets or sizes, or anything
// else as one int (a single transfer, named as a batch's entry 0). The buffer path copies 8-byte
// integers in one go, which keeps thousands of descriptors per call cheap.
// Fills `out` (cleared first), so that callers can keep one vector per thread and a post
// allocates nothing here.
void to_u64(const py::handle& obj, const char* name, std::vector<uint64_t>& out) {
  out.clear();
  PyObject* raw = obj.ptr();
  if (!PySequence_Check(raw) || PyUnicode_Check(raw) || PyBytes_Check(raw)) {
    out.push_back(u64_at(obj, name, 0));
    return;
  }
  if (PyObject_CheckBuffer(obj.ptr())) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
    const char f = info.format.empty() ? '?' : info.format.back();
    const bool int64ish = info.itemsize == 8 && (f == 'q' || f == 'Q' || f == 'l' || f == 'L');
    if (info.ndim == 1 && int64ish && info.strides[0] == 8) {
      const auto* data = static_cast<const int64_t*>(info.ptr);
      out.resize(size_t(info.shape[0]));
      const bool is_signed = f == 'q' || f == 'l';
      for (size_t i = 0; i < out.size(); ++i) {
        if (is_signed && data[i] < 0) {
          raise(Code::InvalidArgument, std::string(name) + "[" + std::to_string(i) + "]=" + std::to_string(data[i]) +
                                           " must be >= 0");
        }
        out[i] = uint64_t(data[i]);
      }
      return;
    }
  }
  if (PyList_CheckExact(raw) || PyTuple_CheckExact(raw)) {
    // Thousands of descriptors come as lists: read the items in place, ints directly (the general
    // path below costs ~30 ns an item, a third of a 4 KiB P2P copy per descriptor).
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(raw);
    PyObject** items = PySequence_Fast_ITEMS(raw);
    out.resize(size_t(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      unsigned long long value = 0;
      if (PyLong_CheckExact(items[i])) {
        value = PyLong_AsUnsignedLongLong(items[i]);
        if (value == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
          PyErr_Clear();
          value = u64_at(items[i], name, size_t(i));  // raises, naming the entry
        }
      } else {
        value = u64_at(items[i], name, size_t(i));
      }
      out[size_t(i)] = value;
    }
    return;
  }
  auto seq = py::reinterpret_borrow<py::sequence>(obj);
  const size_t n = py::len(seq);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = u64_at(seq[i], name, i);
  return;
}

// A transfer uid: an int in [0, 2**63 - 1] (worded like mori.io.errors.check_int).
uint64_t to_uid(const py::handle& obj) {
  PyObject* index = PyBool_Check(obj.ptr()) ? nullptr : PyNumber_Index(obj.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    raise(Code::InvalidArgument, "transfer_uid=" + std::string(py::repr(obj)) + " must be an int");
  }
  auto value = py::reinterpret_steal<py::int_>(index);
  const long long uid = PyLong_AsLongLong(value.ptr());
  if (PyErr_Occurred() || uid < 0) {
    PyErr_Clear();
    raise(Code::InvalidArgument, "transfer_uid=" + std::string(py::str(value)) + " is out of range [0, " +
                                     std::to_string(INT64_MAX) + "]");
  }
  return static_cast<uint64_t>(uid);
}

// The Python member of a StatusCode, looked up once per code.
py::object status_code_object(StatusCode code) {
  static auto* members = new std::map<int, py::object>();  // leaked, like error_classes()
  auto it = members->find(static_cast<int>(code));
  if (it == members->end()) it = members->emplace(static_cast<int>(code), py::cast(code)).first;
  return it->second;
}

// Engine::transfer from Python: offsets, sizes and uid converted (and checked) with the GIL held,
// the transfer started without it.
std::shared_ptr<TransferStatus> post_transfer(Engine& e, bool is_read, uint32_t local_id, const RemoteMemory& remote,
                                              const py::handle& local_offsets, const py::handle& remote_offsets,
                                              const py::handle& sizes, const py::handle& uid) {
  thread_local std::vector<uint64_t> lo, ro, sz;
  to_u64(local_offsets, "local_offsets", lo);
  to_u64(remote_offsets, "remote_offsets", ro);
  to_u64(sizes, "sizes", sz);
  const uint64_t checked_uid = to_uid(uid);
  py::gil_scoped_release release;
  return e.transfer(is_read, local_id, remote, lo, ro, sz, checked_uid);
}

}  // namespace

// What IOEngineSession posts with every transfer; the engine outlives it (keep_alive).
struct SessionPair {
  Engine* engine;
  uint32_t local_id;
  RemoteMemory remote;
};

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native core of mori.io (TCP, P2P and RDMA/UCX transfer engine).";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      auto it = error_classes().find(static_cast<int>(e.code()));
      PyErr_SetString(it != error_classes().end() ? it->second.ptr() : PyExc_RuntimeError, e.what());
    }
  });

  m.def("set_error_classes", [](const std::map<int, py::object>& classes) {
    for (const auto& entry : classes) error_classes()[entry.first] = entry.second;
  });
  m.def("set_log_level", [](int level) { mori::io::log::threshold().store(level); });
  m.def("gpu_unavailable_reason", []() -> std::string {
    try {
      mori::io::gpu::device_count();
      return std::string();
    } catch (const Error& e) {
      return e.what();
    }
  }, "Empty when GPU memory can be used here, else why not (no CUDA driver, no GPU).");
  m.def("gpu_device_count", &mori::io::gpu::device_count);
  m.def(
      "ucx_version",
      [](const std::string& lib_dir) {
        const mori::io::ucx::Api& api = mori::io::ucx::load(lib_dir);
        return std::to_string(api.major) + "." + std::to_string(api.minor) + "." + std::to_string(api.release);
      },
      py::arg("lib_dir"), "Loads UCX (from lib_dir, or the system's when empty) and returns its version; "
                          "raises UnsupportedError naming why it cannot be loaded.");
  m.def("time_device_copies", &mori::io::gpu::time_device_copies, py::arg("device"), py::arg("dst"), py::arg("src"),
        py::arg("size"), py::arg("warmup"), py::arg("iters"), py::arg("host_timed") = false,
        py::call_guard<py::gil_scoped_release>());

  py::native_enum<StatusCode>(m, "StatusCode", "enum.IntEnum")
      .value("SUCCESS", StatusCode::SUCCESS)
      .value("INIT", StatusCode::INIT)
      .value("IN_PROGRESS", StatusCode::IN_PROGRESS)
      .value("ERR_BEGIN", StatusCode::ERR_BEGIN)
      .value("ERR_INVALID_ARGS", StatusCode::ERR_INVALID_ARGS)
      .value("ERR_NOT_FOUND", StatusCode::ERR_NOT_FOUND)
      .value("ERR_RDMA_OP", StatusCode::ERR_RDMA_OP)
      .value("ERR_BAD_STATE", StatusCode::ERR_BAD_STATE)
      .value("ERR_GPU_OP", StatusCode::ERR_GPU_OP)
      .finalize();
  py::native_enum<MemoryLocation>(m, "MemoryLocationType", "enum.IntEnum")
      .value("Unknown", MemoryLocation::Unknown)
      .value("CPU", MemoryLocation::CPU)
      .value("GPU", MemoryLocation::GPU)
      .finalize();
  py::native_enum<BackendType>(m, "BackendType", "enum.IntEnum")
      .value("Unknown", BackendType::Unknown)
      .value("XGMI", BackendType::XGMI)
      .value("RDMA", BackendType::RDMA)
      .value("TCP", BackendType::TCP)
      .value("FABRIC", BackendType::FABRIC)
      .finalize();
  py::native_enum<mori::io::ucx::PollCqMode>(m, "PollCqMode", "enum.IntEnum")
      .value("POLLING", mori::io::ucx::PollCqMode::POLLING)
      .value("EVENT", mori::io::ucx::PollCqMode::EVENT)
      .finalize();

  py::class_<TransferStatus, std::shared_ptr<TransferStatus>>(m, "TransferStatus")
      .def(py::init<>())
      // Polling reads a response that already arrived for the transfer (TransferStatus::poll),
      // so a caller that polls sees the completion as soon as one that waits.
      .def("Code", &TransferStatus::poll)
      .def("Message", &TransferStatus::message)
      .def("Init", [](const TransferStatus& s) { return s.code() == StatusCode::INIT; })
      .def("InProgress", [](const TransferStatus& s) { return s.poll() == StatusCode::IN_PROGRESS; })
      .def("Succeeded", [](const TransferStatus& s) { return s.poll() == StatusCode::SUCCESS; })
      .def("Failed", [](const TransferStatus& s) { return mori::io::is_error(s.poll()); })
      .def("Wait", [](const TransferStatus& s) { s.wait_for(-1); }, py::call_guard<py::gil_scoped_release>())
      .def(
          "WaitFor",
          // A status already final is answered without letting go of the GIL, and every answer is
          // a cached enum member: both cost more than a small GPU transfer's wait otherwise.
          [](const TransferStatus& s, int64_t timeout_ms) -> py::object {
            StatusCode code;
            if (s.is_done()) {
              code = s.code();
            } else {
              py::gil_scoped_release release;
              code = s.wait_for(timeout_ms);
            }
            return status_code_object(code);
          },
          py::arg("timeout_ms") = -1)
      // MORI's WaitBusy spins instead of sleeping; here the waiter spins briefly before it sleeps
      // on the status anyway, so it is WaitFor under MORI's name.
      .def(
          "WaitBusy",
          [](const TransferStatus& s, int64_t timeout_ms) -> py::object {
            StatusCode code;
            {
              py::gil_scoped_release release;
              code = s.wait_for(timeout_ms);
            }
            return status_code_object(code);
          },
          py::arg("timeout_ms") = -1)
      .def("Update", &TransferStatus::update, py::arg("code"), py::arg("message"))
      .def("SetCode", &TransferStatus::set_code, py::arg("code"))
      .def("SetMessage", &TransferStatus::set_message, py::arg("message"))
      .def("__repr__", [](const TransferStatus& s) {
        std::string name = py::str(py::cast(s.code()).attr("name"));
        std::string msg = s.message();
        return "TransferStatus(" + name + (msg.empty() ? "" : ", " + std::string(py::repr(py::str(msg)))) + ")";
      });

  m.def("wait_all", &mori::io::wait_all, py::arg("statuses"), py::arg("timeout_ms") = -1,
        py::call_guard<py::gil_scoped_release>());

  // A remote MemoryDesc as the native engine takes it; the route chain reads its GPU fields.
  py::class_<RemoteMemory>(m, "RemoteMemory")
      .def(py::init([](const std::string& engine_key, uint32_t id, uint64_t size, MemoryLocation loc, uintptr_t data,
                       const py::bytes& ipc_handle, uint64_t ipc_offset) {
             return RemoteMemory{engine_key, id, size, loc, data, std::string(ipc_handle), ipc_offset};
           }),
           py::arg("engine_key"), py::arg("id"), py::arg("size"), py::arg("loc"), py::arg("data"),
           py::arg("ipc_handle"), py::arg("ipc_offset"))
      .def_readonly("engine_key", &RemoteMemory::engine_key)
      .def_readonly("id", &RemoteMemory::id)
      .def_readonly("size", &RemoteMemory::size);

  // Each backend's settings: the native structs field for field, filled by mori.io.config.
  py::class_<mori::io::tcp::TcpConfig>(m, "TcpConfig")
      .def(py::init<>())
      .def_readwrite("num_data_conns", &mori::io::tcp::TcpConfig::num_data_conns)
      .def_readwrite("striping_threshold_bytes", &mori::io::tcp::TcpConfig::striping_threshold_bytes)
      .def_readwrite("min_stripe_bytes", &mori::io::tcp::TcpConfig::min_stripe_bytes)
      .def_readwrite("chunk_bytes", &mori::io::tcp::TcpConfig::chunk_bytes)
      .def_readwrite("op_timeout_ms", &mori::io::tcp::TcpConfig::op_timeout_ms)
      .def_readwrite("sock_sndbuf_bytes", &mori::io::tcp::TcpConfig::sock_sndbuf_bytes)
      .def_readwrite("sock_rcvbuf_bytes", &mori::io::tcp::TcpConfig::sock_rcvbuf_bytes)
      .def_readwrite("enable_keepalive", &mori::io::tcp::TcpConfig::enable_keepalive)
      .def_readwrite("keepalive_idle_sec", &mori::io::tcp::TcpConfig::keepalive_idle_sec)
      .def_readwrite("keepalive_intvl_sec", &mori::io::tcp::TcpConfig::keepalive_intvl_sec)
      .def_readwrite("keepalive_cnt", &mori::io::tcp::TcpConfig::keepalive_cnt)
      .def_readwrite("enable_ctrl_nodelay", &mori::io::tcp::TcpConfig::enable_ctrl_nodelay);
  py::class_<mori::io::p2p::P2PConfig>(m, "P2PConfig")
      .def(py::init<>())
      .def_readwrite("num_streams", &mori::io::p2p::P2PConfig::num_streams)
      .def_readwrite("num_events", &mori::io::p2p::P2PConfig::num_events)
      .def_readwrite("op_timeout_ms", &mori::io::p2p::P2PConfig::op_timeout_ms)
      .def_readwrite("scatter_gather_threshold", &mori::io::p2p::P2PConfig::scatter_gather_threshold)
      .def_readwrite("run_kernel", &mori::io::p2p::P2PConfig::run_kernel)
      .def_readwrite("resident_blocks", &mori::io::p2p::P2PConfig::resident_blocks)
      .def_readwrite("resident_idle_us", &mori::io::p2p::P2PConfig::resident_idle_us);
  py::class_<mori::io::ucx::RdmaConfig>(m, "RdmaConfig")
      .def(py::init<>())
      .def_readwrite("lib_dir", &mori::io::ucx::RdmaConfig::lib_dir)
      .def_readwrite("net_devices", &mori::io::ucx::RdmaConfig::net_devices)
      .def_readwrite("lanes", &mori::io::ucx::RdmaConfig::lanes)
      .def_readwrite("post_batch", &mori::io::ucx::RdmaConfig::post_batch)
      .def_readwrite("polling", &mori::io::ucx::RdmaConfig::polling)
      .def_readwrite("notify", &mori::io::ucx::RdmaConfig::notify)
      .def_readwrite("chunk_bytes", &mori::io::ucx::RdmaConfig::chunk_bytes)
      .def_readwrite("max_chunks", &mori::io::ucx::RdmaConfig::max_chunks)
      .def_readwrite("op_timeout_ms", &mori::io::ucx::RdmaConfig::op_timeout_ms);

  py::class_<Engine>(m, "Engine")
      .def(py::init([](const std::string& key, const std::string& host, uint16_t port, const py::bytes& secret,
                       const std::string& node_id, const std::string& hostname, int64_t connect_timeout_ms, int64_t handshake_timeout_ms, int64_t io_timeout_ms,
                       uint64_t max_frame_bytes,
                       uint32_t max_segments, size_t max_connections, size_t max_pending_connections,
                       size_t max_inbound_per_peer) {
             mori::io::EngineConfig c;
             c.key = key;
             c.host = host;
             c.port = port;
             c.secret = secret;
             c.node_id = node_id;
             c.hostname = hostname;
             c.connect_timeout_ms = connect_timeout_ms;
             c.handshake_timeout_ms = handshake_timeout_ms;
             c.io_timeout_ms = io_timeout_ms;
             c.max_frame_bytes = max_frame_bytes;
             c.max_segments = max_segments;
             c.max_connections = max_connections;
             c.max_pending_connections = max_pending_connections;
             c.max_inbound_per_peer = max_inbound_per_peer;
             py::gil_scoped_release release;
             return std::make_unique<Engine>(c);
           }),
           py::arg("key"), py::arg("host"), py::arg("port"), py::arg("secret"), py::arg("node_id"),
           py::arg("hostname"), py::arg("connect_timeout_ms"),
           py::arg("handshake_timeout_ms"), py::arg("io_timeout_ms"), py::arg("max_frame_bytes"), py::arg("max_segments"),
           py::arg("max_connections"), py::arg("max_pending_connections"), py::arg("max_inbound_per_peer"))
      .def_property_readonly("key", &Engine::key)
      .def_property_readonly("secret", [](const Engine& e) { return py::bytes(e.secret()); })
      .def_property_readonly("port", &Engine::port)
      .def("create_tcp_backend", &Engine::create_tcp_backend, py::arg("config"))
      .def("remove_tcp_backend", &Engine::remove_tcp_backend, py::call_guard<py::gil_scoped_release>())
      .def("has_tcp_backend", &Engine::has_tcp_backend)
      .def("create_p2p_backend", &Engine::create_p2p_backend, py::arg("config"),
           py::call_guard<py::gil_scoped_release>())
      .def("remove_p2p_backend", &Engine::remove_p2p_backend, py::call_guard<py::gil_scoped_release>())
      .def("has_p2p_backend", &Engine::has_p2p_backend)
      .def("create_rdma_backend", &Engine::create_rdma_backend, py::arg("config"),
           py::call_guard<py::gil_scoped_release>())
      .def("remove_rdma_backend", &Engine::remove_rdma_backend, py::call_guard<py::gil_scoped_release>())
      .def("has_rdma_backend", &Engine::has_rdma_backend)
      .def("rdma_supports_gpu", &Engine::rdma_supports_gpu)
      .def(
          "register_remote",
          [](Engine& e, const std::string& key, const std::string& host, uint16_t port, const py::bytes& secret,
             const std::string& node_id, const std::string& hostname, int64_t pid) {
            mori::io::RemoteEngine remote{key, host, port, std::string(secret), node_id, hostname, pid};
            py::gil_scoped_release release;
            e.register_remote(remote);
          },
          py::arg("key"), py::arg("host"), py::arg("port"), py::arg("secret"), py::arg("node_id"),
          py::arg("hostname"), py::arg("pid"))
      .def("deregister_remote", &Engine::deregister_remote, py::arg("key"), py::call_guard<py::gil_scoped_release>())
      .def("knows_remote", &Engine::knows_remote, py::arg("key"))
      .def(
          "register_memory",
          [](Engine& e, uintptr_t ptr, uint64_t size, MemoryLocation loc, int device) {
            mori::io::RegisteredMemory r;
            {
              py::gil_scoped_release release;
              r = e.register_memory(ptr, size, loc, device);
            }
            return py::make_tuple(r.id, r.bus_id, py::bytes(r.ipc_handle), r.ipc_offset);
          },
          py::arg("ptr"), py::arg("size"), py::arg("loc"), py::arg("device"))
      .def("deregister_memory", &Engine::deregister_memory, py::arg("mem_id"),
           py::call_guard<py::gil_scoped_release>())
      .def("allocate_uid", &Engine::allocate_uid)
      .def(
          "transfer",
          [](Engine& e, bool is_read, uint32_t local_id, const RemoteMemory& remote, const py::handle& local_offsets,
             const py::handle& remote_offsets, const py::handle& sizes, const py::handle& uid) {
            return post_transfer(e, is_read, local_id, remote, local_offsets, remote_offsets, sizes, uid);
          },
          py::arg("is_read"), py::arg("local_id"), py::arg("remote"), py::arg("local_offsets"),
          py::arg("remote_offsets"), py::arg("sizes"), py::arg("uid"))
      .def(
          "first_route",
          [](Engine& e, uint32_t local_id, const RemoteMemory& remote) -> std::optional<BackendType> {
            return e.first_route(local_id, remote);
          },
          py::arg("local_id"), py::arg("remote"),
          "The backend the route chain tries first for the pair; None when no backend takes it.")
      .def("pop_inbound", &Engine::pop_inbound, py::arg("remote_key"), py::arg("uid"))
      .def("query_remote_memory", &Engine::query_remote_memory, py::arg("remote_key"), py::arg("mem_id"),
           py::call_guard<py::gil_scoped_release>())
      .def("ping", &Engine::ping, py::arg("remote_key"), py::call_guard<py::gil_scoped_release>())
      .def("shutdown", &Engine::shutdown, py::call_guard<py::gil_scoped_release>());

  // A session's fixed arguments of Engine::transfer (memory pair), bound once so that a post
  // converts only its offsets, sizes and uid: pybind11 converts every argument of every call.
  py::class_<SessionPair>(m, "SessionPair")
      .def(py::init([](Engine& e, uint32_t local_id, const RemoteMemory& remote) {
             return SessionPair{&e, local_id, remote};
           }),
           py::arg("engine"), py::arg("local_id"), py::arg("remote"), py::keep_alive<1, 2>())
      .def("post", [](const SessionPair& p, bool is_read, const py::handle& local_offsets,
                      const py::handle& remote_offsets, const py::handle& sizes, const py::handle& uid) {
        return post_transfer(*p.engine, is_read, p.local_id, p.remote, local_offsets, remote_offsets, sizes, uid);
      });
}
