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


def _traced_spec(name: str, source: str, defines: dict[str, int]) -> jit.KernelSpec:
    """The variant ``name`` of ``source`` with ``defines``, and with trace points when profiling."""
    suffix, profile_defines, profile_includes = _profile_build()
    return jit.KernelSpec(
        name + suffix,
        SOURCE_DIR / source,
        defines={**defines, **profile_defines},
        include_dirs=(SOURCE_DIR, jit.include_dir(), *profile_includes),
    )


def dispatch_spec(world_size: int, topk: int, low_latency: bool, net: bool = False) -> jit.KernelSpec:
    """``mori_ep_dispatch`` for one (world size, top-k, low latency) combination; ``net``: the
    forward of an inter-node proxy (it uses mori-shmem's device API: ``shmem_module_init`` it)."""
    return _traced_spec(
        f"ep_dispatch_w{world_size}_k{topk}{'_ll' if low_latency else ''}{'_net' if net else ''}",
        "ep_dispatch.cu",
        {"MORI_EP_WORLD": world_size, "MORI_EP_TOPK": topk, "MORI_EP_LL": int(low_latency), "MORI_EP_NET": int(net)},
    )


def combine_spec(world_size: int, topk: int, dtype: str, quant: int, net: bool = False) -> jit.KernelSpec:
    """``mori_ep_combine_stage`` and ``mori_ep_combine`` for one row dtype and wire format; ``net``:
    the inter-node variant (a proxy's reduce, plus ``mori_ep_net_sum``)."""
    return _traced_spec(
        f"ep_combine_w{world_size}_k{topk}_{dtype}_q{quant}{'_net' if net else ''}",
        "ep_combine.cu",
        {"MORI_EP_WORLD": world_size, "MORI_EP_TOPK": topk, "MORI_EP_DTYPE": DTYPE_CODES[dtype],
         "MORI_EP_QUANT": quant, "MORI_EP_NET": int(net)},
    )  # fmt: skip


def net_spec(world_size: int, topk: int) -> jit.KernelSpec:
    """``mori_ep_net_pack`` and ``mori_ep_net_send`` of the inter-node kernel types (they use
    mori-shmem's device API: ``shmem_module_init`` the module)."""
    return jit.KernelSpec(
        f"ep_net_w{world_size}_k{topk}",
        SOURCE_DIR / "ep_net.cu",
        defines={"MORI_EP_WORLD": world_size, "MORI_EP_TOPK": topk},
        include_dirs=(SOURCE_DIR, jit.include_dir()),
    )


def jit_kernels() -> list[jit.KernelSpec]:
    """The variants of the default serving setup (DeepSeek-V3 shape, 8 PEs, top-8) and of the test
    suite (2/4/8 PEs): fp8/bf16 dispatch, bf16 and fp32 combine in every wire format bf16 allows."""
    specs: list[jit.KernelSpec] = []
    for world_size in (2, 4, 8):
        for topk in (4, 8):
            specs += [dispatch_spec(world_size, topk, ll) for ll in (False, True)]
            specs += [combine_spec(world_size, topk, "bfloat16", quant) for quant in (0, 1, 2, 3)]
            specs.append(combine_spec(world_size, topk, "float32", 0))
    for world_size in (8, 16):  # the inter-node types, DeepSeek-V3 shape on 2 x 4 and 2 x 8 PEs
        specs.append(net_spec(world_size, 8))
        specs += [dispatch_spec(world_size, 8, ll, net=True) for ll in (False, True)]
        specs.append(combine_spec(world_size, 8, "bfloat16", 0, net=True))
    return specs


def warmup_jit_kernels(kernel_type: int = 0, *, arch: str | None = None) -> list[str]:
    """MORI's pre-compile hook: builds the registered variants of ``kernel_type`` into the JIT cache
    (call it in the launcher before spawning PEs, so they do not all compile at once). Returns the
    names built. Needs a compiler, not a GPU when ``arch`` is given (e.g. "sm_90")."""
    kind = int(kernel_type)
    low_latency = kind in (3, 5)  # InterNodeV1LL, IntraNodeLL
    net = kind in (1, 2, 3, 4)  # the inter-node types

    def wanted(name: str) -> bool:
        if name.startswith("ep_net"):
            return net
        if name.endswith("_net") != net:
            return False
        return not name.startswith("ep_dispatch") or name.removesuffix("_net").endswith("_ll") == low_latency

    chosen = [spec for spec in jit_kernels() if wanted(spec.name)]
    jit.compile_specs(chosen, arch=arch)  # at once, in threads
    return [spec.name for spec in chosen]
