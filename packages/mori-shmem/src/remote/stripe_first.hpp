// SPDX-License-Identifier: MIT
// NOTE [stripe-first staging]: the tcp conduit sends a transfer above its stripe size as a stripe
// per connection, each as its staging pieces land (NOTE [streamed staging]). Queued in address
// order, the pieces of the last stripe land last, so that connection idles while the GPU copies out
// the stripes before it; the order here takes the first piece of every stripe first, then every
// stripe's second, and so on, so each connection has bytes to send after about its share of the copy.
#pragma once

#include <algorithm>
#include <cstddef>

namespace mori::shmem::remote {

// Writes into order[0..pieces) the indexes of the pieces (each `piece` bytes, the last shorter) of
// a `bytes` transfer that the conduit cuts into stripes of `stripe` bytes: round-robin over the
// stripes, each stripe's pieces in address order, a piece that starts in one stripe and reaches into
// the next counted as that stripe's first. `stripe` 0 or >= bytes: address order. `order` holds at
// least `pieces` entries and `taken` as many flags, all false. Returns `pieces`.
inline size_t stripe_first_order(size_t bytes, size_t piece, size_t stripe, size_t* order, bool* taken) {
  const size_t pieces = bytes == 0 ? 0 : (bytes + piece - 1) / piece;
  size_t queued = 0;
  if (stripe == 0 || stripe >= bytes) {
    for (; queued < pieces; ++queued) order[queued] = queued;
    return pieces;
  }
  const size_t stripes = (bytes + stripe - 1) / stripe;
  for (size_t depth = 0; queued < pieces; ++depth) {
    for (size_t s = 0; s < stripes; ++s) {
      const size_t first = s * stripe / piece, last = (std::min(bytes, (s + 1) * stripe) - 1) / piece;
      if (first + depth <= last && !taken[first + depth]) {
        taken[first + depth] = true;
        order[queued++] = first + depth;
      }
    }
  }
  return pieces;
}

}  // namespace mori::shmem::remote
