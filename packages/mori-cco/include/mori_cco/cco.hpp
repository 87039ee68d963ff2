// SPDX-License-Identifier: MIT
// The C++ host API of mori-cco (libmori_cco.so), shaped as MORI's cco.hpp: every call returns an
// int status (ccoSuccess = 0) and ccoGetLastError() gives the message of the calling thread's
// last failure. Calls marked COLLECTIVE are made by every rank of the communicator, in the same
// order. A communicator may be used from several threads; its calls are serialised internally.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mori_cco/dev_comm.h"

#define MORI_CCO_API __attribute__((visibility("default")))

enum ccoResult : int {
  ccoSuccess = 0,
  ccoInvalidArgument = 1,
  ccoSymmetryError = 2,  // ranks made a collective call with different arguments
  ccoOutOfMemory = 3,    // the slot or its backing store is exhausted
  ccoTimeout = 4,        // a peer did not answer within the timeout
  ccoPeerLost = 5,
  ccoUnsupported = 6,    // not possible on this backend or machine (the message says why)
  ccoSystemError = 7,
  ccoInternalError = 8,
};

constexpr size_t CCO_UNIQUE_ID_BYTES = 128;
struct ccoUniqueId {
  char internal[CCO_UNIQUE_ID_BYTES];
};

enum ccoBackend : int { ccoBackendAuto = 0, ccoBackendCpu = 1, ccoBackendCuda = 2 };

// What a device communicator reserves in its resource window (MORI's field names). Of the GDA
// fields, the signal and counter counts size the resource window; contexts, queue depth and
// traffic class describe NIC queues, which the proxy-based GDA path does not have, and are
// accepted for source compatibility.
struct ccoDevCommRequirements {
  uint32_t size;     // sizeof(ccoDevCommRequirements), for forward compatibility
  uint32_t magic;    // MORI_CCO_DEV_COMM_MAGIC
  uint32_t version;  // MORI_CCO_DEV_COMM_VERSION
  int gdaConnectionType;
  int gdaContextCount;
  int gdaSignalCount;
  int gdaCounterCount;
  int gdaQueueDepth;
  int gdaTrafficClass;
  int lsaBarrierCount;
  int railGdaBarrierCount;
  int sdmaQueueCount;  // copy-engine queues per LSA peer (0: MORI_CCO_CE_QUEUES)
  int barrierCount;
};

#define CCO_DEV_COMM_REQUIREMENTS_INITIALIZER                                                                 \
  {                                                                                                          \
    sizeof(ccoDevCommRequirements), MORI_CCO_DEV_COMM_MAGIC, MORI_CCO_DEV_COMM_VERSION,                       \
        MORI_CCO_GDA_CONNECTION_CROSSNODE, 4, 16, 16, 0, -1, 0, 0, 0, 0                                      \
  }

typedef struct ccoComm* ccoComm_t;
typedef mori_cco_dev_comm_t ccoDevComm;
typedef mori_cco_window_t ccoWindow_t;

// What a communicator is, fixed when it is created. MORI keeps the first seven as public fields of
// its ccoComm (same names); here the handle is opaque and ccoCommGetInfo copies them out.
struct ccoCommInfo {
  int rank;
  int worldSize;
  int lsaSize;      // ranks of this rank's LSA team (they map each other's slots)
  int lsaRank;      // this rank's index in it
  int myNodeStart;  // world rank of LSA rank 0
  void* flatBase;   // this process's address of LSA rank 0's slot
  size_t perRankSize;
  void* localSlot;      // this rank's own slot: flatBase + lsaRank * perRankSize
  int node;             // index of this rank's LSA team (teams are contiguous rank blocks)
  int numNodes;         // LSA teams in the world; ranks of other teams are reached through GDA
  int hostRanks;        // ranks on this machine (more than lsaSize when one host stands for several)
  ccoBackend backend;   // ccoBackendCpu or ccoBackendCuda, never ccoBackendAuto
  int device;           // CUDA ordinal; -1 on the cpu backend
  const char* gdaConduit;  // transport of GDA requests ("tcp", "ucx"); "" on one node; lives as comm does
};

// One entry of mori-cco's registry of environment variables (what `python -m mori.cco env` lists).
// The strings are static except value, the effective value, valid until the calling thread's next
// ccoSettingGet.
struct ccoSetting {
  const char* name;
  const char* type;  // "choice", "size", "seconds", "int", "string"
  const char* defaultValue;
  const char* doc;
  const char* value;
};

extern "C++" {
MORI_CCO_API const char* ccoGetLastError();
MORI_CCO_API int ccoGetUniqueId(ccoUniqueId* id);
// COLLECTIVE. perRankVmmSize: bytes of each rank's slot (0: MORI_CCO_PER_RANK_VMM); backend:
// ccoBackendAuto follows MORI_CCO_BACKEND (whose auto picks cuda when a GPU is visible); device: the
// CUDA ordinal (-1: device 0). LSA teams are the hosts' ranks, or what MORI_VPOD_ID,
// MORI_CCO_FABRIC_CROSSNODE_LSA and MORI_CCO_FABRIC_DISABLE set (docs/user-guide/cco.md).
MORI_CCO_API int ccoCommCreate(const ccoUniqueId& id, int nRanks, int rank, size_t perRankVmmSize, ccoComm_t* comm,
                               ccoBackend backend = ccoBackendAuto, int device = -1);
// COLLECTIVE. Frees every window, dev comm and allocation of comm.
MORI_CCO_API int ccoCommDestroy(ccoComm_t comm);
// COLLECTIVE. Symmetric allocation: the same offset in every rank's slot. 256-byte aligned.
MORI_CCO_API int ccoMemAlloc(ccoComm_t comm, size_t size, void** ptr);
MORI_CCO_API int ccoMemFree(ccoComm_t comm, void* ptr);
// COLLECTIVE. Registers [ptr, ptr + size) of an allocation as a window (same offsets everywhere).
MORI_CCO_API int ccoWindowRegister(ccoComm_t comm, void* ptr, size_t size, ccoWindow_t* window);
// COLLECTIVE. Allocates size bytes and registers them; *ptr receives the local address.
MORI_CCO_API int ccoWindowRegister(ccoComm_t comm, size_t size, ccoWindow_t* window, void** ptr);
MORI_CCO_API int ccoWindowDeregister(ccoComm_t comm, ccoWindow_t window);
// The address through which this rank reaches rank pe's copy of localPtr (pe in this node).
MORI_CCO_API int ccoGetPeerPtr(ccoComm_t comm, const void* localPtr, int pe, void** peerPtr);
// COLLECTIVE. Allocates the resource window that reqs asks for and fills *devComm.
MORI_CCO_API int ccoDevCommCreate(ccoComm_t comm, const ccoDevCommRequirements* reqs, ccoDevComm* devComm);
MORI_CCO_API int ccoDevCommDestroy(ccoComm_t comm, const ccoDevComm* devComm);
// COLLECTIVE. Host barrier over the communicator's bootstrap network.
MORI_CCO_API int ccoBarrierAll(ccoComm_t comm);
// Reads (and with clear, resets) the error word of devComm (MORI_CCO_ERR_*); synchronise first.
MORI_CCO_API int ccoDevCommError(ccoComm_t comm, const ccoDevComm* devComm, int clear, uint32_t* code);

// GDA from the host: one-sided transfers with ranks of other nodes (world ranks; a rank of this
// node is ccoInvalidArgument), through mori-shmem's remote transport, as kernels do with
// mori_cco/device/gda.cuh. A put returns once src may be reused; its bytes are at the peer after
// ccoGdaFlush, or once the peer sees its signal: signalId >= 0 adds signalValue to the peer's
// signal signalId of devComm after the data (-1: no signal).
MORI_CCO_API int ccoGdaPut(ccoComm_t comm, const ccoDevComm* devComm, int peer, ccoWindow_t dst, size_t dstOffset,
                           ccoWindow_t src, size_t srcOffset, size_t bytes, int signalId = -1,
                           uint64_t signalValue = 1);
// Copies the peer's src window bytes into this rank's dst window; they are there on return.
MORI_CCO_API int ccoGdaGet(ccoComm_t comm, int peer, ccoWindow_t src, size_t srcOffset, ccoWindow_t dst,
                           size_t dstOffset, size_t bytes);
// The peer's signal signalId gets += value; not ordered after earlier puts (signal with the put).
MORI_CCO_API int ccoGdaSignal(ccoComm_t comm, const ccoDevComm* devComm, int peer, int signalId, uint64_t value);
// Every GDA request issued before it, by host threads or kernels, is applied at its target.
MORI_CCO_API int ccoGdaFlush(ccoComm_t comm);
// This rank's signal signalId of devComm.
MORI_CCO_API int ccoReadSignal(ccoComm_t comm, const ccoDevComm* devComm, int signalId, uint64_t* value);

// ---- Beyond MORI's host API (MORI has no call for these; Python's mori.cco uses them) ----

// Copies comm's fixed description (rank, LSA team, slot layout, backend) into *info.
MORI_CCO_API int ccoCommGetInfo(ccoComm_t comm, ccoCommInfo* info);
// COLLECTIVE. ccoMemAlloc with an alignment (a power of two; below 256 counts as 256).
MORI_CCO_API int ccoMemAllocAligned(ccoComm_t comm, size_t size, size_t alignment, void** ptr);

// Copy engine (MORI's SDMA path, driven from the host): copies bytes of this rank's src window into
// LSA rank peer's dst window on copy-engine queue `queue` of devComm, then adds 1 to the peer's
// copy-engine signal for (this rank, queue); *signalValue (may be NULL) receives the value that
// signal reaches, for the peer's wait. cuda: a stream per peer and queue; cpu: a host thread.
MORI_CCO_API int ccoCopyEnginePut(ccoComm_t comm, const ccoDevComm* devComm, int peer, int queue, ccoWindow_t dst,
                                  size_t dstOffset, ccoWindow_t src, size_t srcOffset, size_t bytes,
                                  uint64_t* signalValue);
// Waits until this rank's copy-engine puts to peer on queue (-1: every peer / queue) completed.
MORI_CCO_API int ccoCopyEngineQuiet(ccoComm_t comm, int peer = -1, int queue = -1);

// cpu backend, host memory: waits until the 64-bit word at `word` is >= least (a signal of a dev
// comm's resource window, say); ccoTimeout after timeoutNs (0: no bound).
MORI_CCO_API int ccoWaitValue64(const uint64_t* word, uint64_t least, uint64_t timeoutNs);
// cpu backend: runs one collective call on the calling thread. args points at a
// mori_cco_collective_args_t (collective_args.h, shipped with the device sources, which run the
// same protocol on the GPU) and argsSize is its sizeof, checked against the library's.
MORI_CCO_API int ccoCollectiveRunHost(const void* args, size_t argsSize);

// mori-cco's settings (environment variables): each is read through this registry, and a value
// that does not parse fails with ccoInvalidArgument naming the variable, value and expectation.
MORI_CCO_API int ccoSettingCount(int* count);
MORI_CCO_API int ccoSettingGet(int index, ccoSetting* setting);
// The parsed value of a registered "int" / "size" setting (its default when unset).
MORI_CCO_API int ccoSettingGetInt(const char* name, int64_t* value);
MORI_CCO_API int ccoSettingGetSize(const char* name, uint64_t* value);
}
