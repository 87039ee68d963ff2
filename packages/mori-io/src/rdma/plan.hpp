// SPDX-License-Identifier: MIT
// How one transfer's segments become UCX operations: segments that continue the previous one on
// both sides merge (as the TCP backend's frames do), then with chunking a long run is cut into
// at most max_chunks pieces of at least chunk_bytes, and pieces go round-robin over the lanes
// (the UCP endpoints of the peer), starting at first_lane.
#pragma once

#include <cstdint>
#include <vector>

#include "core/segment.hpp"

namespace mori::io::ucx {

struct Piece {
  uint64_t local_offset;
  uint64_t remote_offset;
  uint64_t size;
  uint32_t lane;
};

struct PlanOptions {
  uint32_t lanes = 1;
  uint32_t first_lane = 0;
  uint64_t chunk_bytes = 0;  // 0: no chunking
  uint32_t max_chunks = 64;
};

std::vector<Piece> plan_pieces(const std::vector<Segment>& segments, const PlanOptions& options);

}  // namespace mori::io::ucx
