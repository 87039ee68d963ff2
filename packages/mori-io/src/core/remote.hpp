// SPDX-License-Identifier: MIT
// What this engine knows of other engines and of their memory: the remote side of every transfer,
// as their EngineDesc and MemoryDesc describe it (the Python layer hands both over unchanged).
#pragma once

#include <cstdint>
#include <string>

#include "core/memory.hpp"

namespace mori::io {

// A remote engine: where its listener is, the secret its EngineDesc carries, and where it runs.
struct RemoteEngine {
  std::string key;
  std::string host;
  uint16_t port = 0;
  std::string secret;
  std::string node_id;   // boot id or MORI_NODE_ID; empty when the descriptor has none
  std::string hostname;
  int64_t pid = 0;
};

// Where a remote engine runs relative to this one (MORI's rule: the node id, else the hostname;
// one process when pid and hostname match too, as containers on one host may reuse pids).
struct Placement {
  bool same_host = false;
  bool same_process = false;
};

// A remote engine's registered memory, from its MemoryDesc. The GPU fields let the P2P backend
// open the region with CUDA IPC; the network backends use only the id and size.
struct RemoteMemory {
  std::string engine_key;
  uint32_t id = 0;
  uint64_t size = 0;
  MemoryLocation loc = MemoryLocation::CPU;
  uintptr_t data = 0;
  std::string ipc_handle;  // of the allocation that holds the region; empty when not exported
  uint64_t ipc_offset = 0;  // data - allocation base
};

}  // namespace mori::io
