// SPDX-License-Identifier: MIT
#include "python/dlpack_capsule.hpp"

namespace mori::shmem::python {

namespace {

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

constexpr const char* kLegacyName = "dltensor";
constexpr const char* kVersionedName = "dltensor_versioned";

// Owns the shape/stride arrays and the reference to the Python owner.
struct Context {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  PyObject* owner;
};

void release_context(void* raw) {
  auto* context = static_cast<Context*>(raw);
  // Consumers may drop the tensor on a thread that does not hold the GIL.
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_XDECREF(context->owner);
  PyGILState_Release(gil);
  delete context;
}

template <typename Managed>
void delete_managed(Managed* managed) {
  release_context(managed->manager_ctx);
  delete managed;
}

template <typename Managed>
void capsule_destructor(PyObject* capsule, const char* name) {
  // A consumer renames the capsule to used_* once it owns the tensor; only an unconsumed capsule
  // still owns it here.
  if (PyCapsule_IsValid(capsule, name)) {
    auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(capsule, name));
    managed->deleter(managed);
  }
}

void fill(DLTensor& tensor, Context* context, uintptr_t data, int type_code, int bits, int device_type,
          int device_id) {
  tensor.data = reinterpret_cast<void*>(data);
  tensor.device = {device_type, device_id};
  tensor.ndim = static_cast<int32_t>(context->shape.size());
  tensor.dtype = {static_cast<uint8_t>(type_code), static_cast<uint8_t>(bits), 1};
  tensor.shape = context->shape.data();
  tensor.strides = context->strides.data();
  tensor.byte_offset = 0;
}

}  // namespace

pybind11::capsule make_dlpack_capsule(pybind11::object owner, uintptr_t data, const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& strides, int type_code, int bits, int device_type,
                                      int device_id, bool versioned) {
  auto* context = new Context{shape, strides, owner.inc_ref().ptr()};
  PyObject* capsule = nullptr;
  if (versioned) {
    auto* managed = new DLManagedTensorVersioned{};
    managed->version = {1, 0};
    managed->manager_ctx = context;
    managed->deleter = delete_managed<DLManagedTensorVersioned>;
    fill(managed->dl_tensor, context, data, type_code, bits, device_type, device_id);
    capsule = PyCapsule_New(managed, kVersionedName, [](PyObject* self) {
      capsule_destructor<DLManagedTensorVersioned>(self, kVersionedName);
    });
    if (capsule == nullptr) delete_managed(managed);
  } else {
    auto* managed = new DLManagedTensor{};
    managed->manager_ctx = context;
    managed->deleter = delete_managed<DLManagedTensor>;
    fill(managed->dl_tensor, context, data, type_code, bits, device_type, device_id);
    capsule = PyCapsule_New(managed, kLegacyName,
                            [](PyObject* self) { capsule_destructor<DLManagedTensor>(self, kLegacyName); });
    if (capsule == nullptr) delete_managed(managed);
  }
  if (capsule == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::capsule>(capsule);
}

}  // namespace mori::shmem::python
