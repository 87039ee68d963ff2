# SPDX-License-Identifier: MIT
"""An all-gather written in Triton with mori-ir, checked against torch.

Each PE holds a shard of `--elems` bf16 values. Program p of the kernel puts this PE's shard into
PE p's gather buffer (a block-scope put with a signal), then waits for PE p's shard to land here
and copies it to the output. Every round signals a new epoch, so the signal words never need a
reset. One GPU is enough: run the PEs under CUDA MPS.

    python triton_allgather.py --pes 4 --elems 65536 --rounds 3
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
import triton
import triton.language as tl

import mori.ir.triton as mori_ir


@triton.jit(do_not_specialize=["epoch"])
def allgather_kernel(gather, shard, shard_elems, signals, epoch, out, BLOCK: tl.constexpr):
    peer = tl.program_id(0)
    me = mori_ir.my_pe()
    nbytes = shard_elems * 2  # bf16
    # Every thread of the program takes part in the block-scope put; one thread sets the signal.
    mori_ir.putmem_nbi_signal_block(gather + me * shard_elems, shard, nbytes, signals + me, epoch,
                                    mori_ir.SIGNAL_SET, peer, 0)  # fmt: skip
    mori_ir.uint64_wait_until_equals(signals + peer, epoch)
    for start in range(0, shard_elems, BLOCK):
        offs = peer * shard_elems + start + tl.arange(0, BLOCK)
        mask = offs < (peer + 1) * shard_elems
        # volatile: the bytes were written by another PE's kernel, not by this one.
        tl.store(out + offs, tl.load(gather + offs, mask=mask, volatile=True), mask=mask)


def shard_of(pe: int, round_no: int, elems: int):  # -> torch.Tensor
    import torch

    generator = torch.Generator().manual_seed(1000 * round_no + pe)
    return torch.randn(elems, generator=generator).to(torch.bfloat16)


def pe_program(rank: int, nranks: int, uid: bytes, elems: int, rounds: int) -> int:
    import torch

    import mori.shmem as shmem

    with shmem.session(rank, nranks, uid):
        torch.cuda.set_device(shmem.shmem_cuda_device())
        mori_ir.install_hook()
        libs = mori_ir.get_extern_libs()
        gather = shmem.mori_shmem_create_tensor((nranks * elems,), torch.bfloat16)
        signals = shmem.shmem_zeros(nranks, np.uint64).torch()
        for round_no in range(rounds):
            shard = shard_of(rank, round_no, elems).cuda()
            out = torch.empty(nranks * elems, dtype=torch.bfloat16, device="cuda")
            shmem.shmem_barrier_all()  # nobody overwrites `gather` while a peer still reads it
            allgather_kernel[(nranks,)](gather, shard, elems, signals, round_no + 1, out, BLOCK=1024, extern_libs=libs)
            torch.cuda.synchronize()
            want = torch.cat([shard_of(p, round_no, elems) for p in range(nranks)])
            if not torch.equal(out.cpu(), want):
                raise AssertionError(f"PE {rank}, round {round_no}: the gathered tensor differs from torch.cat")
        shmem.shmem_check_device_error()
        shmem.shmem_barrier_all()
        shmem.mori_shmem_free_tensor(gather)
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pes", type=int, default=2)
    parser.add_argument("--elems", type=int, default=1 << 16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from mori.shmem.testing import run_pes

    run_pes(pe_program, args.pes, args.elems, args.rounds, env={"MORI_SHMEM_BACKEND": "cuda"}, timeout=300)
    logging.getLogger("triton_allgather").info(
        "%d PEs, %d rounds: every PE gathered %d bf16 values, equal to torch.cat of the shards",
        args.pes, args.rounds, args.pes * args.elems,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
