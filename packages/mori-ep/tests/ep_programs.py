# SPDX-License-Identifier: MIT
"""What each PE process of the EP tests runs (module level, so run_pes can pickle it).

The reference is independent of the op (mori.ep.reference, which mori-ep-bench's verification
uses too): every PE rebuilds every other PE's inputs from the workload's seed (mori.ep.workload)
and derives, with plain torch, which rows it must receive and what combine must return (an
identity expert: U * x and U * w, U = distinct destination PEs).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

import mori.shmem as shmem
from mori.ep import reference
from mori.ep import workload as wl
from mori.ep.config import EpDispatchCombineKernelType
from mori.ep.errors import EpInputError


def _device(backend: str) -> torch.device:
    if backend == "cuda":
        device = torch.device("cuda", shmem.shmem_cuda_device())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def make_config(w: wl.Workload, rank: int, **fields: Any) -> Any:
    """The workload's EpDispatchCombineConfig for ``rank`` (the torch and the jax tests share it)."""
    from mori.ep import EpDispatchCombineConfig

    scale_size = torch.empty(0, dtype=getattr(torch, w.scale_dtype)).element_size() if w.scale_dim else 0
    return EpDispatchCombineConfig(
        data_type=getattr(torch, w.dtype),
        rank=rank,
        world_size=w.world_size,
        hidden_dim=w.hidden,
        scale_dim=w.scale_dim,
        scale_type_size=scale_size,
        max_token_type_size=4,
        max_num_inp_token_per_rank=w.max_tokens,
        num_experts_per_rank=w.experts_per_rank,
        num_experts_per_token=w.topk,
        **fields,
    )


def make_op(w: wl.Workload, rank: int, **fields: Any) -> Any:
    from mori.ep import EpDispatchCombineOp

    return EpDispatchCombineOp(make_config(w, rank, **fields))


def check_dispatch(w: wl.Workload, rank: int, iteration: int, op: Any, outputs: Any) -> int:
    """Dispatch's outputs against the package's reference (mori.ep.reference); returns total_recv."""
    total, mismatch = reference.check_dispatch(w, rank, iteration, outputs[:5], op.get_dispatch_src_token_pos())
    assert mismatch is None, f"PE {rank}, iteration {iteration}: {mismatch}"
    return total


def dispatch_combine(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, options: dict[str, Any]
) -> list[int]:
    """Dispatch then combine ``iterations`` times (state must reset itself between calls), checking
    both against the reference; returns total_recv per iteration."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        combine_dtype = getattr(torch, options.get("combine_dtype", "bfloat16"))
        quant = options.get("quant_type", "none")
        zero_copy = options.get("zero_copy", False)
        kernel_type = options.get("kernel_type", 0)
        op = make_op(
            w,
            rank,
            kernel_type=kernel_type,
            gpu_per_node=options.get("gpu_per_node", 8),
            quant_type=quant,
            use_external_inp_buf=not zero_copy,
            max_total_recv_tokens=options.get("max_total_recv_tokens", 0),
        )
        split = kernel_type == 4  # AsyncLL: the send and receive halves are separate calls
        quant_blocks = w.extra.get("quant_blocks", 0)
        kernel_name = EpDispatchCombineKernelType(kernel_type).name
        totals = []
        for iteration in range(options.get("iterations", 2)):
            tolerance = reference.combine_tolerance(
                w, kernel_name, combine_dtype, quant, options.get("gpu_per_node", 8), iteration
            )
            x, weights, scales = wl.tokens(w, rank, iteration)
            indices = wl.routing(w, rank, iteration)
            outputs = (op.dispatch_send if split else op.dispatch)(
                x.to(device),
                weights.to(device),
                None if scales is None else scales.to(device),
                indices.to(device),
                call_local_expert_count=True,
            )
            if split:
                op.dispatch_recv()
            op.check_error()  # a peer's timeout first: it would show as wrong rows below
            total = check_dispatch(w, rank, iteration, op, outputs)
            out, out_weights, out_scales, out_indices, _ = outputs
            local = out_indices[:total].cpu() - rank * w.experts_per_rank
            counted = torch.bincount(local[(local >= 0) & (local < w.experts_per_rank)], minlength=w.experts_per_rank)
            assert torch.equal(op.local_expert_count.cpu(), counted.to(torch.int32)), "local_expert_count"
            expert_out = reference.identity_expert(
                w, out[:total], None if out_scales is None else out_scales[:total], combine_dtype
            )
            if zero_copy:
                op.get_registered_combine_input_buffer(combine_dtype, expert_out.shape[1])[:total].copy_(expert_out)
            combine = op.combine_send if split else op.combine
            combined, combined_weights = combine(expert_out, out_weights[:total].clone(), indices.to(device))
            if split:
                op.combine_recv()
            op.check_error()
            mismatch = reference.check_combine(
                w, rank, iteration, combined, combined_weights, combine_dtype, quant, tolerance, quant_blocks
            )
            assert mismatch is None, f"PE {rank}, iteration {iteration}: {mismatch}"
            if options.get("combine_twice"):  # refused before it sends; the next iteration still works
                try:
                    combine(expert_out, out_weights[:total].clone(), indices.to(device))
                except EpInputError as exc:
                    assert "combine was called twice" in str(exc), exc
                else:
                    raise AssertionError(f"PE {rank}: a second combine without a dispatch was not refused")
            totals.append(total)
        op.close()
        return totals


def call_and_report(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, calls: list[str]) -> str:
    """Runs one bad call per entry of ``calls`` (each must raise before launching anything) and
    returns the messages, then a good dispatch/combine to show the op is still usable."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        op = make_op(w, rank)
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        x, weights, indices = x.to(device), weights.to(device), indices.to(device)
        bad = {
            "expert_out_of_range": lambda: op.dispatch(x, weights, None, torch.full_like(indices, w.total_experts)),
            "expert_below_minus_one": lambda: op.dispatch(x, weights, None, torch.full_like(indices, -2)),
            "indices_int64": lambda: op.dispatch(x, weights, None, indices.long()),
            "too_many_tokens": lambda: op.dispatch(
                x.new_zeros(w.max_tokens + 1, w.hidden), None, None, indices.new_zeros(w.max_tokens + 1, w.topk)
            ),
            "wrong_dtype": lambda: op.dispatch(x.to(torch.int16), weights, None, indices),
            "wrong_shape": lambda: op.dispatch(x[:, None], weights, None, indices),
            "hidden_too_large": lambda: op.dispatch(x.new_zeros(x.shape[0], w.hidden * 2), weights, None, indices),
            "weights_shape": lambda: op.dispatch(x, weights[:, :1].contiguous(), None, indices),
            "wrong_device": lambda: op.dispatch(x.to("meta"), weights, None, indices),
            "combine_before_dispatch": lambda: op.combine(x, None, indices),
            "not_contiguous": lambda: op.dispatch(x.t().contiguous().t(), weights, None, indices),
            "trace_without_profiler": op.get_debug_time_buf,
        }
        messages = []
        for name in calls:
            try:
                bad[name]()
            except Exception as exc:  # the test inspects the type and message
                messages.append(f"{name}|{type(exc).__name__}|{exc}")
            else:
                messages.append(f"{name}|no error|")
        outputs = op.dispatch(x, weights, None, indices)
        check_dispatch(w, rank, 0, op, outputs)
        op.close()
        return "\n".join(messages)


def routed_sources(w: wl.Workload, sources: dict[int, tuple[Any, torch.Tensor]], expert: int) -> list[int]:
    """The reference of which tokens reach ``expert``: every (source PE, token) whose routing row
    names it, encoded as the kernel's src_info encodes them, sorted. ``sources`` maps each source PE
    to (its tokens, its routing)."""
    return sorted(
        src * w.world_size * w.max_tokens + token
        for src, (_, routing) in sources.items()
        for token in torch.nonzero((routing == expert).any(dim=1)).flatten().tolist()
    )


def outcome(call: Callable[[], object]) -> str:
    """``"no error"``, or what ``call`` raised as ``"Type: message"`` (the tests inspect both)."""
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def stalled_dispatch(rank: int, op: Any, dispatch: Callable[[Any], object]) -> str:
    """Rank 1 holds ``op`` and never dispatches; rank 0 runs ``dispatch(op)``, which must fail with a
    timeout: returns the error's type, how long it took and its message (or "no error")."""
    if rank == 1:
        time.sleep(8)
        return "stalled"
    started = time.monotonic()
    try:
        dispatch(op)
    except Exception as exc:
        return f"{type(exc).__name__} after {time.monotonic() - started:.1f}s: {exc}"
    return "no error"


def stall_one_rank(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any] | None = None
) -> str:
    """Rank 1 makes the op and then never dispatches: rank 0's dispatch must fail with a timeout."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank).to(device)

        def dispatch(op: Any) -> None:
            op.dispatch(x.to(device), weights.to(device), None, indices)
            op.check_error()

        return stalled_dispatch(rank, make_op(w, rank, **(fields or {})), dispatch)


def overflow(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, cap: int) -> str:
    """Every token goes to PE 0, whose receive buffer holds fewer rows than arrive."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        op = make_op(w, rank, max_total_recv_tokens=cap)
        x, weights, _ = wl.tokens(w, rank)
        indices = torch.full((x.shape[0], w.topk), -1, dtype=torch.int32)
        indices[:, 0] = 0

        def dispatch_and_check() -> None:
            op.dispatch(x.to(device), weights.to(device), None, indices.to(device))
            op.check_error()

        return outcome(dispatch_and_check)


def replace(w: wl.Workload, **changes: Any) -> wl.Workload:
    return dataclasses.replace(w, **changes)


def spread(w: wl.Workload, world_size: int, **changes: Any) -> wl.Workload:
    """``w`` on ``world_size`` PEs with 16 // world_size + 1 experts each: every PE owns experts
    and the routing reaches every PE, at each world size the tests use."""
    return replace(w, world_size=world_size, experts_per_rank=16 // world_size + 1, **changes)


#: fp8 tokens with four fp32 scales per row, top-8 routing.
FP8_WITH_SCALES: dict[str, Any] = {"dtype": "float8_e4m3fn", "scale_dim": 4, "scale_dtype": "float32", "topk": 8}


def assert_moves_rows(totals: Any) -> None:
    """``totals`` (total_recv per PE, per iteration) shows that some PE received rows: a test
    whose workload moves nothing would pass whatever the op did."""
    assert any(t > 0 for per_rank in totals for t in per_rank), "the workload must move rows"


def graph_replay(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, replays: int) -> list[int]:
    """Dispatch + combine captured once in a CUDA graph, replayed with new tokens and routing copied
    into the captured input tensors each time: every replay must match the reference of its data."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        op = make_op(w, rank)
        x, weights, _ = wl.tokens(w, rank, 0)
        indices = wl.routing(w, rank, 0)
        x, weights, indices = x.to(device), weights.to(device), indices.to(device)
        recv = op.max_num_tokens_to_recv()
        expert_in = torch.zeros(recv, w.hidden, dtype=torch.bfloat16, device=device)
        expert_weights = torch.zeros(recv, w.topk, dtype=torch.float32, device=device)

        def step() -> tuple[Any, Any, Any]:
            dispatched = op.dispatch(x, weights, None, indices)
            # The identity expert, without a host read of total_recv: every row up to capacity.
            expert_in.copy_(dispatched[0])
            expert_weights.copy_(dispatched[1])
            combined, combined_weights = op.combine(expert_in, expert_weights, indices)
            return dispatched, combined, combined_weights

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()  # loads the kernels outside capture
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        shmem.shmem_barrier_all()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        totals = []
        for iteration in range(1, replays + 1):
            new_x, new_weights, _ = wl.tokens(w, rank, iteration)
            x.copy_(new_x)
            weights.copy_(new_weights)
            indices.copy_(wl.routing(w, rank, iteration))
            torch.cuda.synchronize()
            shmem.shmem_barrier_all()
            graph.replay()
            torch.cuda.synchronize()
            op.check_error()
            dispatched, combined, combined_weights = captured
            totals.append(check_dispatch(w, rank, iteration, op, dispatched))
            want, want_weights = reference.expected_combine(w, rank, iteration, torch.bfloat16, "none")
            torch.testing.assert_close(combined[: x.shape[0]].cpu(), want, rtol=0, atol=0)
            torch.testing.assert_close(combined_weights[: x.shape[0]].cpu(), want_weights, rtol=1e-6, atol=1e-6)
            shmem.shmem_barrier_all()
        op.close()
        return totals


def make_op_error(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any] | None = None
) -> str:
    """The error of creating an op (an op whose buffers exceed the heap, a kernel type the PEs'
    topology does not allow, ...), or "no error"."""
    with shmem.session(rank, nranks, uid):
        _device(backend)
        return outcome(lambda: make_op(w, rank, **(fields or {})))


def routing_replay(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any] | None = None
) -> int:
    """A dispatch returns its routing handle; after a dispatch with other routing, replaying the
    handle with new token values lands them in the handle's slots, and combine by the handle sums
    them for the handle's routing. ``fields``: config fields (an inter-node kernel type; AsyncLL's
    halves are called separately)."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        fields = fields or {}
        op = make_op(w, rank, **fields)
        kernel_type = int(fields.get("kernel_type", 0))
        split = kernel_type == 4  # AsyncLL: the receive halves are calls of their own

        def dispatch(*args: Any, **kwargs: Any) -> Any:
            outputs = op.dispatch(*args, **kwargs)
            if split:
                op.dispatch_recv()
            return outputs

        def combine(*args: Any, **kwargs: Any) -> Any:
            outputs = op.combine(*args, **kwargs)
            if split:
                op.combine_recv()
            return outputs

        indices = wl.routing(w, rank, 0).to(device)
        x0, w0, _ = wl.tokens(w, rank, 0)
        *first, handle = dispatch(x0.to(device), w0.to(device), None, indices, return_routing=True)
        total = check_dispatch(w, rank, 0, op, first)
        positions = op.get_dispatch_src_token_pos().clone()
        assert torch.equal(handle.disp_tok_id_to_src_tok_id_local[:total].cpu(), positions.cpu())
        assert int(handle.total_recv_token_num.item()) == total
        # A peer's next dispatch writes into this PE's receive buffers: read them before it starts.
        shmem.shmem_barrier_all()

        other = wl.routing(w, rank, 1).to(device)  # a dispatch with other routing in between
        x1, w1, _ = wl.tokens(w, rank, 1)
        outputs = dispatch(x1.to(device), w1.to(device), None, other)
        combine(outputs[0][: int(outputs[4].item())].to(torch.bfloat16), None, other)
        op.check_error()

        # Replay: iteration 2's token values, iteration 0's routing and slots.
        x2, w2, _ = wl.tokens(w, rank, 2)
        out, out_weights, _, out_indices, total_recv = dispatch(
            x2.to(device), w2.to(device), None, indices, routing=handle
        )
        op.check_error()
        assert int(total_recv.item()) == total
        assert torch.equal(op.get_dispatch_src_token_pos().cpu(), positions.cpu()), "replay moved rows"
        replayed = replace(w, seed=w.seed)  # same routing as iteration 0, values of iteration 2
        for row, pos in enumerate(positions.tolist()):
            src, token = op.decode_send_flat_idx(pos)
            x_src, w_src, _ = wl.tokens(replayed, src, 2)
            assert torch.equal(out[row].cpu().view(torch.uint8), x_src[token].view(torch.uint8)), f"row {row}"
            assert torch.equal(out_weights[row].cpu(), w_src[token])
            assert torch.equal(out_indices[row].cpu(), wl.routing(w, src, 0)[token])
        expert_out, expert_weights = out[:total].to(torch.bfloat16).clone(), out_weights[:total].clone()
        shmem.shmem_barrier_all()  # every PE read its rows: the next dispatch may overwrite them

        # Another dispatch in between again, then combine by the handle (a backward pass's order).
        # (Not a combine in between: on the inter-node types two combines in a row are unsafe, with
        # or without handles, as ep.md says.)
        dispatch(x1.to(device), w1.to(device), None, other)
        combined, combined_weights = combine(expert_out, expert_weights, indices, routing=handle)
        op.check_error()
        count = wl.destinations(w, wl.routing(w, rank, 0)).sum(dim=1, keepdim=True).float()
        n = x2.shape[0]
        name = EpDispatchCombineKernelType(kernel_type).name
        tolerance = reference.combine_tolerance(w, name, torch.bfloat16, "none", int(fields.get("gpu_per_node", 8)))
        want = (x2.to(torch.bfloat16).float() * count).to(torch.bfloat16)
        torch.testing.assert_close(combined[:n].cpu(), want, rtol=tolerance.rtol, atol=tolerance.atol)
        torch.testing.assert_close(combined_weights[:n].cpu(), w2 * count, rtol=1e-6, atol=1e-6)
        op.close()
        return total


def routing_misuse(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any]
) -> dict[str, str]:
    """Handles that do not belong to the call: another op's (stale), one of another token count,
    one without the inter-node maps, and any after its op closed. Each raises before launching
    anything; the other op still dispatches and combines by its own handle afterwards."""
    from mori.ep import EpDispatchRoutingHandle

    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        first, second = make_op(w, rank, **fields), make_op(w, rank, **fields)
        split = int(fields.get("kernel_type", 0)) == 4
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        x, weights, indices = x.to(device), weights.to(device), indices.to(device)
        *_, handle = first.dispatch(x, weights, None, indices, return_routing=True)
        if split:
            first.dispatch_recv()
        n = int(x.shape[0])
        dest, _, _, total, src = handle.tensors()
        empty = torch.empty(0, dtype=torch.int32, device=device)
        bare = EpDispatchRoutingHandle.from_tensors((dest, empty, empty, total, src), n)  # intra-node's shape
        calls = {
            "stale": lambda: second.dispatch(x, weights, None, indices, routing=handle),
            "wrong_tokens": lambda: first.dispatch(
                x, weights, None, indices, routing=EpDispatchRoutingHandle.from_tensors(handle.tensors(), n + 1)
            ),
            "no_inter_node_maps": lambda: first.dispatch(x, weights, None, indices, routing=bare),
        }
        messages = {name: outcome(call) for name, call in calls.items()}
        first.close()
        messages["closed"] = outcome(lambda: first.dispatch(x, weights, None, indices, routing=handle))
        messages["closed_op_handle"] = outcome(lambda: second.combine(x, None, indices, routing=handle))
        outputs = second.dispatch(x, weights, None, indices, return_routing=True)
        if split:
            second.dispatch_recv()
        total_recv = check_dispatch(w, rank, 0, second, outputs[:5])
        second.combine(outputs[0][:total_recv].to(torch.bfloat16), None, indices, routing=outputs[5])
        if split:
            second.combine_recv()
        second.check_error()
        second.close()
        return messages


def standard_moe(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, fields: dict[str, Any] | None = None
) -> list[int]:
    """dispatch_standard_moe groups received rows per local expert (checked row by row against the
    sources); experts scale their rows by (1 + global expert id); combine_standard_moe must return
    sum_k w_k * (1 + e_k) * x over every valid pick of the token."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        op = make_op(w, rank, **(fields or {}))
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        packed, count, src_info, layout_range = op.dispatch_standard_moe(
            x.to(device), weights.to(device), None, indices.to(device)
        )
        op.check_error()  # a peer's timeout first: it would show as wrong rows below
        assert layout_range.numel() == 0
        count, src_info, packed_cpu = count.cpu(), src_info.cpu(), packed.cpu()
        sources = {src: (wl.tokens(w, src)[0], wl.routing(w, src)) for src in range(w.world_size)}
        for local in range(w.experts_per_rank):
            expert = rank * w.experts_per_rank + local
            want = routed_sources(w, sources, expert)
            n = int(count[local])
            got = src_info[local, :n].tolist()
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            why = f"expert {expert}: {len(got)} of {len(want)} rows; missing {missing}, extra {extra}"
            assert sorted(got) == want, why
            for j, pos in enumerate(got):
                src, token = op.decode_send_flat_idx(pos)
                assert torch.equal(packed_cpu[local, j].view(torch.uint8), sources[src][0][token].view(torch.uint8))
        scale = 1.0 + (rank * w.experts_per_rank + torch.arange(w.experts_per_rank, device=device)).float()
        y = (packed.float() * scale[:, None, None]).to(torch.bfloat16)
        out, _ = op.combine_standard_moe(y, None, indices.to(device))
        op.check_error()
        factor = torch.where(indices >= 0, weights * (1.0 + indices.float()), torch.zeros_like(weights)).sum(dim=1)
        want_out = (x.float() * factor[:, None]).to(torch.bfloat16)
        torch.testing.assert_close(out[: x.shape[0]].cpu(), want_out, rtol=2e-2, atol=2e-2)
        op.close()
        return count.tolist()


def split_misuse(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> list[str]:
    """AsyncLL's halves out of order: each raises before launching anything, and the op still
    works afterwards."""
    with shmem.session(rank, nranks, uid):
        device = _device(backend)
        op = make_op(w, rank, kernel_type=4, gpu_per_node=1)
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        x, weights, indices = x.to(device), weights.to(device), indices.to(device)
        messages = [outcome(op.dispatch_recv), outcome(op.combine_recv)]
        outputs = op.dispatch_send(x, weights, None, indices)
        messages += [
            outcome(lambda: op.dispatch_send(x, weights, None, indices)),
            outcome(lambda: op.combine(x, weights, indices)),
        ]
        op.dispatch_recv()
        check_dispatch(w, rank, 0, op, outputs)
        op.close()
        return messages
