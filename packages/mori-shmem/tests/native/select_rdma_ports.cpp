// SPDX-License-Identifier: MIT
// Runs src/remote/rdma_devices.cpp's select_rdma_ports(argv[1], argv[2]) and prints the ports it
// keeps, one a line, then "unknown <name>" for each name that matched nothing (test_env.py).
#include <cstdio>

#include "remote/rdma_devices.hpp"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const auto selection = mori::shmem::remote::select_rdma_ports(argv[1], argv[2]);
  for (const auto& port : selection.ports) std::printf("%s\n", port.c_str());
  for (const auto& name : selection.unknown) std::printf("unknown %s\n", name.c_str());
  return 0;
}
