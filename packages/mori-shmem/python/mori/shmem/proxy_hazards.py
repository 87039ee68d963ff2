# SPDX-License-Identifier: MIT
"""CUDA settings under which a kernel that waits for a remote PE can stall until it times out.

The device proxy applies what a remote PE puts or signals with this process's own CUDA work (a
copy and a stream write, or a one-thread kernel for atomics, on mori-shmem's stream), so that
work must be able to run while a kernel of this process spins waiting for it. Lazy loading
(CUDA_MODULE_LOADING=LAZY, CUDA's default) gets in the way: the first launch of a kernel waits
for the context's running kernels and holds the proxy's work back meanwhile (measured on the
H200, docs/user-guide/shmem.md "CUDA backend notes").
"""

from __future__ import annotations

#: The environment of a process whose kernels wait on remote PEs (for launchers of such processes).
NEEDED_ENV = {"CUDA_MODULE_LOADING": "EAGER"}


def device_proxy_hazards() -> list[str]:
    """What in this process's CUDA setup can stall a kernel's wait on a remote PE: [] when nothing
    does, or when no PE is remote or the backend is cpu (no device proxy then).

    The variable is read when CUDA starts: set it before ``import torch`` touches the GPU."""
    from mori.shmem.api import shmem_backend, shmem_remote_conduit
    from mori.shmem.jit import driver

    if shmem_backend() != "cuda" or shmem_remote_conduit() is None:
        return []
    if driver.lazy_loading():
        return ["CUDA_MODULE_LOADING is not EAGER (a first kernel load stalls the wait until it times out)"]
    return []
