# SPDX-License-Identifier: MIT
"""The call sequences of MORI's clients, made against mori.ep in 2 and 4 PE processes and checked
against the independent reference (client_programs.py says how).

- vLLM, MoriAll2AllManager in vllm/distributed/device_communicators/all2all.py (revision
  001430048e8175c8dff1bc57e1a81a1fa75460f9) and MoriPrepareAndFinalize in
  vllm/model_executor/layers/fused_moe/mori_prepare_finalize.py (revision
  1dbff2c76f919df9fec6472905e6567035d78c38): ``import mori``; the "mori" torch group registered
  and ``mori.shmem.shmem_torch_process_group_init("mori")``; the single-node kwargs (IntraNode, 16
  warps x 80 blocks, gpu_per_node=min(8, world)) with fp8 data_type, scale_dim = hidden/128 of
  float32 and max_token_type_size = bf16's; ``dispatch(input=, weights=, scales=, indices=)`` of
  e4m3fnuz (MI300's fp8) tokens; ``combine(input=expert_output, weights=topk_weights,
  indices=topk_ids)`` (weights are the tokens' own [N, K] weights) and ``output.copy_(combined[:N])``.
- SGLang, python/sglang/srt/layers/moe/token_dispatcher/moriep.py (revision
  0202c2670711bc3ed75fd4e8cea61eeccb32329c): ``init_mori_op`` (group registration, the kwargs
  with num_qp_per_pe=2, the dataclasses.fields filter), then the normal dispatcher (IntraNode:
  ``dispatch(..., call_local_expert_count=True)``, ``op.local_expert_count``, ``combine(x, None,
  topk_ids)[0][:N]``) or the low-latency one (AsyncLL: ``dispatch_send``,
  ``dispatch_recv(call_local_expert_count=True)``, ``combine_send(x, None, topk_ids)``,
  ``combine_recv()``), with bf16, fp8 (1x128, f32 scales) and mxfp8 (1x32, e8m0 scales) dispatch
  in e4m3fnuz.
"""

from __future__ import annotations

import client_programs
import pytest

from mori.ep.workload import Workload
from mori.shmem.testing import find_free_port, run_pes


def _workload(world_size: int) -> Workload:
    return Workload(world_size=world_size, max_tokens=16, hidden=256, topk=8, experts_per_rank=16 // world_size + 2)


def _env(backend: str) -> dict[str, str]:
    return {"MORI_SHMEM_BACKEND": backend}


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("quant", ["fp8", "bf16"])
def test_vllm_mori_all2all_prepare_finalize(backend: str, world_size: int, quant: str) -> None:
    w = _workload(world_size)
    totals = run_pes(
        client_programs.vllm, world_size, backend, w, find_free_port(), client_programs.Quant(quant),
        env=_env(backend), timeout=240,
    )  # fmt: skip
    assert any(t > 0 for per_pe in totals for t in per_pe), "the workload must move rows"


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("quant", ["bf16", "fp8", "mxfp8"])
@pytest.mark.parametrize("low_latency", [False, True], ids=["normal", "low_latency"])
def test_sglang_moriep_dispatcher(backend: str, world_size: int, quant: str, low_latency: bool) -> None:
    w = _workload(world_size)
    results = run_pes(
        client_programs.sglang, world_size, backend, w, find_free_port(), client_programs.Quant(quant), low_latency,
        env=_env(backend), timeout=240,
    )  # fmt: skip
    assert any(t > 0 for result in results for t in result["totals"]), "the workload must move rows"
    # SGLang passes num_qp_per_pe=2, which has no effect here: it is logged (mori._compat) once.
    assert all("EpDispatchCombineConfig.num_qp_per_pe" in result["noted"] for result in results)
