// SPDX-License-Identifier: MIT
// A ring through the flat address range with the C++ API: every rank writes into its own window,
// then reads the next rank's copy by load/store. Run N copies: lsa_ring <rank> <nranks> <uid file>
// (rank 0 writes the unique id there; the others wait for it). Prints "rank R read V" and SUCCESS.
#include <cstdio>
#include <cstdlib>

#include "example_common.hpp"
#include "mori_cco/cco.hpp"

using example::check;
using example::share_unique_id;

int main(int argc, char** argv) {
  const auto [rank, nranks] = example::parse_ranks(argc, argv);
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
