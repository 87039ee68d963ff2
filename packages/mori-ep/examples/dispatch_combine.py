# SPDX-License-Identifier: MIT
"""A complete dispatch -> experts -> combine round trip on N local PEs (processes).

    python dispatch_combine.py --pes 4            # cpu backend, or the GPU when there is one

Each PE routes its tokens to top-k of all experts, dispatches them, runs its local experts (here
each expert scales its rows by (1 + local expert id), weighted by the router's weight), combines,
and checks the result against the same computation done without communication.
"""

from __future__ import annotations

import argparse
import logging

import torch

import mori.shmem as shmem
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineOp
from mori.shmem.testing import run_pes

logger = logging.getLogger("dispatch_combine")

HIDDEN, TOKENS, TOPK, EXPERTS_PER_PE = 256, 64, 4, 4


def routing(rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(TOKENS, HIDDEN, generator=gen).to(torch.bfloat16)
    indices = torch.rand(TOKENS, world_size * EXPERTS_PER_PE, generator=gen).argsort(dim=1)[:, :TOPK].int()
    weights = torch.rand(TOKENS, TOPK, generator=gen)
    return x, indices, weights


def experts(rows: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, rank: int) -> torch.Tensor:
    """Sum over this PE's experts among each row's picks of weight * (1 + expert) * row, in fp32."""
    local = (ids // EXPERTS_PER_PE) == rank
    factor = torch.where(local, weights * (1 + ids.float()), torch.zeros_like(weights)).sum(dim=1, keepdim=True)
    return (rows.float() * factor).to(torch.bfloat16)


def pe(rank: int, world_size: int, uid: bytes) -> float:
    shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, world_size, uid)
    try:
        on_gpu = shmem.shmem_backend() == "cuda"
        device = torch.device("cuda", shmem.shmem_cuda_device()) if on_gpu else torch.device("cpu")
        config = EpDispatchCombineConfig(
            data_type=torch.bfloat16, rank=rank, world_size=world_size, hidden_dim=HIDDEN, scale_dim=0,
            scale_type_size=0, max_token_type_size=2, max_num_inp_token_per_rank=TOKENS,
            num_experts_per_rank=EXPERTS_PER_PE, num_experts_per_token=TOPK,
        )  # fmt: skip
        with EpDispatchCombineOp(config) as op:
            x, indices, weights = routing(rank, world_size)
            out, out_weights, _, out_indices, total_recv = op.dispatch(
                x.to(device), weights.to(device), None, indices.to(device)
            )
            total = int(total_recv.item())
            y = experts(out[:total], out_indices[:total], out_weights[:total], rank)
            combined, _ = op.combine(y, None, indices.to(device))
            # The same layer without communication: every pick's expert applied where the token is.
            reference = (x.float() * (weights * (1 + indices.float())).sum(dim=1, keepdim=True)).to(torch.bfloat16)
            difference = (combined[:TOKENS].cpu().float() - reference.float()).abs()
            error = (difference / reference.float().abs().clamp(min=1.0)).max().item()
            logger.info("PE %d: received %d rows, largest relative difference %.3g", rank, total, error)
            return error
    finally:
        shmem.shmem_finalize()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pes", type=int, default=4)
    args = parser.parse_args()
    errors = run_pes(pe, args.pes, env={"MORI_SHMEM_HEAP_SIZE": "64M"})
    # bf16 rounding of each PE's partial sum (a few ulps of 2^-8) is the only difference.
    if max(errors) > 2e-2:
        raise SystemExit(f"combine differs from the reference: {errors}")
    logger.info("all %d PEs match the single-process reference", args.pes)


if __name__ == "__main__":
    main()
