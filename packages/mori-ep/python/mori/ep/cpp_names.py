# SPDX-License-Identifier: MIT
"""What MORI's compiled module exposes for EP v1, under its names; ``mori.cpp`` resolves them here.

MORI's Python layer builds a C++ ``EpDispatchCombineConfig`` (pybind, every field defaulted,
snake_case read/write attributes) from its dataclass; code written against ``mori.cpp`` directly
builds one itself. Its functions take raw pointers and op handles: ``launch_local_expert_count``
counts on the device of the heap's backend (on the host for the cpu backend), and the profiler
accessors return ``(ptr, size)`` tuples as MORI's do.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Any

from mori.ep.config import EpDispatchCombineKernelType, EpDispatchCombineQuantType
from mori.ep.errors import EpConfigError, EpInputError
from mori.ep.local_expert_count import count_local_experts
from mori.ep.settings import note_geometry_without_effect

#: The version word that starts MORI's packed i32 config (``ToPackedI32Array``).
PACKED_CONFIG_VERSION = 1


@dataclasses.dataclass(eq=False, repr=False)  # compared and printed as the pybind object is: by identity
class EpDispatchCombineConfig:
    """MORI's C++ config: positional order and defaults of its pybind constructor."""

    rank: int = 0
    world_size: int = 0
    hidden_dim: int = 0
    scale_dim: int = 0
    scale_type_size: int = 0
    max_token_type_size: int = 0
    max_num_inp_token_per_rank: int = 0
    num_experts_per_rank: int = 0
    num_experts_per_token: int = 0
    max_total_recv_tokens: int = 0
    warp_num_per_block: int = 0
    block_num: int = 0
    use_external_inp_buf: bool = True
    kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode
    gpu_per_node: int = 8
    rdma_block_num: int = 0
    num_qp_per_pe: int = 1
    quant_type: EpDispatchCombineQuantType = EpDispatchCombineQuantType.None_

    def __post_init__(self) -> None:
        # pybind converts the enum arguments: an int (MORI's packed form) gives the enum member.
        self.kernel_type = EpDispatchCombineKernelType(self.kernel_type)
        self.quant_type = EpDispatchCombineQuantType(self.quant_type)

    def max_num_tokens_to_send_per_rank(self) -> int:
        return self.max_num_inp_token_per_rank

    def max_num_tokens_to_send(self) -> int:
        return self.world_size * self.max_num_inp_token_per_rank

    def max_num_tokens_to_recv_per_rank(self) -> int:
        """``min(ceil(max_total_recv_tokens / world_size), M)`` with a cap, else M."""
        if self.max_total_recv_tokens > 0:
            per_rank = -(-self.max_total_recv_tokens // self.world_size)
            return min(per_rank, self.max_num_inp_token_per_rank)
        return self.max_num_inp_token_per_rank

    def max_num_tokens_to_recv(self) -> int:
        return self.world_size * self.max_num_tokens_to_recv_per_rank()

    def to_packed_array(self) -> list[int]:
        """MORI's versioned 20-int wire format; the last word (MORI's SDMA snapshot) is 0 here."""
        return [
            PACKED_CONFIG_VERSION,
            self.rank,
            self.world_size,
            self.hidden_dim,
            self.scale_dim,
            self.scale_type_size,
            self.max_token_type_size,
            self.max_num_inp_token_per_rank,
            self.num_experts_per_rank,
            self.num_experts_per_token,
            self.max_total_recv_tokens,
            self.warp_num_per_block,
            self.block_num,
            int(bool(self.use_external_inp_buf)),
            int(self.kernel_type),
            self.gpu_per_node,
            self.rdma_block_num,
            self.num_qp_per_pe,
            int(self.quant_type),
            0,
        ]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"EpDispatchCombineConfig({fields})"


class _DeviceArray:
    """``__cuda_array_interface__`` of a raw device pointer, for torch.as_tensor."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr, "version": 3}


def _int32_tensor(ptr: int, shape: tuple[int, ...], on_cuda: bool) -> Any:
    import torch

    if on_cuda:
        return torch.as_tensor(_DeviceArray(ptr, shape, "<i4"), device="cuda")
    count = 1
    for size in shape:
        count *= size
    if count == 0:
        return torch.empty(shape, dtype=torch.int32)
    return torch.frombuffer((ctypes.c_int32 * count).from_address(ptr), dtype=torch.int32).view(shape)


def launch_local_expert_count(
    config: Any,
    indices_ptr: int,
    total_recv_token_num_ptr: int,
    local_expert_count_ptr: int,
    block_num: int = -1,
    warp_per_block: int = -1,
    stream: int = 0,
) -> None:
    """Zeroes ``local_expert_count`` (int32 [num_experts_per_rank]) and counts in it, per local
    expert, the picks of the received rows ``indices`` (int32 [total_recv, num_experts_per_token])
    that name an expert of ``config.rank`` (``e // num_experts_per_rank == rank``). The pointers
    address the memory of the heap's backend: host memory on the cpu backend, which counts on the
    host at once; device memory on the cuda one, which counts on ``stream`` (0: the current torch
    stream) without a host sync, reading ``indices`` up to max_num_tokens_to_recv() rows (dispatch's
    out_indices has them) and counting those below ``*total_recv``. The geometry arguments are
    accepted for MORI's signature; a torch reduction needs none."""
    import mori.shmem as shmem

    note_geometry_without_effect(
        "launch_local_expert_count", block_num, warp_per_block, "the count is a torch reduction with no launch geometry"
    )
    for name, value in (("indices_ptr", indices_ptr), ("total_recv_token_num_ptr", total_recv_token_num_ptr),
                        ("local_expert_count_ptr", local_expert_count_ptr)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise EpInputError(f"{name}={value!r} must be a non-null address (an int)")
    experts, topk = int(config.num_experts_per_rank), int(config.num_experts_per_token)
    if experts < 1 or topk < 1 or not 0 <= int(config.rank) < max(int(config.world_size), 1):
        raise EpInputError(
            f"config has num_experts_per_rank={experts}, num_experts_per_token={topk}, rank={config.rank} of "
            f"world_size={config.world_size}; the count needs experts >= 1, top-k >= 1 and a rank in range"
        )
    if not shmem.shmem_is_initialized():
        raise EpConfigError("launch_local_expert_count needs mori.shmem initialised (it picks the backend's memory)")
    on_cuda = shmem.shmem_backend() == "cuda"
    total = _int32_tensor(total_recv_token_num_ptr, (1,), on_cuda)
    out = _int32_tensor(local_expert_count_ptr, (experts,), on_cuda)
    if on_cuda:
        import torch

        rows = int(config.max_num_tokens_to_recv())
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream else torch.cuda.stream(None):
            indices = _int32_tensor(indices_ptr, (rows, topk), True)
            count_local_experts(indices, total, out, int(config.rank), experts)
        return
    rows = int(total[0])
    if rows < 0:
        raise EpInputError(f"*total_recv_token_num_ptr={rows} must be >= 0")
    indices = _int32_tensor(indices_ptr, (rows, topk), False)
    count_local_experts(indices, total, out, int(config.rank), experts)


def _op_of(handle: Any) -> Any:
    from mori.ep.op import EpDispatchCombineOp

    op = getattr(handle, "_handle", handle)
    if not isinstance(op, EpDispatchCombineOp):
        raise EpInputError(f"handle must be an EpDispatchCombineOp (or its _handle), got {type(handle).__name__}")
    return op


def get_debug_time_buf(handle: Any) -> tuple[int, int]:
    """``(ptr, size)`` of the op's trace buffer as int64 words (MORI's pybind form); the op method
    ``get_debug_time_buf()`` gives the tensor."""
    buffer = _op_of(handle).get_debug_time_buf()
    return int(buffer.data_ptr()), int(buffer.numel() * buffer.element_size() // 8)


def get_debug_time_offset(handle: Any) -> tuple[int, int]:
    """``(ptr, size)`` of the trace buffer's per-warp headers as int32 words (four per warp slot,
    the third the warp's event count); the op method ``get_debug_time_offset()`` gives the counts."""
    import mori.viz.layout as viz_layout

    buffer = _op_of(handle).get_debug_time_buf()
    start, end = viz_layout.warp_headers_offset(), viz_layout.events_offset(_trace_warps())
    return int(buffer.data_ptr()) + start, (end - start) // 4


def _trace_warps() -> int:
    from mori.ep.op import TRACE_WARPS

    return TRACE_WARPS


__all__ = [
    "EpDispatchCombineConfig",
    "EpDispatchCombineKernelType",
    "EpDispatchCombineQuantType",
    "get_debug_time_buf",
    "get_debug_time_offset",
    "launch_local_expert_count",
]
