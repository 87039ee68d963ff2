// SPDX-License-Identifier: MIT
// A non-root PE: one connection to the root, over which it proves it holds the job secret and
// then sends its part of every collective and waits for the result.
#include <unistd.h>

#include <string>

#include "bootstrap/socket.hpp"
#include "bootstrap/tcp_bootstrap_internal.hpp"
#include "bootstrap/wire.hpp"
#include "core/error.hpp"

namespace mori::shmem {

namespace {

std::string self_description() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return std::string("pid ") + std::to_string(getpid()) + " on " + (host[0] != '\0' ? host : "unknown host");
}

class ClientBootstrap final : public TcpBootstrapBase {
 public:
  ClientBootstrap(const UniqueIdFields& id, int rank, int nranks, double timeout_s)
      : TcpBootstrapBase(rank, nranks, id.secret, timeout_s),
        root_name_("the bootstrap root (rank 0) at " + id.host + ":" + std::to_string(id.port)) {
    const Deadline deadline = Deadline::after(timeout_s_);
    const Deadline reply_deadline = Deadline::after(timeout_s_ + reply_grace_s(timeout_s_));
    root_ = connect_with_retry(id.host, id.port, deadline, root_name_);

    std::string label;
    wire::Header header = wire::recv_header(root_, reply_deadline, "the challenge of the rendezvous", &label);
    if (header.kind != wire::Kind::Challenge) fail_on(header, reply_deadline, "the challenge");
    if (header.status != wire::kProtocolVersion) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, root_name_, " speaks bootstrap protocol version ", header.status,
                  " but this PE speaks ", wire::kProtocolVersion, "; all PEs must run the same mori-shmem release");
    }
    if (header.payload_len != wire::kNonceBytes) {
      throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed challenge from ", root_name_, " (", header.payload_len,
                  " bytes)");
    }
    uint8_t nonce[wire::kNonceBytes];
    root_.recv_all(nonce, sizeof(nonce), reply_deadline, "the challenge of the rendezvous");

    const auto mac = hello_mac(secret_, nonce, rank_, nranks_);
    wire::Header hello;
    hello.kind = wire::Kind::Hello;
    hello.status = wire::kProtocolVersion;
    hello.arg = rank_;
    hello.bytes = uint64_t(nranks_);
    wire::send_frame(root_, hello, self_description(), mac.data(), mac.size(), deadline, "the hello of the rendezvous");

    header = wire::recv_header(root_, reply_deadline, "the welcome of the rendezvous (all PEs must join)", &label);
    if (header.kind != wire::Kind::Welcome) fail_on(header, reply_deadline, "the welcome");
  }

 protected:
  void exchange(const CollectiveCall& call, const CollectiveBuffers& io) override {
    const Deadline deadline = Deadline::after(timeout_s_);
    const Deadline reply_deadline = Deadline::after(timeout_s_ + reply_grace_s(timeout_s_));
    const void* contribution = call.kind == wire::Kind::Allgather ? io.send : io.buf;
    void* result = call.kind == wire::Kind::Allgather ? io.recv : io.buf;
    const uint64_t send_len = contribution_bytes(call, rank_);
    const uint64_t recv_len = result_bytes(call, rank_, nranks_);

    wire::Header header;
    header.kind = call.kind;
    header.arg = call.arg;
    header.seq = call.seq;
    header.bytes = call.bytes;
    const std::string what = describe(call);
    wire::send_frame(root_, header, call.label, contribution, send_len, deadline, "the contribution to " + what);

    std::string label;
    const wire::Header reply = wire::recv_header(root_, reply_deadline, "the result of " + what, &label);
    if (reply.kind != wire::Kind::Result) fail_on(reply, reply_deadline, "the result of " + what);
    if (reply.seq != call.seq || reply.payload_len != recv_len) {
      throw_error(MORI_SHMEM_ERR_INTERNAL, root_name_, " answered ", what, " with the result of call #", reply.seq,
                  " carrying ", reply.payload_len, " bytes (expected ", recv_len, ")");
    }
    root_.recv_all(result, recv_len, reply_deadline, "the result of " + what);
  }

 private:
  // The root answered with something other than what we wait for: an ABORT or REJECT carries the
  // job's reason, which this PE reports as its own so every PE fails with the same story.
  [[noreturn]] void fail_on(const wire::Header& header, const Deadline& deadline, const std::string& awaited) {
    if (header.kind == wire::Kind::Abort || header.kind == wire::Kind::Reject) {
      const std::string reason = wire::recv_reason(root_, header, deadline);
      if (header.kind == wire::Kind::Reject) throw Error(status_from_wire(header.status), reason);
      throw Error(status_from_wire(header.status), "bootstrap aborted by the root (rank 0): " + reason);
    }
    throw_error(MORI_SHMEM_ERR_INTERNAL, root_name_, " sent a ", wire::kind_name(header.kind), " frame while this PE (rank ",
                rank_, ") waited for ", awaited);
  }

  std::string root_name_;
  Socket root_;
};

}  // namespace

std::unique_ptr<Bootstrap> make_client_bootstrap(const UniqueIdFields& id, int rank, int nranks, double timeout_s) {
  return std::make_unique<ClientBootstrap>(id, rank, nranks, timeout_s);
}

}  // namespace mori::shmem
