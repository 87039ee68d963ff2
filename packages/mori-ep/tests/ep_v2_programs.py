# SPDX-License-Identifier: MIT
"""What each PE process of the EP v2 tests runs (module level, so run_pes can pickle it).

``parity`` puts the same inputs through a v1 op and a v2 op and requires equal results; v1 itself
is held to the torch reference by test_dispatch_combine.py. ``contract`` exercises v2's call
contract and lifecycle and returns what each bad call raised.
"""

from __future__ import annotations

from typing import Any

import ep_programs
import torch

import mori.shmem as shmem
from mori.ep import workload as wl
from mori.ep.v2 import EpDispatchCombineConfig, EpDispatchCombineOp, EpDispatchRoutingHandle


def small_config(**changes: object) -> EpDispatchCombineConfig:
    """A small v2 config for tests that need no PEs: 2 PEs, hidden 256, 8 tokens, top-2 of 4 experts."""
    fields: dict[str, object] = dict(
        rank=0, world_size=2, hidden_dim=256, max_num_inp_token_per_rank=8, num_experts_per_rank=2,
        num_experts_per_token=2,
    )  # fmt: skip
    fields.update(changes)
    return EpDispatchCombineConfig(**fields)  # type: ignore[arg-type]


def v2_config(w: wl.Workload, rank: int, **fields: Any) -> EpDispatchCombineConfig:
    dtype = getattr(torch, w.dtype)
    if dtype.is_floating_point and dtype.itemsize == 1:  # fp8 dispatch, bf16 combine
        fields.update(dispatch_data_type=dtype, combine_data_type=torch.bfloat16)
    else:
        fields.update(data_type=dtype)
    if w.scale_dim:
        fields.update(scale_dim=w.scale_dim, scale_type_size=getattr(torch, w.scale_dtype).itemsize)
    return EpDispatchCombineConfig(
        rank=rank,
        world_size=w.world_size,
        hidden_dim=w.hidden,
        max_num_inp_token_per_rank=w.max_tokens,
        num_experts_per_rank=w.experts_per_rank,
        num_experts_per_token=w.topk,
        **fields,
    )


def _inputs(w: wl.Workload, rank: int, iteration: int, device: torch.device) -> tuple[Any, Any, Any, Any]:
    x, weights, scales = wl.tokens(w, rank, iteration)
    indices = wl.routing(w, rank, iteration)
    return x.to(device), weights.to(device), None if scales is None else scales.to(device), indices.to(device)


def _by_source(outputs: Any, sources: Any) -> dict[str, Any]:
    """The received rows as CPU tensors, ordered by source position (rows arrive in any order)."""
    out, out_weights, out_scales, out_indices, total_recv = outputs
    total = int(total_recv.item())
    order = torch.argsort(sources[:total].cpu())
    rows = {
        "positions": sources[:total].cpu()[order],
        "out": out[:total].cpu()[order].view(torch.uint8),  # bytes: fp8 has no equality on every torch
        "out_weights": out_weights[:total].cpu()[order],
        "out_indices": out_indices[:total].cpu()[order],
        "total_recv": total_recv.cpu().clone(),
    }
    if out_scales is not None:
        rows["out_scales"] = out_scales[:total].cpu()[order].view(torch.uint8)
    return rows


def _assert_equal(case: str, what: str, v1: dict[str, Any], v2: dict[str, Any]) -> None:
    assert v1.keys() == v2.keys(), f"{case}: {what} fields {sorted(v1)} vs {sorted(v2)}"
    for name in v1:
        assert torch.equal(v1[name], v2[name]), f"{case}: {what} {name} differs between v1 and v2"


def parity(
    rank: int, nranks: int, uid: bytes, backend: str, cases: list[tuple[str, wl.Workload, str]], iterations: int
) -> list[int]:
    """Per case (name, workload, quant type): ``iterations`` rounds of dispatch, identity expert and
    combine through a v1 op and a v2 op of the same shape; every output must be equal. Returns
    total_recv per round."""
    with shmem.session(rank, nranks, uid):
        device = ep_programs._device(backend)
        totals = []
        for case, w, quant in cases:
            v1 = ep_programs.make_op(w, rank, quant_type=quant)
            v2 = EpDispatchCombineOp(v2_config(w, rank, quant_type=quant))
            stride = w.world_size * w.max_tokens  # v1's source positions; v2's use max_tokens
            for iteration in range(iterations):
                x, weights, scales, indices = _inputs(w, rank, iteration, device)
                n = x.shape[0]
                first = v1.dispatch(x, weights, scales, indices, call_local_expert_count=True)
                v1_positions = v1.get_dispatch_src_token_pos()
                # v2's encoding of the same positions, so both sort the rows alike
                v1_rows = _by_source(first, (v1_positions // stride) * w.max_tokens + v1_positions % stride)
                total = int(first[4].item())
                v1_count = v1.local_expert_count.cpu().clone()
                v1_out, v1_weights = v1.combine(first[0][:total].to(torch.bfloat16), first[1][:total].clone(), indices)
                v1_combined = {"out": v1_out[:n].cpu().clone(), "out_weights": v1_weights[:n].cpu().clone()}

                *second, routing = v2.dispatch(x, weights, scales, indices, return_routing=True)
                _assert_equal(case, "dispatch", v1_rows, _by_source(second, routing.disp_tok_id_to_src_tok_id_local))
                assert torch.equal(v2.local_expert_count().cpu(), v1_count), f"{case}: local_expert_count differs"
                assert torch.equal(routing.total_recv_token_num.cpu(), v1_rows["total_recv"])
                dest = routing.disp_dest_tok_id_map
                sentinel = w.world_size * v2.max_num_tokens_to_recv()
                assert bool(((dest >= 0) & (dest <= sentinel)).all()), f"{case}: destination map out of range"
                out, out_weights = v2.combine(second[0][:total].to(torch.bfloat16), second[1], routing=routing)
                assert out.shape[0] == n and out_weights.shape[0] == n
                v2_combined = {"out": out.cpu(), "out_weights": out_weights.cpu()}
                _assert_equal(case, "combine", v1_combined, v2_combined)
                v1.check_error()
                v2.check_error()
                totals.append(total)
            v2.close()
            v1.close()
        return totals


def _expect_error(messages: list[str], name: str, call: Any) -> None:
    try:
        call()
    except Exception as exc:  # the test inspects the type and the message
        messages.append(f"{name}|{type(exc).__name__}|{exc}")
    else:
        messages.append(f"{name}|no error|")


def contract(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> str:
    """Bad calls (each must raise before anything launches), a routing replay, and the lifecycle.
    Returns one "name|error type|message" line per bad call."""
    with shmem.session(rank, nranks, uid):
        device = ep_programs._device(backend)
        messages: list[str] = []
        op = EpDispatchCombineOp(v2_config(w, rank))
        x, weights, _, indices = _inputs(w, rank, 0, device)
        _expect_error(messages, "combine_without_routing", lambda: op.combine(x, weights))
        too_many = x.new_zeros(w.max_tokens + 1, w.hidden)
        _expect_error(
            messages,
            "too_many_tokens",
            lambda: op.dispatch(too_many, None, None, indices.new_zeros(w.max_tokens + 1, w.topk)),
        )
        _expect_error(messages, "wrong_dtype", lambda: op.dispatch(x.float(), weights, None, indices))
        _expect_error(messages, "combine_before_dispatch", lambda: op.combine(x, routing=_fake_handle(op, x, w)))

        out, _, _, _, total_recv, routing = op.dispatch(x, weights, None, indices, return_routing=True)
        total = int(total_recv.item())
        _expect_error(
            messages, "routing_and_return", lambda: op.dispatch(x, weights, None, indices, routing=routing,
                                                                return_routing=True)
        )  # fmt: skip
        _expect_error(messages, "routing_not_a_handle", lambda: op.combine(out[:total], routing=routing.tensors()))
        shorter = EpDispatchRoutingHandle.from_tensors(routing.tensors(), routing.cur_rank_num_token + 1)
        _expect_error(messages, "routing_wrong_tokens", lambda: op.combine(out[:total], routing=shorter))
        op.combine(out[:total], None, routing=routing)  # completes the first round

        # A handle of another op is stale for this one.
        other = EpDispatchCombineOp(v2_config(w, rank))
        *_, foreign = other.dispatch(x, weights, None, indices, return_routing=True)
        _expect_error(messages, "stale_routing", lambda: op.combine(out[:total], routing=foreign))
        other.close()

        _replay(w, rank, op, routing, indices, device)

        op.close()
        _expect_error(messages, "dispatch_after_close", lambda: op.dispatch(x, weights, None, indices))
        _expect_error(messages, "combine_after_close", lambda: op.combine(out, routing=routing))
        op.close()  # a second close does nothing
        with EpDispatchCombineOp(v2_config(w, rank)) as scoped:
            assert not scoped.closed
        assert scoped.closed and "closed" in repr(scoped)
        return "\n".join(messages)


def _fake_handle(op: EpDispatchCombineOp, x: Any, w: wl.Workload) -> EpDispatchRoutingHandle:
    n, device = x.shape[0], x.device
    empty = torch.empty(0, dtype=torch.int32, device=device)
    dest = torch.full((n, w.topk), w.world_size * op.max_num_tokens_to_recv(), dtype=torch.int32, device=device)
    total = torch.zeros(1, dtype=torch.int32, device=device)
    return EpDispatchRoutingHandle(dest, empty, empty, total, None, n)


def _replay(
    w: wl.Workload, rank: int, op: EpDispatchCombineOp, routing: EpDispatchRoutingHandle, indices: Any, device: Any
) -> None:
    """After a dispatch with other routing, replaying ``routing`` with new values lands them in its
    slots, and combine by it (also rebuilt with from_tensors) returns U * x and U * w."""
    x1, w1, _, other = _inputs(w, rank, 1, device)
    out, out_weights, _, _, total_recv, routing1 = op.dispatch(x1, w1, None, other, return_routing=True)
    op.combine(out[: int(total_recv.item())], out_weights, routing=routing1)

    x2, w2, _, _ = _inputs(w, rank, 2, device)
    out, out_weights, _, out_indices, total_recv = op.dispatch(x2, w2, None, indices, routing=routing)
    total = int(routing.total_recv_token_num.item())
    assert int(total_recv.item()) == total, "replay received another number of rows"
    sources = routing.disp_tok_id_to_src_tok_id_local[:total].cpu()
    for row, pos in enumerate(sources.tolist()):
        src, token = divmod(pos, w.max_tokens)  # v2's encoding: src_rank * M + token
        x_src, w_src, _ = wl.tokens(w, src, 2)
        assert torch.equal(out[row].cpu(), x_src[token]), f"replayed row {row} holds another token"
        assert torch.equal(out_weights[row].cpu(), w_src[token])
        assert torch.equal(out_indices[row].cpu(), wl.routing(w, src, 0)[token])
    count = wl.destinations(w, wl.routing(w, rank, 0)).sum(dim=1, keepdim=True).float()
    want = (x2.cpu().float() * count).to(x2.dtype)
    for handle in (routing, EpDispatchRoutingHandle.from_tensors(routing.tensors(), routing.cur_rank_num_token)):
        combined, combined_weights = op.combine(out[:total], out_weights, None, routing=handle)
        torch.testing.assert_close(combined.cpu(), want, rtol=0, atol=0)
        torch.testing.assert_close(combined_weights.cpu(), w2.cpu() * count, rtol=1e-6, atol=1e-6)
