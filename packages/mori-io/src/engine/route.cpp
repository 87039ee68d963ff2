// SPDX-License-Identifier: MIT
// The route chain: P2P, then RDMA, then TCP. A transfer goes to the first backend whose
// can_route() takes the pair; a backend that cannot start it, or fails it after starting, hands it
// to the next backend that takes it, which retries the whole transfer into the same status (the
// failed backend writes no byte of the destination any more by then). When there is no later
// backend, the status reports the failure in the failed backend's words, as MORI's backends do.
#include <string>

#include "core/log.hpp"
#include "engine/engine.hpp"

namespace mori::io {

namespace {

const char* const kNoBackend = "No available backend found, create backend first";

}  // namespace

void Engine::route(const TransferRequest& request, size_t from) {
  Chain backends = chain();
  for (size_t i = from; i < backends.size(); ++i) {
    if (backends[i] && backends[i]->can_route(request)) {
      start_on(backends, i, request);
      return;
    }
  }
  request.status->update(StatusCode::ERR_BAD_STATE, kNoBackend);
}

void Engine::start_on(const Chain& backends, size_t index, const TransferRequest& request) {
  Backend& backend = *backends[index];
  Fallback fallback;
  std::shared_ptr<Pending> pending;
  if (index + 1 < backends.size()) {  // the last backend has nothing to fail over to
    pending = std::make_shared<Pending>();
    pending->is_read = request.is_read;
    pending->local = request.local;
    pending->memory = *request.memory;
    pending->segments = *request.segments;
    pending->total = request.total;
    pending->uid = request.uid;
    pending->status = request.status;
    fallback = [this, type = backend.type(), index, pending](const std::string& why) {
      fail_over(type, index, pending, why, true, false);
    };
  }
  std::string why;
  bool repeated = false;
  if (backend.submit(request, fallback, &why, &repeated)) return;
  if (!pending) {
    request.status->update(StatusCode::ERR_BAD_STATE, why);
    return;
  }
  fail_over(backend.type(), index, pending, why, false, repeated);
}

void Engine::fail_over(BackendType failed, size_t index, const std::shared_ptr<Pending>& pending,
                       const std::string& why, bool started, bool repeated) {
  Chain backends = chain();
  bool later = false;
  for (size_t i = index + 1; i < backends.size(); ++i) later = later || backends[i] != nullptr;
  const std::string& remote = pending->memory.engine_key;
  const uint64_t uid = pending->uid;
  TransferStatus& status = *pending->status;
  if (failed == BackendType::XGMI) {  // P2P: a start that failed reads like a failure
    const std::string reason = started ? why : "could not start: " + why;
    if (!later) {
      MORI_IO_LOG(Warning, "P2P transfer " << uid << " to engine '" << remote << "' failed: " << reason);
      status.update(StatusCode::ERR_GPU_OP,
                    "P2P transfer failed: " + reason + " (and no RDMA or TCP backend to fall back to)");
      return;
    }
    MORI_IO_LOG(Warning, "P2P transfer " << uid << " to engine '" << remote << "' failed (" << reason
                                         << "); retrying it over the network");
    retry_later(pending, index, StatusCode::ERR_GPU_OP, "P2P failed (" + reason + ") and the retry");
    return;
  }
  if (failed != BackendType::RDMA) {  // only the last backend (TCP) never fails over
    status.update(StatusCode::ERR_BAD_STATE, why);
    return;
  }
  if (!started) {
    if (!later) {
      status.update(StatusCode::ERR_RDMA_OP, "RDMA transfer could not start: " + why + " (and no TCP backend)");
      return;
    }
    // The backend logged the reason the first time; every transfer to that peer goes this way
    // until it is asked again.
    if (!repeated) MORI_IO_LOG(Warning, "RDMA transfer " << uid << " could not start; sending it over TCP");
    reroute(pending, index + 1);  // on the caller's thread: its errors are the caller's
    return;
  }
  if (!later) {
    MORI_IO_LOG(Info, "RDMA transfer " << uid << " to engine '" << remote << "' failed: " << why);
    status.update(StatusCode::ERR_RDMA_OP, why + " (and no TCP backend to fall back to)");
    return;
  }
  MORI_IO_LOG(Warning, "RDMA transfer " << uid << " to engine '" << remote << "' failed (" << why
                                        << "); retrying it over TCP");
  retry_later(pending, index, StatusCode::ERR_RDMA_OP, "RDMA failed (" + why + ") and TCP");
}

void Engine::retry_later(const std::shared_ptr<Pending>& pending, size_t index, StatusCode code,
                         const std::string& failures) {
  try {
    reroute(pending, index + 1);
  } catch (const Error& e) {
    pending->status->update(code, failures + " too: " + e.what());
  }
}

void Engine::reroute(const std::shared_ptr<Pending>& pending, size_t from) {
  check_open();
  std::shared_ptr<const Remote> peer = find_remote(pending->memory.engine_key);
  RemoteEngine gone;
  gone.key = pending->memory.engine_key;
  TransferRequest request;
  request.is_read = pending->is_read;
  request.local = pending->local;
  request.engine = peer ? &peer->engine : &gone;
  request.placement = peer ? peer->placement : Placement{};
  request.memory = &pending->memory;
  request.segments = &pending->segments;
  request.total = pending->total;
  request.uid = pending->uid;
  request.status = pending->status;
  if (peer) {
    route(request, from);
    return;
  }
  // Deregistered meanwhile: TCP reports it in the status as it reports a lost connection; the
  // other backends' callers get the error.
  Chain backends = chain();
  for (size_t i = from; i < backends.size(); ++i) {
    if (!backends[i] || !backends[i]->can_route(request)) continue;
    const std::string why = "remote engine '" + gone.key + "' is not registered; call register_remote_engine";
    if (backends[i]->type() != BackendType::TCP) throw Error(Code::NotFound, why);
    request.status->update(StatusCode::ERR_BAD_STATE, why);
    return;
  }
  request.status->update(StatusCode::ERR_BAD_STATE, kNoBackend);
}

}  // namespace mori::io
