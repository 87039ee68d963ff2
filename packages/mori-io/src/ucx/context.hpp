// SPDX-License-Identifier: MIT
// One UCP context per RDMA backend: the transports UCX picked on this machine (UCX_TLS,
// UCX_NET_DEVICES and the rest of UCX's own environment apply), and memory registration. Not
// thread-safe beyond construction: everything after it runs on the backend's worker thread.
#pragma once

#include <cstdint>
#include <string>

#include "ucx/loader.hpp"

namespace mori::io::ucx {

struct ContextOptions {
  std::string lib_dir;      // where libucp.so.0 is; empty: the system's
  std::string net_devices;  // UCX_NET_DEVICES for this context; empty: UCX's default or environment
  std::string name;         // shows in UCX's logs
};

class Context {
 public:
  // Throws Error(Unsupported) when UCX cannot be loaded or initialised.
  explicit Context(const ContextOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Api& api() const { return api_; }
  ucp_context_h handle() const { return context_; }
  // Whether this UCX can register and move CUDA device memory (its cuda transports loaded).
  bool supports_cuda() const { return cuda_; }

  // ucp_mem_map of memory the application owns; throws Error(System) naming the UCX error.
  ucp_mem_h map(uintptr_t address, uint64_t length, bool gpu) const;
  void unmap(ucp_mem_h memh) const;
  // The packed rkey a peer unpacks to reach the mapped memory.
  std::string pack_rkey(ucp_mem_h memh) const;

  // Throws Error(System) "<call> failed: <UCX's text>" unless status is UCS_OK.
  void check(ucs_status_t status, const char* call) const;

 private:
  const Api& api_;
  ucp_context_h context_ = nullptr;
  bool cuda_ = false;
};

}  // namespace mori::io::ucx
