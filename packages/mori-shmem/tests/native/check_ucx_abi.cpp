// SPDX-License-Identifier: MIT
// Compiled (never run) by test_ucx_abi.py against the real ucp.h of the libucx-cu12 wheel: the
// hand-written UCP declarations of src/remote/ucx_api.hpp must match it exactly, since
// libmori_shmem is built without UCX headers and opens libucp with dlopen.
#include <ucp/api/ucp.h>

#include <cstddef>
#include <type_traits>

#include "remote/ucx_api.hpp"

namespace ours = mori::shmem::ucx;

#define SAME_LAYOUT(OURS, THEIRS)                                       \
  static_assert(sizeof(ours::OURS) == sizeof(THEIRS), #OURS " size differs"); \
  static_assert(alignof(ours::OURS) == alignof(THEIRS), #OURS " alignment differs")
#define SAME_FIELD(OURS, THEIRS, FIELD)                                                   \
  static_assert(offsetof(ours::OURS, FIELD) == offsetof(THEIRS, FIELD), #OURS "::" #FIELD " offset differs"); \
  static_assert(sizeof(ours::OURS::FIELD) == sizeof(THEIRS::FIELD), #OURS "::" #FIELD " size differs")

static_assert(UCP_API_MAJOR == ours::kApiMajor && UCP_API_MINOR == ours::kApiMinor,
              "ucp.h is not the UCX release ucx_api.hpp was written against");

SAME_LAYOUT(ucs_status_t, ucs_status_t);
SAME_LAYOUT(ucs_thread_mode_t, ucs_thread_mode_t);
SAME_LAYOUT(ucs_memory_type_t, ucs_memory_type_t);
SAME_LAYOUT(ucs_cpu_set_t, ucs_cpu_set_t);
SAME_LAYOUT(ucs_sock_addr_t, ucs_sock_addr_t);
SAME_LAYOUT(ucp_err_handling_mode_t, ucp_err_handling_mode_t);
SAME_LAYOUT(ucp_atomic_op_t, ucp_atomic_op_t);
SAME_LAYOUT(ucp_datatype_t, ucp_datatype_t);

SAME_LAYOUT(ucp_params_t, ucp_params_t);
SAME_FIELD(ucp_params_t, ucp_params_t, field_mask);
SAME_FIELD(ucp_params_t, ucp_params_t, features);
SAME_FIELD(ucp_params_t, ucp_params_t, request_size);
SAME_FIELD(ucp_params_t, ucp_params_t, request_init);
SAME_FIELD(ucp_params_t, ucp_params_t, request_cleanup);
SAME_FIELD(ucp_params_t, ucp_params_t, tag_sender_mask);
SAME_FIELD(ucp_params_t, ucp_params_t, mt_workers_shared);
SAME_FIELD(ucp_params_t, ucp_params_t, estimated_num_eps);
SAME_FIELD(ucp_params_t, ucp_params_t, estimated_num_ppn);
SAME_FIELD(ucp_params_t, ucp_params_t, name);
SAME_FIELD(ucp_params_t, ucp_params_t, node_local_id);

SAME_LAYOUT(ucp_context_attr_t, ucp_context_attr_t);
SAME_FIELD(ucp_context_attr_t, ucp_context_attr_t, request_size);
SAME_FIELD(ucp_context_attr_t, ucp_context_attr_t, thread_mode);
SAME_FIELD(ucp_context_attr_t, ucp_context_attr_t, memory_types);
SAME_FIELD(ucp_context_attr_t, ucp_context_attr_t, name);
SAME_FIELD(ucp_context_attr_t, ucp_context_attr_t, device_counter_size);

SAME_LAYOUT(ucp_worker_params_t, ucp_worker_params_t);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, thread_mode);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, cpu_mask);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, events);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, user_data);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, event_fd);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, flags);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, name);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, am_alignment);
SAME_FIELD(ucp_worker_params_t, ucp_worker_params_t, client_id);

SAME_LAYOUT(ucp_worker_attr_t, ucp_worker_attr_t);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, thread_mode);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, address_flags);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, address);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, address_length);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, max_am_header);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, name);
SAME_FIELD(ucp_worker_attr_t, ucp_worker_attr_t, max_debug_string);

SAME_LAYOUT(ucp_worker_address_attr_t, ucp_worker_address_attr_t);
SAME_FIELD(ucp_worker_address_attr_t, ucp_worker_address_attr_t, worker_uid);

SAME_LAYOUT(ucp_err_handler_t, ucp_err_handler_t);
SAME_FIELD(ucp_err_handler_t, ucp_err_handler_t, cb);
SAME_FIELD(ucp_err_handler_t, ucp_err_handler_t, arg);

SAME_LAYOUT(ucp_ep_params_t, ucp_ep_params_t);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, address);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, err_mode);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, err_handler);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, user_data);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, flags);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, sockaddr);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, conn_request);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, name);
SAME_FIELD(ucp_ep_params_t, ucp_ep_params_t, local_sockaddr);

SAME_LAYOUT(ucp_transport_entry_t, ucp_transport_entry_t);
SAME_FIELD(ucp_transport_entry_t, ucp_transport_entry_t, transport_name);
SAME_FIELD(ucp_transport_entry_t, ucp_transport_entry_t, device_name);
SAME_LAYOUT(ucp_transports_t, ucp_transports_t);
SAME_FIELD(ucp_transports_t, ucp_transports_t, entries);
SAME_FIELD(ucp_transports_t, ucp_transports_t, num_entries);
SAME_FIELD(ucp_transports_t, ucp_transports_t, entry_size);
SAME_LAYOUT(ucp_ep_attr_t, ucp_ep_attr_t);
SAME_FIELD(ucp_ep_attr_t, ucp_ep_attr_t, name);
SAME_FIELD(ucp_ep_attr_t, ucp_ep_attr_t, local_sockaddr);
SAME_FIELD(ucp_ep_attr_t, ucp_ep_attr_t, remote_sockaddr);
SAME_FIELD(ucp_ep_attr_t, ucp_ep_attr_t, transports);
SAME_FIELD(ucp_ep_attr_t, ucp_ep_attr_t, user_data);

SAME_LAYOUT(ucp_mem_map_params_t, ucp_mem_map_params_t);
SAME_FIELD(ucp_mem_map_params_t, ucp_mem_map_params_t, address);
SAME_FIELD(ucp_mem_map_params_t, ucp_mem_map_params_t, length);
SAME_FIELD(ucp_mem_map_params_t, ucp_mem_map_params_t, flags);
SAME_FIELD(ucp_mem_map_params_t, ucp_mem_map_params_t, prot);
SAME_FIELD(ucp_mem_map_params_t, ucp_mem_map_params_t, memory_type);
SAME_FIELD(ucp_mem_map_params_t, ucp_mem_map_params_t, exported_memh_buffer);

SAME_LAYOUT(ucp_request_param_t, ucp_request_param_t);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, op_attr_mask);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, flags);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, request);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, cb);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, datatype);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, user_data);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, reply_buffer);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, memory_type);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, recv_info);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, memh);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, remote_datatype);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, remote);
SAME_FIELD(ucp_request_param_t, ucp_request_param_t, remote_count);

SAME_LAYOUT(ucp_am_recv_param_t, ucp_am_recv_param_t);
SAME_FIELD(ucp_am_recv_param_t, ucp_am_recv_param_t, recv_attr);
SAME_FIELD(ucp_am_recv_param_t, ucp_am_recv_param_t, reply_ep);
SAME_LAYOUT(ucp_am_handler_param_t, ucp_am_handler_param_t);
SAME_FIELD(ucp_am_handler_param_t, ucp_am_handler_param_t, id);
SAME_FIELD(ucp_am_handler_param_t, ucp_am_handler_param_t, flags);
SAME_FIELD(ucp_am_handler_param_t, ucp_am_handler_param_t, cb);
SAME_FIELD(ucp_am_handler_param_t, ucp_am_handler_param_t, arg);

// Status codes and the status-pointer helpers.
static_assert(ours::kOk == UCS_OK && ours::kInProgress == UCS_INPROGRESS);
static_assert(ours::kErrNoResource == UCS_ERR_NO_RESOURCE && ours::kErrUnreachable == UCS_ERR_UNREACHABLE);
static_assert(ours::kErrBusy == UCS_ERR_BUSY && ours::kErrCanceled == UCS_ERR_CANCELED);
static_assert(ours::kErrTimedOut == UCS_ERR_TIMED_OUT && ours::kErrConnectionReset == UCS_ERR_CONNECTION_RESET);
static_assert(ours::kErrEndpointTimeout == UCS_ERR_ENDPOINT_TIMEOUT && ours::kErrLast == UCS_ERR_LAST);
static_assert(std::is_signed_v<std::underlying_type_t<ucs_status_t>> == std::is_signed_v<ours::ucs_status_t>);

// Enum values and bits.
static_assert(ours::kThreadModeSerialized == UCS_THREAD_MODE_SERIALIZED);
static_assert(ours::kMemoryTypeHost == UCS_MEMORY_TYPE_HOST && ours::kMemoryTypeCuda == UCS_MEMORY_TYPE_CUDA);
static_assert(ours::kParamFieldFeatures == UCP_PARAM_FIELD_FEATURES);
static_assert(ours::kParamFieldMtWorkersShared == UCP_PARAM_FIELD_MT_WORKERS_SHARED);
static_assert(ours::kParamFieldEstimatedNumEps == UCP_PARAM_FIELD_ESTIMATED_NUM_EPS);
static_assert(ours::kParamFieldName == UCP_PARAM_FIELD_NAME);
static_assert(ours::kFeatureRma == UCP_FEATURE_RMA && ours::kFeatureAmo32 == UCP_FEATURE_AMO32);
static_assert(ours::kFeatureAmo64 == UCP_FEATURE_AMO64 && ours::kFeatureWakeup == UCP_FEATURE_WAKEUP);
static_assert(ours::kFeatureAm == UCP_FEATURE_AM);
static_assert(ours::kAttrFieldMemoryTypes == UCP_ATTR_FIELD_MEMORY_TYPES);
static_assert(ours::kWorkerParamFieldThreadMode == UCP_WORKER_PARAM_FIELD_THREAD_MODE);
static_assert(ours::kWorkerParamFieldName == UCP_WORKER_PARAM_FIELD_NAME);
static_assert(ours::kWorkerAttrFieldAddress == UCP_WORKER_ATTR_FIELD_ADDRESS);
static_assert(ours::kWorkerAddressAttrFieldUid == UCP_WORKER_ADDRESS_ATTR_FIELD_UID);
static_assert(ours::kErrHandlingModePeer == UCP_ERR_HANDLING_MODE_PEER);
static_assert(ours::kEpParamFieldRemoteAddress == UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
static_assert(ours::kEpParamFieldErrHandlingMode == UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
static_assert(ours::kEpParamFieldErrHandler == UCP_EP_PARAM_FIELD_ERR_HANDLER);
static_assert(ours::kEpParamFieldName == UCP_EP_PARAM_FIELD_NAME);
static_assert(ours::kEpCloseFlagForce == UCP_EP_CLOSE_FLAG_FORCE);
static_assert(ours::kEpAttrFieldTransports == UCP_EP_ATTR_FIELD_TRANSPORTS);
static_assert(ours::kMemMapParamFieldAddress == UCP_MEM_MAP_PARAM_FIELD_ADDRESS);
static_assert(ours::kMemMapParamFieldLength == UCP_MEM_MAP_PARAM_FIELD_LENGTH);
static_assert(ours::kMemMapParamFieldProt == UCP_MEM_MAP_PARAM_FIELD_PROT);
static_assert(ours::kMemMapParamFieldMemoryType == UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE);
static_assert(ours::kMemMapProtLocalRead == UCP_MEM_MAP_PROT_LOCAL_READ);
static_assert(ours::kMemMapProtLocalWrite == UCP_MEM_MAP_PROT_LOCAL_WRITE);
static_assert(ours::kMemMapProtRemoteRead == UCP_MEM_MAP_PROT_REMOTE_READ);
static_assert(ours::kMemMapProtRemoteWrite == UCP_MEM_MAP_PROT_REMOTE_WRITE);
static_assert(ours::kOpAttrFieldDatatype == UCP_OP_ATTR_FIELD_DATATYPE);
static_assert(ours::kOpAttrFieldFlags == UCP_OP_ATTR_FIELD_FLAGS);
static_assert(ours::kOpAttrFieldReplyBuffer == UCP_OP_ATTR_FIELD_REPLY_BUFFER);
static_assert(ours::contig(4) == ucp_dt_make_contig(4) && ours::contig(8) == ucp_dt_make_contig(8));
static_assert(ours::kAtomicOpAdd == UCP_ATOMIC_OP_ADD && ours::kAtomicOpSwap == UCP_ATOMIC_OP_SWAP);
static_assert(ours::kAtomicOpCswap == UCP_ATOMIC_OP_CSWAP && ours::kAtomicOpAnd == UCP_ATOMIC_OP_AND);
static_assert(ours::kAtomicOpOr == UCP_ATOMIC_OP_OR && ours::kAtomicOpXor == UCP_ATOMIC_OP_XOR);
static_assert(ours::kAmHandlerParamFieldId == UCP_AM_HANDLER_PARAM_FIELD_ID);
static_assert(ours::kAmHandlerParamFieldFlags == UCP_AM_HANDLER_PARAM_FIELD_FLAGS);
static_assert(ours::kAmHandlerParamFieldCb == UCP_AM_HANDLER_PARAM_FIELD_CB);
static_assert(ours::kAmHandlerParamFieldArg == UCP_AM_HANDLER_PARAM_FIELD_ARG);
static_assert(ours::kAmFlagWholeMsg == UCP_AM_FLAG_WHOLE_MSG);
static_assert(ours::kAmSendFlagEager == UCP_AM_SEND_FLAG_EAGER);
static_assert(ours::kAmSendFlagCopyHeader == UCP_AM_SEND_FLAG_COPY_HEADER);

// Each entry point must be call-compatible with the function dlsym binds it to: the same number
// of parameters, each of the same size and pointer-ness (ucp.h's enums are our integers of the
// same size, its handles our pointers to the same opaque structs).
template <typename A, typename B>
constexpr bool same_slot = sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B>;

template <typename Ours, typename Theirs>
struct CallCompatible : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct CallCompatible<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) && same_slot<R1, R2> && (same_slot<A1, A2> && ...);
};
template <typename... A1, typename... A2>
struct CallCompatible<void (*)(A1...), void (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) && (same_slot<A1, A2> && ...);
};

#define SAME_SIGNATURE(FUNCTION) \
  static_assert(CallCompatible<decltype(ours::Api::FUNCTION), decltype(&::FUNCTION)>::value, #FUNCTION " signature differs")

SAME_SIGNATURE(ucp_get_version);
SAME_SIGNATURE(ucp_config_read);
SAME_SIGNATURE(ucp_config_release);
SAME_SIGNATURE(ucp_config_modify);
SAME_SIGNATURE(ucp_init_version);
SAME_SIGNATURE(ucp_cleanup);
SAME_SIGNATURE(ucp_context_query);
SAME_SIGNATURE(ucp_worker_create);
SAME_SIGNATURE(ucp_worker_destroy);
SAME_SIGNATURE(ucp_worker_query);
SAME_SIGNATURE(ucp_worker_release_address);
SAME_SIGNATURE(ucp_worker_address_query);
SAME_SIGNATURE(ucp_worker_progress);
SAME_SIGNATURE(ucp_worker_get_efd);
SAME_SIGNATURE(ucp_worker_arm);
SAME_SIGNATURE(ucp_worker_signal);
SAME_SIGNATURE(ucp_worker_set_am_recv_handler);
SAME_SIGNATURE(ucp_ep_create);
SAME_SIGNATURE(ucp_ep_close_nbx);
SAME_SIGNATURE(ucp_ep_flush_nbx);
SAME_SIGNATURE(ucp_ep_query);
SAME_SIGNATURE(ucp_mem_map);
SAME_SIGNATURE(ucp_mem_unmap);
SAME_SIGNATURE(ucp_rkey_pack);
SAME_SIGNATURE(ucp_rkey_buffer_release);
SAME_SIGNATURE(ucp_ep_rkey_unpack);
SAME_SIGNATURE(ucp_rkey_destroy);
SAME_SIGNATURE(ucp_put_nbx);
SAME_SIGNATURE(ucp_get_nbx);
SAME_SIGNATURE(ucp_atomic_op_nbx);
SAME_SIGNATURE(ucp_am_send_nbx);
SAME_SIGNATURE(ucp_request_check_status);
SAME_SIGNATURE(ucp_request_free);
SAME_SIGNATURE(ucs_status_string);

// The callbacks UCX calls into us.
static_assert(CallCompatible<ours::ucp_err_handler_cb_t, ucp_err_handler_cb_t>::value);
static_assert(CallCompatible<ours::ucp_am_recv_callback_t, ucp_am_recv_callback_t>::value);
static_assert(CallCompatible<ours::ucp_send_nbx_callback_t, ucp_send_nbx_callback_t>::value);
