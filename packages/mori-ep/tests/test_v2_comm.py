# SPDX-License-Identifier: MIT
"""EP v2 over a mori.cco communicator (``comm=``), the scatter combine, and MORI's package layout
of ``mori.ops.dispatch_combine_v2``: 2, 4 and 8 PE processes against the independent reference
(cpu here, cuda where a GPU is visible)."""

from __future__ import annotations

import importlib
import sys

import ep_programs
import ep_v2_comm_programs
import pytest
from ep_v2_programs import small_config

from mori.ep.v2 import EpCommunicatorError, EpDispatchCombineOp, EpPlansUnavailableError
from mori.ep.workload import Workload
from mori.shmem.testing import run_pes

BASE = Workload(world_size=2, max_tokens=16, hidden=64, topk=4, experts_per_rank=4, tokens=None)


def _workload(world_size: int) -> Workload:
    return ep_programs.spread(BASE, world_size)


# ---- package layout (no PEs) ----------------------------------------------------------------


def test_package_has_moris_submodules() -> None:
    import mori.ops.dispatch_combine_v2 as package
    from mori.ops.dispatch_combine_v2 import dispatch_combine_op, tuning_configs

    assert hasattr(package, "__path__"), "dispatch_combine_v2 must be a package, as in MORI"
    for name in ("EpDispatchCombineConfig", "EpDispatchCombineOp", "EpDispatchRoutingHandle"):
        assert getattr(package, name) is getattr(dispatch_combine_op, name) is getattr(sys.modules["mori.ep.v2"], name)
    geometry = tuning_configs.lookup(8, 7168, 8)
    assert set(geometry) == {"dispatch_block_num", "combine_block_num", "warp_num_per_block",
                             "combine_warp_num_per_block", "schedule"}  # fmt: skip
    assert geometry["warp_num_per_block"] == 16 and geometry["combine_warp_num_per_block"] == 4
    assert geometry["schedule"] is None and geometry["dispatch_block_num"] == geometry["combine_block_num"] > 0
    cfg = small_config(**{k: v for k, v in tuning_configs.lookup(2, 256, 2, dtype="bf16").items()})
    assert cfg.dispatch_block_num == geometry["dispatch_block_num"]


def test_ep_plans_raises_oserror_as_moris_does_without_its_library() -> None:
    # MORI's binding tests do: try: from ... import ep_plans / except OSError: skip.
    with pytest.raises(OSError, match=r"libmori_ops_v2\.so") as info:
        importlib.import_module("mori.ops.dispatch_combine_v2.ep_plans")
    assert isinstance(info.value, EpPlansUnavailableError)
    with pytest.raises(OSError):  # every import, not only the first
        importlib.import_module("mori.ops.dispatch_combine_v2.ep_plans")


# ---- comm= checks (no PEs) ------------------------------------------------------------------


def test_comm_without_mori_cco_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mori.cco", None)  # as if mori-cco were not installed
    with pytest.raises(EpCommunicatorError, match=r"needs mori-cco \(pip install mori-cco\)"):
        EpDispatchCombineOp(small_config(), comm=object())


def test_comm_must_be_a_communicator() -> None:
    pytest.importorskip("mori.cco")
    with pytest.raises(EpCommunicatorError, match=r"comm must be a mori\.cco\.Communicator .*got builtins\.str"):
        EpDispatchCombineOp(small_config(), comm="tcp://127.0.0.1:1234")


def test_scatter_needs_two_inboxes_of_ws_x_m_rows() -> None:
    gather, scatter = small_config(), small_config(combine_mode="scatter")
    extra = EpDispatchCombineOp.required_heap_bytes(scatter) - EpDispatchCombineOp.required_heap_bytes(gather)
    rows = 2 * 8  # world_size * max_num_inp_token_per_rank
    assert extra == 2 * (rows * 256 * 2 + 256)  # per inbox: bf16 rows, then f32 weights padded to 256 bytes
    blockwise = small_config(quant_type="fp8_blockwise")
    extra = EpDispatchCombineOp.required_heap_bytes(blockwise) - EpDispatchCombineOp.required_heap_bytes(gather)
    assert extra == 2 * (rows * 256 + 256 + 256)  # fp8 rows, weights, 2 f32 scales a row (each padded)


# ---- across PEs -----------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_scatter_combine_matches_reference_and_gather(backend: str, world_size: int) -> None:
    totals = run_pes(
        ep_v2_comm_programs.scatter_over_shmem, world_size, backend, _workload(world_size), 2,
        env={"MORI_SHMEM_BACKEND": backend}, timeout=240,
    )  # fmt: skip
    ep_programs.assert_moves_rows(totals)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_v2_over_a_cco_communicator(backend: str, world_size: int) -> None:
    pytest.importorskip("mori.cco")
    totals = run_pes(
        ep_v2_comm_programs.over_comm, world_size, backend, _workload(world_size), 2,
        env={"MORI_CCO_BACKEND": backend, "MORI_CCO_PER_RANK_VMM": "64M"}, timeout=240,
    )  # fmt: skip
    ep_programs.assert_moves_rows(totals)


def test_comm_op_builds_the_state_v1_builds(backend: str) -> None:
    cco = pytest.importorskip("mori.cco")
    cco_uid = bytes(cco.get_unique_id())
    differences = run_pes(
        ep_v2_comm_programs.same_state, 2, backend, cco_uid, BASE,
        env={"MORI_SHMEM_BACKEND": backend, "MORI_CCO_BACKEND": backend, "MORI_CCO_PER_RANK_VMM": "64M"},
        timeout=120,
    )  # fmt: skip
    assert differences == [[], []], f"attributes set by only one constructor: {differences}"


# ---- settings with no effect (no PEs) ---------------------------------------------------------


def test_inert_settings_are_noted_once_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from mori._compat import noted_settings
    from mori.ep.v2.compat import note_inert_settings

    monkeypatch.setenv("MORI_V2_EP_DISP_BLOCKS", "64")
    note_inert_settings(small_config(combine_warp_num_per_block=4), "cuda")  # gather on the GPU: it applies
    assert "EpDispatchCombineConfig.combine_warp_num_per_block" not in noted_settings()
    assert "MORI_V2_EP_DISP_BLOCKS" in noted_settings()
    note_inert_settings(small_config(dispatch_block_num=32), "cpu")
    note_inert_settings(small_config(combine_mode="scatter", combine_block_num=16, warp_num_per_block=8), "cuda")
    noted = noted_settings()
    assert {"EpDispatchCombineConfig.dispatch_block_num", "EpDispatchCombineConfig.combine_block_num"} <= noted
    assert "EpDispatchCombineConfig.warp_num_per_block" not in noted  # dispatch geometry applies to scatter ops
    assert "MORI_V2_LIB_DIR" not in noted  # unset
