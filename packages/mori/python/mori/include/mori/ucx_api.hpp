// SPDX-License-Identifier: MIT
// The slice of UCX's UCP API the mori packages use (mori-shmem's UCX conduit, mori-io's RDMA
// backend), declared by hand with ucp.h's own names, and the loader that opens libucp with dlopen:
// a package built with this header needs no UCX headers, and a machine without UCX still loads it
// (and falls back to TCP). Layouts, enum values and signatures are those of UCX 1.22's ucp.h
// (ucp_def.h, ucs/type/status.h, ucs/memory/memory_type.h);
// packages/mori/tests/native/check_ucx_abi.cpp compiles every one against the real headers of the
// libucx wheel. UCP structs only ever grow at the end and every one carries a field_mask, so these
// 1.22 layouts also work with newer UCX, and with older UCX as long as only fields it knows are
// marked.
//
// Header-only: inline functions in a hidden-visibility namespace, so each shared library that
// includes this keeps its own copy and two packages' libraries never bind to each other's.
#pragma once

#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace mori {
namespace common __attribute__((visibility("hidden"))) {
namespace ucx {

// ucs_status_t is a packed enum in status.h: one signed byte, also as a return value.
using ucs_status_t = int8_t;
constexpr ucs_status_t UCS_OK = 0;
constexpr ucs_status_t UCS_INPROGRESS = 1;
constexpr ucs_status_t UCS_ERR_NO_RESOURCE = -2;
constexpr ucs_status_t UCS_ERR_UNREACHABLE = -6;
constexpr ucs_status_t UCS_ERR_BUSY = -15;
constexpr ucs_status_t UCS_ERR_CANCELED = -16;
constexpr ucs_status_t UCS_ERR_TIMED_OUT = -20;
constexpr ucs_status_t UCS_ERR_CONNECTION_RESET = -25;
constexpr ucs_status_t UCS_ERR_ENDPOINT_TIMEOUT = -80;
constexpr ucs_status_t UCS_ERR_LAST = -100;

// ucs_status_ptr_t: NULL (done), a request pointer (in progress), or an error code cast to a
// pointer. ptr_is_err / ptr_is_request / ptr_status are status.h's UCS_PTR_IS_ERR / _IS_PTR / _STATUS.
using ucs_status_ptr_t = void*;
inline bool ptr_is_err(ucs_status_ptr_t p) {
  return reinterpret_cast<uintptr_t>(p) >= static_cast<uintptr_t>(static_cast<intptr_t>(UCS_ERR_LAST));
}
inline bool ptr_is_request(ucs_status_ptr_t p) {
  return reinterpret_cast<uintptr_t>(p) - 1 < static_cast<uintptr_t>(static_cast<intptr_t>(UCS_ERR_LAST)) - 1;
}
inline ucs_status_t ptr_status(ucs_status_ptr_t p) {
  return ptr_is_request(p) ? UCS_INPROGRESS : static_cast<ucs_status_t>(reinterpret_cast<intptr_t>(p));
}

enum ucs_memory_type_t : int { UCS_MEMORY_TYPE_HOST = 0, UCS_MEMORY_TYPE_CUDA = 1 };
enum ucs_thread_mode_t : int { UCS_THREAD_MODE_SINGLE = 0, UCS_THREAD_MODE_SERIALIZED = 1, UCS_THREAD_MODE_MULTI = 2 };
enum ucp_err_handling_mode_t : int { UCP_ERR_HANDLING_MODE_NONE = 0, UCP_ERR_HANDLING_MODE_PEER = 1 };
enum ucp_atomic_op_t : unsigned {  // unsigned, as C gives an enum without negative values
  UCP_ATOMIC_OP_ADD = 0,
  UCP_ATOMIC_OP_SWAP = 1,
  UCP_ATOMIC_OP_CSWAP = 2,
  UCP_ATOMIC_OP_AND = 3,
  UCP_ATOMIC_OP_OR = 4,
  UCP_ATOMIC_OP_XOR = 5,
};

struct ucp_context;
struct ucp_worker;
struct ucp_ep;
struct ucp_mem;
struct ucp_rkey;
struct ucp_config;
struct ucp_address;
struct ucp_conn_request;
using ucp_context_h = ucp_context*;
using ucp_worker_h = ucp_worker*;
using ucp_ep_h = ucp_ep*;
using ucp_mem_h = ucp_mem*;
using ucp_rkey_h = ucp_rkey*;
using ucp_config_t = ucp_config;
using ucp_address_t = ucp_address;
using ucp_conn_request_h = ucp_conn_request*;
using ucp_datatype_t = uint64_t;

// ucp_dt_make_contig(size): the element size above the 3 class bits, class CONTIG (0).
constexpr ucp_datatype_t contig(size_t element_bytes) { return ucp_datatype_t(element_bytes) << 3; }

constexpr uint64_t bit(unsigned i) { return uint64_t(1) << i; }

// ucp_params_field, ucp_feature
constexpr uint64_t UCP_PARAM_FIELD_FEATURES = bit(0);
constexpr uint64_t UCP_PARAM_FIELD_MT_WORKERS_SHARED = bit(5);
constexpr uint64_t UCP_PARAM_FIELD_ESTIMATED_NUM_EPS = bit(6);
constexpr uint64_t UCP_PARAM_FIELD_NAME = bit(8);
constexpr uint64_t UCP_FEATURE_RMA = bit(1);
constexpr uint64_t UCP_FEATURE_AMO32 = bit(2);
constexpr uint64_t UCP_FEATURE_AMO64 = bit(3);
constexpr uint64_t UCP_FEATURE_WAKEUP = bit(4);
constexpr uint64_t UCP_FEATURE_AM = bit(6);
// ucp_context_attr_field
constexpr uint64_t UCP_ATTR_FIELD_MEMORY_TYPES = bit(2);
// ucp_worker_params_field, ucp_worker_attr_field, ucp_worker_address_attr_field
constexpr uint64_t UCP_WORKER_PARAM_FIELD_THREAD_MODE = bit(0);
constexpr uint64_t UCP_WORKER_PARAM_FIELD_NAME = bit(6);
constexpr uint64_t UCP_WORKER_ATTR_FIELD_ADDRESS = bit(1);
constexpr uint64_t UCP_WORKER_ADDRESS_ATTR_FIELD_UID = bit(0);
// ucp_ep_params_field, ucp_ep_close_flags_t, ucp_ep_attr_field
constexpr uint64_t UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = bit(0);
constexpr uint64_t UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = bit(1);
constexpr uint64_t UCP_EP_PARAM_FIELD_ERR_HANDLER = bit(2);
constexpr uint64_t UCP_EP_PARAM_FIELD_NAME = bit(7);
constexpr uint32_t UCP_EP_CLOSE_FLAG_FORCE = 1u << 0;
constexpr uint64_t UCP_EP_ATTR_FIELD_TRANSPORTS = bit(3);
// ucp_mem_map_params_field and the protection bits
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_ADDRESS = bit(0);
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_LENGTH = bit(1);
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_PROT = bit(3);
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE = bit(4);
constexpr unsigned UCP_MEM_MAP_PROT_LOCAL_READ = 1u << 0;
constexpr unsigned UCP_MEM_MAP_PROT_LOCAL_WRITE = 1u << 1;
constexpr unsigned UCP_MEM_MAP_PROT_REMOTE_READ = 1u << 8;
constexpr unsigned UCP_MEM_MAP_PROT_REMOTE_WRITE = 1u << 9;
// ucp_op_attr_t
constexpr uint32_t UCP_OP_ATTR_FIELD_CALLBACK = 1u << 1;
constexpr uint32_t UCP_OP_ATTR_FIELD_USER_DATA = 1u << 2;
constexpr uint32_t UCP_OP_ATTR_FIELD_DATATYPE = 1u << 3;
constexpr uint32_t UCP_OP_ATTR_FIELD_FLAGS = 1u << 4;
constexpr uint32_t UCP_OP_ATTR_FIELD_REPLY_BUFFER = 1u << 5;
constexpr uint32_t UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1u << 6;
constexpr uint32_t UCP_OP_ATTR_FIELD_MEMH = 1u << 8;
// ucp_am_cb_flags, ucp_send_am_flags, ucp_am_recv_attr_t, ucp_am_handler_param_field
constexpr uint32_t UCP_AM_FLAG_WHOLE_MSG = 1u << 0;
constexpr uint32_t UCP_AM_SEND_FLAG_REPLY = 1u << 0;
constexpr uint32_t UCP_AM_SEND_FLAG_EAGER = 1u << 1;
constexpr uint32_t UCP_AM_SEND_FLAG_COPY_HEADER = 1u << 3;
constexpr uint64_t UCP_AM_RECV_ATTR_FIELD_REPLY_EP = bit(0);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_ID = bit(0);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_FLAGS = bit(1);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_CB = bit(2);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_ARG = bit(3);

constexpr size_t kEntityNameMax = 32;  // UCP_ENTITY_NAME_MAX
constexpr size_t kCpuSetBits = 1024;   // UCS_CPU_SETSIZE

using ucp_request_init_callback_t = void (*)(void* request);
using ucp_request_cleanup_callback_t = void (*)(void* request);
using ucp_send_nbx_callback_t = void (*)(void* request, ucs_status_t status, void* user_data);
using ucp_err_handler_cb_t = void (*)(void* arg, ucp_ep_h ep, ucs_status_t status);

struct ucs_cpu_set_t {
  unsigned long ucs_bits[kCpuSetBits / (8 * sizeof(unsigned long))];
};
struct ucs_sock_addr_t {
  const struct sockaddr* addr;
  socklen_t addrlen;
};

struct ucp_params_t {
  uint64_t field_mask;
  uint64_t features;
  size_t request_size;
  ucp_request_init_callback_t request_init;
  ucp_request_cleanup_callback_t request_cleanup;
  uint64_t tag_sender_mask;
  int mt_workers_shared;
  size_t estimated_num_eps;
  size_t estimated_num_ppn;
  const char* name;
  size_t node_local_id;
};

struct ucp_context_attr_t {
  uint64_t field_mask;
  size_t request_size;
  ucs_thread_mode_t thread_mode;
  uint64_t memory_types;
  char name[kEntityNameMax];
  size_t device_counter_size;
};

struct ucp_worker_params_t {
  uint64_t field_mask;
  ucs_thread_mode_t thread_mode;
  ucs_cpu_set_t cpu_mask;
  unsigned events;
  void* user_data;
  int event_fd;
  uint64_t flags;
  const char* name;
  size_t am_alignment;
  uint64_t client_id;
};

struct ucp_worker_attr_t {
  uint64_t field_mask;
  ucs_thread_mode_t thread_mode;
  uint32_t address_flags;
  ucp_address_t* address;
  size_t address_length;
  size_t max_am_header;
  char name[kEntityNameMax];
  size_t max_debug_string;
};

struct ucp_worker_address_attr_t {
  uint64_t field_mask;
  uint64_t worker_uid;
};

struct ucp_err_handler_t {
  ucp_err_handler_cb_t cb;
  void* arg;
};

struct ucp_ep_params_t {
  uint64_t field_mask;
  const ucp_address_t* address;
  ucp_err_handling_mode_t err_mode;
  ucp_err_handler_t err_handler;
  void* user_data;
  unsigned flags;
  ucs_sock_addr_t sockaddr;
  ucp_conn_request_h conn_request;
  const char* name;
  ucs_sock_addr_t local_sockaddr;
};

struct ucp_transport_entry_t {
  const char* transport_name;
  const char* device_name;
};
struct ucp_transports_t {
  ucp_transport_entry_t* entries;
  unsigned num_entries;
  size_t entry_size;
};
struct ucp_ep_attr_t {
  uint64_t field_mask;
  char name[kEntityNameMax];
  struct sockaddr_storage local_sockaddr;
  struct sockaddr_storage remote_sockaddr;
  ucp_transports_t transports;
  void* user_data;
};

struct ucp_mem_map_params_t {
  uint64_t field_mask;
  void* address;
  size_t length;
  unsigned flags;
  unsigned prot;
  ucs_memory_type_t memory_type;
  const void* exported_memh_buffer;
};

struct ucp_request_param_t {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  union {
    ucp_send_nbx_callback_t send;
    void* other;  // the receive callbacks, unused here
  } cb;
  ucp_datatype_t datatype;
  void* user_data;
  void* reply_buffer;
  ucs_memory_type_t memory_type;
  union {
    size_t* length;
    void* tag_info;
  } recv_info;
  ucp_mem_h memh;
  ucp_datatype_t remote_datatype;
  const void* remote;
  size_t remote_count;
};

struct ucp_am_recv_param_t {
  uint64_t recv_attr;
  ucp_ep_h reply_ep;
};
using ucp_am_recv_callback_t = ucs_status_t (*)(void* arg, const void* header, size_t header_length, void* data,
                                                size_t length, const ucp_am_recv_param_t* param);
struct ucp_am_handler_param_t {
  uint64_t field_mask;
  unsigned id;
  uint32_t flags;
  ucp_am_recv_callback_t cb;
  void* arg;
};

// The API these declarations follow (and ask ucp_init_version for).
constexpr unsigned kApiMajor = 1;
constexpr unsigned kApiMinor = 22;
// The oldest UCX accepted: every entry point of Api exists from it on.
constexpr unsigned kOldestMinor = 14;

// The entry points, resolved with dlsym from the libucp (and libucs) that load() opened; every
// one is non-null once load() returned.
struct Api {
  void (*ucp_get_version)(unsigned* major, unsigned* minor, unsigned* release);
  ucs_status_t (*ucp_config_read)(const char* env_prefix, const char* filename, ucp_config_t** config);
  void (*ucp_config_release)(ucp_config_t* config);
  ucs_status_t (*ucp_config_modify)(ucp_config_t* config, const char* name, const char* value);
  ucs_status_t (*ucp_init_version)(unsigned api_major, unsigned api_minor, const ucp_params_t* params,
                                   const ucp_config_t* config, ucp_context_h* context);
  void (*ucp_cleanup)(ucp_context_h context);
  ucs_status_t (*ucp_context_query)(ucp_context_h context, ucp_context_attr_t* attr);
  ucs_status_t (*ucp_worker_create)(ucp_context_h context, const ucp_worker_params_t* params, ucp_worker_h* worker);
  void (*ucp_worker_destroy)(ucp_worker_h worker);
  ucs_status_t (*ucp_worker_query)(ucp_worker_h worker, ucp_worker_attr_t* attr);
  void (*ucp_worker_release_address)(ucp_worker_h worker, ucp_address_t* address);
  ucs_status_t (*ucp_worker_address_query)(ucp_address_t* address, ucp_worker_address_attr_t* attr);
  unsigned (*ucp_worker_progress)(ucp_worker_h worker);
  ucs_status_t (*ucp_worker_get_efd)(ucp_worker_h worker, int* fd);
  ucs_status_t (*ucp_worker_arm)(ucp_worker_h worker);
  ucs_status_t (*ucp_worker_signal)(ucp_worker_h worker);
  ucs_status_t (*ucp_worker_set_am_recv_handler)(ucp_worker_h worker, const ucp_am_handler_param_t* param);
  ucs_status_t (*ucp_ep_create)(ucp_worker_h worker, const ucp_ep_params_t* params, ucp_ep_h* ep);
  ucs_status_ptr_t (*ucp_ep_close_nbx)(ucp_ep_h ep, const ucp_request_param_t* param);
  ucs_status_ptr_t (*ucp_ep_flush_nbx)(ucp_ep_h ep, const ucp_request_param_t* param);
  ucs_status_t (*ucp_ep_query)(ucp_ep_h ep, ucp_ep_attr_t* attr);
  ucs_status_t (*ucp_mem_map)(ucp_context_h context, const ucp_mem_map_params_t* params, ucp_mem_h* memh);
  ucs_status_t (*ucp_mem_unmap)(ucp_context_h context, ucp_mem_h memh);
  ucs_status_t (*ucp_rkey_pack)(ucp_context_h context, ucp_mem_h memh, void** buffer, size_t* size);
  void (*ucp_rkey_buffer_release)(void* buffer);
  ucs_status_t (*ucp_ep_rkey_unpack)(ucp_ep_h ep, const void* buffer, ucp_rkey_h* rkey);
  void (*ucp_rkey_destroy)(ucp_rkey_h rkey);
  ucs_status_ptr_t (*ucp_put_nbx)(ucp_ep_h ep, const void* buffer, size_t count, uint64_t remote_addr,
                                  ucp_rkey_h rkey, const ucp_request_param_t* param);
  ucs_status_ptr_t (*ucp_get_nbx)(ucp_ep_h ep, void* buffer, size_t count, uint64_t remote_addr, ucp_rkey_h rkey,
                                  const ucp_request_param_t* param);
  ucs_status_ptr_t (*ucp_atomic_op_nbx)(ucp_ep_h ep, ucp_atomic_op_t opcode, const void* buffer, size_t count,
                                        uint64_t remote_addr, ucp_rkey_h rkey, const ucp_request_param_t* param);
  ucs_status_ptr_t (*ucp_am_send_nbx)(ucp_ep_h ep, unsigned id, const void* header, size_t header_length,
                                      const void* buffer, size_t count, const ucp_request_param_t* param);
  ucs_status_t (*ucp_request_check_status)(void* request);
  void (*ucp_request_free)(void* request);
  const char* (*ucs_status_string)(ucs_status_t status);  // from libucs

  unsigned major = 0, minor = 0, release = 0;  // of the library opened
  std::string dir;                             // the directory asked for (empty: the system's)
  std::string origin;                          // where it was opened from, for messages
};

// Thrown by load() when UCX cannot be used; what() says what is missing (library, symbol, version).
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline std::string dl_error() {
  const char* text = dlerror();
  return text != nullptr ? text : "unknown dlopen error";
}

// dir/name.so (the name the libucx wheel's load.py opens, so a process that already loaded UCX
// through that package shares its copy), else dir/name.so.0; nullptr (and why) when neither opens.
inline void* open_from(const std::string& dir, const char* name, std::string* why) {
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
inline void bind(void* handle, const char* symbol, Fn*& slot, const std::string& origin) {
  slot = reinterpret_cast<Fn*>(dlsym(handle, symbol));
  if (slot == nullptr) throw Unavailable(origin + " has no " + symbol + " (UCX too old?)");
}

// Opens libucs, libucs_signal when there, libuct and libucp from dir, in that order and
// RTLD_LOCAL as the wheel's load.py does (each library's dependencies are mapped before it and no
// UCX symbol enters the global namespace); with dir empty, the libucp.so.0 the dynamic linker finds.
inline Api open_api(const std::string& dir) {
  Api api{};
  api.dir = dir;
  void* ucs = nullptr;
  void* ucp = nullptr;
  std::string why;
  if (!dir.empty()) {
    api.origin = dir + "/libucp";
    if ((ucs = open_from(dir, "libucs", &why)) == nullptr) throw Unavailable(why);
    std::string optional;
    open_from(dir, "libucs_signal", &optional);  // absent from some builds; never required
    if (open_from(dir, "libuct", &why) == nullptr || (ucp = open_from(dir, "libucp", &why)) == nullptr) {
      throw Unavailable(why);
    }
  } else {
    api.origin = "the system's libucp.so.0";
    if ((ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL)) == nullptr) {
      throw Unavailable("no UCX found: dlopen(libucp.so.0) failed: " + dl_error());
    }
    if ((ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_LOCAL)) == nullptr) {
      throw Unavailable("dlopen(libucs.so.0) failed: " + dl_error());
    }
  }
  bind(ucp, "ucp_get_version", api.ucp_get_version, api.origin);
  api.ucp_get_version(&api.major, &api.minor, &api.release);
  if (api.major != kApiMajor || api.minor < kOldestMinor) {
    throw Unavailable(api.origin + " is UCX " + std::to_string(api.major) + "." + std::to_string(api.minor) +
                      "; 1." + std::to_string(kOldestMinor) + " or newer is needed");
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

}  // namespace detail

// Opens UCX once per library (thread-safe) and returns its entry points: from dir or, when dir is
// empty, the system's. Throws Unavailable saying what is missing; a failed attempt is not
// remembered, so a later call (another directory) retries. Once loaded, later calls get the same
// library whatever dir they name (compare Api::dir to tell); *opened_now says whether this call
// opened it. The libraries stay loaded: UCX cannot be unloaded safely.
inline const Api& load(const std::string& dir, bool* opened_now = nullptr) {
  static std::mutex mutex;
  static Api* loaded = nullptr;  // leaked on purpose: UCX outlives every user
  std::lock_guard<std::mutex> lock(mutex);
  if (opened_now != nullptr) *opened_now = loaded == nullptr;
  if (loaded == nullptr) loaded = new Api(detail::open_api(dir));
  return *loaded;
}

// "Connection reset by remote peer (UCS_ERR_CONNECTION_RESET)"; never throws.
inline std::string describe(const Api& api, ucs_status_t status) {
  static constexpr struct {
    ucs_status_t code;
    const char* name;
  } kNames[] = {
      {0, "UCS_OK"},
      {1, "UCS_INPROGRESS"},
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
  std::string name = "ucs_status_t " + std::to_string(int(status));
  for (const auto& entry : kNames) {
    if (entry.code == status) name = entry.name;
  }
  const char* text = api.ucs_status_string != nullptr ? api.ucs_status_string(status) : nullptr;
  return text != nullptr ? std::string(text) + " (" + name + ")" : name;
}

}  // namespace ucx
}  // namespace common
}  // namespace mori
