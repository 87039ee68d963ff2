# SPDX-License-Identifier: MIT
"""What the ranks of the GDA tests run (module level, for spawned processes): one-sided transfers
between ranks of different nodes, one host standing for several through MORI_CCO_RANKS_PER_NODE."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from cco_programs import _init, invalid_argument_messages

import mori.cco
from mori.cco.tensors import tensor_at

CHUNK = 3 << 20  # above the tcp conduit's 512 KiB stripe: striped transfers too


def pattern(rank: int, nbytes: int = CHUNK) -> np.ndarray:
    """The bytes rank puts; the test recomputes them independently."""
    return np.random.default_rng(1000 + rank).integers(0, 256, size=nbytes, dtype=np.uint8)


def _bytes_of(comm: Any, window: Any, offset: int, nbytes: int) -> np.ndarray:
    view = tensor_at(window.local_ptr + offset, (nbytes,), "uint8", comm.device)
    return view.cpu().numpy().copy()


def _remote_peers(comm: Any) -> list[int]:
    start = comm.node * comm.lsa_size
    return [p for p in range(comm.nranks) if not start <= p < start + comm.lsa_size]


def host_exchange(rank: int, nranks: int, uid: bytes, backend: str) -> dict[str, Any]:
    """Every rank puts CHUNK bytes (with a signal) into slot `rank` of every remote peer's window,
    gets one remote peer's source window, and adds rank + 1 to signal 1 of every remote peer."""
    import torch

    with _init(rank, nranks, uid, backend) as comm:
        handle = comm.create_dev_comm(mori.cco.CCODevCommRequirements(gda_signal_count=2))
        inbox = comm.register_window(size=nranks * CHUNK)
        src = comm.register_window(size=CHUNK)
        got = comm.register_window(size=CHUNK)
        tensor_at(src.local_ptr, (CHUNK,), "uint8", comm.device).copy_(torch.from_numpy(pattern(rank)))
        if backend == "cuda":
            torch.cuda.synchronize()
        comm.barrier()
        remote = _remote_peers(comm)
        for peer in remote:
            comm.gda_put(handle, peer, inbox, rank * CHUNK, src, 0, CHUNK, signal_id=0, signal_value=1)
            comm.gda_signal(handle, peer, 1, rank + 1)
        comm.wait_signal(handle, 0, len(remote))
        comm.wait_signal(handle, 1, sum(p + 1 for p in remote))
        if backend == "cuda":
            torch.cuda.synchronize()
        received = {p: _bytes_of(comm, inbox, p * CHUNK, CHUNK) for p in remote}
        comm.gda_get(remote[-1], src, 0, got, 0, CHUNK)
        fetched = _bytes_of(comm, got, 0, CHUNK)
        comm.gda_flush()
        signals = [comm.read_signal(handle, i) for i in range(2)]
        comm.barrier()
        return {
            "topology": (comm.node, comm.num_nodes, comm.lsa_rank, comm.lsa_size),
            "remote": remote,
            "received": received,
            "fetched_from": remote[-1],
            "fetched": fetched,
            "signals": signals,
            "conduit": comm.gda_conduit,
        }


def bad_gda_calls(rank: int, nranks: int, uid: bytes, backend: str) -> list[str]:
    """Each bad call must raise CcoInvalidArgumentError naming what is wrong."""
    with _init(rank, nranks, uid, backend) as comm:
        handle = comm.create_dev_comm(mori.cco.CCODevCommRequirements(gda_signal_count=2))
        win = comm.register_window(size=4096)
        remote = _remote_peers(comm)[0]
        local = comm.node * comm.lsa_size + (comm.lsa_rank + 1) % comm.lsa_size
        checks = [
            lambda: comm.gda_put(handle, local, win, 0, win, 0, 16),
            lambda: comm.gda_put(handle, nranks, win, 0, win, 0, 16),
            lambda: comm.gda_put(handle, remote, win, 4000, win, 0, 200),
            lambda: comm.gda_put(handle, remote, win, 0, win, 0, 16, signal_id=2),
            lambda: comm.gda_signal(handle, remote, -2, 1),
            lambda: comm.gda_get(remote, win, 0, win, 8192, 16),
        ]
        messages = invalid_argument_messages(checks)
        comm.barrier()
    return messages


def gda_to_dead_peer(rank: int, nranks: int, uid: bytes, backend: str) -> str:
    """The last rank (alone on its node) leaves; rank 0's puts and flush to it must fail."""
    comm = _init(rank, nranks, uid, backend)
    handle = comm.create_dev_comm()
    win = comm.register_window(size=1 << 20)
    comm.barrier()
    if rank == nranks - 1:
        os._exit(0)
    if rank != 0:
        return "not asked"
    try:
        for _ in range(50):
            comm.gda_put(handle, nranks - 1, win, 0, win, 0, 1 << 20)
            comm.gda_flush()
    except (mori.cco.CcoPeerLostError, mori.cco.CcoTimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"
