// SPDX-License-Identifier: MIT
// mori.shmem._C: a thin pybind11 layer over the C ABI of libmori_shmem. Pointers travel as
// Python ints; failures raise the exception class that mori.shmem.errors registers for the
// status code. Collective and potentially long calls release the GIL so other Python threads
// (and a PE's own progress threads) keep running.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "mori_shmem/mori_shmem.h"
#include "python/dlpack_capsule.hpp"

namespace py = pybind11;

namespace {

// Leaked on purpose: Python objects must not be destroyed after the interpreter is gone.
std::map<int, py::object>& error_classes() {
  static auto* classes = new std::map<int, py::object>();
  return *classes;
}

[[noreturn]] void raise_status(int status) {
  auto it = error_classes().find(status);
  PyObject* type = it != error_classes().end() ? it->second.ptr() : PyExc_RuntimeError;
  PyErr_SetString(type, mori_shmem_last_error());
  throw py::error_already_set();
}

void check(int status) {
  if (status != MORI_SHMEM_SUCCESS) raise_status(status);
}

// Releases the GIL around a C call and raises after reacquiring it.
template <typename Call>
void call_unlocked(Call&& call) {
  int status;
  {
    py::gil_scoped_release release;
    status = call();
  }
  check(status);
}

void* as_ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }
uintptr_t as_int(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr); }

constexpr size_t kUnlockedCopyBytes = 64 * 1024;

mori_shmem_uniqueid_t to_uid(const py::bytes& data) {
  std::string raw = data;
  mori_shmem_uniqueid_t uid{};
  if (raw.size() != sizeof(uid.internal)) {
    PyErr_SetString(error_classes().count(MORI_SHMEM_ERR_INVALID_ARGUMENT)
                        ? error_classes()[MORI_SHMEM_ERR_INVALID_ARGUMENT].ptr()
                        : PyExc_ValueError,
                    ("unique_id must be exactly " + std::to_string(sizeof(uid.internal)) + " bytes, got " +
                     std::to_string(raw.size()))
                        .c_str());
    throw py::error_already_set();
  }
  std::copy(raw.begin(), raw.end(), uid.internal);
  return uid;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Native layer of mori.shmem (use the functions of mori.shmem instead)";

  m.def("set_error_classes", [](const py::dict& classes) {
    for (auto item : classes) error_classes()[item.first.cast<int>()] = py::reinterpret_borrow<py::object>(item.second);
  });
  m.def("abi_version", &mori_shmem_abi_version);
  m.def("version", &mori_shmem_version);
  m.def("backend", &mori_shmem_backend);
  m.def("cuda_available", [] { return mori_shmem_cuda_available() != 0; });
  m.def("parse_size", [](const std::string& text) {
    uint64_t bytes = 0;
    check(mori_shmem_parse_size(text.c_str(), &bytes));
    return bytes;
  });
  m.def("env_entries", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>> entries;
    for (int i = 0; i < mori_shmem_env_count(); ++i) {
      const char *name, *type, *def, *doc, *value;
      check(mori_shmem_env_entry(i, &name, &type, &def, &doc, &value));
      entries.emplace_back(name, type, def, doc, value);
    }
    return entries;
  });

  m.def("get_unique_id", [] {
    mori_shmem_uniqueid_t uid{};
    check(mori_shmem_get_unique_id(&uid));
    return py::bytes(uid.internal, sizeof(uid.internal));
  });
  m.def("init_uniqueid", [](int rank, int nranks, const py::bytes& unique_id) {
    mori_shmem_uniqueid_t uid = to_uid(unique_id);
    mori_shmem_init_attr_t attr{};
    check(mori_shmem_set_attr_uniqueid_args(rank, nranks, &uid, &attr));
    call_unlocked([&] { return mori_shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, &attr); });
  });
  m.def("finalize", [] { call_unlocked([] { return mori_shmem_finalize(); }); });
  m.def("is_initialized", [] { return mori_shmem_is_initialized() != 0; });
  m.def("my_pe", [] {
    int pe = mori_shmem_my_pe();
    if (pe < 0) raise_status(MORI_SHMEM_ERR_NOT_INITIALIZED);
    return pe;
  });
  m.def("n_pes", [] {
    int n = mori_shmem_n_pes();
    if (n < 0) raise_status(MORI_SHMEM_ERR_NOT_INITIALIZED);
    return n;
  });
  m.def("barrier_all", [] { call_unlocked([] { return mori_shmem_barrier_all(); }); });
  m.def("bootstrap_allgather", [](const py::bytes& send) {
    std::string data = send;
    int n = mori_shmem_n_pes();
    if (n < 0) raise_status(MORI_SHMEM_ERR_NOT_INITIALIZED);
    std::string out(data.size() * static_cast<size_t>(n), '\0');
    call_unlocked([&] { return mori_shmem_bootstrap_allgather(data.data(), out.data(), data.size()); });
    return py::bytes(out);
  });
  m.def("bootstrap_broadcast", [](const py::bytes& data, int root) {
    std::string buf = data;
    call_unlocked([&] { return mori_shmem_bootstrap_broadcast(buf.data(), buf.size(), root); });
    return py::bytes(buf);
  });

  m.def("malloc_align", [](size_t alignment, size_t size) {
    void* ptr = nullptr;
    call_unlocked([&] { return mori_shmem_malloc_align(alignment, size, &ptr); });
    return as_int(ptr);
  });
  m.def("ext_malloc_with_flags", [](size_t size, unsigned int flags) {
    void* ptr = nullptr;
    call_unlocked([&] { return mori_shmem_ext_malloc_with_flags(size, flags, &ptr); });
    return as_int(ptr);
  });
  m.def("free", [](uintptr_t ptr) { call_unlocked([&] { return mori_shmem_free(as_ptr(ptr)); }); });
  m.def("heap_info", [] {
    mori_shmem_heap_info_t info{};
    check(mori_shmem_heap_info(&info));
    py::dict out;
    out["base"] = info.base;
    out["size"] = info.size;
    out["reserved"] = info.reserved;
    out["used"] = info.used;
    out["largest_free"] = info.largest_free;
    out["num_allocations"] = info.num_allocations;
    out["backend"] = std::string(info.backend);
    return out;
  });
  m.def("buffer_register", [](uintptr_t ptr, size_t size) { check(mori_shmem_buffer_register(as_ptr(ptr), size)); });
  m.def("buffer_deregister",
        [](uintptr_t ptr, size_t size) { check(mori_shmem_buffer_deregister(as_ptr(ptr), size)); });
  m.def("pe_transport", [](int pe) {
    int out = 0;
    check(mori_shmem_pe_transport(pe, &out));
    return out;
  });
  m.def("remote_endpoint", [] {
    char buf[64] = {};
    check(mori_shmem_remote_endpoint(buf, sizeof(buf)));
    return std::string(buf);
  });
  m.def("ptr_p2p", [](uintptr_t dest, int my_pe, int dest_pe) {
    void* out = nullptr;
    check(mori_shmem_ptr_p2p(as_ptr(dest), my_pe, dest_pe, &out));
    return as_int(out);
  });

  m.def("putmem", [](uintptr_t dest, uintptr_t src, size_t nbytes, int pe) {
    if (nbytes >= kUnlockedCopyBytes) {
      call_unlocked([&] { return mori_shmem_putmem(as_ptr(dest), as_ptr(src), nbytes, pe); });
    } else {
      check(mori_shmem_putmem(as_ptr(dest), as_ptr(src), nbytes, pe));
    }
  });
  m.def("getmem", [](uintptr_t dest, uintptr_t src, size_t nbytes, int pe) {
    if (nbytes >= kUnlockedCopyBytes) {
      call_unlocked([&] { return mori_shmem_getmem(as_ptr(dest), as_ptr(src), nbytes, pe); });
    } else {
      check(mori_shmem_getmem(as_ptr(dest), as_ptr(src), nbytes, pe));
    }
  });
  m.def("putmem_signal", [](uintptr_t dest, uintptr_t src, size_t nbytes, uintptr_t sig_addr, uint64_t signal,
                            int sig_op, int pe) {
    call_unlocked([&] {
      return mori_shmem_putmem_signal(as_ptr(dest), as_ptr(src), nbytes, static_cast<uint64_t*>(as_ptr(sig_addr)),
                                      signal, sig_op, pe);
    });
  });
  m.def("signal_op", [](uintptr_t sig_addr, uint64_t signal, int sig_op, int pe) {
    check(mori_shmem_signal_op(static_cast<uint64_t*>(as_ptr(sig_addr)), signal, sig_op, pe));
  });
  m.def("atomic", [](uintptr_t dest, int amo, int type, uint64_t value, uint64_t compare, int pe) {
    uint64_t fetched = 0;
    check(mori_shmem_atomic(as_ptr(dest), amo, type, value, compare, pe, &fetched));
    return fetched;
  });
  m.def("wait_until", [](uintptr_t ivar, int type, int cmp, uint64_t value, int64_t timeout_ms) {
    uint64_t observed = 0;
    call_unlocked([&] { return mori_shmem_wait_until(as_ptr(ivar), type, cmp, value, timeout_ms, &observed); });
    return observed;
  });
  m.def("test", [](uintptr_t ivar, int type, int cmp, uint64_t value) {
    int satisfied = 0;
    check(mori_shmem_test(as_ptr(ivar), type, cmp, value, &satisfied));
    return satisfied != 0;
  });
  m.def("get_device_state", [] {
    mori_shmem_device_state_t state{};
    check(mori_shmem_get_device_state(&state));
    return py::bytes(reinterpret_cast<const char*>(&state), sizeof(state));
  });
  m.def("cuda_device", [] {
    int ordinal = -1;
    check(mori_shmem_cuda_device(&ordinal));
    return ordinal;
  });
  m.def("device_error", [](bool clear) {
    uint32_t code = 0;
    check(mori_shmem_device_error(clear ? 1 : 0, &code));
    return code;
  });
  m.def("fence", [] { check(mori_shmem_fence()); });
  m.def("quiet", [] { check(mori_shmem_quiet()); });

  m.def("make_dlpack", &mori::shmem::python::make_dlpack_capsule, py::arg("owner"), py::arg("data"),
        py::arg("shape"), py::arg("strides"), py::arg("type_code"), py::arg("bits"), py::arg("device_type"),
        py::arg("device_id"), py::arg("versioned"));
}
