// SPDX-License-Identifier: MIT
#include "remote/put_batch.hpp"

#include <algorithm>

namespace mori::shmem::remote {

std::vector<PutPiece> coalesce_puts(std::vector<PutPiece> pieces, uint64_t max_bytes) {
  std::vector<PutPiece> sorted = pieces;
  std::stable_sort(sorted.begin(), sorted.end(), [](const PutPiece& a, const PutPiece& b) {
    return a.pe != b.pe ? a.pe < b.pe : a.offset < b.offset;
  });
  std::vector<PutPiece> merged;
  for (const PutPiece& piece : sorted) {
    if (piece.bytes == 0) continue;
    if (!merged.empty() && merged.back().pe == piece.pe) {
      PutPiece& last = merged.back();
      if (piece.offset < last.offset + last.bytes) return pieces;  // overlap: ticket order matters
      if (piece.offset == last.offset + last.bytes && piece.local == last.local + last.bytes &&
          last.bytes + piece.bytes <= max_bytes) {
        last.bytes += piece.bytes;
        continue;
      }
    }
    merged.push_back(piece);
  }
  return merged;
}

}  // namespace mori::shmem::remote
