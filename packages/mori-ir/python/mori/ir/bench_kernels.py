# SPDX-License-Identifier: MIT
# mypy: allow-untyped-defs
"""The Triton kernels of ``mori-ir-bench``: the two kernels of mori-shmem-bench
(``src/device/bench_kernels.cu`` of mori-shmem) written against the mori-ir device API.

- :func:`put_block_kernel` is ``mori_bench_put`` at block scope: program ``w`` puts bytes
  ``[w * slice_bytes, +slice_bytes)`` of ``src`` into PE ``pe``'s ``dest`` with
  ``putmem_nbi_block`` (every thread of the program takes part) and completes it with
  ``quiet_thread`` on every thread, ``reps`` times. Launch it with the grid and the 512 threads
  (``num_warps=16``) of ``mori.shmem.bench.gpu.geometry("block", ...)``.
- :func:`pingpong_kernel` is ``mori_bench_pingpong``: thread 0 of one program on each of two PEs
  runs ``rounds`` round trips of an ``nbytes`` put-with-signal (``SIGNAL_SET`` of the round
  number); the initiator puts and then waits for the reply, the responder waits and then replies.
  The initiator stores its elapsed ``%globaltimer`` nanoseconds to ``elapsed_ns[0]``.

Runtime scalars are in ``do_not_specialize``, so that one compiled kernel serves every size, PE
and round count (Triton would otherwise specialise on values equal to 1 and compile again).
Triton and this package's wrappers are reached through ``Any`` names: Triton ships no types, and
the wrappers are added to ``mori.ir.triton`` at import time.
"""

import importlib
from typing import Any

import mori.ir.triton as _mori_ir

triton: Any = importlib.import_module("triton")
tl: Any = importlib.import_module("triton.language")
mori_ir: Any = _mori_ir

#: Threads per program of the put kernel: mori_bench_put's block size (bench_gpu.THREADS_PER_BLOCK).
PUT_NUM_WARPS = 16
#: The ping-pong runs on thread 0 of one warp, like mori_bench_pingpong's <<<1, 32>>>.
PINGPONG_NUM_WARPS = 1


@triton.jit
def globaltimer():
    """``%globaltimer`` in nanoseconds (not pure: two reads are never merged or moved)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.uint64, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["nbytes", "slice_bytes", "workers", "pe", "reps"])
def put_block_kernel(dest, src, nbytes, slice_bytes, workers, pe, reps):
    """Program w < workers puts src[w * slice_bytes:][:slice_bytes] (clipped to nbytes) into PE pe's
    dest at the same offset, reps times, each put completed by quiet_thread before the next."""
    worker = tl.program_id(0)
    begin = worker.to(tl.int64) * slice_bytes
    if (worker < workers) & (begin < nbytes):
        length = tl.minimum(nbytes - begin, slice_bytes)
        for _ in range(reps):
            mori_ir.putmem_nbi_block(dest + begin, src + begin, length, pe, 0)
            mori_ir.quiet_thread()


@triton.jit(do_not_specialize=["nbytes", "peer", "rounds", "initiator"])
def pingpong_kernel(buf, signal, nbytes, peer, rounds, initiator, elapsed_ns):
    """rounds round trips of an nbytes put-with-signal between this PE and peer, on thread 0.

    Round r: the responder (initiator == 0) waits until its signal word is >= r, then puts
    buf[:nbytes] into the peer's buf with SIGNAL_SET of r on the peer's signal; the initiator puts
    first and then waits. The signal words must start below 1 on both PEs.
    """
    if mori_ir.thread_id() == 0:
        start = globaltimer()
        for r in tl.range(1, rounds + 1):
            round_no = r.to(tl.uint64)
            if initiator == 0:
                mori_ir.uint64_wait_until_greater_than(signal, round_no - 1)
            mori_ir.putmem_nbi_signal_thread(buf, buf, nbytes, signal, round_no, mori_ir.SIGNAL_SET, peer, 0)
            if initiator != 0:
                mori_ir.uint64_wait_until_greater_than(signal, round_no - 1)
        end = globaltimer()
        if initiator != 0:
            tl.store(elapsed_ns, (end - start).to(tl.int64))


#: (kernel, signature, num_warps) as the bench launches them, for triton.compile(ASTSource(...))
#: (the tests compile them without a GPU). Sizes below 2 GiB are passed as i32, larger ones as i64.
COMPILE_SPECS: list[tuple[Any, dict[str, str], int]] = [
    (put_block_kernel, {"dest": "*u8", "src": "*u8", "nbytes": "i32", "slice_bytes": "i32", "workers": "i32",
                        "pe": "i32", "reps": "i32"}, PUT_NUM_WARPS),
    (put_block_kernel, {"dest": "*u8", "src": "*u8", "nbytes": "i64", "slice_bytes": "i64", "workers": "i32",
                        "pe": "i32", "reps": "i32"}, PUT_NUM_WARPS),
    (pingpong_kernel, {"buf": "*u8", "signal": "*i64", "nbytes": "i32", "peer": "i32", "rounds": "i32",
                       "initiator": "i32", "elapsed_ns": "*i64"}, PINGPONG_NUM_WARPS),
]  # fmt: skip
