# SPDX-License-Identifier: MIT
"""All-reduce, all-gather and all-to-all on a communicator: collective_args.h's protocol, run by
host code on the cpu backend and by the JIT kernels of collectives.cu on cuda.

One engine per communicator owns a dev comm (its LSA barriers) and a scratch area of two buffers
that calls alternate between; see collective_args.h for why no call needs a closing barrier. The
engine spans the ranks of one node (the LSA team); on a communicator of several nodes,
cross_node.py runs each call as this node-local step plus an exchange between nodes."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from mori.cco import _C
from mori.cco.errors import CcoInvalidArgumentError
from mori.cco.layout import (
    ALL_GATHER,
    ALL_REDUCE_ONE_SHOT,
    ALL_REDUCE_TWO_SHOT,
    ALL_TO_ALL,
    DTYPE_CODES,
    OP_CODES,
    WIRE_FP8,
    WIRE_NATIVE,
    CollectiveArgs,
    DevComm,
)
from mori.cco.tensors import dtype_name

logger = logging.getLogger("mori.cco")

_REDUCTION_DTYPES = ("float32", "bfloat16", "float16", "int32", "int64")
_FLOAT_DTYPES = ("float32", "bfloat16", "float16")
_ALGORITHMS = {"one_shot": ALL_REDUCE_ONE_SHOT, "two_shot": ALL_REDUCE_TWO_SHOT}
_MIN_SCRATCH = 1 << 20


def wire_code(wire_dtype: Any) -> int:
    """MORI_CCO_WIRE_* for None / "fp8" / torch.float8_e4m3fn."""
    if wire_dtype is None:
        return WIRE_NATIVE
    if str(wire_dtype).removeprefix("torch.") in ("fp8", "float8_e4m3fn"):
        return WIRE_FP8
    raise CcoInvalidArgumentError(f"wire_dtype={wire_dtype!r} is not None, 'fp8' or torch.float8_e4m3fn")


class CollectiveEngine:
    """The collectives of one communicator (made on first use by Communicator.all_reduce & co.)."""

    def __init__(self, comm: Any) -> None:
        from mori.cco.communicator import CCODevCommRequirements

        self.comm = comm
        self.world = comm.lsa_size  # the node's ranks; cross_node.py spans nodes on top of this
        self.cuda = comm.backend == "cuda"
        blocks = int(_C.setting_int("MORI_CCO_BLOCKS"))
        if self.cuda:
            from mori.cco import kernels

            # Blocks of different ranks wait for each other, so all must be resident at once: the
            # share counts every rank on this machine, which is more than the node's when one
            # host stands for several nodes.
            self.blocks = blocks or kernels.default_blocks(comm.device, comm.host_ranks)
            self.threads = kernels.THREADS
            self._kernels = kernels.CudaCollectives(comm.device, self.world)
        else:
            self.blocks, self.threads = 1, 1  # one host thread runs the whole call
        # Two-shot waits twice per block: 2 * blocks barriers.
        self.dev_comm = comm.create_dev_comm(
            CCODevCommRequirements(lsa_barrier_count=2 * self.blocks, gda_signal_count=0, gda_counter_count=0)
        )
        self._dev_struct = DevComm.from_buffer_copy(self.dev_comm.raw)
        self._scratch: Any = None
        self._half = 0
        self.one_shot_max = int(_C.setting_size("MORI_CCO_ONE_SHOT_MAX"))

    def close(self) -> None:
        self._synchronize()
        self.comm.check_device_error(self.dev_comm)

    # ---- helpers ----
    def _synchronize(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.comm.device)

    def _check_tensor(self, name: str, tensor: Any, dtypes: tuple[str, ...] | None = None) -> None:
        import torch

        if not isinstance(tensor, torch.Tensor):
            raise CcoInvalidArgumentError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if not tensor.is_contiguous():
            raise CcoInvalidArgumentError(f"{name} must be contiguous (shape {tuple(tensor.shape)})")
        if dtypes is not None and dtype_name(tensor.dtype) not in dtypes:
            raise CcoInvalidArgumentError(f"{name}.dtype={tensor.dtype} is not one of {list(dtypes)}")
        want = f"cuda:{self.comm.device}" if self.cuda else "cpu"
        if str(tensor.device) != want and not (
            self.cuda and tensor.device.type == "cuda" and tensor.device.index == self.comm.device
        ):
            raise CcoInvalidArgumentError(f"{name} is on {tensor.device}, but this {self.comm.backend} "
                                          f"communicator needs tensors on {want}")  # fmt: skip

    def _ensure_scratch(self, needed: int) -> None:
        if needed <= self._half:
            return
        half = max(needed, 2 * self._half, _MIN_SCRATCH)
        half = (half + _MIN_SCRATCH - 1) // _MIN_SCRATCH * _MIN_SCRATCH
        if self._scratch is not None:
            # Peers may still be reading the old buffers: every rank drains its own work, and the
            # free's symmetry exchange then orders that before anyone reuses the range.
            self._synchronize()
            self.comm.free_mem(self._scratch)
        logger.debug("collective scratch grows to 2 x %d bytes", half)
        self._scratch = self.comm.alloc_mem(2 * half)
        self._half = half

    def _run(self, kind: int, inp: Any, out: Any, count: int, dtype: str, op: int, wire: int) -> None:
        elem = 1 if kind in (ALL_GATHER, ALL_TO_ALL) else inp.element_size()
        self._ensure_scratch(int(_C.scratch_bytes(kind, count, elem, self.world, wire)))
        args = CollectiveArgs(
            comm=self._dev_struct,
            input=inp.data_ptr(),
            output=out.data_ptr(),
            count=count,
            scratch_offset=self._scratch.ptr - self.comm.ptr,
            scratch_half=self._half,
            kind=kind,
            dtype=DTYPE_CODES[dtype],
            op=op,
            wire=wire,
            barrier_base=0,
        )
        if self.cuda:
            import torch

            stream = torch.cuda.current_stream(self.comm.device).cuda_stream
            self._kernels.run(
                args, kind=kind, dtype=dtype, op=op, wire=wire, grid=self.blocks, block=self.threads, stream=stream
            )
        else:
            _C.run_collective(ctypes.addressof(args))

    # ---- the collectives ----
    def all_reduce(self, tensor: Any, op: str, *, out: Any, algorithm: str, wire_dtype: Any) -> Any:
        self._check_tensor("tensor", tensor, _REDUCTION_DTYPES)
        out = tensor if out is None else out
        self._check_tensor("out", out)
        if out.dtype != tensor.dtype or out.numel() != tensor.numel():
            raise CcoInvalidArgumentError(
                f"out ({out.dtype}, {out.numel()} elements) must match tensor ({tensor.dtype}, {tensor.numel()})"
            )
        if op not in OP_CODES:
            raise CcoInvalidArgumentError(f"op={op!r} is not one of {sorted(OP_CODES)}")
        wire = wire_code(wire_dtype)
        dtype = dtype_name(tensor.dtype)
        if wire == WIRE_FP8 and (dtype not in _FLOAT_DTYPES or op != "sum"):
            raise CcoInvalidArgumentError(
                f"wire_dtype=fp8 needs a floating tensor and op='sum', got {tensor.dtype} and op={op!r}"
            )
        if algorithm == "auto":
            kind = (
                ALL_REDUCE_ONE_SHOT
                if tensor.numel() * tensor.element_size() <= self.one_shot_max
                else ALL_REDUCE_TWO_SHOT
            )
        elif algorithm in _ALGORITHMS:
            kind = _ALGORITHMS[algorithm]
        else:
            raise CcoInvalidArgumentError(f"algorithm={algorithm!r} is not 'auto', 'one_shot' or 'two_shot'")
        if tensor.numel() > 0:
            self._run(kind, tensor, out, tensor.numel(), dtype, OP_CODES[op], wire)
        return out

    def check_all_gather(self, output: Any, input: Any, world: int) -> None:
        self._check_tensor("input", input)
        self._check_tensor("output", output)
        if output.dtype != input.dtype or output.numel() != input.numel() * world:
            raise CcoInvalidArgumentError(
                f"output ({output.dtype}, {output.numel()} elements) must be {input.dtype} with "
                f"world * input.numel() = {world * input.numel()} elements"
            )

    def check_all_to_all(self, output: Any, input: Any, world: int) -> None:
        self._check_tensor("input", input)
        self._check_tensor("output", output)
        if output.dtype != input.dtype or output.numel() != input.numel():
            raise CcoInvalidArgumentError(
                f"output ({output.dtype}, {output.numel()}) must match input ({input.dtype}, {input.numel()})"
            )
        if input.numel() % world:
            raise CcoInvalidArgumentError(f"input.numel()={input.numel()} is not divisible by the world size {world}")

    def all_gather(self, output: Any, input: Any) -> Any:
        self.check_all_gather(output, input, self.world)
        nbytes = input.numel() * input.element_size()
        if nbytes > 0:
            self._run(ALL_GATHER, input, output, nbytes, "uint8", 0, WIRE_NATIVE)
        return output

    def all_to_all(self, output: Any, input: Any) -> Any:
        self.check_all_to_all(output, input, self.world)
        chunk = input.numel() // self.world * input.element_size()
        if chunk > 0:
            self._run(ALL_TO_ALL, input, output, chunk, "uint8", 0, WIRE_NATIVE)
        return output
