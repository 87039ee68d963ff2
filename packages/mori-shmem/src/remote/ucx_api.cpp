// SPDX-License-Identifier: MIT
#include "remote/ucx_api.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::shmem::ucx {

namespace {

std::string dl_error() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlopen error";
}

// dir/name.so (the name the wheel's load.py opens, so a process that already loaded UCX through
// the libucx package shares that copy), else dir/name.so.0; nullptr (and why) when neither opens.
void* open_from(const std::string& dir, const char* name, std::string* why) {
  for (const char* suffix : {".so", ".so.0"}) {
    const std::string path = dir + "/" + name + suffix;
    if (access(path.c_str(), F_OK) != 0) continue;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    *why = dl_error();
    return nullptr;
  }
  *why = std::string("no ") + name + ".so or " + name + ".so.0 in " + dir;
  return nullptr;
}

template <typename Fn>
void bind(void* handle, const char* symbol, Fn*& slot, const std::string& origin) {
  slot = reinterpret_cast<Fn*>(dlsym(handle, symbol));
  if (slot == nullptr) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, origin, " has no ", symbol, " (UCX too old?)");
}

Api open_api(const std::string& dir) {
  Api api{};
  void* ucs = nullptr;
  void* ucp = nullptr;
  std::string why;
  if (!dir.empty()) {
    api.origin = dir + "/libucp";
    if ((ucs = open_from(dir, "libucs", &why)) == nullptr) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, why);
    std::string optional;
    open_from(dir, "libucs_signal", &optional);  // absent from some builds; never required
    if (open_from(dir, "libuct", &why) == nullptr || (ucp = open_from(dir, "libucp", &why)) == nullptr) {
      throw_error(MORI_SHMEM_ERR_UNSUPPORTED, why);
    }
  } else {
    api.origin = "the system's libucp.so.0";
    if ((ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL)) == nullptr ||
        (ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_LOCAL)) == nullptr) {
      throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "no UCX found (", dl_error(),
                  "); install libucx-cu12 or set MORI_SHMEM_UCX_DIR");
    }
  }
  bind(ucp, "ucp_get_version", api.ucp_get_version, api.origin);
  api.ucp_get_version(&api.major, &api.minor, &api.release);
  if (api.major != kApiMajor || api.minor < kOldestMinor) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, api.origin, " is UCX ", api.major, ".", api.minor,
                "; the UCX conduit needs 1.", kOldestMinor, " or newer");
  }
  const std::string& o = api.origin;
  bind(ucp, "ucp_config_read", api.ucp_config_read, o);
  bind(ucp, "ucp_config_release", api.ucp_config_release, o);
  bind(ucp, "ucp_config_modify", api.ucp_config_modify, o);
  bind(ucp, "ucp_init_version", api.ucp_init_version, o);
  bind(ucp, "ucp_cleanup", api.ucp_cleanup, o);
  bind(ucp, "ucp_context_query", api.ucp_context_query, o);
  bind(ucp, "ucp_worker_create", api.ucp_worker_create, o);
  bind(ucp, "ucp_worker_destroy", api.ucp_worker_destroy, o);
  bind(ucp, "ucp_worker_query", api.ucp_worker_query, o);
  bind(ucp, "ucp_worker_release_address", api.ucp_worker_release_address, o);
  bind(ucp, "ucp_worker_address_query", api.ucp_worker_address_query, o);
  bind(ucp, "ucp_worker_progress", api.ucp_worker_progress, o);
  bind(ucp, "ucp_worker_get_efd", api.ucp_worker_get_efd, o);
  bind(ucp, "ucp_worker_arm", api.ucp_worker_arm, o);
  bind(ucp, "ucp_worker_signal", api.ucp_worker_signal, o);
  bind(ucp, "ucp_worker_set_am_recv_handler", api.ucp_worker_set_am_recv_handler, o);
  bind(ucp, "ucp_ep_create", api.ucp_ep_create, o);
  bind(ucp, "ucp_ep_close_nbx", api.ucp_ep_close_nbx, o);
  bind(ucp, "ucp_ep_flush_nbx", api.ucp_ep_flush_nbx, o);
  bind(ucp, "ucp_ep_query", api.ucp_ep_query, o);
  bind(ucp, "ucp_mem_map", api.ucp_mem_map, o);
  bind(ucp, "ucp_mem_unmap", api.ucp_mem_unmap, o);
  bind(ucp, "ucp_rkey_pack", api.ucp_rkey_pack, o);
  bind(ucp, "ucp_rkey_buffer_release", api.ucp_rkey_buffer_release, o);
  bind(ucp, "ucp_ep_rkey_unpack", api.ucp_ep_rkey_unpack, o);
  bind(ucp, "ucp_rkey_destroy", api.ucp_rkey_destroy, o);
  bind(ucp, "ucp_put_nbx", api.ucp_put_nbx, o);
  bind(ucp, "ucp_get_nbx", api.ucp_get_nbx, o);
  bind(ucp, "ucp_atomic_op_nbx", api.ucp_atomic_op_nbx, o);
  bind(ucp, "ucp_am_send_nbx", api.ucp_am_send_nbx, o);
  bind(ucp, "ucp_request_check_status", api.ucp_request_check_status, o);
  bind(ucp, "ucp_request_free", api.ucp_request_free, o);
  bind(ucs, "ucs_status_string", api.ucs_status_string, o);
  return api;
}

}  // namespace

const Api& load(const std::string& dir) {
  // Loaded once; a failed attempt is not remembered, so a later init (another directory) retries.
  static std::mutex mutex;
  static Api api{};
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    api = open_api(dir);
    loaded = true;
    log::emit(log::Level::Debug, "UCX ", api.major, ".", api.minor, ".", api.release, " from ", api.origin);
  } else if (!dir.empty() && api.origin != dir + "/libucp") {
    log::emit(log::Level::Debug, "UCX stays the one loaded first (", api.origin, "), not ", dir);
  }
  return api;
}

std::string describe(const Api& api, ucs_status_t status) {
  const char* text = api.ucs_status_string(status);
  return std::string(text != nullptr ? text : "?") + " (ucs_status_t " + std::to_string(int(status)) + ")";
}

}  // namespace mori::shmem::ucx
