// SPDX-License-Identifier: MIT
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

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

void require_one_host(Bootstrap& bootstrap, const char* why) {
  const int nranks = bootstrap.nranks();
  const std::string mine = host_key();
  std::vector<char> keys(kHostKeyBytes * nranks);
  bootstrap.allgather(mine.data(), keys.data(), kHostKeyBytes, "heap: host check");
  for (int pe = 0; pe < nranks; ++pe) {
    if (std::memcmp(keys.data() + pe * kHostKeyBytes, mine.data(), kHostKeyBytes) != 0) {
      throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "PE ", pe, " runs on another host than PE ", bootstrap.rank(), ": ", why,
                  " and needs all PEs on one host");
    }
  }
}

}  // namespace mori::shmem
