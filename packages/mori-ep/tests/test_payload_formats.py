# SPDX-License-Identifier: MIT
"""FP4 (MXFP4, NVFP4), MXFP8 and raw uint8 dispatch payloads, and MORI's fp4_blockwise combine.

Dispatch moves payload and scale rows as bytes: the received rows must equal the source's bytes
(ep_programs.check_dispatch compares bytes). The identity expert dequantises them to bf16, so
combine must return U * dequant(x) (U = distinct destination PEs). The torch reference those
programs use (mori.ep.payload_formats, mori.ep.reference) is itself checked here against the
numpy quantiser of payload_numpy.py, written from the formats' specifications.

Tolerances (mori.ep.reference.combine_tolerance, derived, not tuned):
- quant none: dequantised MXFP4/NVFP4/MXFP8 values have at most 2 + 4 significant bits (e2m1
  times an e4m3 or power-of-two scale), which bf16 (8 bits) and fp32 sums of U <= 4 rows hold
  exactly: bit-equality.
- fp4_blockwise: a wire value is e2m1 times an arbitrary fp32 scale (24 bits), so the fp32 sum of
  U of them may round: rtol = eps(bf16) + U * eps(fp32). The reference itself quantises exactly as
  the format specifies (checked against numpy below); test_fp4_blockwise_is_within_e2m1_precision
  bounds the format's own error: |q(v) - v| <= amax/6 per element (half of e2m1's widest gap, 2,
  times the block scale amax/6).
"""

from __future__ import annotations

import ep_programs
import numpy as np
import payload_numpy
import payload_programs
import pytest
import torch

from mori.ep import payload_formats, reference
from mori.ep import workload as wl
from mori.ep.workload import Workload
from mori.shmem.proxy_hazards import NEEDED_ENV
from mori.shmem.testing import run_pes

FORMATS = ["mxfp4", "nvfp4", "mxfp8"]
# hidden 256: MXFP4's scale row is 8 bytes (rows of scales are whole 4-byte words), the fp4 row
# 128 bytes; fp4_blockwise with 4 blocks of 64.
BASE = Workload(
    world_size=2, max_tokens=24, hidden=256, topk=2, experts_per_rank=3, outliers=40.0, extra={"quant_blocks": 4}
)
QUANT_BLOCKS = "4"


def _env(backend: str, **extra: str) -> dict[str, str | None]:
    return {"MORI_SHMEM_BACKEND": backend, "MORI_FP8_COMBINE_SCALE_DIM": QUANT_BLOCKS, **extra}


@pytest.mark.parametrize("fmt", FORMATS)
def test_workload_quantiser_matches_numpy(fmt: str) -> None:
    w = wl.with_payload(ep_programs.replace(BASE, tokens=16), fmt)
    for rank in range(2):
        source = wl.source_rows(w, rank).numpy()
        payload, _, scales = wl.tokens(w, rank)
        want_payload, want_scales = payload_numpy.quantize(source, fmt)
        np.testing.assert_array_equal(payload.view(torch.uint8).numpy(), want_payload)
        np.testing.assert_array_equal(scales.view(torch.uint8).numpy(), want_scales)
        got = payload_formats.dequantize(payload, scales, fmt).numpy()
        np.testing.assert_array_equal(got, payload_numpy.dequantize(want_payload, want_scales, fmt))


def test_e2m1_ties_and_saturation_match_numpy() -> None:
    grid = np.concatenate([np.arange(-8, 8, 0.125, dtype=np.float32), np.float32([0.25, 0.75, 1.25, 1.75, 2.5])])
    got = payload_formats.e2m1_codes(torch.from_numpy(grid)).numpy()
    np.testing.assert_array_equal(payload_formats.e2m1_values(torch.from_numpy(got)).numpy(),
                                  payload_numpy.e2m1_values(payload_numpy.e2m1_codes(grid)))  # fmt: skip


def test_fp4_blockwise_reference_matches_numpy() -> None:
    rows = wl.source_rows(ep_programs.replace(BASE, tokens=16, payload="mxfp4"), 0)
    got = payload_formats.fp4_blockwise_row_values(rows, 4).numpy()
    np.testing.assert_array_equal(got, payload_numpy.fp4_blockwise(rows.numpy(), 4))


def test_fp4_blockwise_is_within_e2m1_precision() -> None:
    rows = wl.source_rows(ep_programs.replace(BASE, tokens=16, payload="mxfp4"), 1).numpy()
    blocks = rows.reshape(rows.shape[0], 4, -1)
    bound = np.abs(blocks).max(axis=2, keepdims=True) / 6  # half of the 4 -> 6 gap, times amax / 6
    error = np.abs(payload_numpy.fp4_blockwise(rows, 4).reshape(blocks.shape) - blocks)
    assert (error <= bound * (1 + 2**-20)).all()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("quant", ["none", "fp4_blockwise"])
@pytest.mark.parametrize(("world_size", "topk"), [(2, 2), (4, 3)])
def test_payload_dispatch_and_combine_intra_node(
    backend: str, fmt: str, quant: str, world_size: int, topk: int
) -> None:
    w = wl.with_payload(ep_programs.replace(BASE, world_size=world_size, topk=topk, sentinel="last"), fmt)
    options = {"quant_type": quant, "kernel_type": 0}
    run_pes(ep_programs.dispatch_combine, world_size, backend, w, options, env=_env(backend), timeout=240)


def test_fp4_payload_intra_node_low_latency(backend: str) -> None:
    w = wl.with_payload(ep_programs.replace(BASE, world_size=4, topk=3), "nvfp4")
    options = {"quant_type": "fp4_blockwise", "kernel_type": 5, "zero_copy": False}
    run_pes(ep_programs.dispatch_combine, 4, backend, w, options, env=_env(backend), timeout=240)


@pytest.mark.parametrize(
    ("kernel_type", "fmt"),
    [(1, "mxfp4"), (2, "nvfp4"), (3, "mxfp8"), (4, "mxfp4")],
    ids=["InterNode-mxfp4", "InterNodeV1-nvfp4", "InterNodeV1LL-mxfp8", "AsyncLL-mxfp4"],
)
def test_payload_dispatch_and_fp4_combine_across_hosts(backend: str, kernel_type: int, fmt: str) -> None:
    w = wl.with_payload(ep_programs.replace(BASE, world_size=4, topk=3, experts_per_rank=5), fmt)
    env = _env(backend, MORI_SHMEM_PES_PER_NODE="2", **{k: v for k, v in NEEDED_ENV.items() if v is not None})
    options = {"quant_type": "fp4_blockwise", "kernel_type": kernel_type, "gpu_per_node": 2}
    run_pes(ep_programs.dispatch_combine, 4, backend, w, options, env=env, timeout=240)


@pytest.mark.parametrize(
    ("kernel_type", "width"),
    [(0, 48), (0, 37), (5, 1), (2, 45), (4, 130)],
    ids=["IntraNode-48", "IntraNode-37", "IntraNodeLL-1", "InterNodeV1-45", "AsyncLL-130"],
)
def test_uint8_rows_travel_bit_exact_and_do_not_combine(backend: str, kernel_type: int, width: int) -> None:
    # Rows of random bytes of any width (the kernels move 16-byte vectors: the op pads and cuts
    # back) with 8 random scale bytes: no format, just bytes.
    w = wl.with_payload(ep_programs.replace(BASE, world_size=4, topk=3, hidden=width), "uint8")
    w = ep_programs.replace(w, scale_dim=8, scale_dtype="uint8")
    env = _env(backend, MORI_SHMEM_PES_PER_NODE="2", **{k: v for k, v in NEEDED_ENV.items() if v is not None})
    messages = run_pes(
        payload_programs.dispatch_then_combine_bytes, 4, backend, w, {"kernel_type": kernel_type, "gpu_per_node": 2},
        env=env if kernel_type in (1, 2, 3, 4) else _env(backend), timeout=240,
    )  # fmt: skip
    for message in messages:
        assert message.startswith("EpInputError") and "no sum" in message and "uint8" in message, message


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_fp4_rows_group_per_expert_in_the_standard_moe_layout(backend: str, fmt: str) -> None:
    w = wl.with_payload(ep_programs.replace(BASE, world_size=4, topk=3), fmt)
    counts = run_pes(payload_programs.standard_moe_bytes, 4, backend, w, env=_env(backend), timeout=240)
    assert sum(sum(c) for c in counts) > 0, "the workload must move rows"


def test_fp4_payload_does_not_combine(backend: str) -> None:
    w = wl.with_payload(ep_programs.replace(BASE, world_size=2), "mxfp4")
    messages = run_pes(payload_programs.dispatch_then_combine_bytes, 2, backend, w, {}, env=_env(backend), timeout=120)
    for message in messages:
        assert message.startswith("EpInputError") and "float4_e2m1fn_x2" in message, message


def test_fp4_blockwise_needs_whole_blocks(backend: str) -> None:
    """hidden 200 is not a multiple of 8 x 4 blocks: a typed error before anything launches."""
    w = ep_programs.replace(BASE, hidden=200, tokens=4)
    messages = run_pes(
        payload_programs.combine_error, 2, backend, w, {"quant_type": "fp4_blockwise"}, env=_env(backend)
    )
    for message in messages:
        assert message.startswith("EpInputError") and "fp4_blockwise needs a multiple of 8 x" in message, message


@pytest.mark.parametrize("net", [False, True], ids=["intra", "net"])
def test_fp4_blockwise_combine_kernels_compile(tmp_path, monkeypatch, net: bool) -> None:  # type: ignore[no-untyped-def]
    """The cuda backend's fp4_blockwise combine under NVRTC (no GPU needed)."""
    from test_kernels import _compiler_or_skip

    from mori.ep.kernels import combine_spec

    _compiler_or_skip()
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    for world_size, topk in ((2, 2), (4, 3), (8, 8)):
        assert combine_spec(world_size, topk, "bfloat16", 3, net=net).compile(arch="sm_90").stat().st_size > 0


def test_reference_tolerance_is_derived() -> None:
    w = wl.with_payload(ep_programs.replace(BASE, world_size=4, topk=3), "nvfp4")
    exact = reference.combine_tolerance(w, "IntraNode", torch.bfloat16, "none", 8)
    assert exact.rtol == 0.0, exact
    fp4 = reference.combine_tolerance(w, "IntraNode", torch.bfloat16, "fp4_blockwise", 8)
    assert fp4.rtol == pytest.approx(2**-7 + 3 * 2**-23), fp4


@pytest.mark.parametrize(
    ("dtype", "quant", "kernel_type"),
    [
        ("fp4", "fp4_blockwise", "IntraNode"),
        ("nvfp4", "none", "IntraNodeLL"),
        ("mxfp8", "fp4_blockwise", "InterNodeV1"),
    ],
)
def test_bench_moves_and_verifies_payload_formats(
    tmp_path, monkeypatch, dtype: str, quant: str, kernel_type: str
) -> None:  # type: ignore[no-untyped-def]
    """mori-ep-bench with a block-scaled dispatch and fp4_blockwise combine: verified, and the
    bytes per row counted as they move (payload + scales; fp4 wire row + fp32 block scales)."""
    import json

    from test_bench import TINY

    from mori.ep import bench

    monkeypatch.setenv("MORI_FP8_COMBINE_SCALE_DIM", QUANT_BLOCKS)
    report_path = tmp_path / "bench.json"
    args = [*TINY, "--hidden", "128", "--world-size", "2", "--kernel-type", kernel_type, "--json", str(report_path)]
    args += ["--dispatch-dtype", dtype, "--combine-quant", quant, "--zero-copy", "0"]
    assert bench.main(args) == 0
    report = json.loads(report_path.read_text())
    assert report["verified"] is True, report["verification"]
    payload_bytes = {"fp4": 64 + 4, "nvfp4": 64 + 8, "mxfp8": 128 + 4}[dtype]  # hidden 128: H/2 or H, H/32 or H/16
    combine_bytes = 64 + 4 * 4 if quant == "fp4_blockwise" else 128 * 2
    for pe in report["raw"]:
        for case in pe["cases"]:
            assert case["dispatch_row_bytes"] == payload_bytes and case["combine_row_bytes"] == combine_bytes, case
    assert report["results"][0]["dispatch"]["wire_algo_bw_gbps"] > 0
