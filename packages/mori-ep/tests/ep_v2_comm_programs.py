# SPDX-License-Identifier: MIT
"""What each PE process of the EP v2 communicator and scatter tests runs (module level, so run_pes
can pickle it).

The reference is independent of the op, as in ep_programs.py: every PE rebuilds every PE's inputs
from the workload's seed and derives with plain torch which rows it must receive and what combine
of an identity expert returns (U * x and U * w, U = distinct destination PEs of the token).
"""

from __future__ import annotations

from typing import Any

import ep_programs
import torch

import mori.shmem as shmem
from mori.ep import reference
from mori.ep import workload as wl
from mori.ep.v2 import EpDispatchCombineOp


def _device(backend: str, cuda_device: int) -> torch.device:
    if backend == "cuda":
        device = torch.device("cuda", cuda_device)
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def _check_round(w: wl.Workload, rank: int, iteration: int, op: EpDispatchCombineOp, device: Any) -> dict[str, Any]:
    """One dispatch -> identity expert -> combine round against the reference; returns combine's
    outputs (CPU copies) so callers can also compare modes with each other."""
    x, weights, _ = wl.tokens(w, rank, iteration)
    indices = wl.routing(w, rank, iteration)
    out, out_weights, _, out_indices, total_recv, routing = op.dispatch(
        x.to(device), weights.to(device), None, indices.to(device), return_routing=True
    )
    total = int(total_recv.item())
    expected = reference.expected_rows(w, rank, iteration)  # v1 positions: src * W * M + token
    sources = routing.disp_tok_id_to_src_tok_id_local[:total].cpu()
    got = {int(src) // w.max_tokens * w.world_size * w.max_tokens + int(src) % w.max_tokens for src in sources}
    assert len(got) == total and got == set(expected), f"rank {rank}: received rows differ from the reference"
    for row, pos in enumerate(sources.tolist()):
        src, token = divmod(pos, w.max_tokens)
        x_src, w_src, _ = wl.tokens(w, src, iteration)
        assert torch.equal(out[row].cpu(), x_src[token]), f"rank {rank}: row {row} holds another token"
        assert torch.equal(out_weights[row].cpu(), w_src[token])
        assert torch.equal(out_indices[row].cpu(), wl.routing(w, src, iteration)[token])
    combined, combined_weights = op.combine(out[:total], out_weights, routing=routing)
    count = wl.destinations(w, indices).sum(dim=1, keepdim=True).float()
    torch.testing.assert_close(combined.cpu(), (x.float() * count).to(x.dtype), rtol=0, atol=0)
    torch.testing.assert_close(combined_weights.cpu(), weights * count, rtol=1e-6, atol=1e-6)
    op.check_error()
    return {"out": combined.cpu().clone(), "out_weights": combined_weights.cpu().clone(), "total": total}


def _config(w: wl.Workload, rank: int, **fields: Any) -> Any:
    import ep_v2_programs

    return ep_v2_programs.v2_config(w, rank, **fields)


def _both_combines(w: wl.Workload, rank: int, device: Any, iterations: int, first: Any, second: Any) -> list[int]:
    """``iterations`` rounds through ``first`` then ``second`` (a gather and a scatter combine op,
    either order), each against the reference and both equal bit for bit. Returns the first op's
    total_recv per round."""
    totals = []
    for iteration in range(iterations):
        by_first = _check_round(w, rank, iteration, first, device)
        by_second = _check_round(w, rank, iteration, second, device)
        assert torch.equal(by_first["out"], by_second["out"]), "gather and scatter combines differ"
        assert torch.equal(by_first["out_weights"], by_second["out_weights"])
        totals.append(by_first["total"])
    return totals


def over_comm(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, iterations: int) -> list[int]:
    """v2 ops over a mori.cco communicator, mori.shmem never initialised: gather and scatter
    combines against the reference, and equal to each other bit for bit. Returns total_recv per
    round."""
    import mori.cco

    assert not shmem.shmem_is_initialized()
    with mori.cco.Communicator.init(nranks, rank, uid, backend=backend) as comm:
        device = _device(backend, comm.device)
        gather = EpDispatchCombineOp(_config(w, rank), comm)
        scatter = EpDispatchCombineOp(_config(w, rank, combine_mode="scatter"), comm)
        assert gather.device == device and "mori.cco communicator" in repr(gather)
        totals = _both_combines(w, rank, device, iterations, gather, scatter)
        scatter.close()
        gather.close()
        assert not shmem.shmem_is_initialized(), "the op must not have initialised mori.shmem"
    return totals


def scatter_over_shmem(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, iterations: int) -> list[int]:
    """combine_mode='scatter' over mori.shmem's heap against the reference, and equal to gather."""
    with shmem.session(rank, nranks, uid):
        device = ep_programs._device(backend)
        gather = EpDispatchCombineOp(_config(w, rank))
        scatter = EpDispatchCombineOp(_config(w, rank, combine_mode="scatter"))
        totals = _both_combines(w, rank, device, iterations, scatter, gather)
        scatter.close()
        gather.close()
        return totals


def same_state(rank: int, nranks: int, uid: bytes, backend: str, cco_uid: bytes, w: wl.Workload) -> list[str]:
    """The attributes mori.ep's v1 constructor sets and those CommV1Op sets: they must be the
    same names, so every v1 method finds its state over a communicator too."""
    import mori.cco
    from mori.ep import EpDispatchCombineOp as V1Op
    from mori.ep.v2.comm_op import CommV1Op
    from mori.ep.v2.memory import CcoMemory

    with shmem.session(rank, nranks, uid):
        with mori.cco.Communicator.init(nranks, rank, cco_uid, backend=backend) as comm:
            v1_config = _config(w, rank).to_v1_config()
            v1 = V1Op(v1_config)
            over_comm_op = CommV1Op(v1_config, CcoMemory(comm, rank, nranks))
            difference = sorted(set(vars(v1)) ^ set(vars(over_comm_op)))
            over_comm_op.close()
            v1.close()
        return difference
