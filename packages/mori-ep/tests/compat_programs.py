# SPDX-License-Identifier: MIT
"""What each PE runs in test_config_check.py and test_fp8_formats.py (module level for run_pes)."""

from __future__ import annotations

from typing import Any

import ep_programs
import torch

import mori.shmem as shmem
from mori.ep import reference
from mori.ep import workload as wl


def mismatched_configs(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, odd_pe: int, field: str, value: Any
) -> str:
    """PE ``odd_pe`` passes ``field=value``, the others the workload's config: returns the error
    of creating the op. Then every PE creates an op with the same config, which must dispatch and
    combine correctly (the failed creation left nothing behind)."""
    with shmem.session(rank, nranks, uid):
        device = ep_programs._device(backend)
        from mori.ep import EpDispatchCombineConfig, EpDispatchCombineOp

        fields = dict(
            data_type=torch.bfloat16, rank=rank, world_size=w.world_size, hidden_dim=w.hidden, scale_dim=0,
            scale_type_size=0, max_token_type_size=4, max_num_inp_token_per_rank=w.max_tokens,
            num_experts_per_rank=w.experts_per_rank, num_experts_per_token=w.topk,
        )  # fmt: skip
        if rank == odd_pe:
            fields[field] = value
        outcome = ep_programs.outcome(lambda: EpDispatchCombineOp(EpDispatchCombineConfig(**fields)))
        op = ep_programs.make_op(w, rank)
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        outputs = op.dispatch(x.to(device), weights.to(device), None, indices.to(device))
        total = ep_programs.check_dispatch(w, rank, 0, op, outputs)
        combined, _ = op.combine(outputs[0][:total].clone(), None, indices.to(device))
        want, _ = reference.expected_combine(w, rank, 0, torch.bfloat16, "none")
        torch.testing.assert_close(combined[: x.shape[0]].cpu(), want, rtol=0, atol=0)
        op.close()
        return outcome


def fp8_rows(hidden: int, dtype: Any, rank: int, iteration: int) -> Any:
    """Rows of ``dtype`` whose first row holds every byte pattern (NaN, +-max, subnormals, -0),
    then random bytes: combine must decode each as torch does."""
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    gen = torch.Generator().manual_seed(1000 * rank + iteration)
    rest = torch.randint(0, 256, (3, hidden), generator=gen, dtype=torch.int32).to(torch.uint8)
    first = every.repeat(hidden // 256 + 1)[:hidden]
    return torch.cat([first[None], rest]).contiguous().view(dtype)


def fp8_combine(rank: int, nranks: int, uid: bytes, backend: str, dtype_name: str, topk: int) -> list[float]:
    """Dispatch rows of an fp8 dtype (bytes exact), combine them as that dtype: combine must equal
    torch's own arithmetic, U * decode(x) re-encoded (saturating to the format's max), U the
    distinct destination PEs; the weighted standard-MoE path decodes them as torch does too."""
    with shmem.session(rank, nranks, uid):
        device = ep_programs._device(backend)
        dtype = getattr(torch, dtype_name)
        hidden = 256
        w = wl.Workload(world_size=nranks, max_tokens=4, hidden=hidden, topk=topk, experts_per_rank=1, tokens=4)
        op = ep_programs.make_op(ep_programs.replace(w, dtype=dtype_name), rank)
        # Token t goes to PEs t, t+1, ... (mod nranks), topk of them: U = min(topk, nranks).
        indices = torch.tensor([[(t + k) % nranks for k in range(topk)] for t in range(4)], dtype=torch.int32)
        maxima = []
        for iteration in range(2):
            x = fp8_rows(hidden, dtype, rank, iteration)
            outputs = op.dispatch(x.to(device), None, None, indices.to(device))
            out, _, _, _, total_recv = outputs
            total = int(total_recv.item())
            positions = op.get_dispatch_src_token_pos().cpu().tolist()
            for row, pos in enumerate(positions):
                src, token = op.decode_send_flat_idx(pos)
                want = fp8_rows(hidden, dtype, src, iteration)[token]
                assert torch.equal(out[row].cpu().view(torch.uint8), want.view(torch.uint8)), "dispatch moved bytes"
            combined, _ = op.combine(out[:total].clone(), None, indices.to(device))
            unique = min(topk, nranks)
            limit = torch.finfo(dtype).max
            want = (x.float() * unique).clamp(-limit, limit).to(dtype)
            got = combined[: x.shape[0]].cpu()
            torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=0, equal_nan=True)
            maxima.append(float(got.float().nan_to_num(0.0).abs().max()))
            shmem.shmem_barrier_all()
        op.close()
        return maxima


def free_local_expert_count(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> list[int]:
    """mori.ops.launch_local_expert_count over dispatch's outputs, as MORI's free function is
    called (a C++ config, raw pointers): it must equal a bincount of the received ids."""
    with shmem.session(rank, nranks, uid):
        import mori.cpp
        import mori.ops

        device = ep_programs._device(backend)
        op = ep_programs.make_op(w, rank)
        x, weights, _ = wl.tokens(w, rank)
        outputs = op.dispatch(x.to(device), weights.to(device), None, wl.routing(w, rank).to(device))
        total = ep_programs.check_dispatch(w, rank, 0, op, outputs)
        out_indices, total_recv = outputs[3], outputs[4]
        cpp_config = mori.cpp.EpDispatchCombineConfig(
            rank=rank,
            world_size=nranks,
            hidden_dim=w.hidden,
            max_token_type_size=4,
            max_num_inp_token_per_rank=w.max_tokens,
            num_experts_per_rank=w.experts_per_rank,
            num_experts_per_token=w.topk,
        )
        counts = torch.full((w.experts_per_rank,), 12345, dtype=torch.int32, device=device)  # must be zeroed
        mori.ops.launch_local_expert_count(cpp_config, out_indices.data_ptr(), total_recv.data_ptr(), counts.data_ptr())
        local = out_indices[:total].cpu() - rank * w.experts_per_rank
        want = torch.bincount(local[(local >= 0) & (local < w.experts_per_rank)], minlength=w.experts_per_rank)
        assert torch.equal(counts.cpu(), want.to(torch.int32)), f"{counts.tolist()} != {want.tolist()}"
        # MORI's geometry arguments: accepted, the same count, and logged once as having no effect.
        from mori._compat import noted_settings

        counts.fill_(-7)
        mori.ops.launch_local_expert_count(
            cpp_config, out_indices.data_ptr(), total_recv.data_ptr(), counts.data_ptr(), block_num=64, warp_per_block=4
        )
        assert torch.equal(counts.cpu(), want.to(torch.int32))
        assert "launch_local_expert_count(block_num=)" in noted_settings()
        op.close()
        return counts.tolist()


def profiler_offsets(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> int:
    """A profiled dispatch + combine: op.get_debug_time_offset() must be each warp slot's event
    count as the buffer's warp headers hold it (parsed with mori.viz's dtypes), and mori.cpp's
    (ptr, size) accessors must address the same memory. Without the profiler both raise."""
    with shmem.session(rank, nranks, uid):
        import numpy as np

        import mori.cpp
        import mori.viz.layout as layout
        from mori.ep.errors import EpConfigError

        device = ep_programs._device(backend)
        op = ep_programs.make_op(w, rank)
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank).to(device)
        outputs = op.dispatch(x.to(device), weights.to(device), None, indices)
        total = ep_programs.check_dispatch(w, rank, 0, op, outputs)
        op.combine(outputs[0][:total].clone(), None, indices)
        op.check_error()
        from mori.ep.settings import setting

        if backend != "cuda" or not setting("MORI_ENABLE_PROFILER"):
            for call in (op.get_debug_time_offset, lambda: mori.cpp.get_debug_time_offset(op._handle)):
                try:
                    call()
                except EpConfigError:
                    continue
                raise AssertionError("the trace accessors must raise without the profiler")
            op.close()
            return 0
        counts = op.get_debug_time_offset().cpu()
        buffer = op.get_debug_time_buf().cpu().numpy()
        warps = counts.numel()
        headers = buffer[layout.warp_headers_offset() : layout.events_offset(warps)].view(layout.WARP_HEADER_DTYPE)
        assert np.array_equal(counts.numpy(), headers["count"].astype(np.int32)), "offsets differ from the headers"
        assert int(counts.sum()) > 0, "a profiled call records events"
        ptr, size = mori.cpp.get_debug_time_offset(op._handle)
        assert ptr == op.get_debug_time_buf().data_ptr() + layout.warp_headers_offset() and size == 4 * warps
        ptr, size = mori.cpp.get_debug_time_buf(op)
        assert ptr == op.get_debug_time_buf().data_ptr() and size * 8 == buffer.size
        op.close()
        return int(counts.sum())
