// SPDX-License-Identifier: MIT
// The slice of UCX's UCP API the RDMA backend uses, declared by hand: the wheel is built without
// UCX headers and opens libucp with dlopen at run time (loader.hpp), so a machine without UCX
// still imports mori.io. Layouts, enum values and signatures are those of UCX 1.22's ucp.h
// (ucp_def.h, ucs/type/status.h, ucs/memory/memory_type.h); tests/native/check_ucx_abi.cpp
// compiles every one of them against the real headers of the libucx wheel. Structs are only ever
// passed with a field_mask naming the fields set here, so libraries older than 1.22 (whose
// structs are prefixes of these) read them correctly too.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

namespace mori::io::ucx {

// ucs_status_t is a packed enum in status.h: one byte, also as a return value.
using ucs_status_t = int8_t;
using ucs_status_ptr_t = void*;
using ucp_context_h = struct ucp_context*;
using ucp_config_t = struct ucp_config;
using ucp_worker_h = struct ucp_worker*;
using ucp_ep_h = struct ucp_ep*;
using ucp_mem_h = struct ucp_mem*;
using ucp_rkey_h = struct ucp_rkey*;
using ucp_address_t = struct ucp_address;
using ucp_datatype_t = uint64_t;

constexpr ucs_status_t UCS_OK = 0;
constexpr ucs_status_t UCS_INPROGRESS = 1;
constexpr ucs_status_t UCS_ERR_BUSY = -15;
constexpr ucs_status_t UCS_ERR_CANCELED = -16;
constexpr ucs_status_t UCS_ERR_LAST = -100;

// UCS_PTR_IS_ERR / UCS_PTR_IS_PTR / UCS_PTR_STATUS of status.h.
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

constexpr uint64_t bit(unsigned i) { return uint64_t(1) << i; }

// ucp_params_field, ucp_feature
constexpr uint64_t UCP_PARAM_FIELD_FEATURES = bit(0);
constexpr uint64_t UCP_PARAM_FIELD_MT_WORKERS_SHARED = bit(5);
constexpr uint64_t UCP_PARAM_FIELD_NAME = bit(8);
constexpr uint64_t UCP_FEATURE_RMA = bit(1);
constexpr uint64_t UCP_FEATURE_WAKEUP = bit(4);
constexpr uint64_t UCP_FEATURE_AM = bit(6);
// ucp_context_attr_field
constexpr uint64_t UCP_ATTR_FIELD_MEMORY_TYPES = bit(2);
// ucp_worker_params_field, ucp_worker_attr_field
constexpr uint64_t UCP_WORKER_PARAM_FIELD_THREAD_MODE = bit(0);
constexpr uint64_t UCP_WORKER_PARAM_FIELD_NAME = bit(6);
constexpr uint64_t UCP_WORKER_ATTR_FIELD_ADDRESS = bit(1);
// ucp_ep_params_field, ucp_ep_close_flags_t
constexpr uint64_t UCP_EP_PARAM_FIELD_REMOTE_ADDRESS = bit(0);
constexpr uint64_t UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE = bit(1);
constexpr uint64_t UCP_EP_PARAM_FIELD_ERR_HANDLER = bit(2);
constexpr uint64_t UCP_EP_PARAM_FIELD_NAME = bit(7);
constexpr uint32_t UCP_EP_CLOSE_FLAG_FORCE = 1;
// ucp_mem_map_params_field
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_ADDRESS = bit(0);
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_LENGTH = bit(1);
constexpr uint64_t UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE = bit(4);
// ucp_op_attr_t
constexpr uint32_t UCP_OP_ATTR_FIELD_CALLBACK = 1u << 1;
constexpr uint32_t UCP_OP_ATTR_FIELD_USER_DATA = 1u << 2;
constexpr uint32_t UCP_OP_ATTR_FIELD_FLAGS = 1u << 4;
constexpr uint32_t UCP_OP_ATTR_FIELD_MEMORY_TYPE = 1u << 6;
constexpr uint32_t UCP_OP_ATTR_FIELD_MEMH = 1u << 8;
// ucp_send_am_flags, ucp_am_recv_attr_t, ucp_am_handler_param_field
constexpr uint32_t UCP_AM_SEND_FLAG_REPLY = 1u << 0;
constexpr uint32_t UCP_AM_SEND_FLAG_EAGER = 1u << 1;
constexpr uint64_t UCP_AM_RECV_ATTR_FIELD_REPLY_EP = bit(0);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_ID = bit(0);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_CB = bit(2);
constexpr uint64_t UCP_AM_HANDLER_PARAM_FIELD_ARG = bit(3);

constexpr size_t kEntityNameMax = 32;   // UCP_ENTITY_NAME_MAX
constexpr size_t kCpuSetBits = 1024;    // UCS_CPU_SETSIZE

using ucp_request_init_callback_t = void (*)(void*);
using ucp_request_cleanup_callback_t = void (*)(void*);
using ucp_send_nbx_callback_t = void (*)(void* request, ucs_status_t status, void* user_data);
using ucp_err_handler_cb_t = void (*)(void* arg, ucp_ep_h ep, ucs_status_t status);

struct ucp_am_recv_param_t {
  uint64_t recv_attr;
  ucp_ep_h reply_ep;
};
using ucp_am_recv_callback_t = ucs_status_t (*)(void* arg, const void* header, size_t header_length, void* data,
                                                size_t length, const ucp_am_recv_param_t* param);

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

struct ucs_cpu_set_t {
  unsigned long ucs_bits[kCpuSetBits / (8 * sizeof(unsigned long))];
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

struct ucp_err_handler_t {
  ucp_err_handler_cb_t cb;
  void* arg;
};

struct ucs_sock_addr_t {
  const struct sockaddr* addr;
  socklen_t addrlen;
};

struct ucp_ep_params_t {
  uint64_t field_mask;
  const ucp_address_t* address;
  ucp_err_handling_mode_t err_mode;
  ucp_err_handler_t err_handler;
  void* user_data;
  unsigned flags;
  ucs_sock_addr_t sockaddr;
  struct ucp_conn_request* conn_request;
  const char* name;
  ucs_sock_addr_t local_sockaddr;
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

struct ucp_am_handler_param_t {
  uint64_t field_mask;
  unsigned id;
  uint32_t flags;
  ucp_am_recv_callback_t cb;
  void* arg;
};

// Bound by loader.cpp; every entry is non-null once load() returned.
struct Api {
  unsigned major = 0, minor = 0, release = 0;  // of the library actually loaded
  void (*ucp_get_version)(unsigned*, unsigned*, unsigned*);
  ucs_status_t (*ucp_config_read)(const char*, const char*, ucp_config_t**);
  void (*ucp_config_release)(ucp_config_t*);
  ucs_status_t (*ucp_config_modify)(ucp_config_t*, const char*, const char*);
  ucs_status_t (*ucp_init_version)(unsigned, unsigned, const ucp_params_t*, const ucp_config_t*, ucp_context_h*);
  void (*ucp_cleanup)(ucp_context_h);
  ucs_status_t (*ucp_context_query)(ucp_context_h, ucp_context_attr_t*);
  ucs_status_t (*ucp_worker_create)(ucp_context_h, const ucp_worker_params_t*, ucp_worker_h*);
  void (*ucp_worker_destroy)(ucp_worker_h);
  ucs_status_t (*ucp_worker_query)(ucp_worker_h, ucp_worker_attr_t*);
  void (*ucp_worker_release_address)(ucp_worker_h, ucp_address_t*);
  unsigned (*ucp_worker_progress)(ucp_worker_h);
  ucs_status_t (*ucp_worker_get_efd)(ucp_worker_h, int*);
  ucs_status_t (*ucp_worker_arm)(ucp_worker_h);
  ucs_status_t (*ucp_worker_set_am_recv_handler)(ucp_worker_h, const ucp_am_handler_param_t*);
  ucs_status_t (*ucp_ep_create)(ucp_worker_h, const ucp_ep_params_t*, ucp_ep_h*);
  ucs_status_ptr_t (*ucp_ep_close_nbx)(ucp_ep_h, const ucp_request_param_t*);
  ucs_status_ptr_t (*ucp_ep_flush_nbx)(ucp_ep_h, const ucp_request_param_t*);
  ucs_status_t (*ucp_mem_map)(ucp_context_h, const ucp_mem_map_params_t*, ucp_mem_h*);
  ucs_status_t (*ucp_mem_unmap)(ucp_context_h, ucp_mem_h);
  ucs_status_t (*ucp_rkey_pack)(ucp_context_h, ucp_mem_h, void**, size_t*);
  void (*ucp_rkey_buffer_release)(void*);
  ucs_status_t (*ucp_ep_rkey_unpack)(ucp_ep_h, const void*, ucp_rkey_h*);
  void (*ucp_rkey_destroy)(ucp_rkey_h);
  ucs_status_ptr_t (*ucp_put_nbx)(ucp_ep_h, const void*, size_t, uint64_t, ucp_rkey_h, const ucp_request_param_t*);
  ucs_status_ptr_t (*ucp_get_nbx)(ucp_ep_h, void*, size_t, uint64_t, ucp_rkey_h, const ucp_request_param_t*);
  ucs_status_ptr_t (*ucp_am_send_nbx)(ucp_ep_h, unsigned, const void*, size_t, const void*, size_t,
                                      const ucp_request_param_t*);
  ucs_status_t (*ucp_request_check_status)(void*);
  void (*ucp_request_free)(void*);
  const char* (*ucs_status_string)(ucs_status_t);
};

}  // namespace mori::io::ucx
