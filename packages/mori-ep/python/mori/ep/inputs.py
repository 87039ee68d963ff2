# SPDX-License-Identifier: MIT
"""Checks of dispatch/combine arguments, run before anything is launched. Each failure raises
``EpInputError`` naming the argument, the value and the limit."""

from __future__ import annotations

from typing import Any

from mori.ep.config import EpDispatchCombineConfig
from mori.ep.errors import EpInputError

#: Element types dispatch moves (as bytes: fp8 rows travel as they are, with their scales).
#: float8_e4m3fnuz is MI300's fp8, which vLLM's and SGLang's MORI paths pick there.
#: float4_e2m1fn_x2 is packed FP4 (two e2m1 a byte: the row is hidden/2 elements of 1 byte; MXFP4
#: and NVFP4 differ only in their scales); uint8 rows are any caller format, moved as bytes.
DISPATCH_DTYPES = (
    "bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float4_e2m1fn_x2", "uint8",
)  # fmt: skip
#: Dispatch payloads combine cannot take: opaque bytes have no sum.
BYTE_PAYLOAD_DTYPES = ("float4_e2m1fn_x2", "uint8")
#: Element types of dispatch scales (bytes forwarded verbatim): float8_e8m0fnu is the MX block scale.
SCALE_DTYPES = (*DISPATCH_DTYPES, "float8_e8m0fnu", "int8", "uint8", "int32")
#: Element types combine sums (in fp32).
COMBINE_DTYPES = ("bfloat16", "float16", "float32")
#: fp8 rows combine also takes, as MORI's combine does: decoded in their own format, summed in
#: fp32, re-encoded (saturating). The usual serving setup combines bf16; these are MORI's extra.
FP8_COMBINE_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz")


def dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "data_ptr") and hasattr(value, "dtype") and hasattr(value, "shape")


def check_tensor(
    name: str,
    value: Any,
    *,
    device: Any,
    dtypes: tuple[str, ...],
    ndim: int = 2,
    rows: tuple[int, int] | None = None,
    cols: int | None = None,
) -> None:
    """A contiguous ``ndim``-D tensor on ``device`` of one of ``dtypes``, with ``rows[0] <=
    shape[0] <= rows[1]`` and ``shape[1] == cols`` where given."""
    if not _is_tensor(value):
        raise EpInputError(f"{name} must be a torch tensor, got {type(value).__name__}")
    if value.device != device:
        raise EpInputError(f"{name} is on {value.device}; this op's PE runs on {device}")
    if dtype_name(value) not in dtypes:
        raise EpInputError(f"{name}.dtype={value.dtype} is not supported; expected one of {', '.join(dtypes)}")
    if value.dim() != ndim:
        raise EpInputError(f"{name} must be {ndim}-D, got shape {tuple(value.shape)}")
    if not value.is_contiguous():
        raise EpInputError(f"{name} must be contiguous (call .contiguous())")
    if rows is not None and not rows[0] <= value.shape[0] <= rows[1]:
        raise EpInputError(f"{name} has {value.shape[0]} rows; the limit is [{rows[0]}, {rows[1]}]")
    if cols is not None and value.shape[1] != cols:
        raise EpInputError(f"{name} has {value.shape[1]} columns, expected {cols}")
    if value.data_ptr() % 16:
        raise EpInputError(f"{name} starts at {value.data_ptr():#x}, not 16-byte aligned (pass a fresh tensor)")


def check_row(name: str, value: Any, config: EpDispatchCombineConfig) -> tuple[int, int]:
    """(hidden, row bytes) of a token tensor, within the config's limits."""
    padded = name == "input" and dtype_name(value) == "uint8"  # byte_rows pads
    return check_row_size(name, int(value.shape[1]), int(value.element_size()), value.dtype, config, padded=padded)


def check_row_size(
    name: str, hidden: int, itemsize: int, dtype: object, config: EpDispatchCombineConfig, *, padded: bool = False
) -> tuple[int, int]:
    """(hidden, row bytes) of rows of ``hidden`` elements of ``itemsize`` bytes, within the config's
    limits; ``padded`` rows need not be a multiple of 16 bytes (the caller pads them)."""
    if hidden > config.hidden_dim:
        raise EpInputError(f"{name} has hidden size {hidden}, above config.hidden_dim={config.hidden_dim}")
    if itemsize > config.max_token_type_size:
        raise EpInputError(
            f"{name}.dtype={dtype} has {itemsize}-byte elements, above "
            f"config.max_token_type_size={config.max_token_type_size}"
        )
    if (hidden * itemsize) % 16 and not padded:
        raise EpInputError(f"{name} rows are {hidden * itemsize} bytes; they must be a multiple of 16 bytes")
    return hidden, hidden * itemsize


def check_combine_dtype(input: Any) -> None:
    """Byte payloads dispatch moves but combine cannot sum (checked before the dtype list, to say why)."""
    if _is_tensor(input) and dtype_name(input) in BYTE_PAYLOAD_DTYPES:
        raise EpInputError(
            f"input.dtype={input.dtype}: combine sums rows, and {dtype_name(input)} rows are packed or opaque "
            f"bytes with no sum; dequantise the expert outputs to one of {', '.join(COMBINE_DTYPES)} (quant_type="
            "'fp4_blockwise' sends them as FP4)"
        )


def check_dispatch(
    config: EpDispatchCombineConfig, device: Any, input: Any, weights: Any, scales: Any, indices: Any
) -> None:
    tokens, topk = config.max_num_inp_token_per_rank, config.num_experts_per_token
    check_tensor("input", input, device=device, dtypes=DISPATCH_DTYPES, rows=(0, tokens))
    rows = int(input.shape[0])
    check_row("input", input, config)
    check_tensor("indices", indices, device=device, dtypes=("int32",), rows=(rows, rows), cols=topk)
    if weights is not None:
        check_tensor("weights", weights, device=device, dtypes=("float32",), rows=(rows, rows), cols=topk)
    if scales is not None:
        if config.scale_dim == 0:
            raise EpInputError("scales were passed but config.scale_dim=0")
        check_tensor("scales", scales, device=device, dtypes=SCALE_DTYPES, rows=(rows, rows))
        if scales.shape[1] * scales.element_size() > config.scale_dim * config.scale_type_size:
            raise EpInputError(
                f"scales rows are {scales.shape[1] * scales.element_size()} bytes, above "
                f"config.scale_dim * scale_type_size = {config.scale_dim * config.scale_type_size}"
            )
        if (scales.shape[1] * scales.element_size()) % 4:
            raise EpInputError(f"scales rows are {scales.shape[1] * scales.element_size()} bytes; use a multiple of 4")


def check_expert_ids(config: EpDispatchCombineConfig, indices: Any) -> None:
    """Every id in [-1, total experts): a host read of the ids (a device sync on a GPU)."""
    if indices.numel() == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    if low < -1 or high >= config.total_experts:
        bad = low if low < -1 else high
        raise EpInputError(
            f"indices holds expert id {bad}; ids must be in [-1, {config.total_experts}) "
            f"(world_size={config.world_size} x num_experts_per_rank={config.num_experts_per_rank})"
        )
