# SPDX-License-Identifier: MIT
"""What each PE runs in the client-sequence tests: the calls vLLM's and SGLang's MORI paths make,
in their order, with their arguments, shapes and dtypes (test_clients.py names the files and
revisions), checked against the independent reference of ep_programs / mori.ep.workload.

The clients quantise with AMD's aiter before dispatch; here a plain torch quantiser of the same
layout stands in (quantisation is the client's business, not EP's): fp8 per 1x128 block with fp32
scales, or MX fp8 per 1x32 block with e8m0 scales. The "experts" dequantise the received rows, an
identity expert, so combine must return U * dequant(x) exactly (U = distinct destination PEs).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import mori.shmem as shmem
from mori.ep import workload as wl

FP8_BLOCK = 128  # SGLang's FP8_BLOCK_SIZE, aiter's per_1x128
MX_BLOCK = 32  # SGLang's MXFP4_BLOCK_SIZE, aiter's per_1x32


@dataclasses.dataclass(frozen=True)
class Quant:
    """How a client quantises before dispatch: 'bf16' (none), 'fp8' (1x128, f32 scales) or 'mxfp8'
    (1x32, e8m0 scales), into ``fp8`` (a torch dtype name)."""

    kind: str = "bf16"
    fp8: str = "float8_e4m3fnuz"

    @property
    def block(self) -> int:
        return FP8_BLOCK if self.kind == "fp8" else MX_BLOCK

    def scale_dim(self, hidden: int) -> int:
        return 0 if self.kind == "bf16" else hidden // self.block


def quantize(x: Any, quant: Quant) -> tuple[Any, Any]:
    """(payload [N, H], scales [N, H / block] | None) of bf16 rows x."""
    if quant.kind == "bf16":
        return x, None
    fp8 = getattr(torch, quant.fp8)
    fp8_max = torch.finfo(fp8).max
    n, hidden = x.shape
    blocks = x.float().view(n, hidden // quant.block, quant.block)
    amax = blocks.abs().amax(dim=2).clamp_min(1e-6)
    if quant.kind == "fp8":
        scale = amax / fp8_max
        scales = scale
    else:  # MX: a power-of-two scale, stored as its biased exponent (e8m0)
        exponent = torch.ceil(torch.log2(amax / fp8_max)).clamp(-127, 127).to(torch.int32)
        scale = torch.pow(2.0, exponent.float())
        scales = (exponent + 127).to(torch.uint8).view(torch.float8_e8m0fnu)
    payload = (blocks / scale[:, :, None]).clamp(-fp8_max, fp8_max).to(fp8).view(n, hidden)
    return payload, scales.contiguous()


def dequantize(payload: Any, scales: Any, quant: Quant) -> Any:
    """bf16 rows back from (payload, scales): the identity expert of these tests."""
    if quant.kind == "bf16":
        return payload.to(torch.bfloat16)
    n, hidden = payload.shape
    if quant.kind == "fp8":
        scale = scales.float()
    else:
        scale = torch.pow(2.0, scales.view(torch.uint8).to(torch.int32).float() - 127.0)
    blocks = payload.float().view(n, hidden // quant.block, quant.block) * scale[:, :, None]
    return blocks.view(n, hidden).to(torch.bfloat16)


def sources(w: wl.Workload, quant: Quant, iteration: int) -> dict[int, tuple[Any, Any, Any, Any]]:
    """src PE -> (payload, weights, scales, indices): every PE's inputs, rebuilt from the seed."""
    result = {}
    for src in range(w.world_size):
        x, weights, _ = wl.tokens(w, src, iteration)
        payload, scales = quantize(x, quant)
        result[src] = (payload, weights, scales, wl.routing(w, src, iteration))
    return result


def check_received(
    w: wl.Workload, rank: int, op: Any, outputs: Any, inputs: dict[int, tuple[Any, Any, Any, Any]]
) -> int:
    """Every row this PE must receive arrived once, bytes equal to its source row (payload,
    scales, top-k ids and weights); returns total_recv."""
    out, out_weights, out_scales, out_indices, total_recv = outputs
    total = int(total_recv.reshape(-1)[0].item())
    got = op.get_dispatch_src_token_pos().cpu().tolist()
    want = set()
    for src, (_, _, _, indices) in inputs.items():
        dest = wl.destinations(w, indices)
        want |= {src * w.world_size * w.max_tokens + t for t in torch.nonzero(dest[:, rank]).flatten().tolist()}
    assert len(got) == total and len(set(got)) == total, "a source token arrived twice"
    assert set(got) == want, f"received rows differ from the reference: {sorted(set(got) ^ want)[:8]}"
    out, out_weights, out_indices = out[:total].cpu(), out_weights[:total].cpu(), out_indices[:total].cpu()
    for row, pos in enumerate(got):
        src, token = op.decode_send_flat_idx(pos)
        payload, weights, scales, indices = inputs[src]
        assert out.dtype == payload.dtype
        assert torch.equal(out[row].view(torch.uint8), payload[token].view(torch.uint8)), f"row {row}: payload"
        assert torch.equal(out_indices[row], indices[token]), f"row {row}: top-k ids"
        assert torch.equal(out_weights[row], weights[token]), f"row {row}: weights"
        if scales is not None:
            assert out_scales is not None and out_scales.dtype == scales.dtype
            assert torch.equal(out_scales[row].cpu().view(torch.uint8), scales[token].view(torch.uint8)), "scales"
    return total


def expected_combined(w: wl.Workload, rank: int, inputs: dict[int, tuple[Any, Any, Any, Any]], quant: Quant) -> Any:
    payload, _, scales, indices = inputs[rank]
    count = wl.destinations(w, indices).sum(dim=1, keepdim=True).float()
    return (dequantize(payload, scales, quant).float() * count).to(torch.bfloat16)


def experts(out: Any, out_scales: Any, quant: Quant) -> Any:
    """The identity expert over every received-buffer row, as the clients' experts see the
    buffer (rows past total_recv are whatever the buffer holds; combine does not read them)."""
    rows = out.shape[0]
    if quant.kind == "bf16":
        return out.clone()
    return dequantize(out.cpu(), out_scales[:rows].cpu(), quant).to(out.device)


def _torch_dist(rank: int, nranks: int, port: int) -> Any:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks)
    return dist.new_group(backend="gloo")  # the clients' cpu_group


def _device(backend: str) -> Any:
    if backend == "cuda":
        device = torch.device("cuda", shmem.shmem_cuda_device())
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def vllm(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, port: int, quant: Quant) -> list[int]:
    """MoriAll2AllManager.__init__ / get_handle (single node) then MoriPrepareAndFinalize.prepare
    and finalize, twice (a cached handle serves every forward)."""
    del uid  # vLLM initialises mori.shmem over its torch process group
    cpu_group = _torch_dist(rank, nranks, port)
    try:
        import mori

        torch._C._distributed_c10d._register_process_group("mori", cpu_group)
        mori.shmem.shmem_torch_process_group_init("mori")
        device = _device(backend)
        scale_dim = quant.scale_dim(w.hidden)
        kwargs = dict(
            rank=rank,
            world_size=nranks,
            data_type=getattr(torch, quant.fp8) if quant.kind != "bf16" else torch.bfloat16,
            hidden_dim=w.hidden,
            scale_dim=scale_dim,
            scale_type_size=0 if scale_dim == 0 else torch.float32.itemsize,
            max_token_type_size=torch.bfloat16.itemsize,
            max_num_inp_token_per_rank=w.max_tokens,
            num_experts_per_rank=w.experts_per_rank,
            num_experts_per_token=w.topk,
            warp_num_per_block=16,
            block_num=80,
            kernel_type=mori.ops.EpDispatchCombineKernelType.IntraNode,
            rdma_block_num=0,
            gpu_per_node=min(8, nranks),
        )
        handle = mori.ops.EpDispatchCombineOp(mori.ops.EpDispatchCombineConfig(**kwargs))
        totals = []
        for iteration in range(2):
            inputs = sources(w, quant, iteration)
            payload, topk_weights, scales, topk_ids = inputs[rank]
            # prepare()
            dispatched = handle.dispatch(
                input=payload.to(device),
                weights=topk_weights.to(device),
                scales=None if scales is None else scales.to(device),
                indices=topk_ids.to(device),
            )
            dispatch_output, _weights, dispatch_scales, _indices, _dispatch_recv_num_token = dispatched
            totals.append(check_received(w, rank, handle, dispatched, inputs))
            fused_expert_output = experts(dispatch_output, dispatch_scales, quant)
            # finalize()
            output = torch.empty(payload.shape[0], w.hidden, dtype=torch.bfloat16, device=device)
            combined_output, _combined_weights = handle.combine(
                input=fused_expert_output, weights=topk_weights.to(device), indices=topk_ids.to(device)
            )
            output.copy_(combined_output[: output.size(0)], non_blocking=True)
            handle.check_error()
            want = expected_combined(w, rank, inputs, quant)
            torch.testing.assert_close(output.cpu(), want, rtol=0, atol=0)
            shmem.shmem_barrier_all()  # the next dispatch writes into peers' receive buffers
        handle.close()
        return totals
    finally:
        shmem.shmem_finalize()


def _sglang_op(rank: int, nranks: int, w: wl.Workload, quant: Quant, low_latency: bool) -> Any:
    """init_mori_op: the group registration, the mode's launch config and the config kwargs."""
    import mori

    gpu_per_node = 8 if nranks >= 8 else nranks
    hidden_dim, scale_dim, scale_type_size = w.hidden, 1, torch.float32.itemsize
    data_type: Any = getattr(torch, quant.fp8)
    if quant.kind == "bf16":
        data_type, scale_dim = torch.bfloat16, 0
    elif quant.kind == "fp8":
        scale_dim = w.hidden // FP8_BLOCK
    else:
        scale_dim, scale_type_size = w.hidden // MX_BLOCK, torch.float8_e8m0fnu.itemsize
    if low_latency:
        kernel_type, warp_num_per_block, block_num, rdma_block_num = (
            mori.ops.EpDispatchCombineKernelType.AsyncLL,
            8,
            64,
            32,
        )
    else:
        kernel_type, warp_num_per_block, block_num, rdma_block_num = (
            mori.ops.EpDispatchCombineKernelType.IntraNode,
            16,
            80,
            0,
        )
    common_kwargs = dict(
        data_type=data_type,
        rank=rank,
        world_size=nranks,
        hidden_dim=hidden_dim,
        scale_dim=scale_dim,
        scale_type_size=scale_type_size,
        max_token_type_size=torch.bfloat16.itemsize,
        max_num_inp_token_per_rank=w.max_tokens,
        num_experts_per_rank=w.experts_per_rank,
        num_experts_per_token=w.topk,
        warp_num_per_block=warp_num_per_block,
        block_num=block_num,
        max_total_recv_tokens=0,
        use_external_inp_buf=True,
        kernel_type=kernel_type,
        gpu_per_node=gpu_per_node,
        rdma_block_num=rdma_block_num,
        num_qp_per_pe=2,
        quant_type="none",
    )
    valid_kwargs = {f.name for f in dataclasses.fields(mori.ops.EpDispatchCombineConfig)}
    assert set(common_kwargs) <= valid_kwargs, f"SGLang would drop {set(common_kwargs) - valid_kwargs}"
    return mori.ops.EpDispatchCombineOp(mori.ops.EpDispatchCombineConfig(**common_kwargs))


def sglang(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, port: int, quant: Quant, low_latency: bool
) -> dict[str, Any]:
    """MoriEPDispatcher: init_mori_op, then dispatch_a/dispatch_b and combine_a/combine_b of the
    normal (IntraNode) or low-latency (AsyncLL) implementation, with the expert-distribution
    recorder on (call_local_expert_count=True, then op.local_expert_count), twice."""
    del uid
    cpu_group = _torch_dist(rank, nranks, port)
    try:
        import mori
        from mori._compat import noted_settings

        try:
            torch._C._distributed_c10d._register_process_group("mori", cpu_group)
        except Exception as exc:
            if "already registered" not in str(exc):
                raise
        else:
            mori.shmem.shmem_torch_process_group_init("mori")
        device = _device(backend)
        op = _sglang_op(rank, nranks, w, quant, low_latency)
        totals = []
        for iteration in range(2):
            inputs = sources(w, quant, iteration)
            hidden_states, topk_weights, scale, topk_ids = (None if t is None else t.to(device) for t in inputs[rank])
            num_tokens = hidden_states.shape[0]
            record = True
            if low_latency:
                assert op.config.kernel_type is mori.ops.EpDispatchCombineKernelType.AsyncLL
                dispatched = op.dispatch_send(hidden_states, topk_weights, scale, topk_ids)  # dispatch_a
                op.dispatch_recv(call_local_expert_count=record)  # dispatch_b
            else:
                dispatched = op.dispatch(hidden_states, topk_weights, scale, topk_ids, call_local_expert_count=record)
            local_expert_count = op.local_expert_count  # the recorder's hook reads it
            packed_recv_hidden, _recv_topk_weights, recv_scales, recv_topk_ids, _packed_recv_count = dispatched
            op.check_error()
            totals.append(check_received(w, rank, op, dispatched, inputs))
            received = recv_topk_ids[: totals[-1]].cpu()
            local = received - rank * w.experts_per_rank
            counted = torch.bincount(local[(local >= 0) & (local < w.experts_per_rank)], minlength=w.experts_per_rank)
            assert torch.equal(local_expert_count.cpu(), counted.to(torch.int32)), "local_expert_count"
            expert_output = experts(packed_recv_hidden, recv_scales, quant)
            if low_latency:
                combined = op.combine_send(expert_output, None, topk_ids)  # combine_a
                op.combine_recv()  # combine_b
                hidden = combined[0]
            else:
                hidden = op.combine(expert_output, None, topk_ids)[0]
            op.check_error()
            torch.testing.assert_close(
                hidden[:num_tokens].cpu(), expected_combined(w, rank, inputs, quant), rtol=0, atol=0
            )
            shmem.shmem_barrier_all()
        op.close()
        return {"totals": totals, "noted": sorted(noted_settings())}
    finally:
        shmem.shmem_finalize()
