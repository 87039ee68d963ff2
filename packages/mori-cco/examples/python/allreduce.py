# SPDX-License-Identifier: MIT
"""Collectives on a communicator: all-reduce (one-shot, two-shot, fp8 wire), all-gather,
all-to-all and a GEMM + all-reduce, each checked against a local reference.

    python allreduce.py --nranks 4 [--backend cpu|cuda]
"""

from __future__ import annotations

import argparse

from _ranks import pick_backend, run_ranks


def rank_main(rank: int, nranks: int, uid: bytes, backend: str) -> None:
    import torch

    import mori.cco

    if backend == "cuda":
        torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else rank)
    device = "cuda" if backend == "cuda" else "cpu"
    with mori.cco.Communicator.init(nranks, rank, uid, backend=backend) as comm:
        # Every rank can build every rank's input from the same seed: the reference is local.
        inputs = [torch.randn(1 << 16, generator=torch.Generator().manual_seed(r)) for r in range(nranks)]
        exact = torch.stack(inputs).sum(0)
        for algorithm in ("one_shot", "two_shot"):
            got = comm.all_reduce(inputs[rank].to(device), out=torch.empty(1 << 16, device=device), algorithm=algorithm)
            got = got.cpu()
            assert torch.allclose(got, exact, atol=1e-4), algorithm
        fp8 = comm.all_reduce(inputs[rank].to(device), out=torch.empty(1 << 16, device=device), wire_dtype="fp8").cpu()
        fp8_error = float((fp8 - exact).norm() / exact.norm())

        gathered = comm.all_gather(torch.empty(nranks * 4, device=device), torch.full((4,), float(rank), device=device))
        assert gathered.cpu().tolist() == [float(r) for r in range(nranks) for _ in range(4)]
        chunks = torch.arange(nranks, device=device, dtype=torch.int64) + 100 * rank
        swapped = comm.all_to_all(torch.empty_like(chunks), chunks)
        assert swapped.cpu().tolist() == [100 * r + rank for r in range(nranks)]

        a = torch.randn(512, 256, generator=torch.Generator().manual_seed(10 + rank)).to(device)
        b = torch.randn(256, 128, generator=torch.Generator().manual_seed(20 + rank)).to(device)
        out = mori.cco.gemm_all_reduce(comm, a, b)
        partial = comm.all_reduce((a @ b).contiguous())
        assert torch.allclose(out, partial, atol=1e-3)
        print(f"rank {rank}: SUCCESS (fp8 wire relative error {fp8_error:.4f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args()
    backend = pick_backend(args.backend)
    raise SystemExit(run_ranks(rank_main, args.nranks, backend))


if __name__ == "__main__":
    main()
