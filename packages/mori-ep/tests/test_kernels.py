# SPDX-License-Identifier: MIT
"""Every kernel variant mori-ep registers for ``mori-jit precompile`` compiles (for sm_90), with
whichever compiler the JIT finds (NVRTC from nvidia-cuda-nvrtc, or nvcc): CI has no GPU but
catches a kernel that does not build."""

from __future__ import annotations

import pytest

from mori.ep.kernels import combine_spec, dispatch_spec, jit_kernels, net_spec
from mori.shmem import jit


def _compiler_or_skip() -> None:
    from mori.shmem.jit.compiler import find_compiler
    from mori.shmem.jit.errors import JitError

    try:
        find_compiler(None)
    except JitError as exc:
        pytest.skip(f"no CUDA compiler here: {exc}")


def test_registered_variants_compile(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _compiler_or_skip()
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    specs = jit_kernels()
    assert {spec.name for spec in specs} >= {"ep_dispatch_w8_k8", "ep_combine_w8_k8_bfloat16_q0"}
    for spec, cubin in zip(specs, jit.compile_specs(specs, arch="sm_90"), strict=True):
        assert cubin.stat().st_size > 0, spec.name


@pytest.mark.parametrize("topk", [1, 3, 9])
def test_odd_topk_and_world_sizes_compile(tmp_path, monkeypatch, topk: int) -> None:  # type: ignore[no-untyped-def]
    _compiler_or_skip()
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    specs = []
    for world_size in (1, 3, 16):
        specs += [
            dispatch_spec(world_size, topk, False),
            combine_spec(world_size, topk, "float16", 0),
            dispatch_spec(world_size, topk, True, net=True),
            combine_spec(world_size, topk, "bfloat16", 2 if topk == 3 else 0, net=True),
            net_spec(world_size, topk),
        ]
    assert all(cubin.stat().st_size > 0 for cubin in jit.compile_specs(specs, arch="sm_90"))


def test_warmup_jit_kernels_builds_one_kernel_type(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _compiler_or_skip()
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    from mori.ep import warmup_jit_kernels

    built = warmup_jit_kernels(5, arch="sm_90")
    assert "ep_dispatch_w8_k8_ll" in built and "ep_dispatch_w8_k8" not in built
    assert "ep_combine_w8_k8_bfloat16_q0" in built and not any("net" in name for name in built)
    inter = warmup_jit_kernels(2, arch="sm_90")  # InterNodeV1
    assert {"ep_net_w16_k8", "ep_dispatch_w16_k8_net", "ep_combine_w16_k8_bfloat16_q0_net"} <= set(inter)
    assert "ep_dispatch_w16_k8_ll_net" not in inter and "ep_dispatch_w8_k8" not in inter
    assert len(list(tmp_path.rglob("*.cubin"))) >= len(built)


def test_slot_header_matches_its_table() -> None:
    """ep_slots.h is generated from ep_slots.json by mori-viz's codegen; --check fails if stale."""
    import subprocess
    import sys

    from mori.ep.kernels import SLOTS_FILE

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mori.viz",
            "codegen",
            str(SLOTS_FILE),
            "--header",
            str(SLOTS_FILE.with_suffix(".h")),
            "--check",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_profiling_variants_compile_with_trace_points(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _compiler_or_skip()
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MORI_ENABLE_PROFILER", "1")
    dispatch, combine = dispatch_spec(8, 8, False), combine_spec(8, 8, "bfloat16", 0)
    assert dispatch.name.endswith("_prof") and combine.name.endswith("_prof")
    assert dispatch.defines.get("MORI_VIZ_ENABLED") == 1
    for spec in (dispatch, combine):
        assert spec.compile(arch="sm_90").stat().st_size > 0
    monkeypatch.setenv("MORI_ENABLE_PROFILER", "0")
    assert "MORI_VIZ_ENABLED" not in dispatch_spec(8, 8, False).defines
