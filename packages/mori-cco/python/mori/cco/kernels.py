# SPDX-License-Identifier: MIT
"""The CUDA kernels of mori-cco as JIT variants (compiled at first use by mori-shmem's JIT and
listed for ``mori-jit precompile`` through the ``mori.jit_kernels`` entry point).

One source, ``device_src/collectives.cu``, holds one kernel, ``mori_cco_collective``, specialised by
the kind of call, the element type, the reduction, the wire format and the LSA team size. It follows
the protocol of ``collective_args.h`` (which the cpu backend runs too): stage into this rank's
scratch buffer, LSA barrier ``barrier_base + block``, read the peers' scratch through the flat VA.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from mori.cco import layout
from mori.cco.errors import CcoInvalidArgumentError
from mori.shmem import jit

SOURCE_DIR = Path(__file__).resolve().parent / "device_src"
KERNEL = "mori_cco_collective"

#: Bounds of the default number of blocks of every collective launch. Block b of a rank
#: synchronises only with block b of its peers (LSA barrier ``barrier_base + b``) and handles the
#: same elements in every call, so the grid must be the same on every rank and in every call of a
#: communicator (the dev comm's creation checks that the ranks agree).
MIN_BLOCKS = 8
MAX_BLOCKS = 64


def default_blocks(device: int, world: int) -> int:
    """The SMs this rank may use, within [MIN_BLOCKS, MAX_BLOCKS] and a multiple of 8: all of
    them when it has the GPU to itself, its share when the `world` ranks of this machine share
    one GPU under MPS (every rank sees one device). Measured on the H200 with 2 ranks sharing it:
    16 blocks reach 197 GB/s at 64 MiB, 64 blocks 387 GB/s (docs/benchmarks/cco.md)."""
    import torch

    sms = int(torch.cuda.get_device_properties(device).multi_processor_count)
    sharing = world if shares_one_gpu(world) else 1
    return max(MIN_BLOCKS, min(MAX_BLOCKS, sms // sharing // 8 * 8))


def shares_one_gpu(world: int) -> bool:
    """Whether the team's ranks share this process's one visible GPU (several ranks under MPS)."""
    import torch

    return bool(world > 1 and torch.cuda.device_count() == 1)


#: Threads per block: the kernel's __launch_bounds__ (128 registers a thread, which the 8-peer
#: reduction needs without spilling) and 16 warps to quantise 16 fp8 blocks at a time. Smaller
#: blocks (whole warps) work too.
THREADS = 512
#: Team sizes whose variants ``jit_kernels`` lists (the test suite's).
TEST_WORLDS = (2, 4, 8)
#: The largest team one module serves (the kernel's static limit).
MAX_WORLD = 64

KIND_NAMES = {
    layout.ALL_REDUCE_ONE_SHOT: "ar1",
    layout.ALL_REDUCE_TWO_SHOT: "ar2",
    layout.ALL_GATHER: "ag",
    layout.ALL_TO_ALL: "a2a",
}
WIRE_NAMES = {layout.WIRE_NATIVE: "native", layout.WIRE_FP8: "fp8"}
REDUCE_KINDS = (layout.ALL_REDUCE_ONE_SHOT, layout.ALL_REDUCE_TWO_SHOT)
FLOAT_DTYPES = ("float32", "bfloat16", "float16")
_OP_NAMES = {code: name for name, code in layout.OP_CODES.items()}


def include_dir() -> Path:
    """The installed ``mori/cco/include``: the CCO device API (``mori_cco/cco_device.cuh``) and
    ``mori_cco/dev_comm.h``, for kernels of your own (with ``mori.shmem.jit.include_dir()``)."""
    return Path(__file__).resolve().parent / "include"


def barriers_per_call(kind: int, grid: int) -> int:
    """LSA barriers one call uses, from ``barrier_base``: one per block, two-shot two."""
    return 2 * grid if kind == layout.ALL_REDUCE_TWO_SHOT else grid


def op_name(op: str | int) -> str:
    """``op`` as a name of ``layout.OP_CODES``: given as that name or as its code."""
    if isinstance(op, str) and op in layout.OP_CODES:
        return op
    if type(op) is int and op in _OP_NAMES:
        return _OP_NAMES[op]
    raise CcoInvalidArgumentError(f"op={op!r} is not supported; expected one of {sorted(layout.OP_CODES)} or its code")


def _check(kind: int, dtype: str, op: str, wire: int, world: int) -> None:
    if kind not in KIND_NAMES:
        raise CcoInvalidArgumentError(f"kind={kind!r} is not a collective kind; expected one of {sorted(KIND_NAMES)}")
    if dtype not in layout.DTYPE_CODES:
        raise CcoInvalidArgumentError(f"dtype={dtype!r} is not supported; expected one of {sorted(layout.DTYPE_CODES)}")
    if wire not in WIRE_NAMES:
        raise CcoInvalidArgumentError(f"wire={wire!r} is not a wire format; expected one of {sorted(WIRE_NAMES)}")
    if type(world) is not int or not 1 <= world <= MAX_WORLD:
        raise CcoInvalidArgumentError(f"world={world!r} must be an int in [1, {MAX_WORLD}]")
    if kind in REDUCE_KINDS:
        if dtype == "uint8":
            raise CcoInvalidArgumentError("dtype='uint8' is for all-gather / all-to-all byte copies, not reductions")
        if wire == layout.WIRE_FP8 and dtype not in FLOAT_DTYPES:
            raise CcoInvalidArgumentError(f"the fp8 wire carries {', '.join(FLOAT_DTYPES)}, not dtype={dtype!r}")


def _normalise(kind: int, op: str, wire: int) -> tuple[str, int]:
    """Copies ignore the reduction and the wire format: one variant serves them all."""
    if kind in REDUCE_KINDS:
        return op, wire
    return "sum", layout.WIRE_NATIVE


def collective_spec(kind: int, dtype: str, op: str | int, wire: int, world: int) -> jit.KernelSpec:
    """``mori_cco_collective`` for one (kind, dtype, op, wire, LSA team size) combination.

    ``kind`` and ``wire`` are layout's codes (``layout.ALL_REDUCE_ONE_SHOT``, ``layout.WIRE_FP8``,
    ...), ``dtype`` a name of ``layout.DTYPE_CODES``, ``op`` a name or code of ``layout.OP_CODES``.
    All-gather and all-to-all move ``count * itemsize(dtype)`` bytes per rank; use ``"uint8"`` and
    a count in bytes to serve every element type with one variant.
    """
    op = op_name(op)
    _check(kind, dtype, op, wire, world)
    op, wire = _normalise(kind, op, wire)
    name = f"cco_{KIND_NAMES[kind]}_w{world}_{dtype}"
    if kind in REDUCE_KINDS:
        name += f"_{op}_{WIRE_NAMES[wire]}"
    return jit.KernelSpec(
        name,
        SOURCE_DIR / "collectives.cu",
        defines={
            "MORI_CCO_KIND": kind,
            "MORI_CCO_DTYPE": layout.DTYPE_CODES[dtype],
            "MORI_CCO_OP": layout.OP_CODES[op],
            "MORI_CCO_WIRE": wire,
            "MORI_CCO_WORLD": world,
        },
        include_dirs=(SOURCE_DIR, include_dir(), jit.include_dir()),
    )


def jit_kernels() -> list[jit.KernelSpec]:
    """The variants of the test suite (2/4/8 ranks): one- and two-shot all-reduce of every
    reduction dtype and op on the native wire, float32/bfloat16 sums on the fp8 wire, and byte
    all-gather / all-to-all. ``mori-jit precompile`` builds them in parallel before the ranks start."""
    specs: list[jit.KernelSpec] = []
    for world in TEST_WORLDS:
        for kind in REDUCE_KINDS:
            for dtype in (*FLOAT_DTYPES, "int32", "int64"):
                for op in layout.OP_CODES:
                    specs.append(collective_spec(kind, dtype, op, layout.WIRE_NATIVE, world))
            for dtype in ("float32", "bfloat16"):
                specs.append(collective_spec(kind, dtype, "sum", layout.WIRE_FP8, world))
        for kind in (layout.ALL_GATHER, layout.ALL_TO_ALL):
            specs.append(collective_spec(kind, "uint8", "sum", layout.WIRE_NATIVE, world))
    return specs


class CudaCollectives:
    """Loads (once per variant) and launches ``mori_cco_collective`` for one communicator's team on
    one GPU. Launches are asynchronous and never synchronise the host, so they can be captured in a
    CUDA graph; the caller reads the dev comm's error word to learn about expired waits."""

    def __init__(self, device: int, world: int) -> None:
        if type(world) is not int or not 1 <= world <= MAX_WORLD:
            raise CcoInvalidArgumentError(f"world={world!r} must be an int in [1, {MAX_WORLD}]")
        self.device = device
        self.world = world
        self._functions: dict[tuple[int, str, str, int], jit.Function] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        loaded = len(self._functions)
        return f"<mori.cco.kernels.CudaCollectives device={self.device} world={self.world} loaded={loaded}>"

    def function(self, kind: int, dtype: str, op: str | int, wire: int) -> jit.Function:
        """The kernel of one variant, compiled and loaded on first use."""
        key = (kind, dtype, *_normalise(kind, op_name(op), wire))
        found = self._functions.get(key)
        if found is not None:
            return found
        spec = collective_spec(kind, dtype, op, wire, self.world)
        with self._lock:
            found = self._functions.get(key)
            if found is None:
                found = spec.load(device=self.device).function(KERNEL)
                self._functions[key] = found
        return found

    def run(
        self,
        args: layout.CollectiveArgs,
        *,
        kind: int,
        dtype: str,
        op: str | int,
        wire: int,
        grid: int,
        block: int,
        stream: Any,
    ) -> None:
        """Launches one collective described by ``args`` (whose kind/dtype/op/wire fields must agree
        with the keywords, which pick the variant). ``grid`` must be the communicator's fixed grid
        and ``args.barrier_base`` the first of ``barriers_per_call(kind, grid)`` LSA barriers."""
        function = self.function(kind, dtype, op, wire)
        self._check_args(args, kind, dtype, op_name(op), wire, block)
        function.launch(grid, block, [args], stream=stream)

    def _check_args(self, args: layout.CollectiveArgs, kind: int, dtype: str, op: str, wire: int, block: int) -> None:
        if args.kind != kind or args.dtype != layout.DTYPE_CODES[dtype]:
            raise CcoInvalidArgumentError(
                f"args.kind={args.kind}, args.dtype={args.dtype} disagree with kind={kind}, dtype={dtype!r}"
            )
        if kind in REDUCE_KINDS and (args.op != layout.OP_CODES[op] or args.wire != wire):
            raise CcoInvalidArgumentError(
                f"args.op={args.op}, args.wire={args.wire} disagree with op={op!r}, wire={wire}"
            )
        if args.comm.lsa_size != self.world:
            raise CcoInvalidArgumentError(f"args.comm.lsa_size={args.comm.lsa_size} differs from world={self.world}")
        if type(block) is not int or block % 32 or not 32 <= block <= THREADS:
            raise CcoInvalidArgumentError(
                f"block={block!r} must be a multiple of 32 in [32, {THREADS}] (whole warps: a warp quantises "
                "one fp8 block; the kernel's launch bound)"
            )
