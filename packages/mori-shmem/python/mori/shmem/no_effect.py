# SPDX-License-Identifier: MIT
"""Settings that mori-shmem accepts from MORI and that have no effect here, each logged once at INFO
when set to a non-default value (mori._compat). Each has a row, with the same reason, in the
mori-shmem section of docs/user-guide/compatibility.md."""

from __future__ import annotations

from mori._compat import note_no_effect
from mori.shmem.settings import setting

HEAP_TYPE_REASON = (
    "CUDA has no uncached device memory: both types give ordinary device memory, and device code reads "
    "peer-written flags with system-scope acquire loads instead; the cpu backend's heap is POSIX shared memory"
)
MALLOC_FLAGS_REASON = (
    "the heap is one allocation of one memory type, so per-allocation memory flags have nothing to choose "
    "(MORI's default static_heap mode ignores them too)"
)
RDMA_DEVICES_REASON = (
    "it selects the NICs of the ucx conduit, and this job's remote transport is the tcp conduit "
    "(MORI_SOCKET_IFNAME picks its interface) or no PE is remote"
)

NUM_QP_REASON = (
    "the ucx conduit keeps one UCP endpoint per remote PE and UCX chooses its lanes; with the tcp conduit "
    "it sets the connections per remote PE (when MORI_SHMEM_REMOTE_STREAMS is not set)"
)


def note_init_settings(conduit: str | None) -> None:
    """After init: the settings init accepted without effect. conduit: shmem_remote_conduit()."""
    heap_type = setting("MORI_SHMEM_HEAP_TYPE")
    if heap_type.lower() != "uncached":
        note_no_effect("MORI_SHMEM_HEAP_TYPE", heap_type, HEAP_TYPE_REASON)
    rdma_devices = setting("MORI_RDMA_DEVICES")
    if rdma_devices and conduit != "ucx":
        note_no_effect("MORI_RDMA_DEVICES", rdma_devices, RDMA_DEVICES_REASON)
    num_qp = int(setting("MORI_NUM_QP_PER_PE"))
    if num_qp != 0 and conduit == "ucx":
        note_no_effect("MORI_NUM_QP_PER_PE", num_qp, NUM_QP_REASON)


def note_malloc_flags(flags: int) -> None:
    if flags != 0:
        note_no_effect("shmem_ext_malloc_with_flags(flags)", flags, MALLOC_FLAGS_REASON)
