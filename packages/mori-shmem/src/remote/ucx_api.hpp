// SPDX-License-Identifier: MIT
// NOTE [ucx api]
// The slice of UCX's UCP API that the UCX conduit calls, declared here as UCX 1.22's ucp.h has it:
// libmori_shmem builds without UCX headers and opens libucp with dlopen at run time (the libucx
// wheel's, or the system's), so a machine without UCX still loads the library and falls back to
// the TCP conduit. tests/native/check_ucx_abi.cpp compiles these declarations against the real
// ucp.h of the libucx-cu12 wheel (sizes, offsets, enum values, signatures).
// UCP structs only ever grow at the end and every one carries a field_mask, so these 1.22 layouts
// also work with newer UCX, and with older UCX as long as only fields it knows are marked.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mori::shmem::ucx {

// ucs_status_t is a packed enum in ucs/type/status.h: one signed byte.
using ucs_status_t = int8_t;
constexpr ucs_status_t kOk = 0;
constexpr ucs_status_t kInProgress = 1;
constexpr ucs_status_t kErrNoResource = -2;
constexpr ucs_status_t kErrUnreachable = -6;
constexpr ucs_status_t kErrBusy = -15;
constexpr ucs_status_t kErrCanceled = -16;
constexpr ucs_status_t kErrTimedOut = -20;
constexpr ucs_status_t kErrConnectionReset = -25;
constexpr ucs_status_t kErrEndpointTimeout = -80;
constexpr ucs_status_t kErrLast = -100;

// ucs_status_ptr_t: NULL (done), a request pointer (in progress), or an error code cast to a pointer.
using ucs_status_ptr_t = void*;
inline bool ptr_is_err(ucs_status_ptr_t p) { return reinterpret_cast<uintptr_t>(p) >= uintptr_t(intptr_t(kErrLast)); }
inline bool ptr_is_ptr(ucs_status_ptr_t p) {
  return reinterpret_cast<uintptr_t>(p) - 1 < uintptr_t(intptr_t(kErrLast)) - 1;
}
inline ucs_status_t ptr_status(ucs_status_ptr_t p) {
  return ptr_is_ptr(p) ? kInProgress : static_cast<ucs_status_t>(reinterpret_cast<intptr_t>(p));
}

using ucs_thread_mode_t = int;  // enum
constexpr ucs_thread_mode_t kThreadModeSerialized = 1;
using ucs_memory_type_t = int;  // enum
constexpr ucs_memory_type_t kMemoryTypeHost = 0;
constexpr ucs_memory_type_t kMemoryTypeCuda = 1;

struct ucs_cpu_set_t {
  unsigned long ucs_bits[1024 / (8 * sizeof(unsigned long))];
};
struct ucs_sock_addr_t {
  const struct sockaddr* addr;
  socklen_t addrlen;
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

// enum ucp_params_field, ucp_feature
constexpr uint64_t kParamFieldFeatures = 1ul << 0;
constexpr uint64_t kParamFieldMtWorkersShared = 1ul << 5;
constexpr uint64_t kParamFieldEstimatedNumEps = 1ul << 6;
constexpr uint64_t kParamFieldName = 1ul << 8;
constexpr uint64_t kFeatureRma = 1ul << 1;
constexpr uint64_t kFeatureAmo32 = 1ul << 2;
constexpr uint64_t kFeatureAmo64 = 1ul << 3;
constexpr uint64_t kFeatureWakeup = 1ul << 4;
constexpr uint64_t kFeatureAm = 1ul << 6;

using ucp_request_init_callback_t = void (*)(void* request);
using ucp_request_cleanup_callback_t = void (*)(void* request);

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

// enum ucp_context_attr_field
constexpr uint64_t kAttrFieldMemoryTypes = 1ul << 2;
struct ucp_context_attr_t {
  uint64_t field_mask;
  size_t request_size;
  ucs_thread_mode_t thread_mode;
  uint64_t memory_types;
  char name[32];  // UCP_ENTITY_NAME_MAX
  size_t device_counter_size;
};

// enum ucp_worker_params_field
constexpr uint64_t kWorkerParamFieldThreadMode = 1ul << 0;
constexpr uint64_t kWorkerParamFieldName = 1ul << 6;
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

// enum ucp_worker_attr_field
constexpr uint64_t kWorkerAttrFieldAddress = 1ul << 1;
struct ucp_worker_attr_t {
  uint64_t field_mask;
  ucs_thread_mode_t thread_mode;
  uint32_t address_flags;
  ucp_address_t* address;
  size_t address_length;
  size_t max_am_header;
  char name[32];
  size_t max_debug_string;
};

// enum ucp_worker_address_attr_field
constexpr uint64_t kWorkerAddressAttrFieldUid = 1ul << 0;
struct ucp_worker_address_attr_t {
  uint64_t field_mask;
  uint64_t worker_uid;
};

using ucp_err_handling_mode_t = int;  // enum
constexpr ucp_err_handling_mode_t kErrHandlingModePeer = 1;
using ucp_err_handler_cb_t = void (*)(void* arg, ucp_ep_h ep, ucs_status_t status);
struct ucp_err_handler_t {
  ucp_err_handler_cb_t cb;
  void* arg;
};

// enum ucp_ep_params_field
constexpr uint64_t kEpParamFieldRemoteAddress = 1ul << 0;
constexpr uint64_t kEpParamFieldErrHandlingMode = 1ul << 1;
constexpr uint64_t kEpParamFieldErrHandler = 1ul << 2;
constexpr uint64_t kEpParamFieldName = 1ul << 7;
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
constexpr uint32_t kEpCloseFlagForce = 1u << 0;  // ucp_ep_close_flags_t

struct ucp_transport_entry_t {
  const char* transport_name;
  const char* device_name;
};
struct ucp_transports_t {
  ucp_transport_entry_t* entries;
  unsigned num_entries;
  size_t entry_size;
};
// enum ucp_ep_attr_field
constexpr uint64_t kEpAttrFieldTransports = 1ul << 3;
struct ucp_ep_attr_t {
  uint64_t field_mask;
  char name[32];
  struct sockaddr_storage local_sockaddr;
  struct sockaddr_storage remote_sockaddr;
  ucp_transports_t transports;
  void* user_data;
};

// enum ucp_mem_map_params_field and the protection bits
constexpr uint64_t kMemMapParamFieldAddress = 1ul << 0;
constexpr uint64_t kMemMapParamFieldLength = 1ul << 1;
constexpr uint64_t kMemMapParamFieldProt = 1ul << 3;
constexpr uint64_t kMemMapParamFieldMemoryType = 1ul << 4;
constexpr unsigned kMemMapProtLocalRead = 1u << 0;
constexpr unsigned kMemMapProtLocalWrite = 1u << 1;
constexpr unsigned kMemMapProtRemoteRead = 1u << 8;
constexpr unsigned kMemMapProtRemoteWrite = 1u << 9;
struct ucp_mem_map_params_t {
  uint64_t field_mask;
  void* address;
  size_t length;
  unsigned flags;
  unsigned prot;
  ucs_memory_type_t memory_type;
  const void* exported_memh_buffer;
};

using ucp_send_nbx_callback_t = void (*)(void* request, ucs_status_t status, void* user_data);
// ucp_op_attr_t
constexpr uint32_t kOpAttrFieldDatatype = 1u << 3;
constexpr uint32_t kOpAttrFieldFlags = 1u << 4;
constexpr uint32_t kOpAttrFieldReplyBuffer = 1u << 5;
struct ucp_request_param_t {
  uint32_t op_attr_mask;
  uint32_t flags;
  void* request;
  union {
    ucp_send_nbx_callback_t send;
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
// ucp_dt_make_contig(size): the element size above the 3 class bits, class CONTIG (0)
constexpr ucp_datatype_t contig(size_t element_bytes) { return ucp_datatype_t(element_bytes) << 3; }

using ucp_atomic_op_t = int;  // enum
constexpr ucp_atomic_op_t kAtomicOpAdd = 0;
constexpr ucp_atomic_op_t kAtomicOpSwap = 1;
constexpr ucp_atomic_op_t kAtomicOpCswap = 2;
constexpr ucp_atomic_op_t kAtomicOpAnd = 3;
constexpr ucp_atomic_op_t kAtomicOpOr = 4;
constexpr ucp_atomic_op_t kAtomicOpXor = 5;

// Active messages (the "am" atomics of a GPU heap).
struct ucp_am_recv_param_t {
  uint64_t recv_attr;
  ucp_ep_h reply_ep;
};
using ucp_am_recv_callback_t = ucs_status_t (*)(void* arg, const void* header, size_t header_length, void* data,
                                                size_t length, const ucp_am_recv_param_t* param);
// enum ucp_am_handler_param_field, ucp_am_cb_flags, ucp_send_am_flags
constexpr uint64_t kAmHandlerParamFieldId = 1ul << 0;
constexpr uint64_t kAmHandlerParamFieldFlags = 1ul << 1;
constexpr uint64_t kAmHandlerParamFieldCb = 1ul << 2;
constexpr uint64_t kAmHandlerParamFieldArg = 1ul << 3;
constexpr uint32_t kAmFlagWholeMsg = 1u << 0;
constexpr uint32_t kAmSendFlagEager = 1u << 1;
constexpr uint32_t kAmSendFlagCopyHeader = 1u << 3;
struct ucp_am_handler_param_t {
  uint64_t field_mask;
  unsigned id;
  uint32_t flags;
  ucp_am_recv_callback_t cb;
  void* arg;
};

// The entry points, resolved with dlsym from the libucp (and libucs) that load() opened.
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
  std::string origin;                          // where it was opened from, for messages
};

// The API UCX builds are held to: what these declarations were checked against.
constexpr unsigned kApiMajor = 1;
constexpr unsigned kApiMinor = 22;
// The oldest UCX accepted: every entry point above exists from it on.
constexpr unsigned kOldestMinor = 14;

// Opens UCX once per process and returns its entry points: from dir (libucs, libucs_signal when
// there, libuct, libucp, in that order, RTLD_LOCAL, as the libucx wheel's load.py does) or, when
// dir is empty, the libucp.so.0 the dynamic linker finds. Throws Error(UNSUPPORTED) saying what is
// missing. The libraries stay loaded: UCX cannot be unloaded safely.
const Api& load(const std::string& dir);

// "Destination is unreachable (UCS_ERR_UNREACHABLE)"-style text of a status.
std::string describe(const Api& api, ucs_status_t status);

}  // namespace mori::shmem::ucx
