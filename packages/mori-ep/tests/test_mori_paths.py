# SPDX-License-Identifier: MIT
"""MORI's module paths and compiled-module names that mori-ep provides: mori.ops.dispatch_combine,
mori.ops.local_expert_count, mori.ops.tuning_config, and mori.ep.cpp_names (mori.cpp's EP names)."""

from __future__ import annotations

import json

import compat_programs
import pytest

import mori.ep
import mori.ep.cpp_names as cpp
from mori.ep.workload import Workload
from mori.shmem.testing import run_pes


def test_dispatch_combine_module_is_the_v1_api() -> None:
    import mori.ops.dispatch_combine as dc

    for name in ("EpDispatchCombineConfig", "EpDispatchCombineKernelType", "EpDispatchCombineOp",
                 "EpDispatchCombineQuantType", "EpDispatchRoutingHandle", "warmup_jit_kernels"):  # fmt: skip
        assert getattr(dc, name) is getattr(mori.ep, name)
    assert dc.EpDispatchCombineKernelType.IntraNodeLL.value == 5
    assert dc.EpDispatchCombineQuantType.Fp8BlockwiseQuant.value == 2


def test_cpp_config_defaults_and_packed_array() -> None:
    config = cpp.EpDispatchCombineConfig()
    defaults = {name: getattr(config, name) for name in vars(config)}
    assert defaults == {
        "rank": 0, "world_size": 0, "hidden_dim": 0, "scale_dim": 0, "scale_type_size": 0,
        "max_token_type_size": 0, "max_num_inp_token_per_rank": 0, "num_experts_per_rank": 0,
        "num_experts_per_token": 0, "max_total_recv_tokens": 0, "warp_num_per_block": 0, "block_num": 0,
        "use_external_inp_buf": True, "kernel_type": cpp.EpDispatchCombineKernelType.IntraNode, "gpu_per_node": 8,
        "rdma_block_num": 0, "num_qp_per_pe": 1, "quant_type": cpp.EpDispatchCombineQuantType.None_,
    }  # fmt: skip
    config = cpp.EpDispatchCombineConfig(1, 4, 7168, 56, 4, 2, 128, 8, 8, max_total_recv_tokens=100)
    config.block_num = 64  # read/write attributes, as MORI's def_readwrite
    assert config.to_packed_array() == [1, 1, 4, 7168, 56, 4, 2, 128, 8, 8, 100, 0, 64, 1, 0, 8, 0, 1, 0, 0]
    assert config.max_num_tokens_to_send() == 4 * 128 and config.max_num_tokens_to_send_per_rank() == 128
    assert config.max_num_tokens_to_recv_per_rank() == 25 and config.max_num_tokens_to_recv() == 100
    config.max_total_recv_tokens = 0
    assert config.max_num_tokens_to_recv() == 4 * 128


def test_cpp_config_matches_the_python_config_sizes() -> None:
    fields = dict(rank=1, world_size=4, hidden_dim=64, scale_dim=0, scale_type_size=0, max_token_type_size=2,
                  max_num_inp_token_per_rank=33, num_experts_per_rank=2, num_experts_per_token=4,
                  max_total_recv_tokens=70)  # fmt: skip
    python = mori.ep.EpDispatchCombineConfig(data_type=None, **fields)
    native = cpp.EpDispatchCombineConfig(**fields)
    for name in ("max_num_tokens_to_recv", "max_num_tokens_to_recv_per_rank", "max_num_tokens_to_send",
                 "max_num_tokens_to_send_per_rank"):  # fmt: skip
        assert getattr(native, name)() == getattr(python, name)(), name


def test_tuning_config_module(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mori.ops.tuning_config as tc

    name = tc.build_config_filename("sm90", "IntraNode", 8, "h200", "dispatch")
    assert name == "sm90_h200_intranode_ep8_dispatch.json"
    rules = [
        {"dtype": "bfloat16", "num_tokens": 64, "hidden_dim": 7168, "block_num": 16, "rdma_block_num": 0,
         "warp_per_block": 4},
        {"dtype": "bfloat16", "num_tokens": 512, "hidden_dim": 7168, "block_num": 64, "rdma_block_num": 0,
         "warp_per_block": 8},
    ]  # fmt: skip
    (tmp_path / name).write_text(json.dumps({"rules": rules}))
    monkeypatch.setenv("MORI_EP_TUNING_CONFIG", str(tmp_path))
    assert tc.config_path_for("sm90", "IntraNode", 8, "h200") == tmp_path / name
    manager = tc.TuningConfigManager.get_instance("sm90", "IntraNode", 8, "h200")
    assert manager.combine_rules == []
    import torch

    lookup, rules = tc.TuningConfigManager.lookup, manager.dispatch_rules
    assert lookup(rules, torch.bfloat16, 100, 7168) == tc.LaunchParams(64, 0, 8)
    assert lookup(rules, torch.bfloat16, 9999, 7168) == tc.LaunchParams(64, 0, 8)  # above every rule: the largest
    assert lookup(rules, torch.bfloat16, 10, 7168) == tc.LaunchParams(16, 0, 4)
    assert lookup(rules, torch.float32, 10, 7168) is None
    assert tc.quant_type_to_config_str(cpp.EpDispatchCombineQuantType.Fp8DirectCast) == "fp8_direct_cast"
    assert tc.kernel_type_to_config_str(cpp.EpDispatchCombineKernelType.AsyncLL) == "AsyncLL"
    with pytest.raises(mori.ep.EpConfigError, match="quant_type"):
        tc.quant_type_to_config_str("fp16")


@pytest.mark.parametrize("world_size", [2, 4])
def test_launch_local_expert_count_counts_received_picks(backend: str, world_size: int) -> None:
    w = Workload(world_size=world_size, max_tokens=24, hidden=64, topk=4, experts_per_rank=3, sentinel="last")
    counts = run_pes(
        compat_programs.free_local_expert_count, world_size, backend, w, env={"MORI_SHMEM_BACKEND": backend}
    )
    assert sum(sum(c) for c in counts) > 0


def test_launch_local_expert_count_rejects_null_pointers() -> None:
    config = cpp.EpDispatchCombineConfig(world_size=2, num_experts_per_rank=2, num_experts_per_token=2)
    with pytest.raises(mori.ep.EpInputError, match="indices_ptr=0"):
        cpp.launch_local_expert_count(config, 0, 8, 8)


def test_profiler_accessors_need_an_op() -> None:
    with pytest.raises(mori.ep.EpInputError, match="EpDispatchCombineOp"):
        cpp.get_debug_time_buf(object())


def test_settings_without_effect_are_noted_once_set(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mori._compat import noted_settings
    from mori.ep.settings import note_settings_without_effect

    fields = dict(data_type=None, rank=0, world_size=2, hidden_dim=64, scale_dim=0, scale_type_size=0,
                  max_token_type_size=2, max_num_inp_token_per_rank=8, num_experts_per_rank=2,
                  num_experts_per_token=2)  # fmt: skip
    monkeypatch.delenv("MORI_ENABLE_SDMA", raising=False)
    note_settings_without_effect(mori.ep.EpDispatchCombineConfig(**fields))  # MORI's defaults: nothing to note
    assert not {"EpDispatchCombineConfig.num_qp_per_pe", "MORI_ENABLE_SDMA"} & noted_settings()
    monkeypatch.setenv("MORI_ENABLE_SDMA", "1")
    note_settings_without_effect(mori.ep.EpDispatchCombineConfig(**fields, num_qp_per_pe=4))
    assert {"EpDispatchCombineConfig.num_qp_per_pe", "MORI_ENABLE_SDMA"} <= noted_settings()


@pytest.mark.parametrize("profiler", [pytest.param("1", marks=pytest.mark.gpu), "0"], ids=["profiled", "plain"])
def test_debug_time_offset(backend: str, profiler: str) -> None:
    if profiler == "1" and backend != "cuda":
        pytest.skip("the trace points are compiled into the cuda kernels")
    w = Workload(world_size=2, max_tokens=16, hidden=64, topk=4, experts_per_rank=4, tokens=16)
    env = {"MORI_SHMEM_BACKEND": backend, "MORI_ENABLE_PROFILER": profiler if backend == "cuda" else "0"}
    events = run_pes(compat_programs.profiler_offsets, 2, backend, w, env=env)
    assert all(e > 0 for e in events) if backend == "cuda" and profiler == "1" else events == [0, 0]
