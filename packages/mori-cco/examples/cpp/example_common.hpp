// SPDX-License-Identifier: MIT
// What the C++ examples share: their command line, failing loudly on a bad status, and handing
// rank 0's unique id to the other processes through a file.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "mori_cco/cco.hpp"

namespace example {

inline void check(int status, const char* what) {
  if (status != ccoSuccess) {
    std::fprintf(stderr, "%s failed (%d): %s\n", what, status, ccoGetLastError());
    std::exit(1);
  }
}

// "<rank> <nranks> <uid file>" and then the example's own arguments (named in more_usage; their
// count is more_args): returns {rank, nranks}, or exits with the usage when the count is wrong.
struct Ranks {
  int rank;
  int nranks;
};
inline Ranks parse_ranks(int argc, char** argv, int more_args = 0, const char* more_usage = "") {
  if (argc != 4 + more_args) {
    std::fprintf(stderr, "usage: %s <rank> <nranks> <uid file>%s\n", argv[0], more_usage);
    std::exit(2);
  }
  return {std::atoi(argv[1]), std::atoi(argv[2])};
}

// Rank 0 writes a fresh unique id to path; the others wait for it to appear.
inline ccoUniqueId share_unique_id(int rank, const std::string& path) {
  ccoUniqueId id{};
  if (rank == 0) {
    check(ccoGetUniqueId(&id), "ccoGetUniqueId");
    const std::string partial = path + ".tmp";
    std::ofstream(partial, std::ios::binary).write(id.internal, sizeof(id.internal));
    std::rename(partial.c_str(), path.c_str());  // readers never see half a file
    return id;
  }
  for (int attempt = 0; attempt < 3000; ++attempt) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id.internal, sizeof(id.internal))) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "rank %d: no unique id appeared at %s\n", rank, path.c_str());
  std::exit(1);
}

}  // namespace example
