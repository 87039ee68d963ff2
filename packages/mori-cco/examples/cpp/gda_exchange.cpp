// SPDX-License-Identifier: MIT
// GDA with the C++ API: every rank puts a value (with a signal) into a slot of every rank on the
// other nodes, waits for its own signal to count them, checks what arrived, and reads one remote
// rank's value back with a get. Run N copies:
//   gda_exchange <rank> <nranks> <uid file> <ranks per node>
// (the last argument sets MORI_CCO_RANKS_PER_NODE, so one host can stand for several nodes).
// Prints "rank R got V from P" lines and SUCCESS.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "example_common.hpp"
#include "mori_cco/cco.hpp"

using example::check;
using example::share_unique_id;

int main(int argc, char** argv) {
  const auto [rank, nranks] = example::parse_ranks(argc, argv, 1, " <ranks per node>");
  const int per_node = std::atoi(argv[4]);
  setenv("MORI_CCO_RANKS_PER_NODE", argv[4], 1);
  const ccoUniqueId id = share_unique_id(rank, argv[3]);

  ccoComm_t comm = nullptr;
  check(ccoCommCreate(id, nranks, rank, 64 << 20, &comm, ccoBackendCpu), "ccoCommCreate");
  // [0, nranks) longs: what each remote rank put here; [nranks]: this rank's own value.
  ccoWindow_t window{};
  void* local = nullptr;
  check(ccoWindowRegister(comm, (nranks + 1) * sizeof(long), &window, &local), "ccoWindowRegister");
  long* slots = static_cast<long*>(local);
  slots[nranks] = 1000 + rank;
  ccoDevCommRequirements reqs = CCO_DEV_COMM_REQUIREMENTS_INITIALIZER;
  reqs.gdaSignalCount = 1;
  ccoDevComm dev{};
  check(ccoDevCommCreate(comm, &reqs, &dev), "ccoDevCommCreate");

  const int node = rank / per_node;
  std::vector<int> remote;
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer / per_node != node) remote.push_back(peer);
  }
  for (int peer : remote) {
    check(ccoGdaPut(comm, &dev, peer, window, rank * sizeof(long), window, nranks * sizeof(long), sizeof(long),
                    /*signalId=*/0, /*signalValue=*/1),
          "ccoGdaPut");
  }
  uint64_t arrived = 0;
  for (int attempt = 0; attempt < 60000 && arrived < remote.size(); ++attempt) {
    check(ccoReadSignal(comm, &dev, 0, &arrived), "ccoReadSignal");
    if (arrived < remote.size()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  bool ok = arrived == remote.size() && !remote.empty();
  for (int peer : remote) {
    std::printf("rank %d got %ld from %d\n", rank, slots[peer], peer);
    ok = ok && slots[peer] == 1000 + peer;
  }
  // Slot `rank` is free (no rank puts into it): the get lands there.
  check(ccoGdaGet(comm, remote.front(), window, nranks * sizeof(long), window, rank * sizeof(long), sizeof(long)),
        "ccoGdaGet");
  std::printf("rank %d read %ld from %d\n", rank, slots[rank], remote.front());
  ok = ok && slots[rank] == 1000 + remote.front();
  check(ccoGdaFlush(comm), "ccoGdaFlush");
  check(ccoBarrierAll(comm), "ccoBarrierAll");
  check(ccoDevCommDestroy(comm, &dev), "ccoDevCommDestroy");
  check(ccoCommDestroy(comm), "ccoCommDestroy");
  std::printf(ok ? "SUCCESS\n" : "FAILED\n");
  return ok ? 0 : 1;
}
