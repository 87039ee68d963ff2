// SPDX-License-Identifier: MIT
// A DLPack producer for memory the symmetric heap owns. The structs follow the DLPack ABI
// (dlpack.h, versions 0.x "dltensor" and 1.x "dltensor_versioned"); only what a producer needs.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

namespace mori::shmem::python {

// Wraps [data, ...) as a DLPack capsule. `owner` stays referenced until the consumer releases
// the tensor, which keeps the symmetric allocation alive for as long as any view of it.
pybind11::capsule make_dlpack_capsule(pybind11::object owner, uintptr_t data, const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& strides, int type_code, int bits, int device_type,
                                      int device_id, bool versioned);

}  // namespace mori::shmem::python
