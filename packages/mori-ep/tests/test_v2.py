# SPDX-License-Identifier: MIT
"""The EP v2 API (mori.ep.v2): its config, its call contract and lifecycle, and parity with v1 on
the same inputs across 2, 4 and 8 PE processes (cpu here, cuda where a GPU is visible)."""

from __future__ import annotations

import re

import ep_programs
import ep_v2_programs
import pytest
import torch
from ep_v2_programs import small_config

from mori.ep import EpConfigError, EpUnsupportedError
from mori.ep.routing import EpDispatchRoutingHandle as V1Handle
from mori.ep.v2 import EpDispatchCombineConfig, EpDispatchCombineOp, EpDispatchRoutingHandle
from mori.ep.v2.config import unsupported
from mori.ep.v2.geometry import Geometry, for_tokens
from mori.ep.v2.routing import Encoding
from mori.ep.workload import Workload
from mori.shmem.testing import run_pes

BASE = Workload(world_size=2, max_tokens=16, hidden=64, topk=4, experts_per_rank=4, tokens=None)


# ---- config (no PEs) ------------------------------------------------------------------------


def test_defaults_follow_mori() -> None:
    cfg = EpDispatchCombineConfig(0, 8, 7168, 4096, 32, 8)
    assert cfg.data_type is torch.bfloat16 and cfg.dispatch_data_type is None and cfg.combine_data_type is None
    assert (cfg.scale_dim, cfg.scale_type_size, cfg.max_total_recv_tokens) == (0, 0, 0)
    assert (cfg.combine_mode, cfg.quant_type, cfg.kernel_backend, cfg.schedule) == ("gather", "none", None, None)
    assert cfg.dispatch_block_num is cfg.combine_block_num is cfg.warp_num_per_block is None
    assert not cfg.enable_std_moe and not cfg.is_scatter and not cfg.is_asymmetric_dtype
    assert (cfg.token_nbytes, cfg.max_recv, cfg.effective_max_recv, cfg.dtype_str) == (14336, 32768, 32768, "bf16")
    assert small_config(max_total_recv_tokens=5).effective_max_recv == 6  # 2 x ceil(5 / 2)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"world_size": 65}, "world_size=65 must be in [1, 64]"),
        ({"rank": 2}, "rank=2 must be in [0, 1]"),
        ({"num_experts_per_token": 0}, "num_experts_per_token=0"),
        ({"quant_type": "fp4_blockwise"}, "quant_type='fp4_blockwise' is not one of"),
        ({"combine_mode": "push"}, "combine_mode='push' is not one of"),
        ({"kernel_backend": "triton"}, "kernel_backend='triton' is not one of"),
        ({"dispatch_data_type": torch.float8_e4m3fn}, "set both or neither"),
        ({"hidden_dim": 192, "quant_type": "fp8_blockwise"}, "hidden_dim=192 must be a multiple of 128"),
        ({"hidden_dim": 4}, "they must be a multiple of 16 bytes"),
        ({"warp_num_per_block": 33}, "warp_num_per_block=33 must be in [1, 32]"),
        ({"scale_dim": 4}, "scale_dim=4 needs scale_type_size > 0"),
        ({"data_type": "bf16"}, "data_type='bf16' must be a torch.dtype"),
        ({"schedule": ((None, 1, 1, 1, 1), (8, 1, 1, 1, 1))}, "only the last bucket may"),
        ({"schedule": ((8, 1, 1, 1),)}, "schedule[0]=(8, 1, 1, 1) must be"),
        (
            {"dispatch_data_type": torch.float8_e4m3fn, "combine_data_type": torch.bfloat16, "combine_mode": "scatter"},
            "needs combine_mode='gather'",
        ),
        (
            {
                "dispatch_data_type": torch.float8_e4m3fn,
                "combine_data_type": torch.bfloat16,
                "quant_type": "fp8_direct_cast",
            },
            "cannot be combined with dispatch_data_type",
        ),
    ],
)
def test_config_fields_are_checked(changes: dict[str, object], expected: str) -> None:
    with pytest.raises(EpConfigError, match=re.escape(expected)):
        small_config(**changes)


def test_quant_forces_scatter_and_blocks_of_128() -> None:
    cfg = small_config(quant_type="fp8_blockwise")
    assert cfg.is_scatter and cfg.combine_scale_dim == 2 and cfg.wire_elem_size == 1
    v1 = cfg.to_v1_config()
    # The fp8 formats run in v2's scatter combine; the v1 op only dispatches and gathers.
    assert v1.quant_type == "none" and v1.use_external_inp_buf
    assert EpDispatchCombineOp.required_heap_bytes(cfg) > EpDispatchCombineOp.required_heap_bytes(small_config())


def test_asymmetric_dtypes_map_onto_one_v1_op() -> None:
    cfg = small_config(dispatch_data_type=torch.float8_e4m3fn, combine_data_type=torch.bfloat16, scale_dim=2,
                  scale_type_size=4)  # fmt: skip
    assert cfg.dtype_str == "fp8_disp_bf16_comb" and cfg.token_nbytes == 256 and cfg.combine_token_nbytes == 512
    v1 = cfg.to_v1_config()
    assert v1.data_type is torch.float8_e4m3fn and v1.max_token_type_size == 2 and v1.scale_dim == 2
    assert unsupported(cfg) is None


@pytest.mark.parametrize(
    ("changes", "env", "expected"),
    [
        ({"kernel_backend": "hip"}, None, "kernel_backend='hip' is one of MORI's AMD kernel backends"),
        ({"kernel_backend": "flydsl"}, None, "kernel_backend='flydsl'"),
        ({}, "flydsl", "MORI_V2_KERNEL_BACKEND='flydsl'"),
        ({}, "tilelang", "MORI_V2_KERNEL_BACKEND='tilelang' is not one of"),
        ({"enable_std_moe": True}, None, "enable_std_moe=True"),
        ({"data_type": torch.float8_e4m3fn}, None, "set dispatch_data_type=torch.float8_e4m3fn"),
        ({"data_type": torch.float8_e4m3fnuz}, None, "data_type=torch.float8_e4m3fnuz needs AMD"),
        ({"data_type": torch.float32, "quant_type": "fp8_direct_cast"}, None, "is not bf16"),
        ({"data_type": torch.int16}, None, "data_type=torch.int16 is not moved here"),
    ],
)
def test_unsupported_configs_fail_before_allocating(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, object], env: str | None, expected: str
) -> None:
    if env is None:
        monkeypatch.delenv("MORI_V2_KERNEL_BACKEND", raising=False)
    else:
        monkeypatch.setenv("MORI_V2_KERNEL_BACKEND", env)
    cfg = small_config(**changes)
    # No mori.shmem in this process: the capability gate must answer before the op touches it.
    with pytest.raises(EpUnsupportedError, match=re.escape(expected)):
        EpDispatchCombineOp(cfg)


def test_explicit_backend_beats_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MORI_V2_KERNEL_BACKEND", "hip")
    assert unsupported(small_config(kernel_backend="v1")) is None
    assert EpDispatchCombineOp.available_backends() == ("v1",)


def test_v1_config_is_refused() -> None:
    v1 = small_config().to_v1_config()
    with pytest.raises(EpConfigError, match=r"cfg must be a mori\.ep\.v2\.EpDispatchCombineConfig"):
        EpDispatchCombineOp(v1)  # type: ignore[arg-type]


def test_geometry_defaults_pins_and_schedule() -> None:
    assert for_tokens(small_config(), 8) == Geometry()  # v1 chooses
    assert for_tokens(small_config(dispatch_block_num=32), 8) == Geometry(32, 16, 80, 4)
    assert for_tokens(small_config(combine_warp_num_per_block=8), 8) == Geometry(64, 16, 80, 8)
    schedule = ((2, 1, 2, 3, 4), (6, 5, 6, 7, 8), (None, 9, 10, 11, 12))
    cfg = small_config(schedule=schedule, dispatch_block_num=99)  # a schedule wins over pinned fields
    assert [for_tokens(cfg, n).dispatch_blocks for n in (0, 2, 3, 6, 7)] == [1, 1, 5, 5, 9]
    assert for_tokens(small_config(schedule=((4, 1, 2, 3, 4),)), 8) == Geometry(1, 2, 3, 4)


def test_routing_encodings_round_trip() -> None:
    enc = Encoding(world_size=2, max_tokens=4, max_recv=8)
    dest = torch.tensor([[0, -1], [9, 15]], dtype=torch.int32)  # pe 0 slot 0; pe 1 slots 1 and 7
    src = torch.tensor([0, 3, 9, 10, 0, 0, 0, 0], dtype=torch.int32)  # v1: src_rank * 2 * 4 + token
    empty = torch.empty(0, dtype=torch.int32)
    v2 = enc.from_v1(V1Handle(dest, empty, empty, torch.tensor([4], dtype=torch.int32), src, 2), owner=7)
    assert v2.disp_dest_tok_id_map.tolist() == [[0, 16], [9, 15]]  # -1 -> world_size * max_recv
    assert v2.disp_tok_id_to_src_tok_id_local[:4].tolist() == [0, 3, 5, 6]  # src_rank * 4 + token
    assert len(v2.tensors()) == 5 and v2.owner == 7
    rebuilt = EpDispatchRoutingHandle.from_tensors(v2.tensors(), v2.cur_rank_num_token)
    assert rebuilt.owner is None
    v1 = enc.to_v1(rebuilt)
    assert torch.equal(v1.disp_dest_tok_id_map, dest) and torch.equal(v1.disp_tok_id_to_src_tok_id_local, src)


def test_mori_ops_alias() -> None:
    import mori.ops.dispatch_combine_v2 as alias

    assert alias.EpDispatchCombineOp is EpDispatchCombineOp


# ---- across PEs -----------------------------------------------------------------------------


def _cases(world_size: int) -> list[tuple[str, Workload, str]]:
    base = ep_programs.spread(BASE, world_size)
    fp8 = ep_programs.replace(base, dtype="float8_e4m3fn", scale_dim=4, sentinel="every_other")
    cases = [("bf16", base, "none"), ("fp8_dispatch_scales", fp8, "none")]
    if world_size <= 4:  # the fp8 combine formats once or twice: the 8-PE run is the slow one on 2 cores
        outliers = ep_programs.replace(base, hidden=256, outliers=1000.0)
        cases += [("fp8_direct_cast", outliers, "fp8_direct_cast"), ("fp8_blockwise", outliers, "fp8_blockwise")]
    return cases


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_v1_v2_parity(backend: str, world_size: int) -> None:
    # v1's blockwise format takes its block count from the environment; v2's blocks are 128 wide.
    env = {"MORI_SHMEM_BACKEND": backend, "MORI_FP8_COMBINE_SCALE_DIM": str(256 // 128)}
    totals = run_pes(ep_v2_programs.parity, world_size, backend, _cases(world_size), 2, env=env, timeout=240)
    ep_programs.assert_moves_rows(totals)


def test_contract_and_lifecycle(backend: str) -> None:
    w = ep_programs.replace(BASE, tokens=12)
    results = run_pes(ep_v2_programs.contract, 2, backend, w, env={"MORI_SHMEM_BACKEND": backend}, timeout=120)
    expected = {
        "combine_without_routing": ("EpRoutingError", "combine needs routing="),
        "too_many_tokens": ("EpInputError", "input has 17 rows (tokens), above max_num_inp_token_per_rank=16"),
        "wrong_dtype": ("EpInputError", "input.dtype=torch.float32; this op was configured for torch.bfloat16"),
        "combine_before_dispatch": ("EpInputError", "before any dispatch"),
        "routing_and_return": ("EpInputError", "either routing="),
        "routing_not_a_handle": ("EpRoutingError", "routing must be a mori.ep.v2.EpDispatchRoutingHandle"),
        "routing_wrong_tokens": ("EpRoutingError", "routing.disp_dest_tok_id_map must be int32 [13, 4]"),
        "stale_routing": ("EpRoutingError", "routing is stale: it was made by another op"),
        "dispatch_after_close": ("EpOpClosedError", "dispatch() on a closed op"),
        "combine_after_close": ("EpOpClosedError", "combine() on a closed op"),
    }
    for rank_messages in results:
        lines = dict(line.split("|", 1) for line in rank_messages.splitlines())
        assert set(lines) == set(expected), sorted(set(lines) ^ set(expected))
        for name, (kind, fragment) in expected.items():
            got_kind, _, message = lines[name].partition("|")
            assert got_kind == kind, f"{name}: {lines[name]}"
            assert fragment in message, f"{name}: {message!r} lacks {fragment!r}"


def test_missing_routing_is_a_type_error_too() -> None:
    from mori.ep.v2 import EpInputError, EpRoutingError

    # Code written for MORI catches TypeError (its combine has a required keyword); ours catches EpInputError.
    assert issubclass(EpRoutingError, TypeError) and issubclass(EpRoutingError, EpInputError)
