# SPDX-License-Identifier: MIT
"""The CUDA kernels of mori-ep as JIT variants (compiled at first use by mori-shmem's JIT and
listed for ``mori-jit precompile`` through the ``mori.jit_kernels`` entry point)."""

from __future__ import annotations

from pathlib import Path

from mori.ep.errors import EpConfigError
from mori.ep.layout import DTYPE_CODES
from mori.ep.settings import setting
from mori.shmem import jit

SOURCE_DIR = Path(__file__).resolve().parent / "device_src"
#: The trace slots of the kernels (mori-viz's SlotTable reads it; ep_slots.h is generated from it).
SLOTS_FILE = SOURCE_DIR / "ep_slots.json"


def profiling() -> bool:
    """Whether kernels are built with mori-viz trace points (MORI_ENABLE_PROFILER)."""
    return bool(setting("MORI_ENABLE_PROFILER"))


def _profile_build() -> tuple[str, dict[str, int], tuple[Path, ...]]:
    """(name suffix, defines, include dirs) that switch trace points on, or nothing."""
    if not profiling():
        return "", {}, ()
    try:
        import mori.viz
    except ImportError:
        raise EpConfigError("MORI_ENABLE_PROFILER=1 needs the mori-viz wheel (pip install mori-viz)") from None
    return "_prof", mori.viz.jit_defines(enabled=True), (Path(mori.viz.get_include()),)


def dispatch_spec(world_size: int, topk: int, low_latency: bool) -> jit.KernelSpec:
    """``mori_ep_dispatch`` for one (world size, top-k, low latency) combination."""
    suffix, profile_defines, profile_includes = _profile_build()
    return jit.KernelSpec(
        f"ep_dispatch_w{world_size}_k{topk}{'_ll' if low_latency else ''}{suffix}",
        SOURCE_DIR / "ep_dispatch.cu",
        defines={"MORI_EP_WORLD": world_size, "MORI_EP_TOPK": topk, "MORI_EP_LL": int(low_latency), **profile_defines},
        include_dirs=(SOURCE_DIR, jit.include_dir(), *profile_includes),
    )


def combine_spec(world_size: int, topk: int, dtype: str, quant: int) -> jit.KernelSpec:
    """``mori_ep_combine_stage`` and ``mori_ep_combine`` for one row dtype and wire format."""
    suffix, profile_defines, profile_includes = _profile_build()
    return jit.KernelSpec(
        f"ep_combine_w{world_size}_k{topk}_{dtype}_q{quant}{suffix}",
        SOURCE_DIR / "ep_combine.cu",
        defines={
            "MORI_EP_WORLD": world_size,
            "MORI_EP_TOPK": topk,
            "MORI_EP_DTYPE": DTYPE_CODES[dtype],
            "MORI_EP_QUANT": quant,
            **profile_defines,
        },
        include_dirs=(SOURCE_DIR, jit.include_dir(), *profile_includes),
    )


def jit_kernels() -> list[jit.KernelSpec]:
    """The variants of the default serving setup (DeepSeek-V3 shape, 8 PEs, top-8) and of the test
    suite (2/4/8 PEs): fp8/bf16 dispatch, bf16 and fp32 combine in every wire format bf16 allows."""
    specs: list[jit.KernelSpec] = []
    for world_size in (2, 4, 8):
        for topk in (4, 8):
            specs += [dispatch_spec(world_size, topk, ll) for ll in (False, True)]
            specs += [combine_spec(world_size, topk, "bfloat16", quant) for quant in (0, 1, 2)]
            specs.append(combine_spec(world_size, topk, "float32", 0))
    return specs


def warmup_jit_kernels(kernel_type: int = 0, *, arch: str | None = None) -> list[str]:
    """MORI's pre-compile hook: builds the registered variants of ``kernel_type`` into the JIT cache
    (call it in the launcher before spawning PEs, so they do not all compile at once). Returns the
    names built. Needs a compiler, not a GPU when ``arch`` is given (e.g. "sm_90")."""
    low_latency = int(kernel_type) == 5  # IntraNodeLL; combine is shared by both intra-node types
    chosen = [
        spec for spec in jit_kernels()
        if not spec.name.startswith("ep_dispatch") or spec.name.endswith("_ll") == low_latency
    ]  # fmt: skip
    for spec in chosen:
        spec.compile(arch=arch)
    return [spec.name for spec in chosen]
