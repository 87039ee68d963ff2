# SPDX-License-Identifier: MIT
"""PE programs of test_payload_formats.py that expect a typed error (module level, so run_pes can
pickle them); the round trips use ep_programs.dispatch_combine."""

from __future__ import annotations

from typing import Any

import ep_programs
import torch

import mori.shmem as shmem
from mori.ep import workload as wl


def _dispatched(rank: int, backend: str, w: wl.Workload, fields: dict[str, Any]) -> tuple[Any, Any, Any, Any, int]:
    """Makes the op and dispatches ``w``'s rows (received ones checked bit-exact against their
    source): returns the op, the device, the routing, dispatch's outputs and total_recv."""
    device = ep_programs._device(backend)
    op = ep_programs.make_op(w, rank, **fields)
    x, weights, scales = wl.tokens(w, rank)
    indices = wl.routing(w, rank).to(device)
    outputs = op.dispatch(x.to(device), weights.to(device), None if scales is None else scales.to(device), indices)
    if _split(op):
        op.dispatch_recv()
    op.check_error()
    return op, device, indices, outputs, ep_programs.check_dispatch(w, rank, 0, op, outputs)


def _split(op: Any) -> bool:
    return bool(op.config.kernel_type.name == "AsyncLL")  # the receive halves are separate calls


def dispatch_then_combine_bytes(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any]
) -> str:
    """Dispatches ``w``'s byte rows, then hands the received rows to combine as they are: returns
    the error's type and message."""
    with shmem.session(rank, nranks, uid):
        op, device, indices, outputs, total = _dispatched(rank, backend, w, fields)
        message = ep_programs.outcome(lambda: op.combine(outputs[0][:total], None, indices))
        if w.hidden >= 8:  # the op is still usable: a bf16 combine (8 columns, 16 bytes) of the same routing runs
            op.combine(torch.zeros(total, 8, dtype=torch.bfloat16, device=device), None, indices)
            if _split(op):
                op.combine_recv()
            op.check_error()
        op.close()
        return message


def combine_error(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any]) -> str:
    """A dispatch, then a combine the op must refuse before launching (the config's quant_type)."""
    with shmem.session(rank, nranks, uid):
        op, _, indices, out, total = _dispatched(rank, backend, w, fields)
        try:
            return ep_programs.outcome(lambda: op.combine(out[0][:total], None, indices))
        finally:
            shmem.shmem_barrier_all()
            op.close()


def standard_moe_bytes(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> list[int]:
    """dispatch_standard_moe of ``w``'s payload rows: each local expert's packed rows are, byte for
    byte, the sources' rows that picked it (the grouping moves bytes like dispatch)."""
    with shmem.session(rank, nranks, uid):
        device = ep_programs._device(backend)
        op = ep_programs.make_op(w, rank)
        x, weights, scales = wl.tokens(w, rank)
        packed, count, src_info, _ = op.dispatch_standard_moe(
            x.to(device),
            weights.to(device),
            None if scales is None else scales.to(device),
            wl.routing(w, rank).to(device),
        )
        op.check_error()
        packed_bytes, count, src_info = packed.cpu().view(torch.uint8), count.cpu(), src_info.cpu()
        sources = {src: (wl.tokens(w, src)[0].view(torch.uint8), wl.routing(w, src)) for src in range(w.world_size)}
        for local in range(w.experts_per_rank):
            expert = rank * w.experts_per_rank + local
            want = ep_programs.routed_sources(w, sources, expert)
            got = src_info[local, : int(count[local])].tolist()
            assert sorted(got) == want, f"expert {expert}: rows {sorted(got)}, expected {want}"
            for j, pos in enumerate(got):
                src, token = op.decode_send_flat_idx(pos)
                assert torch.equal(packed_bytes[local, j], sources[src][0][token]), f"expert {expert}, row {j}"
        op.close()
        return count.tolist()
