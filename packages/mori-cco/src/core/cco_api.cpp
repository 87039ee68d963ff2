// SPDX-License-Identifier: MIT
// The C++ API of cco.hpp: each call runs its body under `guarded`, which turns an exception into
// its status and the thread's last-error message.
#include <cstring>
#include <new>
#include <string>

#include "core/communicator.hpp"
#include "core/error.hpp"
#include "mori_shmem/mori_shmem.h"

struct ccoComm {
  mori::cco::Communicator impl;
  template <typename... Args>
  explicit ccoComm(Args&&... args) : impl(std::forward<Args>(args)...) {}
};

namespace {

thread_local std::string t_last_error;

template <typename Body>
int guarded(Body&& body) {
  try {
    body();
    return ccoSuccess;
  } catch (const mori::cco::Error& error) {
    t_last_error = error.what();
    return error.status();
  } catch (const std::bad_alloc&) {
    t_last_error = "out of host memory";
    return ccoOutOfMemory;
  } catch (const std::exception& error) {
    t_last_error = std::string("internal error: ") + error.what();
    return ccoInternalError;
  }
}

template <typename T>
T* require(T* pointer, const char* name) {
  if (pointer == nullptr) mori::cco::fail(ccoInvalidArgument, name, " must not be NULL");
  return pointer;
}

}  // namespace

const char* ccoGetLastError() { return t_last_error.c_str(); }

int ccoGetUniqueId(ccoUniqueId* id) {
  static_assert(sizeof(ccoUniqueId) == sizeof(mori_shmem_uniqueid_t), "unique ids share mori-shmem's format");
  return guarded([&] {
    mori_shmem_uniqueid_t uid{};
    if (mori_shmem_get_unique_id(&uid) != MORI_SHMEM_SUCCESS) {
      mori::cco::fail(ccoSystemError, "creating a unique id: ", mori_shmem_last_error());
    }
    std::memcpy(require(id, "id")->internal, uid.internal, sizeof(uid.internal));
  });
}

int ccoCommCreate(const ccoUniqueId& id, int nRanks, int rank, size_t perRankVmmSize, ccoComm_t* comm,
                  ccoBackend backend, int device) {
  return guarded([&] {
    require(comm, "comm");
    *comm = nullptr;
    if (nRanks < 1) mori::cco::fail(ccoInvalidArgument, "nRanks=", nRanks, " must be at least 1");
    if (rank < 0 || rank >= nRanks) mori::cco::fail(ccoInvalidArgument, "rank=", rank, " is outside [0, ", nRanks, ")");
    mori_shmem_uniqueid_t uid{};
    std::memcpy(uid.internal, id.internal, sizeof(uid.internal));
    *comm = new ccoComm(uid, nRanks, rank, perRankVmmSize, backend, device);
  });
}

int ccoCommDestroy(ccoComm_t comm) {
  return guarded([&] { delete comm; });
}

int ccoMemAlloc(ccoComm_t comm, size_t size, void** ptr) {
  return guarded([&] { *require(ptr, "ptr") = require(comm, "comm")->impl.alloc(size, 256); });
}

int ccoMemFree(ccoComm_t comm, void* ptr) {
  return guarded([&] { require(comm, "comm")->impl.free(ptr); });
}

int ccoWindowRegister(ccoComm_t comm, void* ptr, size_t size, ccoWindow_t* window) {
  return guarded([&] { *require(window, "window") = require(comm, "comm")->impl.register_window(ptr, size); });
}

int ccoWindowRegister(ccoComm_t comm, size_t size, ccoWindow_t* window, void** ptr) {
  return guarded([&] {
    require(window, "window");
    require(ptr, "ptr");
    void* memory = require(comm, "comm")->impl.alloc(size, 256);
    *window = comm->impl.register_window(memory, size);
    *ptr = memory;
  });
}

int ccoWindowDeregister(ccoComm_t comm, ccoWindow_t window) {
  return guarded([&] { require(comm, "comm")->impl.deregister_window(window); });
}

int ccoGetPeerPtr(ccoComm_t comm, const void* localPtr, int pe, void** peerPtr) {
  return guarded([&] { *require(peerPtr, "peerPtr") = require(comm, "comm")->impl.peer_ptr(localPtr, pe); });
}

int ccoDevCommCreate(ccoComm_t comm, const ccoDevCommRequirements* reqs, ccoDevComm* devComm) {
  return guarded([&] {
    *require(devComm, "devComm") = require(comm, "comm")->impl.create_dev_comm(*require(reqs, "reqs"));
  });
}

int ccoDevCommDestroy(ccoComm_t comm, const ccoDevComm* devComm) {
  return guarded([&] { require(comm, "comm")->impl.destroy_dev_comm(*require(devComm, "devComm")); });
}

int ccoBarrierAll(ccoComm_t comm) {
  return guarded([&] { require(comm, "comm")->impl.barrier(); });
}

int ccoDevCommError(ccoComm_t comm, const ccoDevComm* devComm, int clear, uint32_t* code) {
  return guarded([&] {
    *require(code, "code") = require(comm, "comm")->impl.dev_comm_error(*require(devComm, "devComm"), clear != 0);
  });
}

int ccoGdaPut(ccoComm_t comm, const ccoDevComm* devComm, int peer, ccoWindow_t dst, size_t dstOffset, ccoWindow_t src,
              size_t srcOffset, size_t bytes, int signalId, uint64_t signalValue) {
  return guarded([&] {
    require(comm, "comm")->impl.gda_put(*require(devComm, "devComm"), peer, dst, dstOffset, src, srcOffset, bytes,
                                        signalId, signalValue);
  });
}

int ccoGdaGet(ccoComm_t comm, int peer, ccoWindow_t src, size_t srcOffset, ccoWindow_t dst, size_t dstOffset,
              size_t bytes) {
  return guarded([&] { require(comm, "comm")->impl.gda_get(peer, src, srcOffset, dst, dstOffset, bytes); });
}

int ccoGdaSignal(ccoComm_t comm, const ccoDevComm* devComm, int peer, int signalId, uint64_t value) {
  return guarded([&] { require(comm, "comm")->impl.gda_signal(*require(devComm, "devComm"), peer, signalId, value); });
}

int ccoGdaFlush(ccoComm_t comm) {
  return guarded([&] { require(comm, "comm")->impl.gda_flush(); });
}

int ccoReadSignal(ccoComm_t comm, const ccoDevComm* devComm, int signalId, uint64_t* value) {
  return guarded([&] {
    *require(value, "value") = require(comm, "comm")->impl.read_signal(*require(devComm, "devComm"), signalId);
  });
}
