// SPDX-License-Identifier: MIT
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/env.hpp"
#include "core/error.hpp"
#include "heap/symmetric_heap.hpp"

namespace mori::shmem {

namespace {

constexpr size_t kHostKeyBytes = 128;

// Two PEs share a host when they see the same kernel boot id and hostname.
std::string host_key() {
  std::string boot_id;
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::getline(file, boot_id);
  char hostname[64] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  std::string key = boot_id + "/" + hostname;
  key.resize(kHostKeyBytes, '\0');
  return key;
}

}  // namespace

Topology exchange_topology(Bootstrap& bootstrap) {
  const int nranks = bootstrap.nranks();
  const int rank = bootstrap.rank();
  const int64_t per_node = env::get_int("MORI_SHMEM_PES_PER_NODE");
  if (per_node < 0) {
    throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_PES_PER_NODE=", per_node, " must be >= 0 (0: by host)");
  }
  const std::string node_id = env::get_string("MORI_NODE_ID");
  if (node_id.size() > kHostKeyBytes - 16) {
    throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_NODE_ID is ", node_id.size(), " characters long; at most ",
                kHostKeyBytes - 16, " are allowed");
  }
  std::string key = per_node > 0  ? "pes-per-node/" + std::to_string(rank / per_node)
                    : node_id.empty() ? host_key()
                                      : "node-id/" + node_id;
  key.resize(kHostKeyBytes - 1, '\0');
  key.push_back(env::get_bool("MORI_DISABLE_P2P") ? 1 : 0);  // last byte: this PE refuses P2P

  std::vector<char> keys(kHostKeyBytes * nranks);
  bootstrap.allgather(key.data(), keys.data(), kHostKeyBytes, "init: topology");
  const auto reachable = [&](int a, int b) {
    const char* ka = keys.data() + a * kHostKeyBytes;
    const char* kb = keys.data() + b * kHostKeyBytes;
    return a == b || (ka[kHostKeyBytes - 1] == 0 && kb[kHostKeyBytes - 1] == 0 &&
                      std::memcmp(ka, kb, kHostKeyBytes - 1) == 0);
  };
  Topology topology;
  topology.remote.assign(nranks, 0);
  for (int a = 0; a < nranks; ++a) {
    for (int b = 0; b < nranks; ++b) {
      const bool far = !reachable(a, b);
      topology.any_remote = topology.any_remote || far;
      if (a == rank) topology.remote[b] = far ? 1 : 0;
    }
  }
  return topology;
}

}  // namespace mori::shmem
