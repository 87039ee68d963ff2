# SPDX-License-Identifier: MIT
"""The block-scaled formats written once more, in numpy from their specifications, to check the
torch reference (mori.ep.payload_formats) the EP programs and mori-ep-bench verify against.

- e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit; magnitudes 0, 0.5 (subnormal), 1, 1.5,
  2, 3, 4, 6; round to nearest, ties to an even mantissa; saturating (no inf/NaN in the format).
- e8m0: a power of two 2^(byte - 127); OCP MX picks floor(log2(amax)) - emax(element) (emax 2 for
  e2m1, 8 for e4m3).
- e4m3 (fn): numpy has no fp8, so the value set is enumerated from the bit layout (bias 7,
  S.1111.111 is NaN) and rounded to nearest, ties to even code.
"""

from __future__ import annotations

import numpy as np


def _e2m1_magnitudes() -> np.ndarray:
    values = []
    for code in range(8):
        exponent, mantissa = code >> 1, code & 1
        values.append(mantissa * 0.5 if exponent == 0 else (1 + mantissa / 2) * 2.0 ** (exponent - 1))
    return np.array(values, dtype=np.float32)


E2M1 = _e2m1_magnitudes()


def _nearest_even(magnitude: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index into the ascending ``table`` of the value nearest each magnitude (ties: even index)."""
    distance = np.abs(magnitude[..., None].astype(np.float64) - table.astype(np.float64))
    best = distance.min(axis=-1, keepdims=True)
    candidates = distance == best
    even = candidates & (np.arange(table.size) % 2 == 0)
    return np.where(even.any(axis=-1), even.argmax(axis=-1), candidates.argmax(axis=-1))


def _encode(values: np.ndarray, table: np.ndarray, sign_bit: int) -> np.ndarray:
    """Sign-magnitude codes of ``values``: the sign in ``sign_bit``, below it the index of the
    nearest magnitude of ``table`` (saturating at its largest)."""
    magnitude = np.minimum(np.abs(values), table[-1])
    return (_nearest_even(magnitude, table) | np.where(values < 0, sign_bit, 0)).astype(np.uint8)


def _decode(codes: np.ndarray, table: np.ndarray, sign_bit: int) -> np.ndarray:
    magnitude = table[codes & (sign_bit - 1)]
    return np.where(codes & sign_bit, -magnitude, magnitude).astype(np.float32)


def e2m1_codes(values: np.ndarray) -> np.ndarray:
    return _encode(values, E2M1, 8)


def e2m1_values(codes: np.ndarray) -> np.ndarray:
    return _decode(codes, E2M1, 8)


def _e4m3_magnitudes() -> np.ndarray:
    values = []
    for code in range(0x7F):  # 0x7F is NaN
        exponent, mantissa = code >> 3, code & 7
        values.append(mantissa / 8 * 2.0**-6 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return np.array(values, dtype=np.float32)


E4M3 = _e4m3_magnitudes()


def e4m3_bytes(values: np.ndarray) -> np.ndarray:
    return _encode(values, E4M3, 0x80)  # saturates at 448


def e4m3_values(codes: np.ndarray) -> np.ndarray:
    return _decode(codes, E4M3, 0x80)


BLOCK = {"mxfp4": 32, "nvfp4": 16, "mxfp8": 32}
NVFP4_GLOBAL = np.float32(0.5)  # the workload's per-tensor global scale (payload_formats.NVFP4_GLOBAL_SCALE)


def quantize(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(payload bytes, scale bytes) of fp32 rows ``x`` [N, H]."""
    n, hidden = x.shape
    blocks = x.astype(np.float32).reshape(n, hidden // BLOCK[fmt], BLOCK[fmt])
    amax = np.abs(blocks).max(axis=2)
    if fmt == "nvfp4":
        scale_bytes = e4m3_bytes((amax / np.float32(6) / NVFP4_GLOBAL).astype(np.float32))
        scale = e4m3_values(scale_bytes) * NVFP4_GLOBAL
    else:
        emax = 2 if fmt == "mxfp4" else 8
        with np.errstate(divide="ignore"):
            shared = np.where(amax > 0, np.floor(np.log2(amax)).astype(np.int64) - emax, -127).clip(-127, 127)
        scale = np.ldexp(np.float32(1), shared).astype(np.float32)
        scale_bytes = (shared + 127).astype(np.uint8)
    scaled = (blocks / np.where(scale > 0, scale, 1)[:, :, None]).astype(np.float32).reshape(n, hidden)
    if fmt == "mxfp8":
        return e4m3_bytes(scaled), scale_bytes
    codes = e2m1_codes(scaled)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), scale_bytes


def dequantize(payload: np.ndarray, scale_bytes: np.ndarray, fmt: str) -> np.ndarray:
    n = payload.shape[0]
    if fmt == "mxfp8":
        values = e4m3_values(payload)
    else:
        values = e2m1_values(np.stack((payload & 0xF, payload >> 4), axis=2).reshape(n, 2 * payload.shape[1]))
    if fmt == "nvfp4":
        scale = e4m3_values(scale_bytes) * NVFP4_GLOBAL
    else:
        scale = np.ldexp(np.float32(1), scale_bytes.astype(np.int64) - 127).astype(np.float32)
    hidden = values.shape[1]
    return (
        (values.reshape(n, hidden // BLOCK[fmt], BLOCK[fmt]) * scale[:, :, None]).reshape(n, hidden).astype(np.float32)
    )


def fp4_blockwise(rows: np.ndarray, quant_blocks: int) -> np.ndarray:
    """What MORI's fp4_blockwise combine delivers of fp32 rows: per block scale = amax / 6 in fp32
    (1 for an all-zero block), e2m1 of row / scale, times the scale."""
    blocks = rows.astype(np.float32).reshape(rows.shape[0], quant_blocks, rows.shape[1] // quant_blocks)
    amax = np.abs(blocks).max(axis=2, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(6), np.float32(1)).astype(np.float32)
    codes = e2m1_codes((blocks / scale).astype(np.float32))
    return (e2m1_values(codes) * scale).astype(np.float32).reshape(rows.shape)
