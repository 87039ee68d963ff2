# SPDX-License-Identifier: MIT
"""PE programs of the device-API tests: each loads gpu_kernels/device_api_test_kernels.cu through
the JIT, runs cases and checks every byte against numpy references computed here, independently
of the code under test. Spawned by run_pes with MORI_SHMEM_BACKEND=cuda.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

import mori.shmem as shmem
from mori.shmem import jit

from pe_programs import check, pattern, pe_session

KERNELS = Path(__file__).resolve().parent / "gpu_kernels" / "device_api_test_kernels.cu"
BLOCK = 128
U64, I32 = ctypes.c_uint64, ctypes.c_int32


class Harness:
    """The test module loaded into this PE, plus scratch memory and launch helpers."""

    def __init__(self, scratch_bytes: int = 1 << 16) -> None:
        import torch

        self.torch = torch
        torch.cuda.set_device(shmem.shmem_cuda_device())
        self.module = jit.load_module(KERNELS, include_dirs=[jit.include_dir()])
        check(shmem.shmem_module_init(self.module) == 0, "the test module has no mori_shmem_device_state global")
        self.state = shmem.shmem_device_state()
        self.rank, self.npes = shmem.shmem_mype(), shmem.shmem_npes()
        self.out = torch.zeros(8, dtype=torch.int64, device="cuda")

    def launch(self, name: str, args: list[Any], *, block: int = BLOCK, grid: int = 1, state: Any = True) -> None:
        fn = self.module.function(name)
        full = args if name.endswith("_global") else [self.state if state is True else state, *args]
        fn.launch(grid, block, full)
        self.torch.cuda.synchronize()

    def outputs(self) -> list[int]:
        return [int(v) & (2**64 - 1) for v in self.out.cpu().tolist()]

    def symmetric(self, nbytes: int) -> Any:
        """A zeroed symmetric byte buffer (collective) as a CUDA tensor of this PE's copy."""
        return shmem.shmem_zeros(nbytes, np.uint8).torch()

    def local(self, data: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(data)).cuda()


def _suffix(global_form: bool) -> str:
    return "_global" if global_form else ""


def put_get(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int, int, bool]]) -> int:
    """cases: (op, scope, nbytes, dest_offset, src_offset, global_form). Returns cases checked."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        largest = max(c[2] + max(c[3], c[4]) for c in cases) + 64
        sym = h.symmetric(largest)
        for index, (op, scope, nbytes, dest_off, src_off, global_form) in enumerate(cases):
            seed = 1000 * index
            sym.zero_()
            h.torch.cuda.synchronize()  # the host barrier does not wait for this stream
            shmem.shmem_barrier_all()
            name = "mori_shmem_test_put_get" + _suffix(global_form)
            if op in (0, 1):  # put local -> next PE's sym
                src = h.local(pattern(seed + rank, nbytes + src_off))
                dest_addr = sym.data_ptr() + dest_off
                h.launch(name, [I32(op), I32(scope), U64(dest_addr), U64(src.data_ptr() + src_off), U64(nbytes),
                                I32(nxt)])  # fmt: skip
                shmem.shmem_barrier_all()
                got = sym.cpu().numpy()
                want = np.zeros(largest, dtype=np.uint8)
                want[dest_off : dest_off + nbytes] = pattern(seed + prv, nbytes + src_off)[src_off:]
            else:  # get next PE's sym -> local
                sym[: nbytes + src_off].copy_(h.local(pattern(seed + rank, nbytes + src_off)))
                h.torch.cuda.synchronize()
                shmem.shmem_barrier_all()
                dest = h.torch.zeros(largest, dtype=h.torch.uint8, device="cuda")
                h.launch(name, [I32(op), I32(scope), U64(dest.data_ptr() + dest_off), U64(sym.data_ptr() + src_off),
                                U64(nbytes), I32(nxt)])  # fmt: skip
                shmem.shmem_barrier_all()
                got = dest.cpu().numpy()
                want = np.zeros(largest, dtype=np.uint8)
                want[dest_off : dest_off + nbytes] = pattern(seed + nxt, nbytes + src_off)[src_off:]
            bad = np.flatnonzero(got != want)
            check(bad.size == 0, f"case {(op, scope, nbytes, dest_off, src_off, global_form)}: {bad.size} wrong "
                                 f"bytes, first at {bad[:5].tolist()}")  # fmt: skip
        shmem.shmem_check_device_error()
        return len(cases)


def queued_puts(rank: int, nranks: int, uid: bytes, launches: int, nbytes: int) -> int:
    """``launches`` one-block put kernels queued back to back, no synchronize between them, kernel i
    putting slice i of a symmetric source to the next PE: the proxy serves each kernel while the
    later ones wait in the launch queue (the launching thread may then hold the CUDA context's lock
    for as long as the GPU is busy). Returns the slices checked."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        total = launches * nbytes
        src, dest = h.symmetric(total), h.symmetric(total)
        src.copy_(h.local(pattern(rank, total)))
        h.torch.cuda.synchronize()
        shmem.shmem_barrier_all()
        put = h.module.function("mori_shmem_test_put_get")
        for i in range(launches):
            put.launch(1, BLOCK, [h.state, I32(0), I32(2), U64(dest.data_ptr() + i * nbytes),
                                  U64(src.data_ptr() + i * nbytes), U64(nbytes), I32(nxt)])  # fmt: skip
        h.torch.cuda.synchronize()
        shmem.shmem_barrier_all()
        bad = np.flatnonzero(dest.cpu().numpy() != pattern(prv, total))
        check(bad.size == 0, f"{bad.size} of {total} bytes wrong, first at {bad[:5].tolist()}")
        shmem.shmem_check_device_error()
        return launches


# ----------------------------------------------------------------------------- typed and immediate puts

TYPE_SIZES = [1, 1, 2, 2, 4, 4, 8, 8, 4, 8]  # dtype codes of the test kernels: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64


def typed_put(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int, int]]) -> int:
    """cases: (op, scope, dtype, api, nelems); puts/gets at element-aligned offsets, checked bytewise."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        largest = max(TYPE_SIZES[c[2]] * (c[4] + 2) for c in cases) + 64
        sym = h.symmetric(largest)
        for index, (op, scope, dtype, api, nelems) in enumerate(cases):
            size, seed = TYPE_SIZES[dtype], 7000 + 10 * index
            nbytes, offset = size * nelems, size  # one element in: offsets stay naturally aligned
            sym.zero_()
            h.torch.cuda.synchronize()  # the host barrier does not wait for this stream
            shmem.shmem_barrier_all()
            want = np.zeros(largest, dtype=np.uint8)
            if op in (0, 1):
                src = h.local(pattern(seed + rank, nbytes))
                h.launch("mori_shmem_test_typed_put_get", [I32(op), I32(scope), I32(dtype), I32(api),
                         U64(sym.data_ptr() + offset), U64(src.data_ptr()), U64(nelems), I32(nxt)])  # fmt: skip
                shmem.shmem_barrier_all()
                got = sym.cpu().numpy()
                want[offset : offset + nbytes] = pattern(seed + prv, nbytes)
            else:
                sym[offset : offset + nbytes].copy_(h.local(pattern(seed + rank, nbytes)))
                h.torch.cuda.synchronize()
                shmem.shmem_barrier_all()
                dest = h.torch.zeros(largest, dtype=h.torch.uint8, device="cuda")
                args = [U64(dest.data_ptr() + offset), U64(sym.data_ptr() + offset), U64(nelems), I32(nxt)]
                h.launch("mori_shmem_test_typed_put_get", [I32(op), I32(scope), I32(dtype), I32(api), *args])
                shmem.shmem_barrier_all()
                got = dest.cpu().numpy()
                want[offset : offset + nbytes] = pattern(seed + nxt, nbytes)
            check(np.array_equal(got, want), f"typed case {(op, scope, dtype, api, nelems)}: wrong bytes")
        shmem.shmem_check_device_error()
        return len(cases)


def put_imm(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int]]) -> int:
    """cases: (api, scope, dtype 0..7, value bits); the next PE must hold the low size bytes."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        sym = h.symmetric(64)
        for api, scope, dtype, value in cases:
            size = TYPE_SIZES[dtype]
            sym.zero_()
            h.torch.cuda.synchronize()  # the host barrier does not wait for this stream
            shmem.shmem_barrier_all()
            mine = (value + rank) & (2**64 - 1)
            h.launch("mori_shmem_test_put_imm", [I32(api), I32(scope), I32(dtype), U64(sym.data_ptr() + 8),
                                                 U64(mine), I32(nxt)])  # fmt: skip
            shmem.shmem_barrier_all()
            got = sym.cpu().numpy()
            want = np.zeros(64, dtype=np.uint8)
            theirs = (value + prv) & (2**64 - 1)
            want[8 : 8 + size] = np.frombuffer(theirs.to_bytes(8, "little")[:size], dtype=np.uint8)
            check(np.array_equal(got, want), f"imm case {(api, scope, dtype, value)}: got {got[8:16].tolist()}")
        shmem.shmem_check_device_error()
        return len(cases)


def put_signal(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, ...]]) -> int:
    """cases: (scope, typed, nbytes, sig_op, sig_val[, shift]); data then signal on the next PE, from
    and to `shift` bytes past an aligned start (any alignment must work, inline payloads too)."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
        largest = max(c[2] for c in cases) + 64
        sym = h.symmetric(largest)
        sig = h.symmetric(8)
        for index, (scope, typed, nbytes, sig_op, sig_val, *rest) in enumerate(cases):
            shift = rest[0] if rest else 0
            seed = 9000 + index
            sym.zero_()
            sig.copy_(h.local(np.array([5], dtype=np.uint64).view(np.uint8)))
            h.torch.cuda.synchronize()
            shmem.shmem_barrier_all()
            src = h.local(pattern(seed + rank, nbytes + shift))
            h.launch("mori_shmem_test_put_signal",
                     [I32(scope), I32(typed), U64(sym.data_ptr() + shift), U64(src.data_ptr() + shift), U64(nbytes),
                      U64(sig.data_ptr()), U64(sig_val), I32(sig_op), I32(nxt)])  # fmt: skip
            shmem.shmem_barrier_all()
            want = np.zeros(largest, dtype=np.uint8)
            want[shift : shift + nbytes] = pattern(seed + prv, nbytes + shift)[shift:]
            check(np.array_equal(sym.cpu().numpy(), want), f"put_signal case {index}: wrong data")
            want_sig = sig_val if sig_op in (3, 9) else 5 + sig_val
            got_sig = int(sig.cpu().numpy().view(np.uint64)[0])
            check(got_sig == want_sig, f"put_signal case {index}: signal {got_sig}, want {want_sig}")
        shmem.shmem_check_device_error()
        return len(cases)


# ----------------------------------------------------------------------------- atomics and waits

ITYPE_BITS = [32, 32, 64, 64, 64, 64]  # int32 uint32 int64 uint64 long ulong
FETCHING = {12, 13, 14, 15, 16, 17, 18, 19}


def amo_reference(amo: int, old: int, value: int, compare: int, bits: int) -> int:
    """The word after atomic ``amo`` (MORI codes), on raw two's-complement bit patterns."""
    mask = (1 << bits) - 1
    new = {
        2: old + 1, 13: old + 1,
        3: value, 9: value, 18: value,
        4: old + value, 10: old + value, 14: old + value,
        5: old & value, 15: old & value,
        6: old | value, 16: old | value,
        7: old ^ value, 17: old ^ value,
        12: old,
        19: value if old == compare else old,
    }[amo]  # fmt: skip
    return new & mask


def atomic(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int, int, int, int]]) -> int:
    """cases: (scope, api, amo, itype, init, value, compare) as bit patterns; each PE hits the next
    PE's word, which its owner set to init. Checks the fetched old value and the word afterwards."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        nxt = (rank + 1) % nranks
        word = h.symmetric(16)
        for scope, api, amo, itype, init, value, compare in cases:
            bits = ITYPE_BITS[itype]
            mask = (1 << bits) - 1
            word.copy_(h.local(np.frombuffer((init & mask).to_bytes(16, "little"), dtype=np.uint8)))
            h.out.zero_()
            h.torch.cuda.synchronize()
            shmem.shmem_barrier_all()
            h.launch("mori_shmem_test_atomic", [I32(scope), I32(api), I32(amo), I32(itype), U64(value & mask),
                                                U64(compare & mask), I32(nxt), U64(word.data_ptr()),
                                                U64(h.out.data_ptr())])  # fmt: skip
            shmem.shmem_barrier_all()
            old, disagreeing = h.outputs()[:2]
            after = int.from_bytes(bytes(word.cpu().numpy()[: bits // 8]), "little")
            case = (scope, api, amo, itype, init, value, compare)
            want_old = (init & mask) if amo in FETCHING else 0
            check(old == want_old, f"atomic {case}: fetched {old:#x}, want {want_old:#x}")
            check(disagreeing == 0, f"atomic {case}: {disagreeing} lanes saw another value than lane 0")
            want = amo_reference(amo, init & mask, value & mask, compare & mask, bits)
            check(after == want, f"atomic {case}: word is {after:#x}, want {want:#x}")
        shmem.shmem_check_device_error()
        return len(cases)


def wait_test(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int, int, bool]]) -> int:
    """cases: (api, itype, cmp, current, value, expected test result) on a local word."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        word = h.symmetric(16)
        for api, itype, cmp, current, value, expected in cases:
            mask = (1 << ITYPE_BITS[itype]) - 1
            word.copy_(h.local(np.frombuffer((current & mask).to_bytes(16, "little"), dtype=np.uint8)))
            h.out.zero_()
            h.launch("mori_shmem_test_wait_test", [I32(api), I32(itype), I32(cmp), U64(word.data_ptr()),
                                                   U64(value & mask), U64(h.out.data_ptr())])  # fmt: skip
            observed, satisfied = h.outputs()[:2]
            case = (api, itype, cmp, current, value)
            check(observed == current & mask, f"wait/test {case}: observed {observed:#x}")
            check(bool(satisfied) == expected, f"wait/test {case}: test gave {satisfied}, want {expected}")
        shmem.shmem_check_device_error()
        return len(cases)


def wait_timeout(rank: int, nranks: int, uid: bytes) -> dict[str, Any]:
    """A wait that can never be satisfied, with a 2 ms spin bound: the error word, then the host error."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        word = h.symmetric(16)
        state = shmem.shmem_device_state()
        state.spin_timeout_ns = 2_000_000
        h.launch("mori_shmem_test_wait_test", [I32(0), I32(3), I32(0), U64(word.data_ptr()), U64(1),
                                               U64(h.out.data_ptr())], state=state)  # fmt: skip
        try:
            shmem.shmem_check_device_error()
        except shmem.WaitTimeoutError as error:
            raised = type(error).__name__
        else:
            raised = None
        after = shmem.shmem_check_device_error()  # cleared: raises nothing now
        shmem.shmem_barrier_all()
        return {"raised": raised, "observed": h.outputs()[0], "after": after}


# ----------------------------------------------------------------------------- ordering, barrier, addressing


def expected_pingpong_bytes(nbytes: int, rounds: int) -> np.ndarray:
    i = np.arange(nbytes, dtype=np.int64)
    return ((i * 31 + rounds * 101 + (i >> 10)) & 0xFF).astype(np.uint8)


def signal_pingpong(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int, int, int]]) -> int:
    """cases: (mode, scope, sig_op, nbytes, offset, rounds); PEs pair up (0,1), (2,3), ...; the reader
    checks every byte of every round in the kernel, the final buffer is checked here."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        role, peer = rank % 2, rank ^ 1
        largest = max(c[3] + c[4] for c in cases) + 64
        buf = h.symmetric(largest)
        sig = h.symmetric(16)
        for mode, scope, sig_op, nbytes, offset, rounds in cases:
            buf.zero_()
            sig.zero_()
            h.out.zero_()
            h.torch.cuda.synchronize()
            shmem.shmem_barrier_all()
            if peer < nranks:
                h.launch("mori_shmem_test_signal_pingpong",
                         [I32(role), I32(mode), I32(scope), I32(sig_op), U64(buf.data_ptr() + offset), U64(nbytes),
                          U64(sig.data_ptr()), I32(peer), I32(rounds), U64(h.out.data_ptr())])  # fmt: skip
                mismatched, completed = h.outputs()[:2]
                case = (mode, scope, sig_op, nbytes, offset, rounds)
                check(completed == rounds, f"pingpong {case}: {completed} of {rounds} rounds completed")
                check(mismatched == 0, f"pingpong {case}: reader saw {mismatched} stale bytes")
                if role == 1:
                    got = buf.cpu().numpy()[offset : offset + nbytes]
                    check(np.array_equal(got, expected_pingpong_bytes(nbytes, rounds)), f"pingpong {case}: final")
            shmem.shmem_barrier_all()
        shmem.shmem_check_device_error()
        return len(cases)


def barrier_loop(rank: int, nranks: int, uid: bytes, scope: int, rounds: int, global_form: bool) -> list[int]:
    with pe_session(rank, nranks, uid):
        h = Harness()
        counter = h.symmetric(8)
        shmem.shmem_barrier_all()
        h.launch("mori_shmem_test_barrier_loop" + _suffix(global_form),
                 [I32(scope), I32(rounds), U64(counter.data_ptr()), U64(h.out.data_ptr())])  # fmt: skip
        shmem.shmem_check_device_error()
        failed, last = h.outputs()[:2]
        final = int(counter.cpu().numpy().view(np.uint64)[0])
        shmem.shmem_barrier_all()
        return [failed, last, final]


def ptr_p2p(rank: int, nranks: int, uid: bytes) -> list[list[int]]:
    """For every PE: what the device says ShmemPtrP2p gives, beside the host's shmem_ptr_p2p."""
    with pe_session(rank, nranks, uid):
        h = Harness()
        sym = h.symmetric(256)
        rows = []
        for pe in [*range(nranks), nranks]:  # nranks: out of range
            h.launch("mori_shmem_test_ptr_p2p", [U64(sym.data_ptr() + 16), I32(pe), U64(h.out.data_ptr())])
            host = shmem.shmem_ptr_p2p(sym.data_ptr() + 16, rank, pe) if pe < nranks else 0
            rows.append([*h.outputs()[:4], host])
        outside = h.torch.zeros(4, device="cuda")
        h.launch("mori_shmem_test_ptr_p2p", [U64(outside.data_ptr()), I32(0), U64(h.out.data_ptr())])
        rows.append([*h.outputs()[:4], 0])
        shmem.shmem_barrier_all()
        return rows


# ----------------------------------------------------------------------------- kernel loading


def wait_while_loading(rank: int, nranks: int, uid: bytes, wait: bool) -> dict[str, Any]:
    """With ``wait``, PE 0 waits in a kernel for a signal that PE 1 (another host) sends a second later,
    and meanwhile looks up a kernel of a loaded module and runs a torch op for the first time. Returns
    the warnings of init and, on PE 0, the value the wait saw and its seconds."""
    import logging
    import time

    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("mori.shmem").addHandler(Collect(logging.WARNING))
    with pe_session(rank, nranks, uid):
        result: dict[str, Any] = {"warnings": warnings}
        if not wait:
            return result
        h = Harness()
        word = h.symmetric(16)
        late = jit.load_image(jit.compile(KERNELS.with_name("jit_test_kernels.cu")).read_bytes(), name="late")
        shmem.shmem_barrier_all()
        if rank == 0:
            start = time.monotonic()
            wait_args = [h.state, I32(2), I32(3), I32(0), U64(word.data_ptr()), U64(1), U64(h.out.data_ptr())]
            h.module.function("mori_shmem_test_wait_test").launch(1, 1, wait_args)
            late.function("iota_i64")
            h.torch.arange(5, device="cuda", dtype=h.torch.float64).cumprod(0)
            h.torch.cuda.synchronize()
            result.update(seen=h.outputs()[0], seconds=time.monotonic() - start)
            shmem.shmem_check_device_error()
        else:
            time.sleep(1.0)
            shmem.shmem_signal_op(word.data_ptr(), 1, shmem.AmoType.SIGNAL_SET, 0)
        shmem.shmem_barrier_all()
    return result


def remote_writes_during_graph_capture(rank: int, nranks: int, uid: bytes, rounds: int) -> dict[str, Any]:
    """PE 0 captures a CUDA graph (torch's default, global capture mode) for 1.5 s while PE 1 (another
    host) sends it ``rounds`` puts with signal and atomic adds, whose copies, signal sets and atomic
    kernels PE 0's remote transport applies meanwhile. Returns, on PE 0, what the replayed graph
    computed, the last round's bytes against numpy's, and the signal and counter words."""
    import time

    import torch

    nbytes = 4096 + 8
    with pe_session(rank, nranks, uid):
        torch.cuda.set_device(shmem.shmem_cuda_device())
        data = shmem.shmem_zeros(nbytes, np.uint8).torch()
        words = shmem.shmem_zeros(2, np.uint64).torch()
        shmem.shmem_barrier_all()
        result: dict[str, Any] = {}
        if rank == 0:
            x = torch.arange(8, device="cuda", dtype=torch.float32)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = x * 2 + 1
                time.sleep(1.5)
            graph.replay()
            torch.cuda.synchronize()
            shmem.shmem_wait_until(words.data_ptr(), shmem.CmpOp.EQ, rounds, timeout=30)
            result = {
                "graph_ok": bool(torch.equal(y.cpu(), torch.arange(8, dtype=torch.float32) * 2 + 1)),
                "data_ok": bool(np.array_equal(data.cpu().numpy(), pattern(rounds, nbytes))),
                "signal": int(words[0].item()),
                "added": int(words[1].item()),
            }
        else:
            time.sleep(0.25)
            for r in range(1, rounds + 1):
                src = torch.from_numpy(pattern(r, nbytes)).cuda()
                shmem.shmem_putmem_signal(data.data_ptr(), src.data_ptr(), nbytes, words.data_ptr(), r,
                                          shmem.AmoType.SIGNAL_SET, 0)  # fmt: skip
                shmem.shmem_atomic_add(words.data_ptr() + 8, r, 0)
                shmem.shmem_quiet()
                time.sleep(0.1)
        shmem.shmem_barrier_all()
    return result
