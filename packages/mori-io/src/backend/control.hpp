// SPDX-License-Identifier: MIT
// A backend's share of the engine's authenticated control plane: the TCP server (tcp/server.hpp)
// answers RDMA_CONNECT and RDMA_KEY (ucx/wire.hpp) by asking the backend that registered here.
// Declared below every backend so that the server and the RDMA backend meet without including
// each other.
#pragma once

#include <cstdint>
#include <string>

namespace mori::io {

// Called from server connection threads, after the peer proved the engine's secret;
// Error(NotFound) becomes ERR_NOT_FOUND in the response, any other Error ERR_RDMA_OP.
class RdmaResponder {
 public:
  virtual ~RdmaResponder() = default;
  virtual std::string connect_info(const std::string& peer_key) = 0;
  virtual std::string memory_key(uint32_t mem_id) = 0;
};

}  // namespace mori::io
