// SPDX-License-Identifier: MIT
// NOTE [striped put-with-signal]
// A put-with-signal travelled on one stream, so a large one moved at one connection's rate while a
// plain put of the same bytes was striped over all of them (issue 32: inter-node EP sends each
// node's batch as one put-with-signal). Above the stripe size the tcp conduit now sends it as
// PUT_SIGNAL_PART requests, one stripe per stream, each naming the join (an id the initiator never
// reuses towards that PE) and how many parts it has. The target's serving threads count the parts
// of each join as they apply them; the thread that applies the last one applies the signal, so a
// PE that observes the signal also observes every part. A quiet's FLUSH on every stream covers the
// signal too, since it is applied before the last part's thread reads its next request.
// The counts are bounded: an authenticated peer that keeps joins open (parts that never come) is
// dropped once it holds kMaxOpenJoins of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace mori::shmem::remote {

class SignalJoins {
 public:
  // Joins one initiator may hold open at once: more than its streams could ever have in flight.
  static constexpr size_t kMaxOpenJoins = 4096;
  // Counts one applied part of join `id` of `parts` (2..255: the wire's 8 bits) parts from PE `pe`;
  // true when it was the last, and the caller applies the signal. Throws (INVALID_ARGUMENT) on a
  // part count that differs from the join's first part's, or past kMaxOpenJoins.
  bool arrived(int pe, uint64_t id, uint32_t parts);

 private:
  struct Open {
    uint32_t parts;
    uint32_t arrived;
  };
  std::mutex mutex_;
  std::map<std::pair<int, uint64_t>, Open> open_;
  std::map<int, size_t> open_per_pe_;
};

}  // namespace mori::shmem::remote
