// SPDX-License-Identifier: MIT
// What the C++ examples share: failing loudly on a bad status, and handing rank 0's unique id to
// the other processes through a file.
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
