// SPDX-License-Identifier: MIT
// The UCX conduit's operations (NOTE [ucx conduit]); setup and waiting are in ucx_conduit.cpp.
#include <cstring>
#include <exception>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rma_apply.hpp"
#include "remote/ucx_conduit.hpp"

namespace mori::shmem::remote {

namespace {

// Active-message ids of the "am" atomics.
constexpr unsigned kAmoRequest = 77;
constexpr unsigned kAmoAnswer = 78;

struct AmoMessage {
  uint64_t token;  // the initiator's, echoed in the answer
  uint64_t offset;
  uint64_t value;
  uint64_t compare;
  int32_t amo;   // MORI_SHMEM_AMO_* / SIGNAL_*
  int32_t type;  // MORI_SHMEM_TYPE_*
  int32_t from;  // the initiator's PE: the answer goes back on the target's endpoint to it
  int32_t reserved;
};

struct AmoAnswer {
  uint64_t token;
  uint64_t old;
  int32_t status;  // 0, or the mori_shmem_status_t the target's heap access raised
  int32_t reserved;
};

bool fits(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

bool is_signal(int amo) { return amo == MORI_SHMEM_SIGNAL_SET || amo == MORI_SHMEM_SIGNAL_ADD; }

struct Mapped {
  ucx::ucp_atomic_op_t op;
  uint64_t operand;
};

// The UCP operation (and operand) that carries amo; every one is used with a reply buffer, which
// makes it fetching, so non-fetching codes simply drop the old value.
Mapped map_amo(int amo, uint64_t value) {
  switch (amo) {
    case MORI_SHMEM_AMO_SET:
    case MORI_SHMEM_SIGNAL_SET:
    case MORI_SHMEM_AMO_SWAP: return {ucx::UCP_ATOMIC_OP_SWAP, value};
    case MORI_SHMEM_AMO_ADD:
    case MORI_SHMEM_SIGNAL_ADD:
    case MORI_SHMEM_AMO_FETCH_ADD: return {ucx::UCP_ATOMIC_OP_ADD, value};
    case MORI_SHMEM_AMO_INC:
    case MORI_SHMEM_AMO_FETCH_INC: return {ucx::UCP_ATOMIC_OP_ADD, 1};
    case MORI_SHMEM_AMO_FETCH: return {ucx::UCP_ATOMIC_OP_ADD, 0};  // UCP has no atomic load
    case MORI_SHMEM_AMO_AND:
    case MORI_SHMEM_AMO_FETCH_AND: return {ucx::UCP_ATOMIC_OP_AND, value};
    case MORI_SHMEM_AMO_OR:
    case MORI_SHMEM_AMO_FETCH_OR: return {ucx::UCP_ATOMIC_OP_OR, value};
    case MORI_SHMEM_AMO_XOR:
    case MORI_SHMEM_AMO_FETCH_XOR: return {ucx::UCP_ATOMIC_OP_XOR, value};
    case MORI_SHMEM_AMO_COMPARE_SWAP: return {ucx::UCP_ATOMIC_OP_CSWAP, value};
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "amo=", amo, " is not an atomic operation code");
}

// The old value as the conduit contract returns it: signed 32-bit values sign-extended.
uint64_t widen(uint64_t raw, int type) {
  switch (type) {
    case MORI_SHMEM_TYPE_INT32: return static_cast<uint64_t>(int64_t(int32_t(uint32_t(raw))));
    case MORI_SHMEM_TYPE_UINT32: return uint32_t(raw);
  }
  return raw;
}

}  // namespace

void UcxConduit::check_range(int pe, uint64_t offset, uint64_t length, uint64_t alignment, const char* what) const {
  if (!fits(offset, length, heap_size_)) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, what, " of ", length, " bytes at heap offset ", offset, " on PE ",
                pe, " runs past the end of the ", heap_size_, "-byte heap");
  }
  if (offset % alignment != 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, what, " at heap offset ", offset, " on PE ", pe,
                " is not aligned to ", alignment, " bytes");
  }
}

template <typename Post>
void UcxConduit::post_and_finish(Peer& target, const char* what, Post&& post) {
  const Deadline deadline = Deadline::after(config_.timeout_s);
  ucx::ucs_status_ptr_t request;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request = post(usable(target, what));
  }
  finish(target, request, deadline, what);
}

void UcxConduit::put(int pe, uint64_t offset, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  check_range(pe, offset, nbytes, 1, "a put");
  Peer& target = peer(pe);
  post_and_finish(target, "a put", [&](ucx::ucp_ep_h ep) {
    const ucx::ucp_request_param_t param{};  // contiguous bytes, no callback
    const ucx::ucs_status_ptr_t request =
        api_.ucp_put_nbx(ep, src, nbytes, target.base + offset, target.rkey, &param);
    target.dirty.store(true);
    return request;
  });
}

void UcxConduit::get(int pe, uint64_t offset, void* dest, size_t nbytes) {
  if (nbytes == 0) return;
  check_range(pe, offset, nbytes, 1, "a get");
  Peer& target = peer(pe);
  post_and_finish(target, "a get", [&](ucx::ucp_ep_h ep) {
    const ucx::ucp_request_param_t param{};
    return api_.ucp_get_nbx(ep, dest, nbytes, target.base + offset, target.rkey, &param);
  });
}

void UcxConduit::flush(Peer& target, const char* what) {
  post_and_finish(target, what, [&](ucx::ucp_ep_h ep) {
    const ucx::ucp_request_param_t param{};
    return api_.ucp_ep_flush_nbx(ep, &param);
  });
}

void UcxConduit::put_signal(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset,
                            uint64_t value, int sig_op) {
  rma::check_signal_op(sig_op);
  check_range(pe, signal_offset, 8, 8, "a signal");
  if (nbytes > 0) {
    put(pe, offset, src, nbytes);
    // Remote completion of the data before the signal travels: see NOTE [ucx conduit].
    flush(peer(pe), "the data of a put-with-signal");
  }
  signal(pe, signal_offset, value, sig_op);
}

void UcxConduit::signal(int pe, uint64_t signal_offset, uint64_t value, int sig_op) {
  rma::check_signal_op(sig_op);
  atomic(pe, signal_offset, sig_op, MORI_SHMEM_TYPE_UINT64, value, 0);
}

uint64_t UcxConduit::atomic(int pe, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) {
  const size_t width = rma::amo_width(type);
  check_range(pe, offset, width, width, "an atomic");
  map_amo(amo, value);  // refuses an unknown code before anything travels
  Peer& target = peer(pe);
  return am_atomics_ ? am_atomic(target, offset, amo, type, value, compare)
                     : ucx_atomic(target, offset, amo, type, value, compare);
}

uint64_t UcxConduit::ucx_atomic(Peer& target, uint64_t offset, int amo, int type, uint64_t value,
                                uint64_t compare) {
  const size_t width = rma::amo_width(type);
  const Mapped mapped = map_amo(amo, value);
  // UCP's cswap compares with `buffer` and swaps in what the reply buffer holds on entry.
  const bool cswap = mapped.op == ucx::UCP_ATOMIC_OP_CSWAP;
  const uint64_t operand = cswap ? compare : mapped.operand;
  uint64_t reply_in = cswap ? value : 0;
  uint32_t operand32 = uint32_t(operand), reply32 = uint32_t(reply_in);
  ucx::ucp_request_param_t param{};
  param.op_attr_mask = ucx::UCP_OP_ATTR_FIELD_DATATYPE | ucx::UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  param.datatype = ucx::contig(width);
  param.reply_buffer = width == 4 ? static_cast<void*>(&reply32) : static_cast<void*>(&reply_in);
  const void* buffer = width == 4 ? static_cast<const void*>(&operand32) : static_cast<const void*>(&operand);
  post_and_finish(target, "an atomic", [&](ucx::ucp_ep_h ep) {
    return api_.ucp_atomic_op_nbx(ep, mapped.op, buffer, 1, target.base + offset, target.rkey, &param);
  });
  return widen(width == 4 ? reply32 : reply_in, type);
}

uint64_t UcxConduit::am_atomic(Peer& target, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) {
  const Deadline deadline = Deadline::after(config_.timeout_s);
  AmoWait wait;
  AmoMessage message{0, offset, value, compare, amo, type, rank_, 0};
  ucx::ucp_request_param_t param{};
  param.op_attr_mask = ucx::UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = ucx::UCP_AM_SEND_FLAG_EAGER | ucx::UCP_AM_SEND_FLAG_COPY_HEADER;
  ucx::ucs_status_ptr_t request;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ucx::ucp_ep_h ep = usable(target, "an atomic");
    message.token = next_token_++;
    request = api_.ucp_am_send_nbx(ep, kAmoRequest, &message, sizeof(message), nullptr, 0, &param);
    pending_[message.token] = &wait;
  }
  // An answer that arrives after this call gave up finds no waiter and is dropped.
  struct Forget {
    UcxConduit& self;
    uint64_t token;
    ~Forget() {
      std::lock_guard<std::mutex> lock(self.mutex_);
      self.pending_.erase(token);
    }
  } forget{*this, message.token};
  finish(target, request, deadline, "an atomic");
  progress_until(target, [&] { return wait.answered || !target.lost.empty(); }, deadline, "an atomic");
  if (!wait.answered) {
    std::lock_guard<std::mutex> lock(mutex_);
    usable(target, "an atomic");  // throws PEER_LOST with the reason
  }
  if (wait.status != 0) {
    throw_error(mori_shmem_status_t(wait.status), "PE ", target.pe, " refused an atomic (amo ", amo, ", type ", type,
                ", heap offset ", offset, "); its log says why");
  }
  return wait.old;
}

void UcxConduit::quiet() {
  const Deadline deadline = Deadline::after(config_.timeout_s);
  std::vector<std::pair<Peer*, ucx::ucs_status_ptr_t>> flushes;
  std::exception_ptr first;
  {
    // Every flush is posted before any is waited for: one round trip however many peers.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& target : peers_) {
      if (!target || !target->dirty.exchange(false)) continue;
      try {
        const ucx::ucp_request_param_t param{};
        flushes.emplace_back(target.get(), api_.ucp_ep_flush_nbx(usable(*target, "a quiet"), &param));
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
  }
  for (auto& [target, request] : flushes) {
    try {
      finish(*target, request, deadline, "a quiet");
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

// ---- the target side of the am atomics -----------------------------------------------------------

void UcxConduit::register_am_handlers() {
  for (auto [id, cb] : {std::pair<unsigned, ucx::ucp_am_recv_callback_t>{kAmoRequest, &UcxConduit::on_amo_request},
                        std::pair<unsigned, ucx::ucp_am_recv_callback_t>{kAmoAnswer, &UcxConduit::on_amo_answer}}) {
    ucx::ucp_am_handler_param_t param{};
    param.field_mask = ucx::UCP_AM_HANDLER_PARAM_FIELD_ID | ucx::UCP_AM_HANDLER_PARAM_FIELD_FLAGS | ucx::UCP_AM_HANDLER_PARAM_FIELD_CB |
                       ucx::UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id = id;
    param.flags = ucx::UCP_AM_FLAG_WHOLE_MSG;
    param.cb = cb;
    param.arg = this;
    const ucx::ucs_status_t status = api_.ucp_worker_set_am_recv_handler(worker_, &param);
    if (status != ucx::UCS_OK) {
      throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "ucp_worker_set_am_recv_handler: ", ucx::describe(api_, status));
    }
  }
}

ucx::ucs_status_t UcxConduit::on_amo_request(void* arg, const void* header, size_t header_length, void*, size_t,
                                             const ucx::ucp_am_recv_param_t*) {
  // Runs in progress, mutex_ held: applies the atomic to this PE's heap and answers.
  UcxConduit& self = *static_cast<UcxConduit*>(arg);
  if (header_length != sizeof(AmoMessage)) {
    log::emit(log::Level::Error, "PE ", self.rank_, ": dropped a remote atomic of ", header_length, " bytes");
    return ucx::UCS_OK;
  }
  AmoMessage message;
  std::memcpy(&message, header, sizeof(message));
  AmoAnswer answer{message.token, 0, 0, 0};
  try {
    const size_t width = rma::amo_width(message.type);
    if (!fits(message.offset, width, self.heap_size_) || message.offset % width != 0) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "atomic word at heap offset ", message.offset,
                  " is outside the heap or misaligned");
    }
    if (is_signal(message.amo)) {
      self.heap_.access.signal(message.offset, message.value, message.amo);
    } else {
      answer.old = self.heap_.access.amo(message.offset, message.amo, message.type, message.value, message.compare);
    }
  } catch (const Error& e) {
    answer.status = e.status();
    log::emit(log::Level::Error, "PE ", self.rank_, ": refused a remote atomic from PE ", message.from, ": ",
              e.what());
  } catch (const std::exception& e) {
    answer.status = MORI_SHMEM_ERR_INTERNAL;
    log::emit(log::Level::Error, "PE ", self.rank_, ": a remote atomic from PE ", message.from, " failed: ", e.what());
  }
  const bool known = message.from >= 0 && size_t(message.from) < self.peers_.size() && self.peers_[message.from];
  Peer* from = known ? self.peers_[message.from].get() : nullptr;
  if (from == nullptr || from->ep == nullptr || !from->lost.empty()) return ucx::UCS_OK;  // nobody to answer
  ucx::ucp_request_param_t param{};
  param.op_attr_mask = ucx::UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = ucx::UCP_AM_SEND_FLAG_EAGER | ucx::UCP_AM_SEND_FLAG_COPY_HEADER;
  const ucx::ucs_status_ptr_t sent =
      self.api_.ucp_am_send_nbx(from->ep, kAmoAnswer, &answer, sizeof(answer), nullptr, 0, &param);
  if (ucx::ptr_is_request(sent)) self.api_.ucp_request_free(sent);  // UCX completes it on its own
  return ucx::UCS_OK;
}

ucx::ucs_status_t UcxConduit::on_amo_answer(void* arg, const void* header, size_t header_length, void*, size_t,
                                            const ucx::ucp_am_recv_param_t*) {
  UcxConduit& self = *static_cast<UcxConduit*>(arg);
  if (header_length != sizeof(AmoAnswer)) return ucx::UCS_OK;
  AmoAnswer answer;
  std::memcpy(&answer, header, sizeof(answer));
  const auto waiting = self.pending_.find(answer.token);
  if (waiting == self.pending_.end()) return ucx::UCS_OK;  // its atomic gave up already
  waiting->second->old = answer.old;
  waiting->second->status = answer.status;
  waiting->second->answered = true;
  return ucx::UCS_OK;
}

}  // namespace mori::shmem::remote
