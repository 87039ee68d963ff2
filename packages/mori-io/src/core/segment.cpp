// SPDX-License-Identifier: MIT
#include "core/segment.hpp"

namespace mori::io {

std::vector<Segment> merge_runs(const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  merge_runs(segments, out);
  return out;
}

void merge_runs(const std::vector<Segment>& segments, std::vector<Segment>& out) {
  out.clear();
  out.reserve(segments.size());
  for (const Segment& s : segments) {
    if (s.size == 0) continue;
    if (!out.empty()) {
      Segment& last = out.back();
      if (last.local_offset + last.size == s.local_offset && last.remote_offset + last.size == s.remote_offset) {
        last.size += s.size;
        continue;
      }
    }
    out.push_back(s);
  }
}

}  // namespace mori::io
