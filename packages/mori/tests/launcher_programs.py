# SPDX-License-Identifier: MIT
"""What the processes of test_testing.py run (module level, so spawned processes can import it)."""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

#: The environment when this module was imported: in a PE, before its function runs.
ENVIRON_AT_IMPORT = dict(os.environ)


def ring_sum(rank: int, nranks: int, port_base: int) -> int:
    """Each rank sends its rank to the next one over loopback TCP and returns what it received plus
    its own rank: a real exchange between the processes, checked against arithmetic by the test."""
    print(f"rank {rank} of {nranks} up", flush=True)
    server = socket.create_server(("127.0.0.1", port_base + rank))
    deadline = time.monotonic() + 30
    while True:
        try:
            out = socket.create_connection(("127.0.0.1", port_base + (rank + 1) % nranks), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with server, out:
        out.sendall(rank.to_bytes(4, "little"))
        conn, _ = server.accept()
        with conn:
            received = int.from_bytes(conn.recv(4), "little")
    return received + rank


def fail_on(rank: int, nranks: int, bad_rank: int) -> int:
    print(f"rank {rank} says hello", file=sys.stderr, flush=True)
    if rank == bad_rank:
        raise ValueError(f"rank {rank} was told to fail")
    time.sleep(300)  # the others wait: the launcher must kill them after the grace period
    return rank


def die_on(rank: int, nranks: int, bad_rank: int) -> int:
    if rank == bad_rank:
        print("dying without a word to the launcher", flush=True)
        os._exit(7)
    time.sleep(300)
    return rank


def hang(rank: int, nranks: int, all_ranks: bool = True) -> None:
    if rank == 0 and not all_ranks:
        return None  # a result of None is a result
    print(f"rank {rank} hangs", flush=True)
    time.sleep(300)


def echo_peer(conn: Connection, greeting: str, *, factor: int = 1) -> None:
    print("peer started", flush=True)
    conn.send(("ready", greeting))
    while True:
        cmd = conn.recv()
        if cmd[0] == "exit":
            conn.send(True)
            return
        if cmd[0] == "die":
            os._exit(9)
        if cmd[0] == "mute":
            continue
        conn.send(cmd[1] * factor)


def environment(rank: int, nranks: int, names: list[str]) -> dict[str, Any]:
    """What this PE saw of ``names`` when it imported its modules and now; the level that
    ``import mori`` set from MORI_LOG_LEVEL; and its parent (the launcher or the fork server)."""
    return {
        "at_import": {name: ENVIRON_AT_IMPORT.get(name) for name in names},
        "now": {name: os.environ.get(name) for name in names},
        "mori_level": logging.getLogger("mori").level,
        "pid": os.getpid(),
        "ppid": os.getppid(),
    }


def environment_peer(conn: Connection, names: list[str]) -> None:
    conn.send(environment(0, 1, names))


def modules_loaded(rank: int, nranks: int, names: list[str]) -> list[bool]:
    """Which of ``names`` were imported before the PE's function ran (by the fork server, say)."""
    return [name in sys.modules for name in names]
