// SPDX-License-Identifier: MIT
// Runs src/remote/put_batch.cpp's coalesce_puts on the pieces read from stdin ("max_bytes" then
// one "pe offset local bytes" line per piece) and prints the transfers, one "pe offset local
// bytes" line each (test_put_batch.py).
#include <cstdio>
#include <vector>

#include "remote/put_batch.hpp"

int main() {
  unsigned long long max_bytes = 0;
  if (std::scanf("%llu", &max_bytes) != 1) return 2;
  std::vector<mori::shmem::remote::PutPiece> pieces;
  int pe = 0;
  unsigned long long offset = 0, local = 0, bytes = 0;
  while (std::scanf("%d %llu %llu %llu", &pe, &offset, &local, &bytes) == 4) pieces.push_back({pe, offset, local, bytes});
  for (const auto& p : mori::shmem::remote::coalesce_puts(pieces, max_bytes)) {
    std::printf("%d %llu %llu %llu\n", p.pe, static_cast<unsigned long long>(p.offset),
                static_cast<unsigned long long>(p.local), static_cast<unsigned long long>(p.bytes));
  }
  return 0;
}
