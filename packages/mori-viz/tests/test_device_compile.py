# SPDX-License-Identifier: MIT
"""The device header compiles with NVRTC and nvcc; trace points compile in only when enabled, and a
disabled build is the same code as a kernel that never had them (PTX compared line for line)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from device_compile import CompileError, find_nvcc, find_nvrtc, nvcc_cubin, nvcc_ptx, nvrtc_ptx, ptx_body

import mori.viz
from mori.viz import codegen
from mori.viz.slots import SlotTable

KERNELS = Path(__file__).resolve().parent / "kernels"


@pytest.fixture(params=["nvrtc", "nvcc"])
def compile_ptx(request, tmp_path):
    if request.param == "nvrtc" and find_nvrtc() is None:
        pytest.skip("NVRTC not found (pip install nvidia-cuda-nvrtc)")
    if request.param == "nvcc" and find_nvcc() is None:
        pytest.skip("nvcc not found (no CUDA toolkit)")

    def run(source: str, include_dirs: list[Path], defines: dict[str, int] | None = None) -> str:
        if request.param == "nvrtc":
            return nvrtc_ptx(source, include_dirs, defines)
        work = tmp_path / f"nvcc{len(list(tmp_path.iterdir()))}"
        work.mkdir()
        return nvcc_ptx(source, include_dirs, work, defines)

    return run


@pytest.fixture
def slots_dir(tmp_path) -> Path:
    """The generated test_slots.h, alone in a directory (so a build that needs mori-viz's own
    headers fails unless their directory is passed too)."""
    table = SlotTable.from_json(KERNELS / "test_slots.json")
    out = tmp_path / "generated"
    codegen.write(out / "test_slots.h", codegen.render_header(table, source="test_slots.json"))
    return out


def _kernel() -> str:
    return (KERNELS / "traced.cu").read_text()


def _uninstrumented(source: str) -> str:
    """The same kernel with every trace-point line deleted: the zero-cost reference."""
    kept = [line for line in source.splitlines() if not re.search(r"MORI_VIZ_|TEST_VIZ_|test_slots\.h", line)]
    return "\n".join(kept) + "\n"


def test_enabled_build_reads_the_timer_and_stores_events(compile_ptx, slots_dir):
    ptx = compile_ptx(_kernel(), [slots_dir, Path(mori.viz.get_include())], mori.viz.jit_defines(enabled=True))
    body = ptx_body(ptx)
    assert "%globaltimer" in body
    assert "%smid" in body
    assert re.search(r"st\.global\.v2\.(u64|b64)", body), "events are one 16-byte store"
    assert "st.global.u32" in body, "and the count one 4-byte store"
    assert "atom." in body or "red." in body, "warps without a slot are counted atomically"


def test_disabled_build_has_no_trace_code(compile_ptx, slots_dir):
    # Without MORI_VIZ_ENABLED the generated header must not even need mori-viz's include dir.
    disabled = ptx_body(compile_ptx(_kernel(), [slots_dir]))
    plain = ptx_body(compile_ptx(_uninstrumented(_kernel()), []))
    assert "globaltimer" not in disabled
    assert "%smid" not in disabled
    assert "atom." not in disabled and "red." not in disabled
    assert disabled == plain


def test_disabled_cubin_is_byte_identical_to_the_uninstrumented_one(slots_dir, tmp_path):
    # SASS-level check without cuobjdump (not always installed): ptxas output compared whole.
    if find_nvcc() is None:
        pytest.skip("nvcc not found (no CUDA toolkit)")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    disabled = nvcc_cubin(_kernel(), [slots_dir], tmp_path / "a")
    plain = nvcc_cubin(_uninstrumented(_kernel()), [], tmp_path / "b")
    enabled = nvcc_cubin(_kernel(), [slots_dir, Path(mori.viz.get_include())], tmp_path / "c", {"MORI_VIZ_ENABLED": 1})
    assert disabled == plain
    assert enabled != plain


def test_enabled_build_needs_the_include_dir(compile_ptx, slots_dir):
    with pytest.raises(CompileError, match=r"mori_viz/trace\.cuh"):
        compile_ptx(_kernel(), [slots_dir], {"MORI_VIZ_ENABLED": 1})


@pytest.mark.parametrize("enabled", [0, 1])
def test_trace_header_alone_compiles(compile_ptx, enabled):
    source = (
        '#include "mori_viz/trace.cuh"\n'
        'extern "C" __global__ void k(void* trace, int* out) {\n'
        "  MORI_VIZ_INIT(viz, trace, 0u);\n"
        "  MORI_VIZ_INSTANT(viz, 7);\n"
        "  MORI_VIZ_ONLY(out[0] = 1;)\n"
        "}\n"
    )
    body = ptx_body(compile_ptx(source, [Path(mori.viz.get_include())], {"MORI_VIZ_ENABLED": enabled}))
    assert ("%globaltimer" in body) == bool(enabled)
    assert ("st.global.u32" in body or "st.global.b32" in body) == bool(enabled)  # MORI_VIZ_ONLY's store


@pytest.mark.parametrize("enabled", [0, 1])
def test_example_kernel_compiles(compile_ptx, tmp_path, enabled):
    examples = Path(__file__).resolve().parent.parent / "examples"
    if not (examples / "rms_norm.cu").is_file():
        pytest.skip("examples/ is not beside tests/ (installed tests only)")
    table = SlotTable.from_json(examples / "demo_slots.json")
    codegen.write(tmp_path / "gen" / "demo_slots.h", codegen.render_header(table))
    body = ptx_body(
        compile_ptx(
            (examples / "rms_norm.cu").read_text(),
            [tmp_path / "gen", Path(mori.viz.get_include())],
            mori.viz.jit_defines(enabled=bool(enabled)),
        )
    )
    assert ".entry rms_norm" in body
    assert ("%globaltimer" in body) == bool(enabled)
