// SPDX-License-Identifier: MIT
// mori.umbp._C: NOTE [wire]'s framing and handshake in native code (mori/umbp/wire.py uses them).
// Every blocking step runs without the GIL; a server takes it only to call its dispatch.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "wire/connection.hpp"
#include "wire/server.hpp"

namespace py = pybind11;
using namespace mori::umbp::wire;

namespace {

std::string_view view_of(const py::bytes& b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  PyBytes_AsStringAndSize(b.ptr(), &data, &size);
  return {data, size_t(size)};
}

// Destroyed without the GIL: stop() waits for connection threads that may be waiting for it.
struct StopWithoutGil {
  void operator()(Server* server) const {
    py::gil_scoped_release release;
    delete server;
  }
};
using ServerHolder = std::unique_ptr<Server, StopWithoutGil>;

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// A connection thread's Python thread state, made at its first call and kept for its life: a
// fresh one per call (what py::gil_scoped_acquire does in a thread Python did not start) costs
// a new thread dict, context and threading.local state every call, which measured slower than
// the Python wire it replaced.
class CallerThreadState {
 public:
  ~CallerThreadState() {
    if (state_ == nullptr || interpreter_finalizing()) return;
    PyEval_RestoreThread(state_);
    PyThreadState_Clear(state_);
    PyThreadState_DeleteCurrent();
  }
  // Takes the GIL in this thread's own state (made in `interpreter` the first time).
  void enter(PyInterpreterState* interpreter) {
    if (state_ == nullptr) state_ = PyThreadState_New(interpreter);
    PyEval_RestoreThread(state_);
  }
  void leave() { PyEval_SaveThread(); }

 private:
  PyThreadState* state_ = nullptr;
};

thread_local CallerThreadState caller_thread_state;

// With the GIL: `message` as an error of the logger mori.umbp.wire (the Python wire's logger);
// never throws, as its callers hold the GIL in a thread state they must leave.
void log_error(const std::string& message) {
  try {
    py::module_::import("logging").attr("getLogger")("mori.umbp.wire").attr("error")("%s", message);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("mori.umbp wire logging");
  }
}

// The server holds the dispatch callable; it is called with the GIL, and dropped with it.
ServerHolder make_server(const py::bytes& secret, const std::string& host, size_t max_connections,
                         double handshake_timeout_s, double idle_timeout_s, py::function dispatch) {
  auto held = std::shared_ptr<py::function>(new py::function(std::move(dispatch)), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
  PyInterpreterState* interpreter = PyInterpreterState_Get();
  Dispatch call = [held, interpreter](const std::string& node, const std::string& name, std::string body) -> Answer {
    caller_thread_state.enter(interpreter);
    Answer answer;
    try {
      py::tuple result = (*held)(node, py::bytes(name), py::bytes(body));
      answer = {result[0].cast<uint8_t>(), result[1].cast<std::string>()};
    } catch (const std::exception& e) {
      // The dispatch answers its handlers' failures itself: this is a failure of the dispatch (it
      // raised, or its answer is no (status, bytes)). Answered UNKNOWN, and logged.
      const std::string why = std::string("wire dispatch failed: ") + e.what();
      log_error(why + " (a call of " + node + ")");
      answer = {2, why};  // grpc.StatusCode.UNKNOWN
    } catch (...) {
      caller_thread_state.leave();
      throw;
    }
    caller_thread_state.leave();
    return answer;
  };
  Report report = [interpreter](const std::string& node, const std::string& why) {
    if (interpreter_finalizing()) return;
    caller_thread_state.enter(interpreter);
    log_error("wire connection of " + (node.empty() ? std::string("an unauthenticated caller") : node) +
              " closed on an error of the server: " + why);
    caller_thread_state.leave();
  };
  py::gil_scoped_release release;
  return ServerHolder(new Server(std::string(view_of(secret)), host, max_connections, handshake_timeout_s,
                                 idle_timeout_s, std::move(call), std::move(report)));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "mori-umbp's native wire (NOTE [wire] in mori.umbp.wire)";
  m.attr("MAX_NODE_ID_BYTES") = kMaxNodeIdBytes;
  m.attr("MAX_FRAME_BYTES") = kMaxFrameBytes;
  m.attr("MAX_HANDSHAKES") = kMaxHandshakes;
  py::register_exception<Closed>(m, "WireClosed", PyExc_EOFError);
  py::register_exception<Timeout>(m, "WireTimeout", PyExc_TimeoutError);
  py::register_exception<SocketError>(m, "WireSocketError", PyExc_ConnectionError);
  py::register_exception<NotAServer>(m, "WireNotAServer", PyExc_RuntimeError);
  py::register_exception<Unauthenticated>(m, "WireUnauthenticated", PyExc_PermissionError);

  py::class_<Server, ServerHolder>(m, "WireServer")
      .def(py::init(&make_server), py::arg("secret"), py::arg("host"), py::arg("max_connections"),
           py::arg("handshake_timeout_s"), py::arg("idle_timeout_s"), py::arg("dispatch"))
      .def_property_readonly("port", &Server::port)
      .def("stop", &Server::stop, py::call_guard<py::gil_scoped_release>());

  py::class_<Connection>(m, "WireConnection")
      .def(py::init([](const std::string& host, uint16_t port, const std::string& node, const py::bytes& secret,
                       double timeout_s) {
             const std::string key(view_of(secret));
             py::gil_scoped_release release;
             return std::make_unique<Connection>(host, port, node, key, after_s(timeout_s));
           }),
           py::arg("host"), py::arg("port"), py::arg("node"), py::arg("secret"), py::arg("timeout_s"))
      .def(
          "send",
          [](Connection& c, const py::bytes& name, const py::bytes& body, double timeout_s) {
            // Both stay referenced by the caller's frame while the GIL is released.
            const std::string_view n = view_of(name), b = view_of(body);
            py::gil_scoped_release release;
            c.send(n, b, after_s(timeout_s));
          },
          py::arg("name"), py::arg("body"), py::arg("timeout_s"))
      .def(
          "receive",
          [](Connection& c, double timeout_s) {
            std::pair<uint8_t, std::string> answer;
            {
              py::gil_scoped_release release;
              answer = c.receive(after_s(timeout_s));
            }
            return py::make_tuple(answer.first, py::bytes(answer.second));
          },
          py::arg("timeout_s"))
      .def("close", &Connection::close)
      .def_property_readonly("closed", &Connection::closed)
      .def_property_readonly("seq", &Connection::seq);
}
