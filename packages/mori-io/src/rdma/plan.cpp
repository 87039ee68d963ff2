// SPDX-License-Identifier: MIT
#include "rdma/plan.hpp"

#include <algorithm>

namespace mori::io::ucx {

std::vector<Piece> plan_pieces(const std::vector<Segment>& segments, const PlanOptions& options) {
  const std::vector<Segment> runs = merge_runs(segments);
  const uint32_t lanes = std::max<uint32_t>(1, options.lanes);
  uint32_t lane = options.first_lane % lanes;
  std::vector<Piece> pieces;
  pieces.reserve(runs.size());
  for (const Segment& run : runs) {
    uint64_t count = 1;
    if (options.chunk_bytes > 0 && run.size > options.chunk_bytes) {
      count = std::min<uint64_t>(std::max<uint32_t>(1, options.max_chunks),
                                 (run.size + options.chunk_bytes - 1) / options.chunk_bytes);
    }
    const uint64_t step = (run.size + count - 1) / count;
    for (uint64_t done = 0; done < run.size; done += step) {
      pieces.push_back(Piece{run.local_offset + done, run.remote_offset + done, std::min(step, run.size - done), lane});
      lane = (lane + 1) % lanes;
    }
  }
  return pieces;
}

}  // namespace mori::io::ucx
