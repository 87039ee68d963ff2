// SPDX-License-Identifier: MIT
#include "ucx/loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::io::ucx {

namespace {

// The order of the wheel's load.py: each library's dependencies are mapped before it.
constexpr const char* kLibraries[] = {"libucs.so.0", "libuct.so.0", "libucp.so.0"};

template <typename Fn>
void bind(void* library, const char* symbol, Fn*& slot, std::string& failure) {
  slot = reinterpret_cast<Fn*>(dlsym(library, symbol));
  if (slot == nullptr && failure.empty()) failure = std::string("libucp has no symbol ") + symbol;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void* open_library(const std::string& lib_dir) {
  if (lib_dir.empty()) {
    void* handle = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw Error(Code::Unsupported, std::string("UCX is not installed: dlopen(libucp.so.0) failed: ") + dlerror() +
                                         " (pip install libucx-cu12, or set MORI_IO_UCX_LIB_DIR)");
    }
    return handle;
  }
  void* handle = nullptr;
  // Never dlclose'd: UCX keeps process-wide state (memory hooks, its async thread) once started.
  for (const char* name : kLibraries) {
    const std::string path = lib_dir + "/" + name;
    if (!is_file(path)) throw Error(Code::Unsupported, "no " + std::string(name) + " in " + lib_dir);
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) throw Error(Code::Unsupported, "dlopen(" + path + ") failed: " + dlerror());
  }
  return handle;  // libucp's
}

Api bind_all(void* library) {
  Api api{};
  std::string f;
  bind(library, "ucp_get_version", api.ucp_get_version, f);
  bind(library, "ucp_config_read", api.ucp_config_read, f);
  bind(library, "ucp_config_release", api.ucp_config_release, f);
  bind(library, "ucp_config_modify", api.ucp_config_modify, f);
  bind(library, "ucp_init_version", api.ucp_init_version, f);
  bind(library, "ucp_cleanup", api.ucp_cleanup, f);
  bind(library, "ucp_context_query", api.ucp_context_query, f);
  bind(library, "ucp_worker_create", api.ucp_worker_create, f);
  bind(library, "ucp_worker_destroy", api.ucp_worker_destroy, f);
  bind(library, "ucp_worker_query", api.ucp_worker_query, f);
  bind(library, "ucp_worker_release_address", api.ucp_worker_release_address, f);
  bind(library, "ucp_worker_progress", api.ucp_worker_progress, f);
  bind(library, "ucp_worker_get_efd", api.ucp_worker_get_efd, f);
  bind(library, "ucp_worker_arm", api.ucp_worker_arm, f);
  bind(library, "ucp_worker_set_am_recv_handler", api.ucp_worker_set_am_recv_handler, f);
  bind(library, "ucp_ep_create", api.ucp_ep_create, f);
  bind(library, "ucp_ep_close_nbx", api.ucp_ep_close_nbx, f);
  bind(library, "ucp_ep_flush_nbx", api.ucp_ep_flush_nbx, f);
  bind(library, "ucp_mem_map", api.ucp_mem_map, f);
  bind(library, "ucp_mem_unmap", api.ucp_mem_unmap, f);
  bind(library, "ucp_rkey_pack", api.ucp_rkey_pack, f);
  bind(library, "ucp_rkey_buffer_release", api.ucp_rkey_buffer_release, f);
  bind(library, "ucp_ep_rkey_unpack", api.ucp_ep_rkey_unpack, f);
  bind(library, "ucp_rkey_destroy", api.ucp_rkey_destroy, f);
  bind(library, "ucp_put_nbx", api.ucp_put_nbx, f);
  bind(library, "ucp_get_nbx", api.ucp_get_nbx, f);
  bind(library, "ucp_am_send_nbx", api.ucp_am_send_nbx, f);
  bind(library, "ucp_request_check_status", api.ucp_request_check_status, f);
  bind(library, "ucp_request_free", api.ucp_request_free, f);
  bind(library, "ucs_status_string", api.ucs_status_string, f);  // libucs, found through libucp's dependencies
  if (!f.empty()) throw Error(Code::Unsupported, f + " (UCX " + std::to_string(kMinMajor) + "." +
                                                     std::to_string(kMinMinor) + " or newer is needed)");
  api.ucp_get_version(&api.major, &api.minor, &api.release);
  if (api.major != kMinMajor || api.minor < kMinMinor) {
    throw Error(Code::Unsupported, "UCX " + std::to_string(api.major) + "." + std::to_string(api.minor) +
                                       " is too old: the RDMA backend needs " + std::to_string(kMinMajor) + "." +
                                       std::to_string(kMinMinor) + " or newer (1.x)");
  }
  return api;
}

}  // namespace

const Api& load(const std::string& lib_dir) {
  static std::mutex mutex;
  static Api* loaded = nullptr;  // leaked on purpose: UCX outlives every engine
  static std::string loaded_from;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded != nullptr) {
    if (lib_dir != loaded_from) {
      MORI_IO_LOG(Info, "UCX is already loaded from '" << loaded_from << "'; ignoring '" << lib_dir << "'");
    }
    return *loaded;
  }
  void* library = open_library(lib_dir);
  loaded = new Api(bind_all(library));
  loaded_from = lib_dir;
  MORI_IO_LOG(Info, "loaded UCX " << loaded->major << "." << loaded->minor << "." << loaded->release << " from "
                                  << (lib_dir.empty() ? std::string("the system") : lib_dir));
  return *loaded;
}

std::string describe(const Api& api, ucs_status_t status) {
  static const struct {
    ucs_status_t code;
    const char* name;
  } kNames[] = {
      {0, "UCS_OK"},
      {-2, "UCS_ERR_NO_RESOURCE"},
      {-3, "UCS_ERR_IO_ERROR"},
      {-4, "UCS_ERR_NO_MEMORY"},
      {-5, "UCS_ERR_INVALID_PARAM"},
      {-6, "UCS_ERR_UNREACHABLE"},
      {-7, "UCS_ERR_INVALID_ADDR"},
      {-8, "UCS_ERR_NOT_IMPLEMENTED"},
      {-14, "UCS_ERR_NO_DEVICE"},
      {-15, "UCS_ERR_BUSY"},
      {-16, "UCS_ERR_CANCELED"},
      {-20, "UCS_ERR_TIMED_OUT"},
      {-22, "UCS_ERR_UNSUPPORTED"},
      {-23, "UCS_ERR_REJECTED"},
      {-24, "UCS_ERR_NOT_CONNECTED"},
      {-25, "UCS_ERR_CONNECTION_RESET"},
      {-80, "UCS_ERR_ENDPOINT_TIMEOUT"},
  };
  std::string name = "status " + std::to_string(status);
  for (const auto& entry : kNames) {
    if (entry.code == status) name = entry.name;
  }
  const char* text = api.ucs_status_string != nullptr ? api.ucs_status_string(status) : nullptr;
  return text != nullptr ? std::string(text) + " (" + name + ")" : name;
}

}  // namespace mori::io::ucx
