// SPDX-License-Identifier: MIT
// NOTE [coalesced puts]
// A kernel that puts a large buffer to a remote PE posts one proxy request per block (a block's
// slice), in whatever order its blocks take tickets, each followed by the block's QUIET. Carried
// out one by one, every slice pays a staging copy and a send of its own, and every QUIET a round
// trip (issue 32: 1 MiB through the proxy at 31 % of the same put issued by the host). The proxy
// therefore takes every request that is ready and is a put or a QUIET as one batch: the puts are
// carried out as few, large transfers (coalesce_puts), then one QUIET if the batch had any, and
// only then does `done` move past the batch. A QUIET still completes every earlier put at its
// target before `done` passes it; later puts of the batch complete with it, which is allowed.
#pragma once

#include <cstdint>
#include <vector>

namespace mori::shmem::remote {

struct PutPiece {
  int pe;
  uint64_t offset;  // in pe's heap
  uint64_t local;   // source address
  uint64_t bytes;
};

// The transfers that carry out `pieces` (the puts of one batch, in ticket order), to be done in the
// returned order: pieces of one PE whose targets and sources both continue one another are merged,
// whatever their ticket order, into transfers of at most max_bytes. If two pieces of one PE
// overlap at the target, their ticket order decides what lands there, so the pieces come back
// unmerged, in ticket order.
std::vector<PutPiece> coalesce_puts(std::vector<PutPiece> pieces, uint64_t max_bytes);

}  // namespace mori::shmem::remote
