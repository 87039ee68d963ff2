// SPDX-License-Identifier: MIT
// MORI_RDMA_DEVICES as MORI reads it, applied to the RDMA ports the ucx conduit hands UCX:
//   "mlx5_0,mlx5_1"    only these devices, in this order;
//   "^mlx5_2,mlx5_3"   every device but these;
//   ""                 every device.
// Names are comma separated and trimmed of blanks. Beyond MORI, a name may carry ":port"
// ("mlx5_1:2") to keep or drop one port of a device. A name that matches no device is reported
// back (MORI skips it silently; the caller logs it). No dependency on the rest of the library, so
// that a test can compile it alone against a made-up sysfs tree.
#pragma once

#include <string>
#include <vector>

namespace mori::shmem::remote {

struct RdmaPortSelection {
  std::vector<std::string> ports;    // "device:port", as UCX_NET_DEVICES takes them
  std::vector<std::string> unknown;  // names of the setting that matched no device or port
};

// sysfs_root: the directory holding one entry per RDMA device, each with a ports/ directory
// (/sys/class/infiniband on Linux); a missing root means no RDMA devices.
RdmaPortSelection select_rdma_ports(const std::string& setting, const std::string& sysfs_root);

}  // namespace mori::shmem::remote
