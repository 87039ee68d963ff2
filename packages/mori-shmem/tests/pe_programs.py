# SPDX-License-Identifier: MIT
"""The programs the PEs of the multi-process tests run (one process per PE).

Each is called by mori.shmem.testing.run_pes as ``fn(rank, nranks, uid, *args)`` in a freshly
spawned process, initializes mori-shmem itself and returns plain picklable data for the parent to
check against its own reference. Checks that can only be done inside a PE (reading the heap) use
``check``, which raises AssertionError with a message that travels back to the parent.

Memory is inspected through ctypes/numpy views of raw addresses, not through mori.shmem's own
array helpers, so that the reference is independent of the code under test.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import itertools
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import mori.shmem as shmem
from mori.shmem.testing import init_pe

logger = logging.getLogger(__name__)

INT_DTYPES = ("int32", "uint32", "int64", "uint64")


# ----------------------------------------------------------------------------- helpers


def check(condition: bool, message: str) -> None:
    """An assert that survives python -O."""
    if not condition:
        raise AssertionError(message)


def mem(addr: int, nbytes: int) -> np.ndarray:
    """A writable uint8 numpy view of nbytes of raw memory at addr."""
    check(addr != 0, "mem(): NULL address")
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))


def typed(addr: int, count: int, dtype: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    return mem(addr, count * dt.itemsize).view(dt)


def same_bytes(a: Any, b: Any) -> bool:
    """Bitwise equality of two arrays (NaN payloads in random float bit patterns included)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))


def pattern(seed: int, nbytes: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


@contextlib.contextmanager
def pe_session(rank: int, nranks: int, uid: bytes) -> Iterator[None]:
    """init_pe ... shmem_finalize; finalize is skipped when the body raised (peers may be gone)."""
    init_pe(rank, nranks, uid)
    yield
    shmem.shmem_finalize()


def info_dict(info: Any) -> dict[str, Any]:
    """HeapInfo as a plain dict (it is a dataclass per the spec)."""
    return dataclasses.asdict(info)


def error_info(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "mro": [cls.__name__ for cls in type(exc).__mro__],
        "message": str(exc),
    }


def catch(fn, *args, **kwargs) -> dict[str, Any] | None:
    """Calls fn; returns error_info of what it raised, or None if it returned."""
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return error_info(exc)
    return None


def wrap(value: int, dtype: str) -> int:
    """value reduced to the range of the integer dtype (two's complement wraparound)."""
    info = np.iinfo(np.dtype(dtype))
    bits = info.bits
    value &= (1 << bits) - 1
    if info.min < 0 and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


# ----------------------------------------------------------------------------- init / lifetime


def identity(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    before = shmem.shmem_is_initialized()
    rc = init_pe(rank, nranks, uid)
    out = {
        "rc": rc,
        "before": before,
        "initialized": shmem.shmem_is_initialized(),
        "mype": shmem.shmem_mype(),
        "npes": shmem.shmem_npes(),
        "backend": shmem.shmem_backend(),
    }
    shmem.shmem_barrier_all()
    out["finalize_rc"] = shmem.shmem_finalize()
    out["after"] = shmem.shmem_is_initialized()
    return out


def init_twice(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    init_pe(rank, nranks, uid)
    second = catch(init_pe, rank, nranks, uid)
    still = shmem.shmem_is_initialized() and shmem.shmem_mype() == rank
    shmem.shmem_barrier_all()
    shmem.shmem_finalize()
    return {"second": second, "still_usable": still}


def reinit_rounds(rank: int, nranks: int, uid: bytes, rounds: int) -> list[dict[str, Any]]:
    """Init, use, finalize `rounds` times. Rank 0 makes the uid of the next round and distributes it
    through the symmetric heap of the current round."""
    out = []
    for round_no in range(rounds):
        init_pe(rank, nranks, uid)
        info = shmem.shmem_heap_info()
        p = shmem.shmem_malloc(4096)
        mine = typed(p, 1, np.uint64)
        mine[0] = 0
        shmem.shmem_barrier_all()
        shmem.shmem_atomic_add(p, rank + 1, 0, dtype=np.uint64)
        shmem.shmem_barrier_all()
        total = int(typed(p, 1, np.uint64)[0]) if rank == 0 else None
        next_uid = None
        if round_no + 1 < rounds:
            slot = p + 256
            if rank == 0:
                new_uid = shmem.shmem_get_unique_id()
                check(len(new_uid) == 128, f"uid has {len(new_uid)} bytes")
                src = np.frombuffer(new_uid, dtype=np.uint8).copy()
                for pe in range(nranks):
                    shmem.shmem_putmem(slot, src.ctypes.data, 128, pe)
                shmem.shmem_quiet()
            shmem.shmem_barrier_all()
            next_uid = bytes(mem(slot, 128))
        shmem.shmem_free(p)
        out.append(
            {
                "mype": shmem.shmem_mype(),
                "npes": shmem.shmem_npes(),
                "total": total,
                "num_allocations_at_init": info.num_allocations,
                "used_at_init": info.used,
            }
        )
        shmem.shmem_finalize()
        check(not shmem.shmem_is_initialized(), "still initialized after finalize")
        if next_uid is not None:
            uid = next_uid
    return out


def calls_before_init(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    buf = ctypes.create_string_buffer(64)
    addr = ctypes.addressof(buf)
    calls = {
        "shmem_mype": lambda: shmem.shmem_mype(),
        "shmem_npes": lambda: shmem.shmem_npes(),
        "shmem_barrier_all": lambda: shmem.shmem_barrier_all(),
        "shmem_malloc": lambda: shmem.shmem_malloc(1024),
        "shmem_free": lambda: shmem.shmem_free(addr),
        "shmem_heap_info": lambda: shmem.shmem_heap_info(),
        "shmem_putmem": lambda: shmem.shmem_putmem(addr, addr, 8, 0),
        "shmem_atomic_add": lambda: shmem.shmem_atomic_add(addr, 1, 0),
        "shmem_quiet": lambda: shmem.shmem_quiet(),
    }
    out = {name: catch(fn) for name, fn in calls.items()}
    out["is_initialized"] = shmem.shmem_is_initialized()
    return out


def finalize_before_init(rank: int, nranks: int, uid: bytes) -> dict[str, Any] | None:
    return catch(shmem.shmem_finalize)


def init_then_timeout(rank: int, nranks: int, uid: bytes, claim_rank: int, claim_nranks: int) -> dict[str, Any]:
    """Joins a job in which the other PEs never show up."""
    t0 = time.monotonic()
    err = catch(init_pe, claim_rank, claim_nranks, uid)
    return {"error": err, "elapsed": time.monotonic() - t0, "initialized": shmem.shmem_is_initialized()}


def threads_as_pes(rank: int, nranks: int, uid: bytes, threads: int) -> list[dict[str, Any]]:
    """MORI's test_spmt: one process, one thread per PE, each joining the same job as its own rank."""
    barrier = threading.Barrier(threads)
    outcomes: list[dict[str, Any]] = [{} for _ in range(threads)]

    def pe_thread(index: int) -> None:
        barrier.wait()
        t0 = time.monotonic()
        outcomes[index]["error"] = catch(init_pe, index, threads, uid)
        outcomes[index]["elapsed"] = time.monotonic() - t0

    workers = [threading.Thread(target=pe_thread, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        check(not worker.is_alive(), "a PE thread is still in init after 60 s")
    if shmem.shmem_is_initialized():
        shmem.shmem_finalize()
    return outcomes


def settings_without_effect(rank: int, nranks: int, uid: bytes) -> list[str]:
    """Init and two flagged mallocs with settings that have no effect here; the INFO lines of the
    mori.compat logger."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    compat = logging.getLogger("mori.compat")
    compat.addHandler(Collect(level=logging.INFO))
    compat.setLevel(logging.INFO)
    with pe_session(rank, nranks, uid):
        for _ in range(2):
            shmem.shmem_free(shmem.shmem_ext_malloc_with_flags(256, 1))
        shmem.shmem_free(shmem.shmem_ext_malloc_with_flags(256, 0))
    return lines


def intruder_job(rank: int, nranks: int, uid: bytes, done_path: str) -> dict[str, Any]:
    """Ranks 0, 1: a legitimate 2-PE job. Rank 2: an intruder with the right address, wrong secret.

    Legitimate rank 1 joins only once the intruder is done, so the intruder meets the root while
    the rendezvous is still open."""
    if rank == 2:
        forged = shmem.unique_id_with_secret(uid, bytes(range(32)))
        check(len(forged) == 128 and forged != uid, "unique_id_with_secret did not change the uid")
        time.sleep(1.0)
        t0 = time.monotonic()
        try:
            err = catch(init_pe, 1, 2, forged)
        finally:
            with open(done_path, "w") as f:
                f.write("done")
        return {"error": err, "elapsed": time.monotonic() - t0}
    if rank == 1:
        deadline = time.monotonic() + 20
        while not os.path.exists(done_path) and time.monotonic() < deadline:
            time.sleep(0.05)
    init_pe(rank, 2, uid)
    out = {"mype": shmem.shmem_mype(), "npes": shmem.shmem_npes()}
    p = shmem.shmem_malloc(256)
    typed(p, 1, np.uint64)[0] = 0
    shmem.shmem_barrier_all()
    shmem.shmem_atomic_add(p, 10 + rank, 0)
    shmem.shmem_barrier_all()
    out["total"] = int(shmem.shmem_atomic_fetch(p, 0))  # the counter lives in PE 0's copy
    shmem.shmem_free(p)
    shmem.shmem_finalize()
    return out


def peer_dies(rank: int, nranks: int, uid: bytes, victim: int) -> dict[str, Any]:
    init_pe(rank, nranks, uid)
    shmem.shmem_barrier_all()
    if rank == victim:
        os._exit(7)
    time.sleep(0.2)
    t0 = time.monotonic()
    err = catch(shmem.shmem_barrier_all)
    elapsed = time.monotonic() - t0
    t1 = time.monotonic()
    fin = catch(shmem.shmem_finalize)
    return {"error": err, "elapsed": elapsed, "finalize_error": fin, "finalize_elapsed": time.monotonic() - t1}


def diverging_collectives(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """Rank 0 enters a barrier while the others enter a malloc."""
    init_pe(rank, nranks, uid)
    shmem.shmem_barrier_all()
    t0 = time.monotonic()
    err = catch(shmem.shmem_barrier_all) if rank == 0 else catch(shmem.shmem_malloc, 4096)
    return {"error": err, "elapsed": time.monotonic() - t0}


def session_manager(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with shmem.session(rank, nranks, uid):
        inside = (shmem.shmem_is_initialized(), shmem.shmem_mype(), shmem.shmem_npes())
        shmem.shmem_barrier_all()
    after = shmem.shmem_is_initialized()
    return {"inside": inside, "after": after}


def session_manager_exception(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    class Boom(Exception):
        pass

    raised = False
    try:
        with shmem.session(rank, nranks, uid):
            shmem.shmem_barrier_all()
            raise Boom("inside")
    except Boom:
        raised = True
    return {"raised": raised, "after": shmem.shmem_is_initialized()}


def torch_pg(rank: int, nranks: int, uid: bytes, port: int, group_name: str) -> dict[str, Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks)
    try:
        if group_name != "default":
            group = dist.new_group(ranks=list(range(nranks)))
            from torch._C._distributed_c10d import _register_process_group

            _register_process_group(group_name, group)
        rc = shmem.shmem_torch_process_group_init(group_name)
        out = {"rc": rc, "mype": shmem.shmem_mype(), "npes": shmem.shmem_npes(), "dist_rank": dist.get_rank()}
        p = shmem.shmem_malloc(256)
        typed(p, 1, np.uint64)[0] = 0
        shmem.shmem_barrier_all()
        shmem.shmem_atomic_add(p, 1 << rank, 0)
        shmem.shmem_barrier_all()
        out["total"] = int(shmem.shmem_atomic_fetch(p, 0))
        shmem.shmem_barrier_all()
        shmem.shmem_free(p)
        shmem.shmem_finalize()
        return out
    finally:
        dist.destroy_process_group()


def torch_pg_errors(rank: int, nranks: int, uid: bytes, port: int) -> dict[str, Any]:
    import torch.distributed as dist

    before = catch(shmem.shmem_torch_process_group_init, "default")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks)
    try:
        unknown = catch(shmem.shmem_torch_process_group_init, "no-such-group")
        return {"before": before, "unknown": unknown, "initialized": shmem.shmem_is_initialized()}
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- heap


def heap_layout(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        info0 = shmem.shmem_heap_info()
        allocs = []  # (kind, requested size, requested alignment, offset)

        def record(kind: str, size: int, align: int, addr: int) -> None:
            allocs.append((kind, size, align, addr - info0.base))

        for size in (1, 100, 255, 256, 257, 4096, 12345, 1 << 20):
            record("malloc", size, 256, shmem.shmem_malloc(size))
        for align in (256, 512, 4096, 65536, 1 << 20):
            for size in (1, 1000, align + 1):
                record("malloc_align", size, align, shmem.shmem_malloc_align(align, size))
        for flags in (0, 1, 0xFFFF):
            record("ext_malloc_with_flags", 777, 256, shmem.shmem_ext_malloc_with_flags(777, flags))
        info1 = shmem.shmem_heap_info()
        zero = shmem.shmem_malloc(0)
        shmem.shmem_free(0)  # no-op
        info_zero = shmem.shmem_heap_info()
        for _, _, _, off in allocs:
            shmem.shmem_free(info0.base + off)
        info2 = shmem.shmem_heap_info()
        return {
            "info0": info_dict(info0),
            "info1": info_dict(info1),
            "info2": info_dict(info2),
            "info_zero_num": info_zero.num_allocations,
            "zero": zero,
            "allocs": allocs,
        }


def bad_alignment(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        out = {str(a): catch(shmem.shmem_malloc_align, a, 1024) for a in (0, 3, 384, 1000)}
        out["num_allocations"] = shmem.shmem_heap_info().num_allocations
        return out


def heap_exhaustion(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        info = shmem.shmem_heap_info()
        huge = catch(shmem.shmem_malloc, 128 << 20)
        after_huge = shmem.shmem_heap_info()
        block = 16 << 20
        ptrs = []
        failure = None
        while True:
            try:
                ptrs.append(shmem.shmem_malloc(block))
            except Exception as exc:
                failure = error_info(exc)
                break
            check(len(ptrs) < 100, "allocated 100 blocks of 16 MiB from a 64 MiB heap")
        largest_at_failure = shmem.shmem_heap_info().largest_free
        small = shmem.shmem_malloc(4096) if largest_at_failure >= 4096 else None
        for p in ptrs:
            shmem.shmem_free(p)
        if small:
            shmem.shmem_free(small)
        final = shmem.shmem_heap_info()
        return {
            "info": info_dict(info),
            "huge": huge,
            "after_huge_num": after_huge.num_allocations,
            "after_huge_used": after_huge.used,
            "count": len(ptrs),
            "failure": failure,
            "largest_at_failure": largest_at_failure,
            "final": info_dict(final),
        }


def bad_frees(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        local = ctypes.create_string_buffer(4096)
        p = shmem.shmem_malloc(1024)
        q = shmem.shmem_malloc(1024)
        shmem.shmem_free(p)
        out = {
            "double_free": catch(shmem.shmem_free, p),
            "interior": catch(shmem.shmem_free, q + 256),
            "foreign": catch(shmem.shmem_free, ctypes.addressof(local)),
            "num_after_errors": shmem.shmem_heap_info().num_allocations,
        }
        # The heap still works after the errors: q is alive and can be freed, new allocations too.
        shmem.shmem_free(q)
        r = shmem.shmem_malloc(2048)
        shmem.shmem_barrier_all()
        shmem.shmem_free(r)
        out["num_final"] = shmem.shmem_heap_info().num_allocations
        return out


def symmetry_violation(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """Rank 0 allocates a different size than the others, then everyone allocates again."""
    with_errors = []
    init_pe(rank, nranks, uid)
    for size in ((256 if rank == 0 else 1 << 20), 512):
        err = catch(shmem.shmem_malloc, size)
        with_errors.append(err)
        if err:
            break
    return {"errors": with_errors}


def p2p_pointers(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        n = 4096
        p = shmem.shmem_malloc(n * nranks)
        local = mem(p, n * nranks)
        local[:] = 0
        shmem.shmem_barrier_all()
        own = shmem.shmem_ptr_p2p(p, rank, rank)
        peers = {}
        for pe in range(nranks):
            q = shmem.shmem_ptr_p2p(p, rank, pe)
            peers[pe] = q
            if pe != rank:
                data = pattern(1000 * rank + pe, n)
                ctypes.memmove(q + rank * n, data.ctypes.data, n)
        shmem.shmem_barrier_all()
        mismatches = []
        for src in range(nranks):
            if src == rank:
                continue
            if not np.array_equal(local[src * n : (src + 1) * n], pattern(1000 * src + rank, n)):
                mismatches.append(src)
        info = shmem.shmem_heap_info()
        offheap = ctypes.create_string_buffer(64)
        out = {
            "p": p,
            "own": own,
            "peers": peers,
            "mismatches": mismatches,
            "offheap": shmem.shmem_ptr_p2p(ctypes.addressof(offheap), rank, (rank + 1) % nranks),
            "past_end": shmem.shmem_ptr_p2p(info.base + info.size, rank, (rank + 1) % nranks),
            "interior": shmem.shmem_ptr_p2p(p + 100, rank, (rank + 1) % nranks) - peers[(rank + 1) % nranks],
            "dest_pe_npes": catch(shmem.shmem_ptr_p2p, p, rank, nranks),
            "dest_pe_neg": catch(shmem.shmem_ptr_p2p, p, rank, -1),
            "my_pe_npes": catch(shmem.shmem_ptr_p2p, p, nranks, 0),
        }
        shmem.shmem_barrier_all()
        shmem.shmem_free(p)
        return out


def buffer_registration(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        local = np.zeros(8192, dtype=np.uint8)
        addr = local.ctypes.data
        never = np.zeros(64, dtype=np.uint8)
        out = {
            "register": shmem.shmem_buffer_register(addr, local.nbytes),
        }
        # The registered buffer works as the source and destination of transfers.
        p = shmem.shmem_malloc(8192)
        local[:] = pattern(rank, 8192)
        peer = (rank + 1) % nranks
        shmem.shmem_putmem(p, addr, 8192, peer)
        shmem.shmem_quiet()
        shmem.shmem_barrier_all()
        local[:] = 0
        shmem.shmem_getmem(addr, p, 8192, rank)
        out["roundtrip_ok"] = bool(np.array_equal(local, pattern((rank - 1) % nranks, 8192)))
        out["deregister"] = shmem.shmem_buffer_deregister(addr, local.nbytes)
        out["deregister_again"] = catch(shmem.shmem_buffer_deregister, addr, local.nbytes)
        out["deregister_unknown"] = catch(shmem.shmem_buffer_deregister, never.ctypes.data, never.nbytes)
        shmem.shmem_barrier_all()
        shmem.shmem_free(p)
        return out


# ----------------------------------------------------------------------------- allocator sequences


def seeded_alloc_sequence(rank: int, nranks: int, uid: bytes, seed: int, steps: int) -> dict[str, Any]:
    """Every rank runs the same seeded random malloc/malloc_align/free sequence."""
    rng = random.Random(seed)
    with pe_session(rank, nranks, uid):
        info0 = shmem.shmem_heap_info()
        live: dict[int, tuple[int, int]] = {}
        trace = []
        for _ in range(steps):
            action = rng.random()
            if action < 0.35 and live:
                addr = rng.choice(sorted(live))
                shmem.shmem_free(addr)
                del live[addr]
                trace.append(("free", addr - info0.base))
            else:
                size = rng.choice([1, 17, 256, 1000, 4096, 65536, 300000, 1 << 20])
                align = 256 if action < 0.7 else 1 << rng.randrange(8, 21)
                addr = shmem.shmem_malloc(size) if align == 256 else shmem.shmem_malloc_align(align, size)
                live[addr] = (size, align)
                trace.append(("malloc", addr - info0.base, size, align))
        final_live = {addr - info0.base: v for addr, v in live.items()}
        info_live = shmem.shmem_heap_info()
        for addr in sorted(live):
            shmem.shmem_free(addr)
        info_end = shmem.shmem_heap_info()
        return {
            "trace": trace,
            "live": final_live,
            "info0": info_dict(info0),
            "info_live": info_dict(info_live),
            "info_end": info_dict(info_end),
        }


def hypothesis_allocator(rank: int, nranks: int, uid: bytes, max_examples: int) -> dict[str, Any]:
    """Runs a hypothesis state machine over the allocator inside one initialized PE."""
    from hypothesis import HealthCheck, settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        invariant,
        precondition,
        rule,
        run_state_machine_as_test,
    )

    init_pe(rank, nranks, uid)
    info0 = shmem.shmem_heap_info()
    base, size, reserved = info0.base, info0.size, info0.reserved
    stats = {"mallocs": 0, "frees": 0, "exhausted": 0}

    def roundup(n: int, a: int) -> int:
        return (n + a - 1) // a * a

    class Allocator(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, tuple[int, int]] = {}  # addr -> (requested size, alignment)
            start = shmem.shmem_heap_info()
            check(start.num_allocations == 0, f"previous example leaked: {info_dict(start)}")
            check(
                start.largest_free == info0.largest_free, f"largest_free {start.largest_free} != {info0.largest_free}"
            )

        def _alloc(self, n: int, align: int, use_align_api: bool) -> None:
            before = shmem.shmem_heap_info()
            try:
                addr = shmem.shmem_malloc_align(align, n) if use_align_api else shmem.shmem_malloc(n)
            except shmem.HeapExhaustedError:
                stats["exhausted"] += 1
                need = roundup(n, align)
                # A block of size + (alignment - 256) always holds an aligned block of size bytes.
                check(
                    need + align - 256 > before.largest_free,
                    f"HeapExhaustedError for {n} B aligned {align} with largest_free {before.largest_free}",
                )
                after = shmem.shmem_heap_info()
                check(
                    info_dict(after) == info_dict(before),
                    f"failed malloc changed the heap: {info_dict(before)} -> {info_dict(after)}",
                )
                return
            stats["mallocs"] += 1
            check(addr % align == 0 and addr % 256 == 0, f"{addr:#x} not aligned to {align}")
            self.live[addr] = (n, align)

        @rule(n=st.integers(1, 3 << 20))
        def malloc(self, n: int) -> None:
            self._alloc(n, 256, False)

        @rule(n=st.integers(1, 1 << 20), shift=st.integers(8, 22))
        def malloc_align(self, n: int, shift: int) -> None:
            self._alloc(n, 1 << shift, True)

        @rule(n=st.sampled_from([1, 255, 256, 257, 4095, 4096, 4097]))
        def malloc_small(self, n: int) -> None:
            self._alloc(n, 256, False)

        @precondition(lambda self: self.live)
        @rule(data=st.data())
        def free(self, data: Any) -> None:
            addr = data.draw(st.sampled_from(sorted(self.live)))
            shmem.shmem_free(addr)
            del self.live[addr]
            stats["frees"] += 1

        @invariant()
        def consistent(self) -> None:
            info = shmem.shmem_heap_info()
            check(info.num_allocations == len(self.live), f"num_allocations {info.num_allocations} != {len(self.live)}")
            spans = sorted((addr, addr + roundup(n, a)) for addr, (n, a) in self.live.items())
            for lo, hi in spans:
                check(base + reserved <= lo and hi <= base + size, f"[{lo:#x}, {hi:#x}) outside the heap")
            for (lo1, hi1), (lo2, hi2) in itertools.pairwise(spans):
                check(hi1 <= lo2, f"allocations overlap: [{lo1:#x},{hi1:#x}) and [{lo2:#x},{hi2:#x})")
            requested = sum(roundup(n, 256) for n, _ in self.live.values())
            check(info.used >= requested, f"used {info.used} < sum of live sizes {requested}")
            check(
                info.used + info.largest_free <= size - reserved,
                f"used {info.used} + largest_free {info.largest_free} > usable {size - reserved}",
            )

        def teardown(self) -> None:
            for addr in list(self.live):
                shmem.shmem_free(addr)
            self.live.clear()
            end = shmem.shmem_heap_info()
            check(
                end.num_allocations == 0 and end.used == 0, f"heap not empty after freeing everything: {info_dict(end)}"
            )
            check(
                end.largest_free == info0.largest_free,
                f"largest_free {end.largest_free} after freeing everything, {info0.largest_free} at start",
            )

    run_state_machine_as_test(
        Allocator,
        settings=settings(
            max_examples=max_examples,
            stateful_step_count=40,
            deadline=None,
            database=None,
            print_blob=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
    shmem.shmem_finalize()
    return stats


# ----------------------------------------------------------------------------- RMA

RMA_SIZES = (1, 2, 3, 7, 8, 15, 64, 255, 256, 1000, 4096, 4099, 65537, 1 << 20)
RMA_OFFSETS = (0, 1, 3, 5, 7, 13)
SENTINEL = 0xAB


def landing_problems(buffer: np.ndarray, off: int, expect: np.ndarray) -> list[str]:
    """What is wrong with ``buffer`` holding ``expect`` at ``off`` and SENTINEL everywhere else
    (empty when nothing is)."""
    problems = []
    window = buffer[off : off + expect.size]
    if not np.array_equal(window, expect):
        problems.append(f"wrong data, first bad byte {int(np.flatnonzero(window != expect)[0])}")
    if not (np.all(buffer[:off] == SENTINEL) and np.all(buffer[off + expect.size :] == SENTINEL)):
        problems.append("bytes outside the destination changed")
    return problems


def put_all_to_all(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """Every PE puts random bytes into its own slot of every PE's buffer (itself included), at
    unaligned offsets and sizes from 1 B to 1 MiB; every PE checks what arrived, and that nothing
    around the destination range changed."""
    slot = (1 << 20) + 64
    with pe_session(rank, nranks, uid):
        buf = shmem.shmem_malloc(slot * nranks)
        local = mem(buf, slot * nranks)
        failures = []
        for case, size in enumerate(RMA_SIZES):
            off = RMA_OFFSETS[case % len(RMA_OFFSETS)]
            local[:] = SENTINEL
            shmem.shmem_barrier_all()
            for pe in range(nranks):
                src = pattern(case * 1_000_003 + rank * 1009 + pe, size)
                shmem.shmem_putmem(buf + rank * slot + off, src.ctypes.data, size, pe)
            shmem.shmem_quiet()
            shmem.shmem_barrier_all()
            for src_pe in range(nranks):
                region = local[src_pe * slot : (src_pe + 1) * slot]
                expect = pattern(case * 1_000_003 + src_pe * 1009 + rank, size)
                for problem in landing_problems(region, off, expect):
                    failures.append(f"size {size} off {off} from PE {src_pe}: {problem}")
        shmem.shmem_barrier_all()
        shmem.shmem_free(buf)
        return {"failures": failures, "cases": len(RMA_SIZES)}


def get_all_to_all(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """Every PE fills its buffer with its own pattern; every PE reads ranges of every PE's buffer
    into local memory at unaligned local addresses."""
    total = (1 << 20) + 64
    with pe_session(rank, nranks, uid):
        buf = shmem.shmem_malloc(total)
        mem(buf, total)[:] = pattern(7000 + rank, total)
        shmem.shmem_barrier_all()
        failures = []
        dst = np.zeros(total + 32, dtype=np.uint8)
        for case, size in enumerate(RMA_SIZES):
            off = RMA_OFFSETS[case % len(RMA_OFFSETS)]
            local_off = RMA_OFFSETS[(case + 2) % len(RMA_OFFSETS)]
            for pe in range(nranks):
                dst[:] = SENTINEL
                shmem.shmem_getmem(dst.ctypes.data + local_off, buf + off, size, pe)
                expect = pattern(7000 + pe, total)[off : off + size]
                for problem in landing_problems(dst, local_off, expect):
                    failures.append(f"size {size} off {off} from PE {pe}: {problem}")
        shmem.shmem_barrier_all()
        shmem.shmem_free(buf)
        return {"failures": failures}


def put_get_array_forms(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        buf = shmem.shmem_zeros((nranks, 100), np.int64)
        shmem.shmem_barrier_all()  # shmem_zeros fills only this PE's copy: peers write after a barrier
        row = np.arange(100, dtype=np.int64) * (rank + 1) - 50
        for pe in range(nranks):
            # Put into row `rank` of every PE's copy: dest is an array view over the heap.
            shmem.shmem_put(buf.numpy()[rank], row, pe)
        shmem.shmem_quiet()
        shmem.shmem_barrier_all()
        expect = np.stack([np.arange(100, dtype=np.int64) * (r + 1) - 50 for r in range(nranks)])
        put_ok = bool(np.array_equal(buf.numpy(), expect))
        got = np.empty((nranks, 100), dtype=np.int64)
        peer = (rank + 1) % nranks
        shmem.shmem_get(got, buf, peer)  # src: the SymmetricBuffer itself
        get_ok = bool(np.array_equal(got, expect))
        shmem.shmem_barrier_all()
        buf.free()
        return {"put_ok": put_ok, "get_ok": get_ok}


def putmem_signal_stream(
    rank: int, nranks: int, uid: bytes, messages: list[tuple[int, str, int]], seed: int
) -> dict[str, Any]:
    """Rank 0 sends each message with putmem_signal to rank 1, which waits for the signal value it
    expects and checks the data before acknowledging."""
    total = sum(size for size, _, _ in messages) + 64
    with pe_session(rank, nranks, uid):
        data = shmem.shmem_malloc(total)
        words = shmem.shmem_malloc(256)  # [0]: signal on rank 1, [1]: ack on rank 0
        sig, ack = words, words + 8
        mem(data, total)[:] = 0
        typed(words, 2, np.uint64)[:] = 0
        shmem.shmem_barrier_all()
        expected_signal = 0
        offset = 0
        failures = []
        observed = []
        for i, (size, op, value) in enumerate(messages):
            payload = pattern(seed * 1000 + i, size)
            if op == "set":
                # Distinct from the current value, so that seeing it means this message arrived.
                value = ((i + 1) << 40) | (value & ((1 << 40) - 1))
                expected_signal = value
                sig_op = shmem.AmoType.SIGNAL_SET
            else:
                expected_signal = (expected_signal + value) % (1 << 64)
                sig_op = shmem.AmoType.SIGNAL_ADD
            if rank == 0:
                shmem.shmem_putmem_signal(data + offset, payload.ctypes.data, size, sig, value, sig_op, 1)
                shmem.shmem_wait_until(ack, shmem.CmpOp.EQ, i + 1, timeout=20)
            else:
                got = shmem.shmem_wait_until(sig, shmem.CmpOp.EQ, expected_signal, timeout=20)
                observed.append(int(got))
                if not np.array_equal(mem(data + offset, size), payload):
                    failures.append(f"message {i} ({size} B, {op}): data incomplete when signal {got} seen")
                if shmem.shmem_signal_fetch(sig) != expected_signal:
                    failures.append(f"message {i}: signal_fetch {shmem.shmem_signal_fetch(sig)} != {expected_signal}")
                shmem.shmem_signal_op(ack, i + 1, shmem.AmoType.SIGNAL_SET, 0)
            offset += size
        shmem.shmem_barrier_all()
        shmem.shmem_free(words)
        shmem.shmem_free(data)
        return {"failures": failures, "observed": observed}


def signal_ops(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """Every PE SIGNAL_ADDs to PE 0's word, then PE 0 SIGNAL_SETs every PE's word."""
    with pe_session(rank, nranks, uid):
        w = shmem.shmem_malloc(256)
        typed(w, 2, np.uint64)[:] = 0
        shmem.shmem_barrier_all()
        shmem.shmem_signal_op(w, 1000 + rank, shmem.AmoType.SIGNAL_ADD, 0)
        total = None
        if rank == 0:
            want = sum(1000 + r for r in range(nranks))
            total = int(shmem.shmem_wait_until(w, shmem.CmpOp.EQ, want, timeout=20))
            for pe in range(nranks):
                shmem.shmem_signal_op(w + 8, 0xDEADBEEF00 + pe, shmem.AmoType.SIGNAL_SET, pe)
        got = int(shmem.shmem_wait_until(w + 8, shmem.CmpOp.NE, 0, timeout=20))
        fetched = int(shmem.shmem_signal_fetch(w + 8))
        shmem.shmem_barrier_all()
        shmem.shmem_free(w)
        return {"total": total, "got": got, "fetched": fetched}


def _int_params(dtype: str) -> tuple[int, int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max), info.bits


def atomics(rank: int, nranks: int, uid: bytes, dtype_names: list[str], m: int) -> dict[str, Any]:
    """Every atomic operation on every dtype, with contention on PE 0 and wraparound. Returns the
    fetched values and final cell contents for the parent to check against Python arithmetic."""
    results: dict[str, Any] = {}
    with pe_session(rank, nranks, uid):
        for name in dtype_names:
            dt = np.dtype(name)
            lo, hi, bits = _int_params(name)
            nslots = 64
            cells = shmem.shmem_malloc(nslots * 8)
            view = typed(cells, nslots, dt)

            def addr(i: int, cells: int = cells, itemsize: int = dt.itemsize) -> int:
                return cells + i * itemsize

            # Initial values (every PE writes its own copy identically).
            view[:] = 0
            view[0] = hi - 2  # add, wraps past max
            view[1] = lo + 2 if lo < 0 else 5  # add of negative values (signed) / small (unsigned)
            view[2] = hi - 5  # fetch_add, wraps
            view[3] = hi - 1  # fetch_inc, wraps
            view[4] = 0  # inc
            view[20] = wrap(0x1234567, name)  # compare_swap winner
            view[21] = 0  # CAS loop counter
            view[22] = 7  # swap
            view[23] = 0  # or
            view[24] = wrap(-1, name)  # and
            view[25] = wrap(0x0F0F0F0F0F0F0F0F, name)  # xor
            view[26:30] = wrap(0x5A5A5A5A5A5A5A5A, name)  # sentinels, never touched
            owner_of_mine = (rank + 1) % nranks
            prev = (rank - 1) % nranks
            view[30 + prev] = wrap(0x3C3C3C3C3C3C3C3C ^ (prev * 0x1111), name)  # fetch_and/or/xor target of prev
            shmem.shmem_barrier_all()
            r: dict[str, Any] = {}
            dtype_kw = {"dtype": dt}

            for _ in range(m):
                shmem.shmem_atomic_add(addr(0), rank + 1, 0, **dtype_kw)
                shmem.shmem_atomic_add(addr(1), -(rank + 1) if lo < 0 else rank + 1, 0, **dtype_kw)
            r["fetch_add"] = [int(shmem.shmem_atomic_fetch_add(addr(2), 3, 0, **dtype_kw)) for _ in range(m)]
            r["fetch_inc"] = [int(shmem.shmem_atomic_fetch_inc(addr(3), 0, **dtype_kw)) for _ in range(m)]
            for _ in range(m):
                shmem.shmem_atomic_inc(addr(4), 0, **dtype_kw)
            # set + fetch: my value into slot 5+rank of the next PE
            my_value = wrap(-(rank + 1) * 12345 if lo < 0 else hi - rank, name)
            shmem.shmem_atomic_set(addr(5 + rank), my_value, owner_of_mine, **dtype_kw)
            # compare_swap: one winner
            r["cas_old"] = int(
                shmem.shmem_atomic_compare_swap(addr(20), wrap(0x1234567, name), 100 + rank, 0, **dtype_kw)
            )
            # CAS loop increments
            retries = 0
            for _ in range(m):
                while True:
                    cur = int(shmem.shmem_atomic_fetch(addr(21), 0, **dtype_kw))
                    old = int(shmem.shmem_atomic_compare_swap(addr(21), cur, wrap(cur + 1, name), 0, **dtype_kw))
                    if old == cur:
                        break
                    retries += 1
            r["cas_retries"] = retries
            # swap
            token = wrap(-(1000 + rank) if lo < 0 else 1000 + rank, name)
            r["swap_old"] = int(shmem.shmem_atomic_swap(addr(22), token, 0, **dtype_kw))
            # bitwise, contended
            or_mask = wrap((1 << rank) | (1 << (bits - 1 - rank)), name)
            shmem.shmem_atomic_or(addr(23), or_mask, 0, **dtype_kw)
            and_mask = wrap(~((1 << rank) | (1 << (bits - 1 - rank))), name)
            shmem.shmem_atomic_and(addr(24), and_mask, 0, **dtype_kw)
            xor_mask = wrap(random.Random(rank * 31 + bits).getrandbits(bits), name)
            shmem.shmem_atomic_xor(addr(25), xor_mask, 0, **dtype_kw)
            # fetching bitwise, uncontended, exact: slot 30+rank on the next PE
            x0 = wrap(0x3C3C3C3C3C3C3C3C ^ (rank * 0x1111), name)
            m1, m2, m3 = wrap(0x00FF00FF00FF00F1, name), wrap(0x7777777777777777, name), wrap(0x1248124812481248, name)
            seq = {
                "fetch_or": int(shmem.shmem_atomic_fetch_or(addr(30 + rank), m1, owner_of_mine, **dtype_kw)),
                "fetch_and": int(shmem.shmem_atomic_fetch_and(addr(30 + rank), m2, owner_of_mine, **dtype_kw)),
                "fetch_xor": int(shmem.shmem_atomic_fetch_xor(addr(30 + rank), m3, owner_of_mine, **dtype_kw)),
                "fetch": int(shmem.shmem_atomic_fetch(addr(30 + rank), owner_of_mine, **dtype_kw)),
            }
            r["bitwise_seq"] = seq
            r["bitwise_seq_expect"] = {
                "fetch_or": x0,
                "fetch_and": wrap(x0 | m1, name),
                "fetch_xor": wrap((x0 | m1) & m2, name),
                "fetch": wrap(((x0 | m1) & m2) ^ m3, name),
            }
            # The generic entry point: fetching ops return the old value, the others None.
            gen_cell = addr(40 + rank)
            r["generic"] = {
                "add": shmem.shmem_atomic(gen_cell, shmem.AmoType.ADD, 5, rank, dtype=dt),
                "fetch_add": int(shmem.shmem_atomic(gen_cell, shmem.AmoType.FETCH_ADD, 2, rank, dtype=dt)),
                "cas_fail": int(shmem.shmem_atomic(gen_cell, shmem.AmoType.COMPARE_SWAP, 9, rank, compare=1, dtype=dt)),
                "cas_ok": int(shmem.shmem_atomic(gen_cell, shmem.AmoType.COMPARE_SWAP, 9, rank, compare=7, dtype=dt)),
                "final": int(view[40 + rank]),
            }
            shmem.shmem_barrier_all()
            r["set_fetch"] = int(shmem.shmem_atomic_fetch(addr(5 + rank), owner_of_mine, **dtype_kw))
            r["set_local"] = int(view[5 + prev])
            r["set_expect"] = my_value
            r["xor_mask"] = xor_mask
            r["sentinels"] = [int(v) for v in view[26:30]]
            if rank == 0:
                r["final"] = {i: int(view[i]) for i in (0, 1, 2, 3, 4, 20, 21, 22, 23, 24, 25)}
            shmem.shmem_barrier_all()
            shmem.shmem_free(cells)
            results[name] = r
    return results


_CMP = {
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
    "GT": lambda a, b: a > b,
    "LE": lambda a, b: a <= b,
    "LT": lambda a, b: a < b,
    "GE": lambda a, b: a >= b,
}


def wait_and_test_local(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """shmem_test / shmem_wait_until for every CmpOp and dtype over boundary values; returns the
    outcomes for the parent to compare with Python's comparison operators."""
    outcomes = []
    with pe_session(rank, nranks, uid):
        cell = shmem.shmem_malloc(256)
        for name in INT_DTYPES:
            dt = np.dtype(name)
            lo, hi, _ = _int_params(name)
            values = sorted({lo, lo + 1, -1 if lo < 0 else 2, 0, 1, hi - 1, hi})
            view = typed(cell, 1, dt)
            for x in values:
                view[0] = x
                for cmp_name in _CMP:
                    cmp = shmem.CmpOp[cmp_name]
                    for v in values:
                        t = bool(shmem.shmem_test(cell, cmp, v, dtype=dt))
                        if t:
                            w = int(shmem.shmem_wait_until(cell, cmp, v, dtype=dt, timeout=1.0))
                        else:
                            err = catch(shmem.shmem_wait_until, cell, cmp, v, dtype=dt, timeout=0.002)
                            w = err["type"] if err else "returned"
                        outcomes.append((name, x, cmp_name, v, t, w))
        shmem.shmem_free(cell)
    return {"outcomes": outcomes}


def wait_remote_wakeup(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """PE 0 waits for each CmpOp on a word that PE 1 changes (with an atomic) after a delay."""
    # (initial, cmp, target, value PE 1 writes)
    plan = [
        (0, "EQ", 42, 42),
        (5, "NE", 5, 6),
        (10, "GT", 10, 11),
        (10, "LE", 3, 2),
        (10, "LT", 3, 1),
        (0, "GE", 100, 250),
    ]
    rounds = []
    with pe_session(rank, nranks, uid):
        cell = shmem.shmem_malloc(256)
        for init, cmp_name, target, new in plan:
            typed(cell, 1, np.int64)[0] = init
            shmem.shmem_barrier_all()
            if rank == 0:
                t0 = time.monotonic()
                got = int(shmem.shmem_wait_until(cell, shmem.CmpOp[cmp_name], target, dtype=np.int64, timeout=20))
                rounds.append((cmp_name, target, new, got, time.monotonic() - t0))
            elif rank == 1:
                time.sleep(0.3)
                shmem.shmem_atomic_set(cell, new, 0, dtype=np.int64)
            shmem.shmem_barrier_all()
        shmem.shmem_free(cell)
    return {"rounds": rounds}


def wait_timeouts(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        cell = shmem.shmem_malloc(256)
        typed(cell, 1, np.uint64)[0] = 0
        t0 = time.monotonic()
        explicit = catch(shmem.shmem_wait_until, cell, shmem.CmpOp.EQ, 1, timeout=0.5)
        explicit_elapsed = time.monotonic() - t0
        t0 = time.monotonic()
        from_env = catch(shmem.shmem_wait_until, cell, shmem.CmpOp.EQ, 1)  # MORI_SHMEM_WAIT_TIMEOUT=1
        env_elapsed = time.monotonic() - t0
        test_false = shmem.shmem_test(cell, shmem.CmpOp.EQ, 1)
        shmem.shmem_free(cell)
        return {
            "explicit": explicit,
            "explicit_elapsed": explicit_elapsed,
            "from_env": from_env,
            "env_elapsed": env_elapsed,
            "test_false": test_false,
        }


def rma_errors(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        p = shmem.shmem_malloc(4096)
        info = shmem.shmem_heap_info()
        local = np.zeros(4096, dtype=np.uint8)
        la = local.ctypes.data
        end = info.base + info.size
        out = {
            "addresses": {"local": la, "heap_end": end, "p": p},
            "put_pe_npes": catch(shmem.shmem_putmem, p, la, 8, nranks),
            "put_pe_neg": catch(shmem.shmem_putmem, p, la, 8, -1),
            "get_pe_npes": catch(shmem.shmem_getmem, la, p, 8, nranks),
            "atomic_pe_npes": catch(shmem.shmem_atomic_add, p, 1, nranks),
            "fetch_add_pe_neg": catch(shmem.shmem_atomic_fetch_add, p, 1, -1),
            "signal_pe_npes": catch(shmem.shmem_signal_op, p, 1, shmem.AmoType.SIGNAL_SET, nranks),
            "put_signal_pe_npes": catch(
                shmem.shmem_putmem_signal, p + 64, la, 8, p, 1, shmem.AmoType.SIGNAL_SET, nranks
            ),
            "put_dest_offheap": catch(shmem.shmem_putmem, la, la + 64, 8, 0),
            "get_src_offheap": catch(shmem.shmem_getmem, la, la + 64, 8, 0),
            "put_past_end": catch(shmem.shmem_putmem, end - 16, la, 64, 0),
            "get_past_end": catch(shmem.shmem_getmem, la, end - 16, 64, 0),
            "atomic_offheap": catch(shmem.shmem_atomic_add, la, 1, 0),
            "fetch_offheap": catch(shmem.shmem_atomic_fetch, la, 0),
            "signal_offheap": catch(shmem.shmem_signal_op, la, 1, shmem.AmoType.SIGNAL_SET, 0),
            "atomic_misaligned": catch(shmem.shmem_atomic_add, p + 4, 1, 0, dtype=np.uint64),
            "atomic_float": catch(shmem.shmem_atomic_add, p, 1, 0, dtype=np.float32),
            "atomic_value_range": catch(shmem.shmem_atomic_add, p, 1 << 40, 0, dtype=np.int32),
            "quiet": shmem.shmem_quiet(),
            "fence": shmem.shmem_fence(),
        }
        # Nothing above may have changed the heap.
        out["num_allocations"] = shmem.shmem_heap_info().num_allocations
        shmem.shmem_barrier_all()
        shmem.shmem_free(p)
        return out


def fence_quiet_ordering(rank: int, nranks: int, uid: bytes, rounds: int) -> dict[str, Any]:
    """Rank 0 puts data then (after a fence) a flag to rank 1, many times; rank 1 must never see a
    flag without the data before it."""
    n = 4096
    with pe_session(rank, nranks, uid):
        data = shmem.shmem_malloc(n)
        flag = shmem.shmem_malloc(256)
        typed(flag, 1, np.uint64)[0] = 0
        mem(data, n)[:] = 0
        shmem.shmem_barrier_all()
        failures = []
        for i in range(1, rounds + 1):
            payload = np.full(n, i % 251, dtype=np.uint8)
            if rank == 0:
                shmem.shmem_putmem(data, payload.ctypes.data, n, 1)
                shmem.shmem_fence()
                one = np.array([i], dtype=np.uint64)
                shmem.shmem_putmem(flag, one.ctypes.data, 8, 1)
                shmem.shmem_quiet()
                shmem.shmem_wait_until(flag, shmem.CmpOp.EQ, i, timeout=20)  # ack from rank 1
            elif rank == 1:
                shmem.shmem_wait_until(flag, shmem.CmpOp.EQ, i, timeout=20)
                if not np.array_equal(mem(data, n), payload):
                    failures.append(i)
                shmem.shmem_atomic_set(flag, i, 0)
        shmem.shmem_barrier_all()
        shmem.shmem_free(flag)
        shmem.shmem_free(data)
        return {"failures": failures}


# ----------------------------------------------------------------------------- DLPack / arrays


def values(seed: int, n: int, dt: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """n values of dt from a seed; floats are finite, since numpy may quiet NaN bit patterns on copy."""
    if dt.kind == "f":
        return np.random.default_rng(seed).standard_normal(n).astype(dt)
    return pattern(seed, n * dt.itemsize).view(dt)


def dlpack_numpy(rank: int, nranks: int, uid: bytes, dtype_name: str) -> dict[str, Any]:
    dt = np.dtype(dtype_name)
    n = 1000
    failures = []
    with pe_session(rank, nranks, uid):
        info = shmem.shmem_heap_info()
        buf = shmem.shmem_empty((n,), dt)
        attrs = {
            "shape": tuple(buf.shape),
            "dtype_eq": bool(buf.dtype == dt),
            "dtype_repr": repr(buf.dtype),
            "nbytes": buf.nbytes,
            "pe": buf.pe,
            "in_heap": info.base + info.reserved <= buf.ptr and buf.ptr + buf.nbytes <= info.base + info.size,
            "aligned": buf.ptr % 256 == 0,
            "device": tuple(buf.__dlpack_device__()),
        }
        a = np.from_dlpack(buf)
        attrs["from_dlpack_ptr_ok"] = a.ctypes.data == buf.ptr
        attrs["from_dlpack_shape"] = a.shape
        attrs["from_dlpack_dtype"] = str(a.dtype)
        b = buf.numpy()
        attrs["numpy_ptr_ok"] = b.ctypes.data == buf.ptr
        mine = values(500 + rank, n, dt)
        a[:] = mine  # write through the DLPack view
        attrs["numpy_sees_write"] = bool(same_bytes(b, mine))
        attrs["raw_sees_write"] = bool(same_bytes(typed(buf.ptr, n, dt), mine))
        shmem.shmem_barrier_all()
        for pe in range(nranks):
            expect = values(500 + pe, n, dt)
            got = np.empty(n, dtype=dt)
            shmem.shmem_getmem(got.ctypes.data, buf.ptr, buf.nbytes, pe)
            if not same_bytes(got, expect):
                failures.append(f"getmem of PE {pe}'s copy differs")
            view = buf.peer(pe)
            if view.pe != pe:
                failures.append(f"peer({pe}).pe == {view.pe}")
            if pe == rank and view.ptr != buf.ptr:
                failures.append("peer(mype).ptr != ptr")
            if not same_bytes(view.numpy(), expect):
                failures.append(f"peer({pe}).numpy() differs from PE {pe}'s data")
            if not same_bytes(np.from_dlpack(view), expect):
                failures.append(f"np.from_dlpack(peer({pe})) differs from PE {pe}'s data")
        # Writes through a peer view land in the peer's copy.
        nxt = (rank + 1) % nranks
        shmem.shmem_barrier_all()
        buf.peer(nxt).numpy()[:] = np.zeros(n, dtype=dt) + dt.type(rank + 1)
        shmem.shmem_barrier_all()
        prev = (rank - 1) % nranks
        if not np.all(buf.numpy() == dt.type(prev + 1)):
            failures.append("a write through peer(pe).numpy() did not land in pe's copy")
        shmem.shmem_barrier_all()
        buf.free()
        return {"attrs": attrs, "failures": failures}


def dlpack_shapes_zeros_lifetime(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        out: dict[str, Any] = {}
        b = shmem.shmem_empty((3, 5, 7), np.float32)
        a = b.numpy()
        out["shape3"] = a.shape
        out["strides3"] = a.strides
        out["nbytes3"] = b.nbytes
        out["c_contig"] = bool(a.flags["C_CONTIGUOUS"])
        b.free()
        # Dirty a block, free it, then shmem_zeros of the same size must still be zero.
        dirty = shmem.shmem_empty((4096,), np.uint8)
        dirty.numpy()[:] = 0xEE
        dirty_ptr = dirty.ptr
        dirty.free()
        z = shmem.shmem_zeros((4096,), np.uint8)
        out["zeros_reused_block"] = z.ptr == dirty_ptr
        out["zeros_all_zero"] = bool(np.all(typed(z.ptr, 4096, np.uint8) == 0))
        z.free()
        n0 = shmem.shmem_heap_info().num_allocations
        with shmem.shmem_empty((128,), np.int64) as c:
            out["in_with_num"] = shmem.shmem_heap_info().num_allocations - n0
            c.numpy()[:] = 1
        out["after_with_num"] = shmem.shmem_heap_info().num_allocations - n0
        d = shmem.shmem_empty((16,), np.int64)
        d.free()
        out["second_free"] = catch(d.free)  # expected: a no-op, like file.close()
        out["after_double_free_num"] = shmem.shmem_heap_info().num_allocations - n0
        return out


def dlpack_torch(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    import torch

    failures = []
    out: dict[str, Any] = {}
    with pe_session(rank, nranks, uid):
        for np_name, t_dtype in (("float32", torch.float32), ("int64", torch.int64), ("uint8", torch.uint8)):
            buf = shmem.shmem_empty((64,), np.dtype(np_name))
            t = torch.from_dlpack(buf)
            t2 = buf.torch()
            if t.data_ptr() != buf.ptr or t2.data_ptr() != buf.ptr:
                failures.append(f"{np_name}: torch tensor does not alias the heap")
            if t.dtype != t_dtype or tuple(t.shape) != (64,) or t.device.type != "cpu":
                failures.append(f"{np_name}: torch.from_dlpack gave {t.dtype} {tuple(t.shape)} {t.device}")
            t.copy_(torch.arange(64, dtype=torch.int64).to(t_dtype) * (rank + 1))
            if not np.array_equal(buf.numpy(), (np.arange(64) * (rank + 1)).astype(np_name)):
                failures.append(f"{np_name}: torch write not visible through numpy")
            buf.free()
        # bfloat16: torch is the reference (numpy has no bfloat16).
        buf = shmem.shmem_empty((256,), "bfloat16")
        out["bf16_dtype_attr"] = str(buf.dtype)
        out["bf16_nbytes"] = buf.nbytes
        t = buf.torch()
        ref = (torch.arange(256, dtype=torch.float32) * 0.37 - 11 + rank).to(torch.bfloat16)
        t.copy_(ref)
        if torch.from_dlpack(buf).dtype != torch.bfloat16 or t.dtype != torch.bfloat16:
            failures.append(f"bfloat16 buffer exported as {t.dtype}")
        shmem.shmem_barrier_all()
        for pe in range(nranks):
            expect = (torch.arange(256, dtype=torch.float32) * 0.37 - 11 + pe).to(torch.bfloat16)
            raw = np.empty(512, dtype=np.uint8)
            shmem.shmem_getmem(raw.ctypes.data, buf.ptr, 512, pe)
            if not np.array_equal(raw, expect.view(torch.uint8).numpy()):
                failures.append(f"bfloat16 bytes of PE {pe} differ")
            if not torch.equal(buf.peer(pe).torch(), expect):
                failures.append(f"bfloat16 peer({pe}).torch() differs")
        shmem.shmem_barrier_all()
        buf.free()
    out["failures"] = failures
    return out


def symm_tensors(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    import torch

    failures = []
    with pe_session(rank, nranks, uid):
        info = shmem.shmem_heap_info()
        n0 = info.num_allocations
        t = shmem.mori_shmem_create_tensor((4, 16), torch.float32)
        u = shmem.mori_shmem_create_tensor((8,), torch.int32)
        u.zero_()
        out = {
            "symm_attr": getattr(t, "__symm_tensor__", None),
            "shape": tuple(t.shape),
            "dtype": str(t.dtype),
            "in_heap": info.base <= t.data_ptr() < info.base + info.size,
            "num_allocs": shmem.shmem_heap_info().num_allocations - n0,
        }
        t.fill_(rank + 0.5)
        shmem.shmem_barrier_all()
        for pe in range(nranks):
            peer_t = shmem.symm_mori_shmem_tensor(t, pe)
            if tuple(peer_t.shape) != (4, 16) or peer_t.dtype != torch.float32:
                failures.append(f"symm tensor of PE {pe}: {tuple(peer_t.shape)} {peer_t.dtype}")
            if not torch.equal(peer_t, torch.full((4, 16), pe + 0.5)):
                failures.append(f"symm tensor of PE {pe} does not hold PE {pe}'s data")
            if pe == rank and peer_t.data_ptr() != t.data_ptr():
                failures.append("symm_mori_shmem_tensor(t, mype) is not t's memory")
        nxt = (rank + 1) % nranks
        shmem.symm_mori_shmem_tensor(u, nxt)[rank % 8] = 100 + rank
        shmem.shmem_barrier_all()
        prev = (rank - 1) % nranks
        expect = torch.zeros(8, dtype=torch.int32)
        expect[prev % 8] = 100 + prev
        if not torch.equal(u, expect):
            failures.append(f"write through the symm tensor of the next PE: got {u.tolist()}")
        shmem.shmem_barrier_all()
        shmem.mori_shmem_free_tensor(t)
        shmem.mori_shmem_free_tensor(u)
        out["num_after_free"] = shmem.shmem_heap_info().num_allocations - n0
        lst = shmem.mori_shmem_create_tensor_list_intra_node((32,), torch.int64, nranks)
        out["list_len"] = len(lst)
        lst[rank].copy_(torch.arange(32, dtype=torch.int64) * (rank + 3))
        shmem.shmem_barrier_all()
        for pe in range(len(lst)):
            if not torch.equal(lst[pe], torch.arange(32, dtype=torch.int64) * (pe + 3)):
                failures.append(f"tensor list entry {pe} does not hold PE {pe}'s data")
        out["list_ptr_in_heap"] = all(info.base <= x.data_ptr() < info.base + info.size for x in lst[rank : rank + 1])
        shmem.shmem_barrier_all()
    out["failures"] = failures
    return out


# ----------------------------------------------------------------------------- env / config


def init_expecting_config_error(rank: int, nranks: int, uid: bytes) -> dict[str, Any] | None:
    err = catch(init_pe, rank, nranks, uid)
    if err is None:
        shmem.shmem_finalize()
    return err


def init_with_native_log(rank: int, nranks: int, uid: bytes, log_dir: str) -> tuple[dict[str, Any] | None, list[str]]:
    """Initializes with the native log (stderr) going to a file: the error init raised, and the log lines."""
    log_path = Path(log_dir) / f"rank{rank}.log"
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 2)
        error = catch(init_pe, rank, nranks, uid)
    finally:
        os.dup2(saved, 2)
        os.close(fd)
        os.close(saved)
    return error, log_path.read_text(errors="replace").splitlines()


def native_init_log(rank: int, nranks: int, uid: bytes, log_dir: str) -> dict[str, Any]:
    error, lines = init_with_native_log(rank, nranks, uid, log_dir)
    if error is None:
        shmem.shmem_finalize()
    return {"error": error, "log": lines}


def heap_size_from_env(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    with pe_session(rank, nranks, uid):
        info = shmem.shmem_heap_info()
        return {"size": info.size, "backend": info.backend}


# ----------------------------------------------------------------------------- harness self-tests
# These do not initialize mori-shmem: they exercise mori.shmem.testing.run_pes itself.


def harness_echo_env(rank: int, nranks: int, uid: bytes, names: list[str]) -> dict[str, Any]:
    return {"rank": rank, "nranks": nranks, "uid_len": len(uid), "env": {n: os.environ.get(n) for n in names}}


def harness_rank1_raises(rank: int, nranks: int, uid: bytes) -> int:
    if rank == 1:
        raise KeyError("rank one failed on purpose")
    return rank * 10


def harness_hang(rank: int, nranks: int, uid: bytes) -> None:
    if rank == 0:
        return None
    time.sleep(600)


def harness_unpicklable(rank: int, nranks: int, uid: bytes) -> Any:
    return lambda: None


def device_calls_on_cpu_backend(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """What the device-side host calls say on the cpu backend, where there is no device state."""
    with pe_session(rank, nranks, uid):
        out = {
            "device_state": catch(shmem.shmem_device_state),
            "cuda_device": catch(shmem.shmem_cuda_device),
            "check_device_error": catch(shmem.shmem_check_device_error),
        }
        shmem.shmem_barrier_all()
        return out
