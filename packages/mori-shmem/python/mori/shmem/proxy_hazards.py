# SPDX-License-Identifier: MIT
"""CUDA settings under which a kernel that waits for a remote PE can stall until it times out.

The device proxy applies what a remote PE puts or signals with this process's own CUDA work (a
copy and a one-thread kernel on mori-shmem's stream), so that work must be able to run while a
kernel of this process spins waiting for it. Two CUDA defaults get in the way (measured on the
H200, docs/user-guide/shmem.md "CUDA backend notes"):

- lazy loading (CUDA_MODULE_LOADING=LAZY): the first launch of a kernel waits for the context's
  running kernels and holds the proxy's work back meanwhile;
- few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS below 32): streams share queues, and the
  proxy's work can queue behind a spinning kernel.
"""

from __future__ import annotations

import os

#: The CUDA_DEVICE_MAX_CONNECTIONS the device proxy needs (CUDA's maximum).
NEEDED_CONNECTIONS = 32
#: The environment of a process whose kernels wait on remote PEs (for launchers of such processes).
NEEDED_ENV = {"CUDA_MODULE_LOADING": "EAGER", "CUDA_DEVICE_MAX_CONNECTIONS": str(NEEDED_CONNECTIONS)}


def device_proxy_hazards() -> list[str]:
    """What in this process's CUDA setup can stall a kernel's wait on a remote PE: [] when nothing
    does, or when no PE is remote or the backend is cpu (no device proxy then).

    Both variables are read when CUDA starts: set them before ``import torch`` touches the GPU."""
    from mori.shmem.api import shmem_backend, shmem_remote_conduit
    from mori.shmem.jit import driver

    if shmem_backend() != "cuda" or shmem_remote_conduit() is None:
        return []
    found = []
    if driver.lazy_loading():
        found.append("CUDA_MODULE_LOADING is not EAGER (a first kernel load stalls the wait until it times out)")
    connections = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    if not connections.isdigit() or int(connections) < NEEDED_CONNECTIONS:
        found.append(
            f"CUDA_DEVICE_MAX_CONNECTIONS={connections} (default 8) is below {NEEDED_CONNECTIONS} (the proxy's "
            "work can queue behind the waiting kernel)"
        )
    return found
