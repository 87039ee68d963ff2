# SPDX-License-Identifier: MIT
"""PE programs of the cuda-backend tests (one process per PE, spawned by run_pes).

Each returns plain data; the parent compares it with a numpy reference it computes itself. GPU
memory is read back through torch (``.cpu()``), which does not go through mori's own copy path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import mori.shmem as shmem

from pe_programs import check, pattern, pe_session

# A module that does not include the device API, so it has no mori_shmem_device_state global.
KERNELS_WITHOUT_STATE = Path(__file__).resolve().parent / "gpu_kernels" / "jit_test_kernels.cu"


def _torch() -> Any:
    import torch

    return torch


def host_rma(rank: int, nranks: int, uid: bytes, nbytes: int) -> dict[str, Any]:
    """Host put/get/signal/atomics on GPU heap memory; returns what every PE observed."""
    torch = _torch()
    with pe_session(rank, nranks, uid):
        info = shmem.shmem_heap_info()
        buf = shmem.shmem_zeros(nbytes, np.uint8)
        got = shmem.shmem_zeros(nbytes, np.uint8)
        signal = shmem.shmem_zeros(1, np.uint64)
        counter = shmem.shmem_zeros(1, np.int64)
        view = buf.torch()
        check(view.is_cuda, f"symmetric buffer exported as {view.device}, expected cuda")
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks

        src = pattern(rank, nbytes)
        shmem.shmem_putmem(buf.symmetric_ptr, src.ctypes.data, nbytes, nxt)  # host memory -> peer GPU
        shmem.shmem_barrier_all()
        received = view.cpu().numpy().copy()

        # GPU tensor -> peer GPU, with a signal the peer waits for.
        device_src = torch.from_numpy(pattern(100 + rank, nbytes)).cuda()
        shmem.shmem_putmem_signal(got.symmetric_ptr, device_src.data_ptr(), nbytes, signal.symmetric_ptr, 7,
                                  shmem.AmoType.SIGNAL_SET, nxt)  # fmt: skip
        observed = shmem.shmem_wait_until(signal.symmetric_ptr, shmem.CmpOp.EQ, 7)
        received_signalled = got.torch().cpu().numpy().copy()

        readback = np.zeros(nbytes, dtype=np.uint8)
        shmem.shmem_getmem(readback.ctypes.data, buf.symmetric_ptr, nbytes, prv)

        # Every PE adds rank+1 to PE 0's counter, then swaps a value into its right neighbour's.
        old = shmem.shmem_atomic_fetch_add(counter.symmetric_ptr, rank + 1, 0, dtype=np.int64)
        shmem.shmem_barrier_all()
        total = int(counter.torch().cpu().numpy()[0]) if rank == 0 else None
        shmem.shmem_barrier_all()
        swapped = shmem.shmem_atomic_swap(counter.symmetric_ptr, -(rank + 1), nxt, dtype=np.int64)
        shmem.shmem_barrier_all()
        after_swap = int(counter.torch().cpu().numpy()[0])

        # Direct load/store through the peer mapping (what kernels do), from torch.
        peer_view = buf.peer(nxt).torch()
        peer_view.fill_(rank + 1)
        torch.cuda.synchronize()
        shmem.shmem_barrier_all()
        filled = int(view.cpu().numpy()[0])
        shmem.shmem_barrier_all()
        return {
            "backend": info.backend,
            "received": received,
            "received_signalled": received_signalled,
            "signal": observed,
            "readback": readback,
            "fetch_add_old": old,
            "total": total,
            "swapped": swapped,
            "after_swap": after_swap,
            "filled": filled,
        }


def module_state(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """The device state the library hands kernels, as the host sees it."""
    with pe_session(rank, nranks, uid):
        state = shmem.shmem_device_state()
        from mori.shmem.jit import driver

        peers = np.frombuffer(driver.memcpy_dtoh(state.peer_bases, 8 * nranks), dtype=np.uint64)
        p2p = [shmem.shmem_ptr_p2p(state.heap_base + 4096, rank, pe) for pe in range(nranks)]
        shmem.shmem_barrier_all()
        return {
            "version": state.version,
            "my_pe": state.my_pe,
            "n_pes": state.n_pes,
            "heap_base": state.heap_base,
            "heap_size": state.heap_size,
            "peers": [int(p) for p in peers],
            "p2p": p2p,
        }


def stream_barriers(rank: int, nranks: int, uid: bytes, rounds: int) -> dict[str, Any]:
    """Device barriers enqueued on a torch stream: every PE's put of round r must be visible to its
    neighbour after the r-th barrier, with no host barrier in between."""
    torch = _torch()
    from mori.shmem import jit

    with pe_session(rank, nranks, uid):
        torch.cuda.set_device(shmem.shmem_cuda_device())
        slots = shmem.shmem_zeros(nranks, np.int64)
        view = slots.torch()
        peer_views = [slots.peer(pe).torch() for pe in range(nranks)]
        stream = torch.cuda.current_stream()
        seen = []
        for r in range(1, rounds + 1):
            for pe in range(nranks):
                peer_views[pe][rank].fill_(r)  # a store into every PE's copy, through the P2P mapping
            shmem.shmem_barrier_on_stream(stream)
            seen.append(view.cpu().tolist())
            shmem.shmem_barrier_on_stream(stream)  # nobody starts round r+1 before all have read
        torch.cuda.synchronize()
        shmem.shmem_check_device_error()
        plain = jit.load_module(KERNELS_WITHOUT_STATE, defines={"VALUE_T": "float"})
        return {"seen": seen, "module_init_without_global": shmem.shmem_module_init(plain)}
