// SPDX-License-Identifier: MIT
// Prints stripe_first_order (NOTE [stripe-first staging]) for each "BYTES PIECE STRIPE" line of
// stdin: the piece indexes in the order staging queues them, one line each (test_stripe_first.py).
#include <iostream>
#include <memory>
#include <vector>

#include "remote/stripe_first.hpp"

int main() {
  size_t bytes = 0, piece = 0, stripe = 0;
  while (std::cin >> bytes >> piece >> stripe) {
    const size_t pieces = bytes == 0 ? 0 : (bytes + piece - 1) / piece;
    std::vector<size_t> order(pieces);
    const std::unique_ptr<bool[]> taken(new bool[pieces]());
    mori::shmem::remote::stripe_first_order(bytes, piece, stripe, order.data(), taken.get());
    for (size_t i = 0; i < pieces; ++i) std::cout << (i ? " " : "") << order[i];
    std::cout << "\n";
  }
  return 0;
}
