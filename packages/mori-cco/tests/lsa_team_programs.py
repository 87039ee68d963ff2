# SPDX-License-Identifier: MIT
"""What the ranks of the LSA-team tests run (module level, for spawned processes): each rank first
takes its own environment (MORI_VPOD_ID differs per rank) and, optionally, its own host name (a
UTS namespace of its own, so one machine can stand for several)."""

from __future__ import annotations

import ctypes
import os
import socket
from typing import Any

import gda_programs
from cco_programs import _init

import mori.cco

CLONE_NEWUTS = 0x04000000


class NoHostNamespace(RuntimeError):
    """This process may not make a UTS namespace of its own (not root, or no unshare)."""


def _take(env: dict[str, str | None], hostname: str | None) -> None:
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if hostname is not None:
        if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUTS) != 0:
            raise NoHostNamespace(os.strerror(ctypes.get_errno()))
        socket.sethostname(hostname)


def teams(
    rank: int, nranks: int, uid: bytes, backend: str, envs: list[dict[str, str | None]], hostnames: list[str | None]
) -> dict[str, Any]:
    """The rank's LSA team, and what it reads from each team peer's copy of a tensor in which
    every rank wrote its own world rank (load/store through the flat range)."""
    import torch

    _take(envs[rank], hostnames[rank])
    with _init(rank, nranks, uid, backend) as comm:
        mine = comm.tensor((4,), torch.int64)
        mine.fill_(rank)
        if backend == "cuda":
            torch.cuda.synchronize()
        comm.barrier()
        start = rank - comm.lsa_rank
        seen = [int(comm.peer_tensor(mine, start + p)[0].item()) for p in range(comm.lsa_size)]
        comm.barrier()
        return {"topology": (comm.node, comm.num_nodes, comm.lsa_rank, comm.lsa_size), "seen": seen}


def gda_between_teams(rank: int, nranks: int, uid: bytes, backend: str, envs: list[dict[str, str | None]]) -> Any:
    """gda_programs.host_exchange under this rank's environment: ranks of other teams by GDA."""
    _take(envs[rank], None)
    return gda_programs.host_exchange(rank, nranks, uid, backend)


def init_error(
    rank: int, nranks: int, uid: bytes, backend: str, envs: list[dict[str, str | None]], hostnames: list[str | None]
) -> tuple[str, str]:
    """The class and message of the error Communicator.init raised on this rank."""
    try:
        _take(envs[rank], hostnames[rank])
    except NoHostNamespace as exc:
        return ("NoHostNamespace", str(exc))
    try:
        with _init(rank, nranks, uid, backend):
            return ("no error", "")
    except mori.cco.CcoError as exc:
        return (type(exc).__name__, str(exc))
