// SPDX-License-Identifier: MIT
// One contiguous piece of a transfer (local offset, remote offset, size), the unit every backend
// moves, and the merge of a caller's pieces into the runs they form.
#pragma once

#include <cstdint>
#include <vector>

namespace mori::io {

struct Segment {
  uint64_t local_offset;
  uint64_t remote_offset;
  uint64_t size;
};

// Drops empty segments and joins each segment that continues the previous one on both sides:
// every backend moves these runs, not the caller's segments.
std::vector<Segment> merge_runs(const std::vector<Segment>& segments);
void merge_runs(const std::vector<Segment>& segments, std::vector<Segment>& out);  // into out, cleared first

}  // namespace mori::io
