# SPDX-License-Identifier: MIT
"""MI300's fp8 (float8_e4m3fnuz) and MX scales (float8_e8m0fnu), which vLLM's and SGLang's MORI
paths use: dispatch moves them byte for byte, and combine decodes and re-encodes fp8 rows exactly
as torch's own conversions do (e4m3fnuz has bias 8, one NaN at 0x80 and +-240 at S.1111.111;
decoding it as e4m3fn would be off by 2x and turn 240 into NaN)."""

from __future__ import annotations

import compat_programs
import ep_programs
import pytest

from mori.ep.workload import Workload
from mori.shmem.testing import run_pes


@pytest.mark.parametrize("dtype", ["float8_e4m3fnuz", "float8_e4m3fn"])
@pytest.mark.parametrize(("world_size", "topk"), [(2, 1), (2, 2), (4, 3)])
def test_fp8_rows_combine_as_torch_converts(backend: str, dtype: str, world_size: int, topk: int) -> None:
    maxima = run_pes(
        compat_programs.fp8_combine, world_size, backend, dtype, topk, env={"MORI_SHMEM_BACKEND": backend}, timeout=180
    )
    # Every byte pattern is in the rows: the largest finite result is the format's saturation value.
    limit = 240.0 if dtype == "float8_e4m3fnuz" else 448.0
    assert all(m == limit for per_pe in maxima for m in per_pe)


@pytest.mark.parametrize("scale_dtype", ["float32", "float8_e8m0fnu"])
def test_fnuz_dispatch_with_scales(backend: str, scale_dtype: str) -> None:
    w = Workload(
        world_size=4, max_tokens=32, hidden=128, topk=8, experts_per_rank=4, dtype="float8_e4m3fnuz", scale_dim=4,
        scale_dtype=scale_dtype,
    )  # fmt: skip
    run_pes(ep_programs.dispatch_combine, 4, backend, w, {}, env={"MORI_SHMEM_BACKEND": backend}, timeout=240)


@pytest.mark.parametrize("dtype", ["float8_e4m3fnuz", "float8_e4m3fn"])
@pytest.mark.parametrize("net", [False, True], ids=["intra", "net"])
def test_fp8_combine_kernels_compile(tmp_path, monkeypatch, dtype: str, net: bool) -> None:  # type: ignore[no-untyped-def]
    """The cuda backend's fp8-row combine (no GPU here: CI catches a kernel that does not build)."""
    from test_kernels import _compiler_or_skip

    from mori.ep.kernels import combine_spec

    _compiler_or_skip()
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    for world_size, topk in ((2, 2), (4, 3), (8, 8)):
        assert combine_spec(world_size, topk, dtype, 0, net=net).compile(arch="sm_90").stat().st_size > 0
