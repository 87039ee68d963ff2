# SPDX-License-Identifier: MIT
"""PE programs of the Triton GPU tests (one process per PE, spawned by mori.shmem.testing.run_pes).

Each initialises mori-shmem on the cuda backend, selects its GPU, installs the mori.ir Triton hook,
launches kernels of triton_kernels.py with ``extern_libs=get_extern_libs()`` and checks every
result against a reference computed here from the inputs (numpy / plain Python integers / torch
concatenation), never from the code under test. ``check`` raises AssertionError with the case,
which travels back to the parent with the traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import mori.shmem as shmem
from mori.shmem.testing import init_pe

import triton_kernels as tk

BLOCK = 1024
MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1


def check(condition: bool, message: str) -> None:
    """An assert that survives python -O."""
    if not condition:
        raise AssertionError(message)


def pattern(seed: int, nbytes: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


def words(values: list[int]) -> np.ndarray:
    """Python ints (any sign, up to 64 bits) as an int64 array of their two's-complement bits."""
    return np.array([v & MASK64 for v in values], dtype=np.uint64).view(np.int64)


def first_bad(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(got != want)
    return f"{bad.size} wrong bytes, first at {bad[:5].tolist()}" if bad.size else "equal"


class Pe:
    """This PE's Triton context: torch on its GPU, the extern libs, buffer and launch helpers."""

    def __init__(self, rank: int, nranks: int) -> None:
        import torch

        import mori.ir.triton as mori_ir

        self.torch = torch
        self.rank, self.nranks = rank, nranks
        self.nxt, self.prv = (rank + 1) % nranks, (rank - 1) % nranks
        self.libs = mori_ir.get_extern_libs()

    def symmetric(self, nbytes: int) -> Any:
        """A zeroed symmetric uint8 tensor (collective)."""
        return shmem.shmem_zeros(nbytes, np.uint8).torch()

    def symmetric_words(self, count: int) -> Any:
        """A zeroed symmetric int64 tensor (collective)."""
        return shmem.shmem_zeros(count, np.int64).torch()

    def local(self, data: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(data)).cuda()

    def zeros(self, count: int, dtype: Any) -> Any:
        return self.torch.zeros(count, dtype=dtype, device="cuda")

    def launch(self, kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        kernel[grid](*args, extern_libs=self.libs, **kwargs)
        self.torch.cuda.synchronize()

    def sync(self) -> None:
        """Every earlier GPU operation of every PE has finished."""
        self.torch.cuda.synchronize()
        shmem.shmem_barrier_all()


@contextlib.contextmanager
def triton_session(rank: int, nranks: int, uid: bytes, *, hook: bool = True) -> Iterator[Pe]:
    """init_pe, the PE's GPU, the hook; finalize at the end (skipped when the body raised)."""
    init_pe(rank, nranks, uid)
    import torch

    import mori.ir.triton as mori_ir

    torch.cuda.set_device(shmem.shmem_cuda_device())
    if hook:
        mori_ir.install_hook()
    yield Pe(rank, nranks)
    shmem.shmem_finalize()


# ----------------------------------------------------------------------------- (a) put + signal + wait


def put_signal_wait(rank: int, nranks: int, uid: bytes, cases: list[tuple[int, int, int, int, int, int]]) -> int:
    """cases: (scope, sig_op, wait_gt, nbytes, dst_off, src_off). Returns the number checked.

    Each case puts pattern(seed + rank) into the next PE with a signal on a word of its own that
    the host first sets to a base value; the receiver must see exactly the previous PE's bytes at
    dst_off (zeros elsewhere), in its output copy too, and the signal base + val (ADD) or val (SET).
    """
    with triton_session(rank, nranks, uid) as pe:
        torch = pe.torch
        largest = max(c[3] + c[4] for c in cases) + 64
        recv = pe.symmetric(largest)
        sig = pe.symmetric_words(len(cases))
        for index, (scope, sig_op, wait_gt, nbytes, dst_off, src_off) in enumerate(cases):
            seed, base, sig_val = 1000 * index, 7 + index, 100 + index
            expect = base + sig_val if sig_op == tk.SIGNAL_ADD.value else sig_val
            recv.zero_()
            sig[index] = base
            send = pe.local(pattern(seed + rank, nbytes + src_off))
            out = pe.zeros(nbytes, torch.uint8)
            seen = pe.zeros(1, torch.int64)
            pe.sync()
            pe.launch(tk.put_signal_wait_kernel, (1,), recv[dst_off:], send[src_off:], nbytes, sig[index:], sig_val,
                      sig_op, expect, scope, wait_gt, out, seen, BLOCK=BLOCK)  # fmt: skip
            pe.sync()
            case = f"case {(scope, sig_op, wait_gt, nbytes, dst_off, src_off)}"
            theirs = pattern(seed + pe.prv, nbytes + src_off)[src_off:]
            got_out = out.cpu().numpy()
            check(np.array_equal(got_out, theirs), f"{case}: output copy: {first_bad(got_out, theirs)}")
            want = np.zeros(largest, dtype=np.uint8)
            want[dst_off : dst_off + nbytes] = theirs
            got = recv.cpu().numpy()
            check(np.array_equal(got, want), f"{case}: symmetric buffer: {first_bad(got, want)}")
            check(int(seen.item()) == expect, f"{case}: the wait returned {int(seen.item())}, want {expect}")
            check(int(sig[index].item()) == expect, f"{case}: signal word {int(sig[index].item())}, want {expect}")
        shmem.shmem_check_device_error()
        return len(cases)


# ----------------------------------------------------------------------------- (b) all-gather


def allgather_shard(round_no: int, pe: int, shard_bytes: int) -> np.ndarray:
    return pattern(50_000 + 100 * round_no + pe, shard_bytes)


def allgather(rank: int, nranks: int, uid: bytes, shard_bytes: int, rounds: int) -> list[str]:
    """The Triton all-gather, rounds times with new data; checked against torch.cat of every PE's
    shard (generated here from the seeds, not received). Returns the sha256 of each round's result."""
    with triton_session(rank, nranks, uid) as pe:
        torch = pe.torch
        data = pe.symmetric(nranks * shard_bytes)
        sig = pe.symmetric_words(nranks)
        digests = []
        for round_no in range(rounds):
            epoch = round_no + 1
            shard = pe.local(allgather_shard(round_no, rank, shard_bytes))
            out = pe.zeros(nranks * shard_bytes, torch.uint8)
            pe.sync()  # nobody writes into data before every PE has read the previous round
            pe.launch(tk.allgather_kernel, (nranks,), data, shard, shard_bytes, sig, epoch, out, BLOCK=BLOCK)
            pe.sync()
            want = torch.cat([torch.from_numpy(allgather_shard(round_no, p, shard_bytes)) for p in range(nranks)])
            got = out.cpu()
            check(torch.equal(got, want), f"round {round_no}: {first_bad(got.numpy(), want.numpy())}")
            check(torch.equal(data.cpu(), want), f"round {round_no}: the symmetric buffer differs from the output")
            check(sig.cpu().tolist() == [epoch] * nranks, f"round {round_no}: signals {sig.cpu().tolist()}")
            digests.append(hashlib.sha256(got.numpy().tobytes()).hexdigest())
        shmem.shmem_check_device_error()
        return digests


# ----------------------------------------------------------------------------- (c) every function


def _query(pe: Pe) -> None:
    """my_pe, n_pes, ptr_p2p, ptr: against the rank, the PE count and the host's shmem_ptr_p2p."""
    sym = pe.symmetric(256)
    out = pe.zeros(2 + 2 * (pe.nranks + 1), pe.torch.int64)
    pe.launch(tk.query_kernel, (1,), sym, out)
    vals = [v & MASK64 for v in out.cpu().tolist()]
    check(vals[:2] == [pe.rank, pe.nranks], f"my_pe/n_pes gave {vals[:2]}, want {[pe.rank, pe.nranks]}")
    for p in range(pe.nranks):
        host = shmem.shmem_ptr_p2p(sym.data_ptr(), pe.rank, p)
        got = (vals[2 + 2 * p], vals[3 + 2 * p])
        check(host != 0 and got == (host, host), f"ptr_p2p/ptr for PE {p}: {got}, host {host:#x}")
    check(vals[2 + 2 * pe.rank] == sym.data_ptr(), "ptr_p2p(addr, me, me) is not addr")
    past = (vals[2 + 2 * pe.nranks], vals[3 + 2 * pe.nranks])
    check(past == (0, 0), f"ptr_p2p/ptr for the PE past the last gave {past}, want NULL")


def _fence(pe: Pe) -> None:
    """The six quiet/fence forms order a put before a flag: the receiver sees the data."""
    torch = pe.torch
    nbytes = 4096 + 3
    data = pe.symmetric(nbytes)
    flag = pe.symmetric_words(1)
    for mode in range(6):
        round_no, seed = mode + 1, 2000 + mode
        data.zero_()
        src = pe.local(pattern(seed + pe.rank, nbytes))
        out = pe.zeros(nbytes, torch.uint8)
        ret = pe.torch.full((1,), -1, dtype=torch.int32, device="cuda")
        pe.sync()
        pe.launch(tk.fence_kernel, (1,), data, flag, src, nbytes, round_no, mode, out, ret, BLOCK=BLOCK)
        pe.sync()
        want = pattern(seed + pe.prv, nbytes)
        got = out.cpu().numpy()
        check(np.array_equal(got, want), f"fence mode {mode}: {first_bad(got, want)}")
        check(int(ret.item()) == 0, f"fence mode {mode} returned {int(ret.item())}")
        check(int(flag.item()) == round_no, f"fence mode {mode}: flag {int(flag.item())}")


def _barrier(pe: Pe) -> None:
    """barrier_all_block / barrier_all_thread make a put issued before them visible after them."""
    sym = pe.symmetric_words(1)
    for block_scope in (1, 0):
        out = pe.zeros(2, pe.torch.int64)
        pe.sync()
        pe.launch(tk.barrier_kernel, (1,), sym, 1000 * (block_scope + 1) + pe.rank, block_scope, out)
        pe.sync()
        want = [1000 * (block_scope + 1) + pe.prv, 0]
        check(out.cpu().tolist() == want, f"barrier (block_scope={block_scope}): {out.cpu().tolist()}, want {want}")


RMA_SIZES = [1, 4, 8, 4, 8]  # bytes per element of ty 0..4: bytes, uint32, uint64, float, double


def _rma(pe: Pe) -> int:
    """All 48 put/get functions, bytes checked against the neighbour's pattern. Returns the count."""
    torch = pe.torch
    offset = 8
    cases = [(verb, scope, ty) for verb in range(4) for scope in range(3) for ty in (range(5) if verb < 3 else [0])]
    largest = offset + 77 * 8 + 1003 + 64
    sym = pe.symmetric(largest)
    for index, (verb, scope, ty) in enumerate(cases):
        n = 1003 if ty == 0 else 77
        nbytes = n * RMA_SIZES[ty]
        seed = 3000 + 10 * index
        sym.zero_()
        want = np.zeros(largest, dtype=np.uint8)
        if verb in (0, 3):  # put: local src -> the next PE's sym
            src = pe.local(pattern(seed + pe.rank, nbytes))
            pe.sync()
            pe.launch(tk.rma_kernel, (1,), sym[offset:], src, n, pe.nxt, verb, scope, ty)
            pe.sync()
            got = sym.cpu().numpy()
            want[offset : offset + nbytes] = pattern(seed + pe.prv, nbytes)
        else:  # get: the next PE's sym -> local dst
            sym[offset : offset + nbytes] = pe.local(pattern(seed + pe.rank, nbytes))
            dst = pe.zeros(largest, torch.uint8)
            pe.sync()
            pe.launch(tk.rma_kernel, (1,), dst[offset:], sym[offset:], n, pe.nxt, verb, scope, ty)
            pe.sync()
            got = dst.cpu().numpy()
            want[offset : offset + nbytes] = pattern(seed + pe.nxt, nbytes)
        check(np.array_equal(got, want), f"rma (verb, scope, ty) = {(verb, scope, ty)}: {first_bad(got, want)}")
    return len(cases)


def _imm_values(p: int) -> tuple[int, list[int], float, float]:
    return 0x1122334455667788 + p, [-(1000 + p), -(1 << 40) - p, 0xF0000000 + p], 1.5 + p, -2.25e100 - p


def _imm(pe: Pe) -> None:
    """put_size_imm_nbi_thread and the seven typed immediate puts, each into its 8-byte slot."""
    torch = pe.torch
    sym = pe.symmetric(8 * tk.IMM_SLOTS)
    value, ints, f32, f64 = _imm_values(pe.rank)
    ret = torch.full((1,), -1, dtype=torch.int32, device="cuda")
    args = (pe.local(words([value])), pe.local(words(ints)), pe.local(np.array([f32], dtype=np.float32)),
            pe.local(np.array([f64], dtype=np.float64)))  # fmt: skip
    pe.sync()
    pe.launch(tk.imm_kernel, (1,), sym, *args, pe.nxt, ret)
    pe.sync()
    value, ints, f32, f64 = _imm_values(pe.prv)
    slots = [
        np.array([value], dtype=np.uint64),
        np.array([ints[0]], dtype=np.int32),
        np.array([ints[1]], dtype=np.int64),
        np.array([ints[2]], dtype=np.uint32),
        np.array([0xFEDCBA9876543210], dtype=np.uint64),
        np.array([-123456789], dtype=np.int32),
        np.array([f32], dtype=np.float32),
        np.array([f64], dtype=np.float64),
    ]
    want = np.zeros(8 * tk.IMM_SLOTS, dtype=np.uint8)
    for slot, item in enumerate(slots):
        raw = item.view(np.uint8)
        want[8 * slot : 8 * slot + raw.size] = raw
    got = sym.cpu().numpy()
    check(np.array_equal(got, want), f"immediate puts: got {got.tolist()}, want {want.tolist()}")
    check(int(ret.item()) == 0, f"immediate puts returned {int(ret.item())}")


def _amo_init(p: int) -> list[int]:
    rng = np.random.default_rng(4000 + p)
    return [int(v) for v in rng.integers(0, 1 << 63, size=tk.AMO_SLOTS, dtype=np.int64)]


def _amo_values(p: int, compare5: int) -> tuple[list[int], list[int]]:
    """(operands, vals) of PE p: what it applies to the next PE (compare5: that PE's word 5, low half)."""
    rng = np.random.default_rng(5000 + p)
    vals = [int(v) for v in rng.integers(0, 1 << 63, size=tk.AMO_SLOTS, dtype=np.int64)]
    vals[4] = -vals[4]  # a negative int64 addend
    vals[10] = -(vals[10] >> 1)
    vals[13] = -(vals[13] >> 2)
    operands = [int(v) for v in rng.integers(0, 1 << 63, size=2, dtype=np.int64)]
    return operands, [*vals, compare5 & MASK32]


def _lo(word: int, new32: int) -> int:
    """word with its low 32 bits replaced."""
    return (word & ~MASK32 & MASK64) | (new32 & MASK32)


def amo_reference(init: list[int], operands: list[int], vals: list[int]) -> tuple[list[int], list[int]]:
    """(the words after the amo_kernel of the previous PE, the values it fetched), as uint64 bits."""
    w = [v & MASK64 for v in init]
    new = list(w)
    new[0] = (w[0] + operands[0]) & MASK64
    new[1] = _lo(w[1], w[1] ^ operands[1])
    new[2] = _lo(w[2], w[2] | vals[2])
    new[3] = vals[3] & MASK64
    new[4] = (w[4] + vals[4]) & MASK64
    new[5] = _lo(w[5], vals[5]) if (w[5] & MASK32) == (vals[14] & MASK32) else w[5]
    new[6] = (w[6] + vals[6]) & MASK64
    new[7] = vals[7] & MASK64
    new[8] = _lo(w[8], w[8] + vals[8])
    new[9] = (w[9] + vals[9]) & MASK64
    new[10] = (w[10] + vals[10]) & MASK64
    new[11] = _lo(w[11], w[11] + vals[11])
    new[12] = (w[12] + vals[12]) & MASK64
    new[13] = (w[13] + vals[13]) & MASK64
    fetched = [w[5] & MASK32, w[6], w[7], w[11] & MASK32, w[12], w[13], 0]
    return new, fetched


def _amo(pe: Pe) -> None:
    """The 13 atomic functions: the words they leave and the values they fetch."""
    torch = pe.torch
    sym = pe.symmetric_words(tk.AMO_SLOTS)
    sym.copy_(pe.local(words(_amo_init(pe.rank))))
    operands, vals = _amo_values(pe.rank, _amo_init(pe.nxt)[5])
    out = pe.zeros(7, torch.int64)
    pe.sync()
    pe.launch(tk.amo_kernel, (1,), sym, pe.local(words(operands)), pe.local(words(vals)), pe.nxt, out)
    pe.sync()
    theirs_operands, theirs_vals = _amo_values(pe.prv, _amo_init(pe.rank)[5])
    want_words, _ = amo_reference(_amo_init(pe.rank), theirs_operands, theirs_vals)
    got_words = [v & MASK64 for v in sym.cpu().tolist()]
    for k in range(tk.AMO_SLOTS):
        check(got_words[k] == want_words[k], f"atomic slot {k}: {got_words[k]:#x}, want {want_words[k]:#x}")
    _, want_fetched = amo_reference(_amo_init(pe.nxt), operands, vals)
    got_fetched = [v & MASK64 for v in out.cpu().tolist()]
    check(
        got_fetched == want_fetched, f"fetched {[hex(v) for v in got_fetched]}, want {[hex(v) for v in want_fetched]}"
    )


# Waits: slot -> (bits, value the host stores first, value the previous PE puts, threshold).
def wait_plan(p: int) -> list[tuple[int, int, int, int]]:
    """The waits of wait_kernel on a PE whose previous PE is p (see its docstring for the forms)."""
    after = [0xFFFFFF00 + p, 0x80000000 + p, 0x7FFF0000 + p, (1 << 63) + p, 0x0123456789ABCDEF + p, 0xDEAD0000 + p,
             -3 - p, -123456 - p, -1 - p, -5 - p, -(1 << 40) - p, -(1 << 63) + p]  # fmt: skip
    before = [3, 0, 1, 0, 0, 0, -1000, 0, 0, -(1 << 62), 0, 0]
    threshold = [5, after[1], 0x10000, (1 << 63) - 1, after[4], 0, -100, after[7], 0, -100, after[10], -5]
    bits = [32, 32, 32, 64, 64, 64, 32, 32, 32, 64, 64, 64]
    return list(zip(bits, before, after, threshold, strict=True))


#: The four tests: (bits, value the host stores, threshold, expected result).
WAIT_TESTS = [(32, 0xCAFEBABE, 0xCAFEBABE, 1), (64, 5, MASK64, 0), (32, -2, 1, 1), (64, 7, 7, 0)]


def _stored(bits: int, value: int) -> int:
    return value & (MASK32 if bits == 32 else MASK64)


def _wait(pe: Pe) -> None:
    """The 16 wait/test functions: the values the waits return and the tests' answers."""
    torch = pe.torch
    sym = pe.symmetric_words(tk.WAIT_SLOTS)
    mine = wait_plan(pe.prv)  # what this PE waits for
    initial = [_stored(bits, before) for bits, before, _, _ in mine]
    initial += [_stored(bits, value) for bits, value, _, _ in WAIT_TESTS]
    sym.copy_(pe.local(words(initial)))
    put_vals = [after for _, _, after, _ in wait_plan(pe.rank)]  # what the next PE waits for
    wait_vals = [threshold for _, _, _, threshold in mine] + [threshold for _, _, threshold, _ in WAIT_TESTS]
    out = pe.zeros(tk.WAIT_SLOTS + 1, torch.int64)
    pe.sync()
    pe.launch(tk.wait_kernel, (1,), sym, pe.local(words(put_vals)), pe.local(words(wait_vals)), out)
    pe.sync()
    got = [v & MASK64 for v in out.cpu().tolist()]
    # A 32-bit wait returns its type: uint32 zero-extends into the int64 output, int32 sign-extends.
    want = [after & MASK64 for _, _, after, _ in mine] + [result for *_, result in WAIT_TESTS] + [0]
    for k in range(tk.WAIT_SLOTS + 1):
        check(got[k] == want[k], f"wait/test slot {k}: {got[k]:#x}, want {want[k]:#x}")


def every_function(rank: int, nranks: int, uid: bytes) -> dict[str, int]:
    """Calls all 100 functions (put_signal_wait covers the three put-with-signal forms) and checks
    them. Returns how many calls each group checked."""
    with triton_session(rank, nranks, uid) as pe:
        done = {}
        groups = [("query", 4, _query), ("quiet_fence", 6, _fence), ("barrier", 2, _barrier), ("rma", 48, _rma),
                  ("immediate", 8, _imm), ("atomic", 13, _amo), ("wait", 16, _wait)]  # fmt: skip
        for name, calls, run in groups:
            counted = run(pe)
            done[name] = calls if counted is None else counted
            try:
                shmem.shmem_check_device_error()  # after each group, so that an error names its group
            except Exception as exc:
                raise AssertionError(f"{name}: the kernels recorded a device error: {exc!r}") from exc
        return done


# ----------------------------------------------------------------------------- the hook


def query_only(rank: int, nranks: int, uid: bytes, hook: bool) -> dict[str, Any]:
    """my_pe/n_pes through one kernel, with or without the hook; also whether Triton took the
    kernel from its disk cache (compilation listener)."""
    import triton

    hits: list[bool] = []

    def listener(*, src: Any, metadata: Any, metadata_group: Any, times: Any, cache_hit: bool) -> None:
        hits.append(cache_hit)

    triton.knobs.compilation.listener = listener
    with triton_session(rank, nranks, uid, hook=hook) as pe:
        sym = pe.symmetric(256)
        out = pe.zeros(2 + 2 * (nranks + 1), pe.torch.int64)
        pe.launch(tk.query_kernel, (1,), sym, out)
        return {"my_pe": int(out[0].item()), "n_pes": int(out[1].item()), "cache_hits": hits}
