// SPDX-License-Identifier: MIT
// Picks the conduit of NOTE [remote transport]. The choice is agreed: every PE tries UCX locally,
// then they exchange whether it worked, so no PE ends up on UCX while another is on TCP.
#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "remote/tcp_conduit.hpp"
#include "remote/ucx_conduit.hpp"

namespace mori::shmem::remote {

namespace {

constexpr size_t kReasonBytes = 240;

struct Verdict {
  int32_t status;             // 0: UCX is usable on this PE; else the mori_shmem_status_t of why not
  char reason[kReasonBytes];  // NUL-terminated
};

}  // namespace

std::unique_ptr<Conduit> make_conduit(Bootstrap& bootstrap, const std::vector<uint8_t>& remote, const LocalHeap& heap,
                                      const ConduitConfig& config) {
  const int rank = bootstrap.rank();
  if (config.choice == "tcp") {
    log::emit(log::Level::Info, "PE ", rank, ": remote transport: TCP (MORI_SHMEM_REMOTE_CONDUIT=tcp)");
    return std::make_unique<TcpConduit>(bootstrap, remote, heap.access, config);
  }
  std::unique_ptr<UcxConduit> ucx;
  Verdict mine{0, {}};
  if (config.choice == "auto" && heap.gpu) {
    // Chosen only when asked for: UCX over a GPU heap has not been run on a GPU machine yet.
    mine.status = MORI_SHMEM_ERR_UNSUPPORTED;
    std::strncpy(mine.reason, "the heap is GPU memory, where UCX is opt-in (MORI_SHMEM_REMOTE_CONDUIT=ucx)",
                 kReasonBytes - 1);
  } else {
    try {
      ucx = std::make_unique<UcxConduit>(rank, bootstrap.nranks(), heap, heap.access.size(), config);
    } catch (const Error& e) {
      mine.status = e.status();
      std::strncpy(mine.reason, e.what(), kReasonBytes - 1);
    }
  }
  std::vector<Verdict> all(bootstrap.nranks());
  bootstrap.allgather(&mine, all.data(), sizeof(Verdict), "remote: ucx usable");
  const auto refused = std::find_if(all.begin(), all.end(), [](const Verdict& v) { return v.status != 0; });
  if (refused == all.end()) {
    ucx->connect(bootstrap, remote);
    return ucx;
  }
  ucx.reset();
  const int pe = static_cast<int>(refused - all.begin());
  const std::string reason(refused->reason, strnlen(refused->reason, kReasonBytes));
  if (refused->status != MORI_SHMEM_ERR_UNSUPPORTED) {  // a bad setting is an error, not a fallback
    throw_error(mori_shmem_status_t(refused->status), "PE ", pe, ": ", reason);
  }
  if (config.choice == "ucx") {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "MORI_SHMEM_REMOTE_CONDUIT=ucx, but UCX is not usable on PE ", pe, ": ",
                reason);
  }
  log::emit(log::Level::Info, "PE ", rank, ": remote transport: TCP, because UCX is not usable on PE ", pe, ": ",
            reason);
  return std::make_unique<TcpConduit>(bootstrap, remote, heap.access, config);
}

}  // namespace mori::shmem::remote
