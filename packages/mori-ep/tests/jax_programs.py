# SPDX-License-Identifier: MIT
"""What each PE process of the mori.jax tests runs: dispatch and combine inside ``jax.jit``,
checked against the same reference as the torch tests (mori.ep.reference, plain torch)."""

from __future__ import annotations

from typing import Any

import ep_programs
import numpy as np
import torch
from ep_programs import make_config

import mori.shmem as shmem
from mori.ep import reference
from mori.ep import workload as wl
from mori.ep.config import EpDispatchCombineKernelType
from mori.shmem.testing import init_pe


def to_jax(tensor: Any) -> Any:
    """The torch tensor's bytes as a jax array of the same dtype (bf16 and fp8 included)."""
    import jax.numpy as jnp

    name = str(tensor.dtype).removeprefix("torch.")
    data = tensor.contiguous().view(torch.uint8).numpy().view(jnp.dtype(name)).reshape(tensor.shape)
    return jnp.asarray(data)


def to_torch(array: Any) -> Any:
    if array is None:
        return None
    host = np.array(array)  # a writable copy
    dtype = getattr(torch, str(host.dtype))
    return torch.from_numpy(host.view(np.uint8).reshape(-1)).view(dtype).reshape(host.shape)


def dispatch_combine(
    rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload, options: dict[str, Any]
) -> list[int]:
    """``iterations`` rounds of one jitted step (dispatch, the source positions, combine of the
    received rows in ``combine_dtype``), each checked against the reference; returns total_recv."""
    init_pe(rank, nranks, uid)
    try:
        import jax
        import jax.numpy as jnp

        import mori.jax

        kernel_type = options.get("kernel_type", 0)
        gpu_per_node = options.get("gpu_per_node", 8)
        quant = options.get("quant_type", "none")
        combine_name = options.get("combine_dtype", "bfloat16")
        config = make_config(w, rank, kernel_type=kernel_type, gpu_per_node=gpu_per_node, quant_type=quant)
        if options.get("cpp_config"):  # MORI's JAX users build mori.cpp's config
            from mori.cpp import EpDispatchCombineConfig as CppConfig

            config = CppConfig(
                rank, w.world_size, w.hidden, config.scale_dim, config.scale_type_size, 4, w.max_tokens,
                w.experts_per_rank, w.topk, 0, 0, 0, True, kernel_type, gpu_per_node, 0, 1, config.quant,
            )  # fmt: skip
        op = mori.jax.EpDispatchCombineOp(config)

        @jax.jit
        def step(x: Any, weights: Any, scales: Any, indices: Any) -> tuple[Any, ...]:
            out, out_indices, total, out_weights, out_scales = op.dispatch(x, weights, scales, indices)
            positions = op.get_dispatch_src_token_pos(total)
            combined, combined_weights = op.combine(out.astype(jnp.dtype(combine_name)), out_weights, indices)
            return out, out_indices, total, out_weights, out_scales, positions, combined, combined_weights

        totals = []
        kernel_name = EpDispatchCombineKernelType(kernel_type).name
        for iteration in range(options.get("iterations", 2)):
            x, weights, scales = wl.tokens(w, rank, iteration)
            indices = wl.routing(w, rank, iteration)
            results = step(to_jax(x), to_jax(weights), None if scales is None else to_jax(scales), to_jax(indices))
            out, out_indices, total, out_weights, out_scales, positions, combined, combined_weights = results
            op.check_error()
            outputs = (to_torch(out), to_torch(out_weights), to_torch(out_scales), to_torch(out_indices),
                       torch.tensor([int(total)], dtype=torch.int32))  # fmt: skip
            got, mismatch = reference.check_dispatch(w, rank, iteration, outputs, to_torch(positions))
            assert mismatch is None, f"PE {rank}, iteration {iteration}: dispatch: {mismatch}"
            combine_dtype = getattr(torch, combine_name)
            tolerance = reference.combine_tolerance(w, kernel_name, combine_dtype, quant, gpu_per_node, iteration)
            mismatch = reference.check_combine(
                w, rank, iteration, to_torch(combined), to_torch(combined_weights), combine_dtype, quant, tolerance,
                w.extra.get("quant_blocks", 0),
            )  # fmt: skip
            assert mismatch is None, f"PE {rank}, iteration {iteration}: combine: {mismatch}"
            totals.append(got)
        mori.jax.shmem_finalize()
        return totals
    except BaseException:
        shmem.shmem_finalize()
        raise


def bad_calls(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> list[str]:
    """Bad shapes and dtypes raise mori.ep's typed errors when traced; an expert id out of range
    fails the running call with jax's runtime error naming EpInputError; the op stays usable."""
    init_pe(rank, nranks, uid)
    try:
        import jax
        import jax.numpy as jnp

        import mori.jax

        op = mori.jax.EpDispatchCombineOp(make_config(w, rank))
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        jx, jw, ji = to_jax(x), to_jax(weights), to_jax(indices)
        dispatch = jax.jit(op.dispatch)
        bad = {
            "indices_int16": lambda: dispatch(jx, jw, None, ji.astype(jnp.int16)),
            "too_many_tokens": lambda: dispatch(
                jnp.zeros((w.max_tokens + 1, w.hidden), jnp.bfloat16),
                None,
                None,
                jnp.zeros((w.max_tokens + 1, w.topk), jnp.int32),
            ),
            "hidden_too_large": lambda: dispatch(jnp.zeros((x.shape[0], w.hidden * 2), jnp.bfloat16), jw, None, ji),
            "weights_shape": lambda: dispatch(jx, jw[:, :1], None, ji),
            "combine_hidden": lambda: jax.jit(op.combine)(jnp.zeros((4, 4), jnp.float32), None, ji),
        }
        messages = []
        for name, call in bad.items():
            try:
                call()
            except Exception as exc:  # the test inspects the type and message
                messages.append(f"{name}|{type(exc).__name__}|{exc}")
            else:
                messages.append(f"{name}|no error|")
        # Every PE sends expert ids past the last expert: each PE's call fails with the kernels' error.
        try:
            jax.block_until_ready(dispatch(jx, jw, None, jnp.full_like(ji, w.total_experts)))
        except Exception as exc:
            messages.append(f"expert_out_of_range|{type(exc).__name__}|{exc}")
        else:
            messages.append("expert_out_of_range|no error|")
        out, out_indices, total, out_weights, _ = jax.block_until_ready(dispatch(jx, jw, None, ji))
        positions = jax.jit(op.get_dispatch_src_token_pos)(total)
        outputs = (to_torch(out), to_torch(out_weights), None, to_torch(out_indices),
                   torch.tensor([int(total)], dtype=torch.int32))  # fmt: skip
        got, mismatch = reference.check_dispatch(w, rank, 0, outputs, to_torch(positions))
        messages.append(f"after|{got}|{mismatch}")
        mori.jax.shmem_finalize()
        return messages
    except BaseException:
        shmem.shmem_finalize()
        raise


def distributed_init(rank: int, nranks: int, uid: bytes, port: int, w: wl.Workload) -> int:
    """MORI's JAX start-up: jax.distributed first, then mori.jax.shmem_init_attr, whose unique id
    travels through jax's coordination service (``uid`` from run_pes is not used); then one jitted
    dispatch checked against the reference. Returns total_recv."""
    del uid
    import jax

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nranks, process_id=rank)
    import mori.jax

    mori.jax.shmem_init_attr(rank, nranks)
    try:
        op = mori.jax.EpDispatchCombineOp(make_config(w, rank))
        x, weights, _ = wl.tokens(w, rank)
        indices = wl.routing(w, rank)
        out, out_indices, total, out_weights, _ = jax.jit(op.dispatch)(
            to_jax(x), to_jax(weights), None, to_jax(indices)
        )
        positions = jax.jit(op.get_dispatch_src_token_pos)(total)
        outputs = (to_torch(out), to_torch(out_weights), None, to_torch(out_indices),
                   torch.tensor([int(total)], dtype=torch.int32))  # fmt: skip
        got, mismatch = reference.check_dispatch(w, rank, 0, outputs, to_torch(positions))
        assert mismatch is None, f"PE {rank}: {mismatch}"
        mori.jax.shmem_finalize()
    except BaseException:
        shmem.shmem_finalize()
        raise
    jax.distributed.shutdown()
    return got


def stall_one_rank(rank: int, nranks: int, uid: bytes, backend: str, w: wl.Workload) -> str:
    """PE 1 creates the op and never dispatches: PE 0's jitted dispatch must fail after
    MORI_EP_TIMEOUT with jax's runtime error naming EpTimeoutError, not hang."""
    with shmem.session(rank, nranks, uid):
        import jax

        import mori.jax

        x, weights, _ = wl.tokens(w, rank)
        args = (to_jax(x), to_jax(weights), None, to_jax(wl.routing(w, rank)))
        op = mori.jax.EpDispatchCombineOp(make_config(w, rank))
        return ep_programs.stalled_dispatch(rank, op, lambda op: jax.block_until_ready(jax.jit(op.dispatch)(*args)))
