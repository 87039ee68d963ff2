# SPDX-License-Identifier: MIT
"""PE programs of the remote-transport tests (test_remote.py).

The PEs run on the cpu backend with some peers forced onto the remote transport
(MORI_SHMEM_PES_PER_NODE, MORI_DISABLE_P2P, MORI_NODE_ID in network namespaces), carried by the
conduit MORI_SHMEM_REMOTE_CONDUIT names (tcp or ucx). Each program returns plain data for the
parent to check against its own reference (Python integers, numpy patterns from seeds); checks
that need the heap run here and come back as ``failures`` lists.

Only the peers that are reached through the remote transport are exercised: those are the ones
whose data crosses the conduit.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import mori.shmem as shmem
from mori.shmem.testing import init_pe

from pe_programs import (
    SENTINEL,
    catch,
    check,
    error_info,
    init_with_native_log,
    landing_problems,
    mem,
    pattern,
    pe_session,
    typed,
    wrap,
)

INT_DTYPES = ("int32", "uint32", "int64", "uint64")

# The wire format of src/remote/wire.hpp.
HELLO = struct.Struct("<Iiii32s")  # version, rank, target, stream, mac
REPLY = struct.Struct("<IIQ")  # status, reserved, value
REQUEST = struct.Struct("<HBBiQQQQQ")  # magic, op, type, amo, offset, length, value, compare, signal_offset
WIRE_MAGIC = 0x4D52
WIRE_VERSION = 2
OP_PUT, OP_FLUSH, OP_PUT_SIGNAL_PART = 1, 6, 7
NONCE_BYTES = 32
STATUS_AUTH = 7
UID_SECRET = slice(20, 52)  # the job secret inside the 128-byte unique id


# ----------------------------------------------------------------------------- plans (inputs)

MiB = 1 << 20
# (size, destination offset, source offset): zero and odd sizes, the 16 KiB boundary of the
# transport's coalesced sends, the 512 KiB striping threshold on both sides, stripes whose 64-byte
# rounding leaves a short last part.
FIXED_CASES: list[tuple[int, int, int]] = [
    (0, 5, 3),
    (1, 0, 0),
    (7, 3, 1),
    (64, 64, 0),
    (4099, 13, 7),
    (16 << 10, 0, 5),
    ((16 << 10) + 1, 1, 0),
    (65537, 7, 3),
    (MiB // 2, 0, 0),
    (MiB // 2 + 1, 5, 9),
    (MiB, 0, 0),
    (MiB + 1, 5, 9),
    (2 * MiB + 65, 3, 1),
    (3 * MiB - 1, 4095, 17),
]

# (size, "set" | "add", raw value) of the put-with-signal rounds; the signal words start at
# 2**64 - 5, so the first ADD wraps. ADD values are never 0 mod 2**64 (the receiver waits for a change).
MESSAGES: list[tuple[int, str, int]] = [
    (10, "add", 10),
    (8, "set", 0xDEAD_BEEF),
    (4097, "add", (1 << 63) + 1),
    (MiB + 3, "set", 0x12_3456_789A),
    (3 * MiB + 1, "add", 7),
    (1, "set", (1 << 40) - 1),
    (16 << 10, "add", (1 << 64) - 1),
    (0, "set", 5),
]


def atomic_plans() -> dict[str, list[tuple[str, int, int]]]:
    """Per dtype, the operations each PE applies to its own cell on every remote PE, after setting
    it to plan_init(...): every AMO, fetching and not, with values that wrap."""
    plans = {}
    for name in INT_DTYPES:
        info = np.iinfo(np.dtype(name))
        bits = info.bits
        raw = [
            ("fetch", 0, 0),
            ("add", 5, 0),
            ("fetch_add", -7, 0),
            ("inc", 0, 0),
            ("fetch_inc", 0, 0),
            ("fetch_add", 1 << (bits - 2), 0),
            ("and", 0x7F3C_F0F0_5A5A_FF0F, 0),
            ("or", 0x0101_0000_8000_0003, 0),
            ("xor", 0x5555_AAAA_5555_AAAA, 0),
            ("fetch_and", 0x3FFF_0FFF_FFF0_FFFF, 0),
            ("fetch_or", 0x0000_F000_000F_0000, 0),
            ("fetch_xor", -1, 0),
            ("fetch", 0, 0),
            ("swap", 0x1234_5678_9ABC_DEF0, 0),
            ("compare_swap", 42, 43),  # compare fails (the cell holds the swap value)
            ("compare_swap", -42, 0x1234_5678_9ABC_DEF0),  # compare succeeds
            ("set", -(1 << (bits - 1)) + 1, 0),
            ("fetch_add", -2, 0),  # signed: wraps below the minimum
            ("fetch", 0, 0),
        ]
        plans[name] = [(op, wrap(value, name), wrap(compare, name)) for op, value, compare in raw]
    return plans


TEXT_BLOCK = 256


def allgather_text(text: str) -> list[str]:
    """Every PE's ``text``, padded to one width: an allgather's blocks must all have the same size
    (pids of 5 and 6 digits made a flaky SymmetryError)."""
    block = text.encode()
    assert len(block) <= TEXT_BLOCK, text
    return [b.rstrip(b"\0").decode() for b in shmem.shmem_bootstrap_allgather(block.ljust(TEXT_BLOCK, b"\0"))]


def remote_peers(nranks: int) -> list[int]:
    return [pe for pe in range(nranks) if shmem.shmem_pe_transport(pe) == "remote"]


def partner(rank: int, nranks: int) -> int:
    """A permutation of the PEs that sends every PE to another node in every layout tested."""
    return (rank + nranks // 2) % nranks


def put_seed(case: int, src: int, dst: int) -> int:
    return case * 1_000_003 + src * 1009 + dst * 17 + 1


def get_seed(owner: int) -> int:
    return 900_000 + owner


# ----------------------------------------------------------------------------- layout


def layout(rank: int, nranks: int) -> dict[str, Any]:
    probe = shmem.shmem_malloc(4096)
    out = {
        "transports": [shmem.shmem_pe_transport(pe) for pe in range(nranks)],
        "ptrs": [shmem.shmem_ptr_p2p(probe, rank, pe) for pe in range(nranks)],
        "probe": probe,
        "endpoint": shmem.shmem_remote_endpoint(),
        "conduit": shmem.shmem_remote_conduit(),
    }
    shmem.shmem_barrier_all()
    shmem.shmem_free(probe)
    return out


# ----------------------------------------------------------------------------- put / get


def put_get_cases(rank: int, nranks: int, cases: list[tuple[int, int, int]]) -> dict[str, Any]:
    """Every PE puts a seeded pattern into its own slot of every remote PE's buffer (destination
    offset dst_off, from a local source at src_off), then checks what arrived from every remote PE
    and that nothing else in its buffer changed; then reads it back with getmem. Then every PE
    fills its buffer with its own pattern and reads ranges of every remote PE's buffer into local
    memory at unaligned addresses."""
    peers = remote_peers(nranks)
    slot = max(size + dst for size, dst, _ in cases) + 64
    slot = (slot + 63) // 64 * 64
    total = slot * nranks
    buf = shmem.shmem_malloc(total)
    local = mem(buf, total)
    biggest = max(size + src for size, _, src in cases) + 64
    failures: list[str] = []
    for case, (size, dst_off, src_off) in enumerate(cases):
        local[:] = SENTINEL
        shmem.shmem_barrier_all()
        staging = np.zeros(biggest, dtype=np.uint8)
        for pe in peers:
            staging[src_off : src_off + size] = pattern(put_seed(case, rank, pe), size)
            shmem.shmem_putmem(buf + rank * slot + dst_off, staging.ctypes.data + src_off, size, pe)
            # putmem returns once the source may be reused: overwrite it at once.
            staging[:] = 0x11
        shmem.shmem_quiet()
        shmem.shmem_barrier_all()
        expect_region = np.full(slot, SENTINEL, dtype=np.uint8)
        for src_pe in range(nranks):
            region = local[src_pe * slot : (src_pe + 1) * slot]
            expect_region[:] = SENTINEL
            if src_pe in peers:
                expect_region[dst_off : dst_off + size] = pattern(put_seed(case, src_pe, rank), size)
            if not np.array_equal(region, expect_region):
                bad = np.flatnonzero(region != expect_region)
                failures.append(
                    f"put case {case} (size {size}, dst_off {dst_off}, src_off {src_off}) from PE {src_pe}: "
                    f"{bad.size} wrong bytes, first at {int(bad[0]) - dst_off} relative to the destination"
                )
        # Read back, across the hosts, what this PE put into each remote PE.
        back = np.full(biggest, SENTINEL, dtype=np.uint8)
        for pe in peers:
            back[:] = SENTINEL
            shmem.shmem_getmem(back.ctypes.data + src_off, buf + rank * slot + dst_off, size, pe)
            for problem in landing_problems(back, src_off, pattern(put_seed(case, rank, pe), size)):
                failures.append(f"put case {case} (size {size}): getmem from PE {pe} of what was put: {problem}")
        shmem.shmem_barrier_all()

    local[:] = pattern(get_seed(rank), total)
    shmem.shmem_barrier_all()
    dst = np.empty(biggest, dtype=np.uint8)
    for pe in peers:
        owner_pattern = pattern(get_seed(pe), total)
        for case, (size, src_off, dst_off) in enumerate(cases):
            dst[:] = SENTINEL
            shmem.shmem_getmem(dst.ctypes.data + dst_off, buf + src_off, size, pe)
            for problem in landing_problems(dst, dst_off, owner_pattern[src_off : src_off + size]):
                failures.append(f"get case {case} (size {size}, src_off {src_off}) from PE {pe}: {problem}")
    shmem.shmem_barrier_all()
    shmem.shmem_free(buf)
    return {"failures": failures, "checked_peers": peers, "cases": len(cases)}


def put_get(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int]]) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        out = put_get_cases(rank, nranks, cases)
        out["layout"] = layout(rank, nranks)
        return out


# ----------------------------------------------------------------------------- put with signal


def signal_value(i: int, op: str, raw: int) -> int:
    """The value message i carries: a SET value is made distinct from every earlier one."""
    return ((i + 1) << 40) | (raw & ((1 << 40) - 1)) if op == "set" else raw


def put_signal_rounds(
    rank: int, nranks: int, messages: list[tuple[int, str, int]], initial: int, seed: int
) -> dict[str, Any]:
    """In round i every PE sends message i with putmem_signal to every remote PE (into a region and
    a signal word of its own on the receiver), waits (wait_until) for message i of every remote PE,
    checks the data it sees then, and acknowledges with signal_op; the sender waits for the
    acknowledgements before the next round. Receivers return the signal values they observed."""
    peers = remote_peers(nranks)
    biggest = max(size for size, _, _ in messages) + 64
    data = shmem.shmem_malloc(biggest * nranks)
    words = shmem.shmem_malloc(16 * nranks)  # [0, n): signal from PE s; [n, 2n): ack from PE s
    sig = [words + 8 * s for s in range(nranks)]
    ack = [words + 8 * (nranks + s) for s in range(nranks)]
    typed(words, 2 * nranks, np.uint64)[:] = 0
    typed(words, nranks, np.uint64)[:] = initial
    mem(data, biggest * nranks)[:] = 0
    shmem.shmem_barrier_all()
    observed: dict[int, list[int]] = {pe: [] for pe in peers}
    fetched: dict[int, list[int]] = {pe: [] for pe in peers}
    failures: list[str] = []
    expect = initial
    for i, (size, op, raw) in enumerate(messages):
        value = signal_value(i, op, raw)
        sig_op = shmem.AmoType.SIGNAL_SET if op == "set" else shmem.AmoType.SIGNAL_ADD
        expect = value if op == "set" else (expect + value) % (1 << 64)
        for pe in peers:
            payload = pattern(seed * 7919 + i * 131 + rank * 13 + pe, size)
            shmem.shmem_putmem_signal(data + rank * biggest, payload.ctypes.data, size, sig[rank], value, sig_op, pe)
        for src in peers:
            got = int(shmem.shmem_wait_until(sig[src], shmem.CmpOp.EQ, expect, timeout=20))
            observed[src].append(got)
            want = pattern(seed * 7919 + i * 131 + src * 13 + rank, size)
            if not np.array_equal(mem(data + src * biggest, size), want):
                failures.append(f"message {i} ({size} B, {op}) from PE {src}: data incomplete when its signal was seen")
            fetched[src].append(int(shmem.shmem_signal_fetch(sig[src])))
            shmem.shmem_signal_op(ack[rank], i + 1, shmem.AmoType.SIGNAL_SET, src)
        for pe in peers:
            shmem.shmem_wait_until(ack[pe], shmem.CmpOp.EQ, i + 1, timeout=20)
    shmem.shmem_barrier_all()
    shmem.shmem_free(words)
    shmem.shmem_free(data)
    return {"observed": observed, "fetched": fetched, "failures": failures}


def signal_ops(rank: int, nranks: int) -> dict[str, Any]:
    """Every PE SIGNAL_ADDs 1000 + rank to word 0 of every remote PE and SIGNAL_SETs its own word
    1 + rank there; every PE waits for the sum and the values it expects."""
    peers = remote_peers(nranks)
    words = shmem.shmem_malloc(8 * (nranks + 1))
    view = typed(words, nranks + 1, np.uint64)
    view[:] = 0
    view[0] = (1 << 64) - 3000  # the adds wrap past 2**64
    shmem.shmem_barrier_all()
    for pe in peers:
        shmem.shmem_signal_op(words, 1000 + rank, shmem.AmoType.SIGNAL_ADD, pe)
        shmem.shmem_signal_op(
            words + 8 * (1 + rank), 0xFEED_0000_0000 + rank * 0x101 + pe, shmem.AmoType.SIGNAL_SET, pe
        )
    total = (((1 << 64) - 3000) + sum(1000 + s for s in peers)) % (1 << 64)
    got_total = int(shmem.shmem_wait_until(words, shmem.CmpOp.EQ, total, timeout=20))
    got_set = {}
    for src in peers:
        got_set[src] = int(shmem.shmem_wait_until(words + 8 * (1 + src), shmem.CmpOp.NE, 0, timeout=20))
    untouched = [int(view[1 + s]) for s in range(nranks) if s not in peers]
    shmem.shmem_barrier_all()
    shmem.shmem_free(words)
    return {"total": got_total, "set": got_set, "untouched": untouched}


# ----------------------------------------------------------------------------- atomics


def run_plan(cell: int, pe: int, dt: np.dtype[Any], init: int, plan: list[tuple[str, int, int]]) -> list[Any]:
    """Applies the operations of plan to `cell` on `pe`; returns what each call returned."""
    out: list[Any] = [shmem.shmem_atomic_set(cell, init, pe, dtype=dt)]
    for op, value, compare in plan:
        if op == "compare_swap":
            out.append(shmem.shmem_atomic_compare_swap(cell, compare, value, pe, dtype=dt))
        elif op in ("fetch", "fetch_inc", "inc"):
            out.append(getattr(shmem, f"shmem_atomic_{op}")(cell, pe, dtype=dt))
        else:
            out.append(getattr(shmem, f"shmem_atomic_{op}")(cell, value, pe, dtype=dt))
    return [None if v is None else int(v) for v in out]


def atomics(rank: int, nranks: int, plans: dict[str, list[tuple[str, int, int]]], contended: int) -> dict[str, Any]:
    """Per dtype: (1) this PE runs plan on its own cell of every remote PE (exact results, no
    contention), the owner then reports the final contents it sees locally; (2) every PE adds to
    and fetch_adds on cells of PE 0 `contended` times (remote PEs through the transport, PE 0's
    node-mates through load/store, the same words)."""
    peers = remote_peers(nranks)
    results: dict[str, Any] = {}
    for name, plan in plans.items():
        dt = np.dtype(name)
        cells = shmem.shmem_malloc(8 * (nranks + 8))
        view = typed(cells, nranks + 8, dt)
        view[:] = 0
        lo = int(np.iinfo(dt).min)
        hi = int(np.iinfo(dt).max)
        # Contended cells on PE 0: [nranks] add, [nranks+1] fetch_add, [nranks+2..] sentinels.
        view[nranks] = hi - 7
        view[nranks + 1] = lo + 11 if lo < 0 else hi - 11
        view[nranks + 2 :] = wrap(0x5A5A5A5A5A5A5A5A, name)
        shmem.shmem_barrier_all()
        per_peer = {}
        for pe in peers:
            init = wrap(plan_init(name, rank, pe), name)
            per_peer[pe] = run_plan(cells + rank * dt.itemsize, pe, dt, init, plan)
        olds = []
        for _ in range(contended):
            shmem.shmem_atomic_add(cells + nranks * dt.itemsize, rank + 1, 0, dtype=dt)
            olds.append(int(shmem.shmem_atomic_fetch_add(cells + (nranks + 1) * dt.itemsize, 3, 0, dtype=dt)))
        shmem.shmem_barrier_all()
        results[name] = {
            "per_peer": per_peer,
            "cells_seen_by_owner": {src: int(view[src]) for src in peers},
            "untouched": [int(view[s]) for s in range(nranks) if s not in peers],
            "contended_olds": olds,
            "contended_final": (int(view[nranks]), int(view[nranks + 1])) if rank == 0 else None,
            "sentinels": [int(v) for v in view[nranks + 2 :]],
        }
        shmem.shmem_barrier_all()
        shmem.shmem_free(cells)
    return results


def plan_init(name: str, src: int, dst: int) -> int:
    """The first value src sets in its cell on dst (also computed by the parent's reference)."""
    info = np.iinfo(np.dtype(name))
    return int(info.max) - 3 - 1000 * src - dst if src % 2 == 0 else int(info.min) + 5 + 1000 * src + dst


# ----------------------------------------------------------------------------- ordering


def ordering(rank: int, nranks: int, rounds: int) -> dict[str, Any]:
    """Each PE puts data (sizes alternating between 64 KiB and a striped 3 MiB) to its partner on the
    other node, then fence (odd rounds) or quiet (even rounds), then an 8-byte flag with a plain
    putmem (likely on another TCP stream); the partner waits for the flag and must then see the
    data. A last round relies on barrier_all alone to complete the puts."""
    target = partner(rank, nranks)
    source = next(s for s in range(nranks) if partner(s, nranks) == rank)
    check(shmem.shmem_pe_transport(target) == "remote", f"partner {target} of PE {rank} is not remote")
    n = 3 << 20
    data = shmem.shmem_malloc(n)
    flags = shmem.shmem_malloc(16)  # [0]: flag from source, [1]: ack from target
    typed(flags, 2, np.uint64)[:] = 0
    mem(data, n)[:] = 0
    shmem.shmem_barrier_all()
    failures = []
    for i in range(1, rounds + 1):
        size = (64 << 10) + 3 if i % 2 else n
        payload = pattern(4242 + i * 31 + rank, size)
        shmem.shmem_putmem(data, payload.ctypes.data, size, target)
        if i % 2:
            shmem.shmem_fence()
        else:
            shmem.shmem_quiet()
        flag = np.array([i], dtype=np.uint64)
        shmem.shmem_putmem(flags, flag.ctypes.data, 8, target)
        shmem.shmem_quiet()
        shmem.shmem_wait_until(flags, shmem.CmpOp.EQ, i, timeout=20)
        if not np.array_equal(mem(data, size), pattern(4242 + i * 31 + source, size)):
            failures.append(f"round {i} ({'fence' if i % 2 else 'quiet'}, {size} B): flag seen before the data")
        shmem.shmem_atomic_set(flags + 8, i, source)
        shmem.shmem_wait_until(flags + 8, shmem.CmpOp.EQ, i, timeout=20)
    # barrier_all completes outstanding puts: no quiet before it.
    payload = pattern(777 + rank, n)
    shmem.shmem_putmem(data, payload.ctypes.data, n, target)
    shmem.shmem_barrier_all()
    if not np.array_equal(mem(data, n), pattern(777 + source, n)):
        failures.append("barrier_all returned before a put issued before it had landed")
    shmem.shmem_barrier_all()
    shmem.shmem_free(flags)
    shmem.shmem_free(data)
    return {"failures": failures}


def barrier_rounds(rank: int, nranks: int, rounds: int) -> dict[str, Any]:
    """In round r every PE writes r into its word on every remote PE (a put, no quiet) and enters
    barrier_all; after it every PE must read r from every remote PE's word."""
    peers = remote_peers(nranks)
    words = shmem.shmem_malloc(8 * nranks)
    typed(words, nranks, np.uint64)[:] = 0
    shmem.shmem_barrier_all()
    failures = []
    for r in range(1, rounds + 1):
        value = np.array([r * 1000 + rank], dtype=np.uint64)
        for pe in peers:
            shmem.shmem_putmem(words + 8 * rank, value.ctypes.data, 8, pe)
        shmem.shmem_barrier_all()
        seen = typed(words, nranks, np.uint64)
        for src in peers:
            if int(seen[src]) != r * 1000 + src:
                failures.append(f"round {r}: word of PE {src} holds {int(seen[src])}")
        shmem.shmem_barrier_all()
    shmem.shmem_free(words)
    return {"failures": failures}


# ----------------------------------------------------------------------------- everything at once


def everything(
    rank: int,
    nranks: int,
    uid: bytes,
    cases: list[tuple[int, int, int]],
    messages: list[tuple[int, str, int]],
    plans: dict[str, list[tuple[str, int, int]]],
    contended: int,
) -> dict[str, Any]:
    """One job that runs every check above (PEs are expensive to start on a 2-core machine)."""
    with pe_session(rank, nranks, uid):
        out: dict[str, Any] = {"layout": layout(rank, nranks)}
        steps: list[tuple[str, Any]] = [
            ("put_get", lambda: put_get_cases(rank, nranks, cases)),
            ("put_signal", lambda: put_signal_rounds(rank, nranks, messages, (1 << 64) - 5, 11)),
            ("signal_ops", lambda: signal_ops(rank, nranks)),
            ("atomics", lambda: atomics(rank, nranks, plans, contended)),
            ("ordering", lambda: ordering(rank, nranks, 6)),
            ("barrier", lambda: barrier_rounds(rank, nranks, 5)),
        ]
        out["seconds"] = {}
        for name, step in steps:
            t0 = time.monotonic()
            out[name] = step()
            out["seconds"][name] = round(time.monotonic() - t0, 2)
        shmem.shmem_barrier_all()
        return out


# ----------------------------------------------------------------------------- intruders


def _connect(endpoint: str, timeout: float = 10.0) -> socket.socket:
    host, port = endpoint.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _until_eof(sock: socket.socket) -> str:
    """'eof' when the server closes the connection (a reset counts too), else what it sent."""
    try:
        extra = sock.recv(4096)
    except ConnectionResetError:
        return "eof"
    except TimeoutError:
        return "open"
    return "eof" if extra == b"" else f"sent {extra!r}"


def _hello(
    secret: bytes | None, nonce: bytes, rank: int, target: int, stream: int, version: int = WIRE_VERSION
) -> bytes:
    head = struct.pack("<Iiii", version, rank, target, stream)
    mac = hmac.new(secret, nonce + head, hashlib.sha256).digest() if secret is not None else bytes(range(32))
    return HELLO.pack(version, rank, target, stream, mac)


def _handshake(endpoint: str, secret: bytes | None, rank: int, target: int, **kw: int) -> dict[str, Any]:
    """Connects, answers the nonce with a Hello (a wrong MAC when secret is None) and returns the
    server's reply and whether it then closed the connection."""
    with _connect(endpoint) as sock:
        nonce = _recv_exact(sock, NONCE_BYTES)
        check(len(nonce) == NONCE_BYTES, f"nonce of {len(nonce)} bytes")
        sock.sendall(_hello(secret, nonce, rank, target, kw.get("stream", 0), kw.get("version", WIRE_VERSION)))
        reply = _recv_exact(sock, REPLY.size)
        status = REPLY.unpack(reply)[0] if len(reply) == REPLY.size else None
        sock.settimeout(2.0)
        after = _until_eof(sock) if status != 0 else "welcomed"
        return {"status": status, "after": after}


def _signal_part(offset: int, data: bytes, parts: int, signal_offset: int) -> bytes:
    """A PUT_SIGNAL_PART of join 2**40 (which PE 0's own striped puts never reach) that sets the
    signal word to 42 once all ``parts`` have landed."""
    sig_set = int(shmem.AmoType.SIGNAL_SET)
    join = (1 << 40) << 8 | parts
    return REQUEST.pack(WIRE_MAGIC, OP_PUT_SIGNAL_PART, 0, sig_set, offset, len(data), 42, join, signal_offset) + data


def intruders(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """PE 0 attacks PE 1's remote-transport server (they are on different nodes) while both stay in
    the job; afterwards the PEs must still move data to each other."""
    out: dict[str, Any] = {}
    silent: list[socket.socket] = []
    with pe_session(rank, nranks, uid):
        endpoint = shmem.shmem_remote_endpoint()
        endpoints = allgather_text(endpoint or "")
        out["endpoints"] = endpoints
        out["transport"] = shmem.shmem_pe_transport(1 - rank)
        n = 1 << 20
        buf = shmem.shmem_malloc(n)
        flag = shmem.shmem_malloc(8)
        joined = shmem.shmem_malloc(8)
        typed(flag, 1, np.uint64)[0] = 0
        typed(joined, 1, np.uint64)[0] = 0
        mem(buf, n)[:] = 0
        info = shmem.shmem_heap_info()
        heap_tail = info.base + info.size - 8
        out["tail_before"] = bytes(mem(heap_tail, 8))
        shmem.shmem_barrier_all()
        if rank == 0:
            target = endpoints[1]
            secret = uid[UID_SECRET]
            silent = [_connect(target) for _ in range(3)]  # say nothing until the end
            out["wrong_mac"] = _handshake(target, None, 0, 1)
            out["wrong_secret"] = _handshake(target, bytes(32), 0, 1)
            out["wrong_target"] = _handshake(target, secret, 0, 0)
            out["wrong_version"] = _handshake(target, secret, 0, 1, version=WIRE_VERSION + 1)
            # Garbage the size of a Hello; then garbage shorter than one; then bare connects.
            with _connect(target) as sock:
                _recv_exact(sock, NONCE_BYTES)
                sock.sendall(os.urandom(HELLO.size))
                reply = _recv_exact(sock, REPLY.size)
                sock.settimeout(2.0)
                out["garbage"] = {
                    "status": REPLY.unpack(reply)[0] if len(reply) == REPLY.size else None,
                    "after": _until_eof(sock),
                }
            with _connect(target) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            for _ in range(5):
                _connect(target).close()
            # The positive control: the right secret is welcomed, and what it then sends is applied.
            out["right_secret"] = _handshake(target, secret, 0, 1, stream=9)
            with _connect(target) as sock:
                nonce = _recv_exact(sock, NONCE_BYTES)
                sock.sendall(_hello(secret, nonce, 0, 1, 10))
                welcome = REPLY.unpack(_recv_exact(sock, REPLY.size))[0]
                sock.sendall(REQUEST.pack(WIRE_MAGIC, OP_PUT, 0, 0, buf - info.base + 64, 8, 0, 0, 0) + b"forged!!")
                sock.sendall(REQUEST.pack(WIRE_MAGIC, OP_FLUSH, 0, 0, 0, 0, 0, 0, 0))
                flushed = REPLY.unpack(_recv_exact(sock, REPLY.size))[0]
                # A put-with-signal in two parts (NOTE [striped put-with-signal]): the signal waits
                # for the second.
                seen = np.zeros(2, dtype=np.uint64)
                joins = []
                for offset, data in ((128, b"part one"), (136, b"part two")):
                    part = _signal_part(buf - info.base + offset, data, 2, joined - info.base)
                    sock.sendall(part + REQUEST.pack(WIRE_MAGIC, OP_FLUSH, 0, 0, 0, 0, 0, 0, 0))
                    REPLY.unpack(_recv_exact(sock, REPLY.size))
                    shmem.shmem_getmem(seen.ctypes.data, joined, 8, 1)
                    joins.append(int(seen[0]))
                out["join"] = joins
                # A put that runs past the end of the heap: dropped, nothing written.
                sock.sendall(REQUEST.pack(WIRE_MAGIC, OP_PUT, 0, 0, info.size - 4, 8, 0, 0, 0) + b"x" * 8)
                sock.settimeout(5.0)
                out["authenticated"] = {"welcome": welcome, "flush": flushed, "after_bad_put": _until_eof(sock)}
            with _connect(target) as sock:  # a part of a join of one part: dropped, nothing written
                nonce = _recv_exact(sock, NONCE_BYTES)
                sock.sendall(_hello(secret, nonce, 0, 1, 11))
                REPLY.unpack(_recv_exact(sock, REPLY.size))
                sock.sendall(_signal_part(buf - info.base + 144, b"one only", 1, joined - info.base))
                sock.settimeout(5.0)
                out["join_of_one"] = _until_eof(sock)
            for sock in silent:
                sock.settimeout(0.2)
            out["silent_before"] = [_until_eof_nonce(sock) for sock in silent]
        shmem.shmem_barrier_all()
        out["forged_seen"] = bytes(mem(buf + 64, 8))
        out["joined_seen"] = bytes(mem(buf + 128, 24))
        out["tail_after"] = bytes(mem(heap_tail, 8))
        shmem.shmem_barrier_all()
        # The PEs still work, in both directions.
        payload = pattern(5150 + rank, n)
        shmem.shmem_putmem_signal(buf, payload.ctypes.data, n, flag, 1, shmem.AmoType.SIGNAL_ADD, 1 - rank)
        shmem.shmem_wait_until(flag, shmem.CmpOp.EQ, 1, timeout=20)
        out["put_after"] = bool(np.array_equal(mem(buf, n), pattern(5150 + (1 - rank), n)))
        shmem.shmem_barrier_all()
        got = np.empty(n, dtype=np.uint8)
        shmem.shmem_getmem(got.ctypes.data, buf, n, 1 - rank)
        out["get_after"] = bool(np.array_equal(got, payload))
        out["fetch_add_after"] = int(shmem.shmem_atomic_fetch_add(flag, 5, 1 - rank))
        shmem.shmem_barrier_all()
        out["silent_after"] = [_until_eof(sock) for sock in silent]
        for sock in silent:
            sock.close()
        shmem.shmem_free(flag)
        shmem.shmem_free(buf)
        t0 = time.monotonic()
    out["finalize_s"] = time.monotonic() - t0
    return out


def _footprint() -> dict[str, int]:
    """What a connection could leak in this process: threads, memory maps, descriptors."""
    with open("/proc/self/maps") as maps:
        nmaps = sum(1 for _ in maps)
    return {"threads": len(os.listdir("/proc/self/task")), "maps": nmaps, "fds": len(os.listdir("/proc/self/fd"))}


def conduit_flood(rank: int, nranks: int, uid: bytes, refused: int, silent: int) -> dict[str, Any]:
    """PE 0 floods PE 1's remote-transport server: `refused` handshakes with a wrong MAC one after
    the other, then `silent` connections (plus two that send a few bytes) held open; while they are
    held, a client with the secret must still be welcomed. PE 1 measures its footprint before,
    during and after; both PEs then move data to check that the transport still works."""
    out: dict[str, Any] = {}
    held: list[socket.socket] = []
    with pe_session(rank, nranks, uid):
        target = allgather_text(shmem.shmem_remote_endpoint() or "")[1]
        n = 1 << 20
        buf = shmem.shmem_malloc(n)
        flag = shmem.shmem_malloc(8)
        typed(flag, 1, np.uint64)[0] = 0
        shmem.shmem_barrier_all()
        if rank == 1:
            out["before"] = _footprint()
        shmem.shmem_barrier_all()
        if rank == 0:
            out["refused"] = [_handshake(target, None, 0, 1)["status"] for _ in range(refused)]
            held = [_connect(target) for _ in range(silent)]
            for _ in range(2):
                sock = _connect(target)
                sock.sendall(b"MR\x01")
                held.append(sock)
        shmem.shmem_barrier_all()
        if rank == 1:
            out["during"] = _footprint()
        shmem.shmem_barrier_all()
        if rank == 0:
            t0 = time.monotonic()
            out["welcomed"] = _handshake(target, uid[UID_SECRET], 0, 1, stream=7)
            out["welcome_s"] = time.monotonic() - t0
            for sock in held:
                sock.close()
        shmem.shmem_barrier_all()
        if rank == 1:
            time.sleep(1.5)  # the server joins ended connections' threads within 0.5 s
            out["after"] = _footprint()
        payload = pattern(77 + rank, n)
        shmem.shmem_putmem_signal(buf, payload.ctypes.data, n, flag, 1, shmem.AmoType.SIGNAL_ADD, 1 - rank)
        shmem.shmem_wait_until(flag, shmem.CmpOp.EQ, 1, timeout=20)
        out["put_after"] = bool(np.array_equal(mem(buf, n), pattern(77 + (1 - rank), n)))
        shmem.shmem_barrier_all()
        shmem.shmem_free(flag)
        shmem.shmem_free(buf)
    return out


def _until_eof_nonce(sock: socket.socket) -> str:
    """A silent client has received the nonce and nothing more; 'open' while the server waits."""
    nonce = _recv_exact(sock, NONCE_BYTES)
    if len(nonce) != NONCE_BYTES:
        return "closed before the nonce"
    return _until_eof(sock)


def silent_client_at_finalize(rank: int, nranks: int, uid: bytes, hold_s: float) -> dict[str, Any]:
    """PE 0 opens a connection to PE 1's server, reads the nonce and says nothing more; it keeps the
    connection open for hold_s after its own finalize. PE 1's finalize must not wait for it."""
    init_pe(rank, nranks, uid)
    endpoints = allgather_text(shmem.shmem_remote_endpoint() or "")
    sock = _connect(endpoints[1]) if rank == 0 else None
    if sock is not None:
        _recv_exact(sock, NONCE_BYTES)  # the server has accepted it and waits for the Hello
    shmem.shmem_barrier_all()
    t0 = time.monotonic()
    shmem.shmem_finalize()
    elapsed = time.monotonic() - t0
    if sock is not None:
        time.sleep(hold_s)
        sock.close()
    return {"finalize_s": elapsed}


# ----------------------------------------------------------------------------- failures


def peer_dies(rank: int, nranks: int, uid: bytes, op: str, how: str) -> dict[str, Any]:
    """PE 1 dies (how="exit": os._exit) or stops (how="stop": SIGSTOP, then PE 0 kills it) while PE 0
    loops `op` towards it; PE 0 returns what it raised and how long after PE 1's end it took."""
    init_pe(rank, nranks, uid)
    pids = [int(p) for p in allgather_text(str(os.getpid()))]
    n = 8 << 20
    buf = shmem.shmem_malloc(n)
    local = np.zeros(n, dtype=np.uint8)
    shmem.shmem_barrier_all()
    if rank == 1:
        time.sleep(0.5)
        if how == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(3)
    peer = 1
    deadline = time.monotonic() + 40
    iterations = 0
    t_end = time.monotonic() + 0.5  # about when PE 1 goes
    error = None

    def step() -> None:
        if op == "put":
            shmem.shmem_putmem(buf, local.ctypes.data, n, peer)
            shmem.shmem_quiet()
        elif op == "get":
            shmem.shmem_getmem(local.ctypes.data, buf, n, peer)
        elif op == "put_signal":
            shmem.shmem_putmem_signal(buf, local.ctypes.data, n, buf, 1, shmem.AmoType.SIGNAL_ADD, peer)
            shmem.shmem_quiet()
        else:
            shmem.shmem_atomic_fetch_add(buf, 1, peer)

    try:
        while time.monotonic() < deadline:
            step()
            iterations += 1
    except Exception as exc:
        error = error_info(exc)
    after_error = time.monotonic() - t_end
    # The same operation once more: it must fail again, not hang (a quiet with nothing outstanding
    # towards the lost peer may succeed, so the op itself is repeated).
    again = catch(step)
    if how == "stop":
        os.kill(pids[1], signal.SIGKILL)
    return {"error": error, "elapsed": after_error, "iterations": iterations, "again": again}


def late_answer(rank: int, nranks: int, uid: bytes, what: str) -> dict[str, Any]:
    """PE 1 stops (SIGSTOP) while PE 0 gets from it (what="get") or fetches an atomic (what="fetch"),
    so the call times out; PE 0 then resumes PE 1 (SIGCONT), whose server sends the late answer,
    and makes the same call on another address: that must return the new address's value or
    raise, never the old one's. Run with one stream and a short MORI_SHMEM_WAIT_TIMEOUT."""
    init_pe(rank, nranks, uid)
    pids = [int(p) for p in allgather_text(str(os.getpid()))]
    a, b = shmem.shmem_malloc(64), shmem.shmem_malloc(64)
    mem(a, 64)[:] = 0xAA
    mem(b, 64)[:] = 0xBB
    typed(a, 1, np.uint64)[0] = 111
    typed(b, 1, np.uint64)[0] = 222
    shmem.shmem_barrier_all()
    if rank == 1:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)  # PE 0 kills this PE when it is done
        return {}
    dst = np.zeros(64, dtype=np.uint8)

    def call(addr: int) -> bytes:
        if what == "get":
            shmem.shmem_getmem(dst.ctypes.data, addr, 64, 1)
            return bytes(dst)
        return int(shmem.shmem_atomic_fetch(addr, 1)).to_bytes(8, "little")

    time.sleep(0.6)  # PE 1 is stopped by now
    out: dict[str, Any] = {"first": catch(call, a)}
    os.kill(pids[1], signal.SIGCONT)
    time.sleep(0.3)  # its server answers the first call now
    dst[:] = 0
    try:
        got = call(b)
        want = bytes(mem(b, len(got)))  # PE 0's copy of b holds what PE 1's does
        out["second"] = "right" if got == want else f"returned {got[:8].hex()}, want {want[:8].hex()}"
    except Exception as exc:
        out["second"] = error_info(exc)
    os.kill(pids[1], signal.SIGKILL)
    return out


# ----------------------------------------------------------------------------- conduit selection


def conduit_choice(rank: int, nranks: int, uid: bytes, log_dir: str) -> dict[str, Any]:
    """Initializes with the native log (stderr) going to a file, then moves one word each way and
    one fetch_add through the remote transport; returns the conduit, the log lines of init, or the
    error init raised."""
    error, lines = init_with_native_log(rank, nranks, uid, log_dir)
    out: dict[str, Any] = {"error": error, "log": lines}
    if error is not None:
        return out
    peer = 1 - rank
    out["conduit"] = shmem.shmem_remote_conduit()
    out["transport"] = shmem.shmem_pe_transport(peer)
    out["num_qp_per_pe"] = shmem.shmem_num_qp_per_pe()
    word = shmem.shmem_malloc(8)
    typed(word, 1, np.uint64)[0] = 0
    shmem.shmem_barrier_all()
    value = np.array([0x5EED_0000 + rank], dtype=np.uint64)
    shmem.shmem_putmem(word, value.ctypes.data, 8, peer)
    shmem.shmem_barrier_all()
    out["received"] = int(typed(word, 1, np.uint64)[0])
    shmem.shmem_barrier_all()  # both have read their word before either adds to the other's
    out["fetched"] = int(shmem.shmem_atomic_fetch_add(word, 1, peer))
    shmem.shmem_barrier_all()
    shmem.shmem_free(word)
    shmem.shmem_finalize()
    return out


# ----------------------------------------------------------------------------- network namespaces


def netns_main(rank: int, nranks: int, uid_path: str, out_path: str) -> None:
    """Entry point of a PE started by `ip netns exec` (see test_remote.py): runs `everything` on a
    fixed plan and pickles the outcome (or the error) to out_path."""
    uid = Path(uid_path).read_bytes()
    try:
        result: Any = ("ok", everything(rank, nranks, uid, *netns_plan()))
    except BaseException as exc:
        import traceback

        result = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(out_path + ".tmp").write_bytes(pickle.dumps(result))
    os.replace(out_path + ".tmp", out_path)
    sys.stdout.flush()


def netns_plan() -> tuple[Any, ...]:
    return FIXED_CASES, MESSAGES, atomic_plans(), 5
