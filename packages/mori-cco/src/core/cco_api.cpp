// SPDX-License-Identifier: MIT
// The C++ API of cco.hpp: each call runs its body under `guarded` (mori/c_api_guard.hpp), which
// turns an exception into its status and the thread's last-error message.
#include <cstring>
#include <new>
#include <string>

#include "collective_args.h"
#include "core/communicator.hpp"
#include "core/error.hpp"
#include "core/settings.hpp"
#include "host/collectives.hpp"
#include "host/lsa_sync.hpp"
#include "mori/c_api_guard.hpp"
#include "mori_shmem/mori_shmem.h"

struct ccoComm {
  mori::cco::Communicator impl;
  template <typename... Args>
  explicit ccoComm(Args&&... args) : impl(std::forward<Args>(args)...) {}
};

namespace {

thread_local std::string t_last_error;
thread_local std::string t_setting_value;  // ccoSetting::value of the thread's last ccoSettingGet

template <typename Body>
int guarded(Body&& body) {
  return mori::common::guarded_call<mori::cco::Error>({ccoSuccess, ccoOutOfMemory, ccoInternalError}, t_last_error,
                                                      std::forward<Body>(body));
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

int ccoCommGetInfo(ccoComm_t comm, ccoCommInfo* info) {
  return guarded([&] {
    require(info, "info");
    mori::cco::Communicator& impl = require(comm, "comm")->impl;
    const mori::cco::Topology& topology = impl.topology();
    ccoCommInfo out{};
    out.rank = impl.rank();
    out.worldSize = impl.nranks();
    out.lsaSize = topology.lsa_size;
    out.lsaRank = topology.lsa_rank;
    out.myNodeStart = topology.node_start;
    out.flatBase = reinterpret_cast<void*>(impl.memory().flat_base());
    out.perRankSize = impl.memory().per_rank_size();
    out.localSlot = reinterpret_cast<void*>(impl.own_slot());
    out.node = topology.node;
    out.numNodes = topology.num_nodes;
    out.hostRanks = topology.host_ranks;
    out.backend = std::string(impl.memory().backend()) == "cuda" ? ccoBackendCuda : ccoBackendCpu;
    out.device = impl.memory().device();
    out.gdaConduit = impl.gda_conduit();
    *info = out;
  });
}

int ccoMemAllocAligned(ccoComm_t comm, size_t size, size_t alignment, void** ptr) {
  return guarded([&] { *require(ptr, "ptr") = require(comm, "comm")->impl.alloc(size, alignment); });
}

int ccoCopyEnginePut(ccoComm_t comm, const ccoDevComm* devComm, int peer, int queue, ccoWindow_t dst,
                     size_t dstOffset, ccoWindow_t src, size_t srcOffset, size_t bytes, uint64_t* signalValue) {
  return guarded([&] {
    const uint64_t reached = require(comm, "comm")->impl.ce_put(*require(devComm, "devComm"), peer, queue, dst,
                                                                dstOffset, src, srcOffset, bytes);
    if (signalValue != nullptr) *signalValue = reached;
  });
}

int ccoCopyEngineQuiet(ccoComm_t comm, int peer, int queue) {
  return guarded([&] { require(comm, "comm")->impl.ce_quiet(peer, queue); });
}

int ccoWaitValue64(const uint64_t* word, uint64_t least, uint64_t timeoutNs) {
  return guarded([&] { mori::cco::host::wait_at_least(require(word, "word"), least, timeoutNs, "wait"); });
}

int ccoCollectiveRunHost(const void* args, size_t argsSize) {
  return guarded([&] {
    require(args, "args");
    if (argsSize != sizeof(mori_cco_collective_args_t)) {
      mori::cco::fail(ccoInvalidArgument, "argsSize=", argsSize, " is not sizeof(mori_cco_collective_args_t)=",
                      sizeof(mori_cco_collective_args_t), " (collective_args.h of another version?)");
    }
    mori::cco::host::run_collective(*static_cast<const mori_cco_collective_args_t*>(args));
  });
}

int ccoSettingCount(int* count) {
  return guarded([&] { *require(count, "count") = static_cast<int>(mori::cco::settings::registry().size()); });
}

int ccoSettingGet(int index, ccoSetting* setting) {
  return guarded([&] {
    require(setting, "setting");
    const auto& registry = mori::cco::settings::registry();
    if (index < 0 || static_cast<size_t>(index) >= registry.size()) {
      mori::cco::fail(ccoInvalidArgument, "index=", index, " is outside [0, ", registry.size(), ")");
    }
    const mori::cco::settings::Var& var = registry[static_cast<size_t>(index)];
    t_setting_value = mori::cco::settings::effective(var.name);
    *setting = ccoSetting{var.name, var.type, var.default_value, var.doc, t_setting_value.c_str()};
  });
}

int ccoSettingGetInt(const char* name, int64_t* value) {
  return guarded([&] { *require(value, "value") = mori::cco::settings::get_int(require(name, "name")); });
}

int ccoSettingGetSize(const char* name, uint64_t* value) {
  return guarded([&] { *require(value, "value") = mori::cco::settings::get_size(require(name, "name")); });
}
