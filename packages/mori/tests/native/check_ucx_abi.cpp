// SPDX-License-Identifier: MIT
// Compiled (never run) by test_shared_headers.py against the real ucp.h of the libucx wheel: the
// hand-written UCP declarations of <mori/ucx_api.hpp> must match it exactly, since the packages
// are built without UCX headers and bind these entry points with dlsym.
#include <ucp/api/ucp.h>

#include <cstddef>
#include <mori/ucx_api.hpp>
#include <type_traits>

namespace ours = mori::common::ucx;

#define SAME_LAYOUT(TYPE)                                                          \
  static_assert(sizeof(ours::TYPE) == sizeof(::TYPE), #TYPE " size differs");     \
  static_assert(alignof(ours::TYPE) == alignof(::TYPE), #TYPE " alignment differs")
#define SAME_OFFSET(TYPE, FIELD) \
  static_assert(offsetof(ours::TYPE, FIELD) == offsetof(::TYPE, FIELD), #TYPE "." #FIELD " offset differs")
#define SAME_VALUE(NAME) static_assert(static_cast<long long>(ours::NAME) == static_cast<long long>(::NAME), #NAME)

// Scalars and handles.
static_assert(sizeof(ours::ucs_status_t) == sizeof(::ucs_status_t), "ucs_status_t is a one-byte packed enum");
static_assert(std::is_signed_v<ours::ucs_status_t>, "ucs_status_t holds negative error codes");
static_assert(sizeof(ours::ucs_memory_type_t) == sizeof(::ucs_memory_type_t));
static_assert(sizeof(ours::ucs_thread_mode_t) == sizeof(::ucs_thread_mode_t));
static_assert(sizeof(ours::ucp_err_handling_mode_t) == sizeof(::ucp_err_handling_mode_t));
static_assert(sizeof(ours::ucp_atomic_op_t) == sizeof(::ucp_atomic_op_t));
static_assert(sizeof(ours::ucp_datatype_t) == sizeof(::ucp_datatype_t));
static_assert(ours::kEntityNameMax == UCP_ENTITY_NAME_MAX);
static_assert(ours::kCpuSetBits == UCS_CPU_SETSIZE);

SAME_VALUE(UCS_OK);
SAME_VALUE(UCS_INPROGRESS);
SAME_VALUE(UCS_ERR_NO_RESOURCE);
SAME_VALUE(UCS_ERR_UNREACHABLE);
SAME_VALUE(UCS_ERR_BUSY);
SAME_VALUE(UCS_ERR_CANCELED);
SAME_VALUE(UCS_ERR_TIMED_OUT);
SAME_VALUE(UCS_ERR_CONNECTION_RESET);
SAME_VALUE(UCS_ERR_ENDPOINT_TIMEOUT);
SAME_VALUE(UCS_ERR_LAST);
SAME_VALUE(UCS_MEMORY_TYPE_HOST);
SAME_VALUE(UCS_MEMORY_TYPE_CUDA);
SAME_VALUE(UCS_THREAD_MODE_SINGLE);
SAME_VALUE(UCS_THREAD_MODE_SERIALIZED);
SAME_VALUE(UCS_THREAD_MODE_MULTI);
SAME_VALUE(UCP_ERR_HANDLING_MODE_NONE);
SAME_VALUE(UCP_ERR_HANDLING_MODE_PEER);
SAME_VALUE(UCP_PARAM_FIELD_FEATURES);
SAME_VALUE(UCP_PARAM_FIELD_MT_WORKERS_SHARED);
SAME_VALUE(UCP_PARAM_FIELD_ESTIMATED_NUM_EPS);
SAME_VALUE(UCP_PARAM_FIELD_NAME);
SAME_VALUE(UCP_FEATURE_RMA);
SAME_VALUE(UCP_FEATURE_AMO32);
SAME_VALUE(UCP_FEATURE_AMO64);
SAME_VALUE(UCP_FEATURE_WAKEUP);
SAME_VALUE(UCP_FEATURE_AM);
SAME_VALUE(UCP_ATTR_FIELD_MEMORY_TYPES);
SAME_VALUE(UCP_WORKER_PARAM_FIELD_THREAD_MODE);
SAME_VALUE(UCP_WORKER_PARAM_FIELD_NAME);
SAME_VALUE(UCP_WORKER_ATTR_FIELD_ADDRESS);
SAME_VALUE(UCP_WORKER_ADDRESS_ATTR_FIELD_UID);
SAME_VALUE(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
SAME_VALUE(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
SAME_VALUE(UCP_EP_PARAM_FIELD_ERR_HANDLER);
SAME_VALUE(UCP_EP_PARAM_FIELD_NAME);
SAME_VALUE(UCP_EP_CLOSE_FLAG_FORCE);
SAME_VALUE(UCP_EP_ATTR_FIELD_TRANSPORTS);
SAME_VALUE(UCP_MEM_MAP_PARAM_FIELD_ADDRESS);
SAME_VALUE(UCP_MEM_MAP_PARAM_FIELD_LENGTH);
SAME_VALUE(UCP_MEM_MAP_PARAM_FIELD_PROT);
SAME_VALUE(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE);
SAME_VALUE(UCP_MEM_MAP_PROT_LOCAL_READ);
SAME_VALUE(UCP_MEM_MAP_PROT_LOCAL_WRITE);
SAME_VALUE(UCP_MEM_MAP_PROT_REMOTE_READ);
SAME_VALUE(UCP_MEM_MAP_PROT_REMOTE_WRITE);
SAME_VALUE(UCP_OP_ATTR_FIELD_CALLBACK);
SAME_VALUE(UCP_OP_ATTR_FIELD_USER_DATA);
SAME_VALUE(UCP_OP_ATTR_FIELD_DATATYPE);
SAME_VALUE(UCP_OP_ATTR_FIELD_FLAGS);
SAME_VALUE(UCP_OP_ATTR_FIELD_REPLY_BUFFER);
SAME_VALUE(UCP_OP_ATTR_FIELD_MEMORY_TYPE);
SAME_VALUE(UCP_OP_ATTR_FIELD_MEMH);
SAME_VALUE(UCP_ATOMIC_OP_ADD);
SAME_VALUE(UCP_ATOMIC_OP_SWAP);
SAME_VALUE(UCP_ATOMIC_OP_CSWAP);
SAME_VALUE(UCP_ATOMIC_OP_AND);
SAME_VALUE(UCP_ATOMIC_OP_OR);
SAME_VALUE(UCP_ATOMIC_OP_XOR);
SAME_VALUE(UCP_AM_FLAG_WHOLE_MSG);
SAME_VALUE(UCP_AM_SEND_FLAG_REPLY);
SAME_VALUE(UCP_AM_SEND_FLAG_EAGER);
SAME_VALUE(UCP_AM_SEND_FLAG_COPY_HEADER);
SAME_VALUE(UCP_AM_RECV_ATTR_FIELD_REPLY_EP);
SAME_VALUE(UCP_AM_HANDLER_PARAM_FIELD_ID);
SAME_VALUE(UCP_AM_HANDLER_PARAM_FIELD_FLAGS);
SAME_VALUE(UCP_AM_HANDLER_PARAM_FIELD_CB);
SAME_VALUE(UCP_AM_HANDLER_PARAM_FIELD_ARG);

// The pointer-status helpers assume the error range ends at -100; contig() is ucp_dt_make_contig.
static_assert(UCS_ERR_LAST == -100, "ptr helpers assume the error range ends at -100");
static_assert(ours::contig(4) == ucp_dt_make_contig(4) && ours::contig(8) == ucp_dt_make_contig(8));

// Struct layouts, field by field.
SAME_LAYOUT(ucp_params_t);
SAME_OFFSET(ucp_params_t, field_mask);
SAME_OFFSET(ucp_params_t, features);
SAME_OFFSET(ucp_params_t, request_size);
SAME_OFFSET(ucp_params_t, request_init);
SAME_OFFSET(ucp_params_t, request_cleanup);
SAME_OFFSET(ucp_params_t, tag_sender_mask);
SAME_OFFSET(ucp_params_t, mt_workers_shared);
SAME_OFFSET(ucp_params_t, estimated_num_eps);
SAME_OFFSET(ucp_params_t, estimated_num_ppn);
SAME_OFFSET(ucp_params_t, name);
SAME_OFFSET(ucp_params_t, node_local_id);

SAME_LAYOUT(ucp_context_attr_t);
SAME_OFFSET(ucp_context_attr_t, field_mask);
SAME_OFFSET(ucp_context_attr_t, request_size);
SAME_OFFSET(ucp_context_attr_t, thread_mode);
SAME_OFFSET(ucp_context_attr_t, memory_types);
SAME_OFFSET(ucp_context_attr_t, name);
SAME_OFFSET(ucp_context_attr_t, device_counter_size);

SAME_LAYOUT(ucs_cpu_set_t);
SAME_LAYOUT(ucp_worker_params_t);
SAME_OFFSET(ucp_worker_params_t, field_mask);
SAME_OFFSET(ucp_worker_params_t, thread_mode);
SAME_OFFSET(ucp_worker_params_t, cpu_mask);
SAME_OFFSET(ucp_worker_params_t, events);
SAME_OFFSET(ucp_worker_params_t, user_data);
SAME_OFFSET(ucp_worker_params_t, event_fd);
SAME_OFFSET(ucp_worker_params_t, flags);
SAME_OFFSET(ucp_worker_params_t, name);
SAME_OFFSET(ucp_worker_params_t, am_alignment);
SAME_OFFSET(ucp_worker_params_t, client_id);

SAME_LAYOUT(ucp_worker_attr_t);
SAME_OFFSET(ucp_worker_attr_t, field_mask);
SAME_OFFSET(ucp_worker_attr_t, thread_mode);
SAME_OFFSET(ucp_worker_attr_t, address_flags);
SAME_OFFSET(ucp_worker_attr_t, address);
SAME_OFFSET(ucp_worker_attr_t, address_length);
SAME_OFFSET(ucp_worker_attr_t, max_am_header);
SAME_OFFSET(ucp_worker_attr_t, name);
SAME_OFFSET(ucp_worker_attr_t, max_debug_string);

SAME_LAYOUT(ucp_worker_address_attr_t);
SAME_OFFSET(ucp_worker_address_attr_t, field_mask);
SAME_OFFSET(ucp_worker_address_attr_t, worker_uid);

SAME_LAYOUT(ucp_err_handler_t);
SAME_OFFSET(ucp_err_handler_t, cb);
SAME_OFFSET(ucp_err_handler_t, arg);
SAME_LAYOUT(ucs_sock_addr_t);
SAME_LAYOUT(ucp_ep_params_t);
SAME_OFFSET(ucp_ep_params_t, field_mask);
SAME_OFFSET(ucp_ep_params_t, address);
SAME_OFFSET(ucp_ep_params_t, err_mode);
SAME_OFFSET(ucp_ep_params_t, err_handler);
SAME_OFFSET(ucp_ep_params_t, user_data);
SAME_OFFSET(ucp_ep_params_t, flags);
SAME_OFFSET(ucp_ep_params_t, sockaddr);
SAME_OFFSET(ucp_ep_params_t, conn_request);
SAME_OFFSET(ucp_ep_params_t, name);
SAME_OFFSET(ucp_ep_params_t, local_sockaddr);

SAME_LAYOUT(ucp_transport_entry_t);
SAME_OFFSET(ucp_transport_entry_t, transport_name);
SAME_OFFSET(ucp_transport_entry_t, device_name);
SAME_LAYOUT(ucp_transports_t);
SAME_OFFSET(ucp_transports_t, entries);
SAME_OFFSET(ucp_transports_t, num_entries);
SAME_OFFSET(ucp_transports_t, entry_size);
SAME_LAYOUT(ucp_ep_attr_t);
SAME_OFFSET(ucp_ep_attr_t, field_mask);
SAME_OFFSET(ucp_ep_attr_t, name);
SAME_OFFSET(ucp_ep_attr_t, local_sockaddr);
SAME_OFFSET(ucp_ep_attr_t, remote_sockaddr);
SAME_OFFSET(ucp_ep_attr_t, transports);
SAME_OFFSET(ucp_ep_attr_t, user_data);

SAME_LAYOUT(ucp_mem_map_params_t);
SAME_OFFSET(ucp_mem_map_params_t, field_mask);
SAME_OFFSET(ucp_mem_map_params_t, address);
SAME_OFFSET(ucp_mem_map_params_t, length);
SAME_OFFSET(ucp_mem_map_params_t, flags);
SAME_OFFSET(ucp_mem_map_params_t, prot);
SAME_OFFSET(ucp_mem_map_params_t, memory_type);
SAME_OFFSET(ucp_mem_map_params_t, exported_memh_buffer);

SAME_LAYOUT(ucp_request_param_t);
SAME_OFFSET(ucp_request_param_t, op_attr_mask);
SAME_OFFSET(ucp_request_param_t, flags);
SAME_OFFSET(ucp_request_param_t, request);
SAME_OFFSET(ucp_request_param_t, cb);
SAME_OFFSET(ucp_request_param_t, datatype);
SAME_OFFSET(ucp_request_param_t, user_data);
SAME_OFFSET(ucp_request_param_t, reply_buffer);
SAME_OFFSET(ucp_request_param_t, memory_type);
SAME_OFFSET(ucp_request_param_t, recv_info);
SAME_OFFSET(ucp_request_param_t, memh);
SAME_OFFSET(ucp_request_param_t, remote_datatype);
SAME_OFFSET(ucp_request_param_t, remote);
SAME_OFFSET(ucp_request_param_t, remote_count);
static_assert(sizeof(ours::ucp_request_param_t{}.cb) == sizeof(::ucp_request_param_t{}.cb));
static_assert(sizeof(ours::ucp_request_param_t{}.recv_info) == sizeof(::ucp_request_param_t{}.recv_info));

SAME_LAYOUT(ucp_am_handler_param_t);
SAME_OFFSET(ucp_am_handler_param_t, field_mask);
SAME_OFFSET(ucp_am_handler_param_t, id);
SAME_OFFSET(ucp_am_handler_param_t, flags);
SAME_OFFSET(ucp_am_handler_param_t, cb);
SAME_OFFSET(ucp_am_handler_param_t, arg);

static_assert(sizeof(ours::ucp_am_recv_param_t) == sizeof(::ucp_am_recv_param));
static_assert(offsetof(ours::ucp_am_recv_param_t, recv_attr) == offsetof(::ucp_am_recv_param, recv_attr));
static_assert(offsetof(ours::ucp_am_recv_param_t, reply_ep) == offsetof(::ucp_am_recv_param, reply_ep));

// Each entry point must be call-compatible with the library's function of that name: the same
// number of parameters, each of the same size and pointer-ness (the handle types are distinct
// opaque structs on each side, so exact type identity cannot be asked for).
template <typename T, bool = std::is_enum_v<T>>
struct Signed : std::is_signed<T> {};
template <typename T>
struct Signed<T, true> : std::is_signed<std::underlying_type_t<T>> {};

template <typename A, typename B>
constexpr bool same_slot = sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B> &&
                           Signed<A>::value == Signed<B>::value;
template <>
constexpr bool same_slot<void, void> = true;

template <typename Ours, typename Theirs>
struct CallCompatible : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct CallCompatible<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) && same_slot<R1, R2> && (same_slot<A1, A2> && ...);
};

#define SAME_SIGNATURE(NAME) \
  static_assert(CallCompatible<decltype(ours::Api::NAME), decltype(&::NAME)>::value, #NAME " signature differs")

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
static_assert(CallCompatible<ours::ucp_send_nbx_callback_t, ::ucp_send_nbx_callback_t>::value);
static_assert(CallCompatible<ours::ucp_err_handler_cb_t, ::ucp_err_handler_cb_t>::value);
static_assert(CallCompatible<ours::ucp_am_recv_callback_t, ::ucp_am_recv_callback_t>::value);
static_assert(CallCompatible<ours::ucp_request_init_callback_t, ::ucp_request_init_callback_t>::value);

// The API version these declarations were written against; a newer ucp.h must be re-checked.
static_assert(UCP_API_MAJOR == ours::kApiMajor && UCP_API_MINOR == ours::kApiMinor,
              "ucp.h is not the UCX release ucx_api.hpp was written against");
