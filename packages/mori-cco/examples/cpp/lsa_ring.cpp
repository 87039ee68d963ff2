// SPDX-License-Identifier: MIT
// A ring through the flat address range with the C++ API: every rank writes into its own window,
// then reads the next rank's copy by load/store. Run N copies: lsa_ring <rank> <nranks> <uid file>
// (rank 0 writes the unique id there; the others wait for it). Prints "rank R read V" and SUCCESS.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "mori_cco/cco.hpp"

namespace {

int check(int status, const char* what) {
  if (status != ccoSuccess) {
    std::fprintf(stderr, "%s failed (%d): %s\n", what, status, ccoGetLastError());
    std::exit(1);
  }
  return status;
}

ccoUniqueId share_unique_id(int rank, const std::string& path) {
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <rank> <nranks> <uid file>\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int nranks = std::atoi(argv[2]);
  const ccoUniqueId id = share_unique_id(rank, argv[3]);

  ccoComm_t comm = nullptr;
  check(ccoCommCreate(id, nranks, rank, 64 << 20, &comm, ccoBackendCpu), "ccoCommCreate");
  ccoWindow_t window{};
  void* local = nullptr;
  check(ccoWindowRegister(comm, sizeof(long), &window, &local), "ccoWindowRegister");
  *static_cast<long*>(local) = 1000 + rank;
  check(ccoBarrierAll(comm), "ccoBarrierAll");

  void* next = nullptr;
  check(ccoGetPeerPtr(comm, local, (rank + 1) % nranks, &next), "ccoGetPeerPtr");
  std::printf("rank %d read %ld\n", rank, *static_cast<long*>(next));

  ccoDevCommRequirements reqs = CCO_DEV_COMM_REQUIREMENTS_INITIALIZER;
  reqs.lsaBarrierCount = 1;
  ccoDevComm dev{};
  check(ccoDevCommCreate(comm, &reqs, &dev), "ccoDevCommCreate");
  const bool layout_ok = dev.rank == rank && dev.world_size == nranks && dev.lsa_barrier_count == 1;
  check(ccoBarrierAll(comm), "ccoBarrierAll");
  check(ccoDevCommDestroy(comm, &dev), "ccoDevCommDestroy");
  check(ccoCommDestroy(comm), "ccoCommDestroy");
  std::printf(layout_ok ? "SUCCESS\n" : "FAILED: dev comm fields\n");
  return layout_ok ? 0 : 1;
}
