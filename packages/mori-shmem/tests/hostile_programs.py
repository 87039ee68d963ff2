# SPDX-License-Identifier: MIT
"""PE programs in which a hostile client meets the bootstrap root before the real ranks do
(test_init.py). NOTE [handshake gate] in src/bootstrap/handshake_gate.hpp is what they test."""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

import mori.shmem as shmem
from mori.shmem.testing import init_pe

from pe_programs import catch, check

NONCE_BYTES = 32
HELLO_BYTES = 48  # struct Hello of src/bootstrap/tcp_bootstrap.cpp
REPLY = struct.Struct("<IIQ")  # status, reason_len, payload_len
STATUS_AUTH = 7


def _connect_when_listening(host: str, port: int, within_s: float = 20.0) -> socket.socket:
    """Connects to the root, retrying while rank 0 has not bound the port yet."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5.0)
            sock.settimeout(5.0)
            return sock
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _recv_upto(sock: socket.socket, n: int, timeout_s: float) -> bytes:
    sock.settimeout(timeout_s)
    out = bytearray()
    try:
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                break
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return bytes(out)


def rendezvous_past_hostiles(rank: int, nranks: int, uid: bytes, silent: int, absent_rank: int) -> dict[str, Any]:
    """Before rank 1 joins, it opens `silent` connections to the root that send nothing, two that
    send a few bytes and one that sends a hello-sized block of garbage, and keeps them all open
    while it joins. absent_rank (if in range) never joins."""
    if rank == absent_rank:
        return {"absent": True}
    out: dict[str, Any] = {}
    hostile: list[socket.socket] = []
    if rank == 1:
        where = shmem.describe_unique_id(uid)
        host, port = where["host"], where["port"]
        hostile = [_connect_when_listening(host, port) for _ in range(silent)]
        few = [_connect_when_listening(host, port) for _ in range(2)]
        for sock in few:
            sock.sendall(b"MOR")
        garbage = _connect_when_listening(host, port)
        garbage.sendall(os.urandom(HELLO_BYTES))
        hostile += few
        # The garbage client is answered (refused) while the silent ones still hold their slots.
        nonce = _recv_upto(garbage, NONCE_BYTES, 5.0)
        reply = _recv_upto(garbage, REPLY.size, 5.0)
        out["garbage_nonce"] = len(nonce)
        out["garbage_status"] = REPLY.unpack(reply)[0] if len(reply) == REPLY.size else None
        garbage.close()
    t0 = time.monotonic()
    err = catch(init_pe, rank, nranks, uid)
    out["init_s"] = time.monotonic() - t0
    out["error"] = err
    if err is None:
        ranks = shmem.shmem_bootstrap_allgather(str(rank).encode())
        out["allgather"] = [int(r) for r in ranks]
        shmem.shmem_finalize()
    for sock in hostile:
        sock.close()
    check(rank != 1 or out["garbage_nonce"] == NONCE_BYTES, f"garbage client got {out.get('garbage_nonce')} bytes")
    return out
