# SPDX-License-Identifier: MIT
"""Block-scaled payload formats, as the workload (:mod:`mori.ep.workload`) makes them and the
reference (:mod:`mori.ep.reference`) reads them back; torch only, imported lazily.

Dispatch never looks inside these: it moves a payload row and its scale row as bytes. What this
module defines is how the tests' and mori-ep-bench's sources quantise and how their identity
expert dequantises, plus the wire format of MORI's ``fp4_blockwise`` combine.

=========  ===========================  ==========================  =====
format     payload (per row)            scales (per row)            block
=========  ===========================  ==========================  =====
mxfp4      float4_e2m1fn_x2, H/2 bytes  float8_e8m0fnu, H/32 bytes  32
nvfp4      float4_e2m1fn_x2, H/2 bytes  float8_e4m3fn, H/16 bytes   16
mxfp8      float8_e4m3fn, H bytes       float8_e8m0fnu, H/32 bytes  32
=========  ===========================  ==========================  =====

Packed e2m1: element 2i in the low nibble of byte i, 2i+1 in the high one (torch's and the OCP MX
order); a nibble is sign | 3-bit magnitude code of {0, 0.5, 1, 1.5, 2, 3, 4, 6}. MX scales are
OCP MX's shared exponent ``floor(log2(amax)) - emax(element)``. NVFP4's per-tensor fp32 global
scale does not travel: it is a per-layer constant every PE holds (a calibrated
``input_global_scale``), so a row's value is ``e2m1 * e4m3 scale * global``; here it is
:data:`NVFP4_GLOBAL_SCALE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Largest finite e2m1 magnitude.
E2M1_MAX = 6.0
#: The e2m1 magnitudes of the codes 0..7.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: Round-to-nearest-even boundaries between neighbouring codes: a magnitude exactly on one goes to
#: the even code, i.e. down at 0.25, 1.25, 2.5, 5 and up at 0.75, 1.75, 3.5.
_TIES_DOWN = (0.25, 1.25, 2.5, 5.0)
_TIES_UP = (0.75, 1.75, 3.5)
#: The global scale the workload's NVFP4 sources use (any positive fp32 constant shared by all PEs).
NVFP4_GLOBAL_SCALE = 0.5
_FP8_E4M3_MAX = 448.0


@dataclass(frozen=True)
class PayloadFormat:
    name: str
    payload_dtype: str
    scale_dtype: str
    block: int
    elements_per_byte: int
    emax: int  # exponent of the element format's largest power of two (MX shared exponent)


FORMATS = {
    "mxfp4": PayloadFormat("mxfp4", "float4_e2m1fn_x2", "float8_e8m0fnu", 32, 2, 2),
    "nvfp4": PayloadFormat("nvfp4", "float4_e2m1fn_x2", "float8_e4m3fn", 16, 2, 2),
    "mxfp8": PayloadFormat("mxfp8", "float8_e4m3fn", "float8_e8m0fnu", 32, 1, 8),
}


def e2m1_codes(values: Any) -> Any:
    """uint8 nibbles (sign << 3 | code) of fp32 ``values``, rounded to nearest even, saturating at 6."""
    import torch

    magnitude = values.abs()
    code = torch.zeros(values.shape, dtype=torch.uint8, device=values.device)
    for bound in _TIES_DOWN:
        code += (magnitude > bound).to(torch.uint8)
    for bound in _TIES_UP:
        code += (magnitude >= bound).to(torch.uint8)
    return code | ((values < 0).to(torch.uint8) << 3)


def e2m1_values(codes: Any) -> Any:
    """fp32 values of uint8 nibbles."""
    import torch

    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    magnitude = table[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -magnitude, magnitude)


def pack_e2m1(codes: Any) -> Any:
    """[N, H] nibbles -> [N, H/2] bytes (element 2i low)."""
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def unpack_e2m1(packed: Any) -> Any:
    """[N, H/2] bytes -> [N, H] nibbles."""
    import torch

    return torch.stack((packed & 0xF, packed >> 4), dim=2).reshape(packed.shape[0], 2 * packed.shape[1])


def _mx_exponent(amax: Any, emax: int) -> Any:
    """OCP MX shared exponent of blocks with magnitude ``amax``, within e8m0's [-127, 127]."""
    import torch

    _, exponent = torch.frexp(amax)  # amax = m * 2^e, m in [0.5, 1): floor(log2(amax)) = e - 1
    shared = torch.where(amax > 0, exponent - 1 - emax, torch.full_like(exponent, -127))
    return shared.clamp(-127, 127)


def quantize(x: Any, name: str) -> tuple[Any, Any]:
    """(payload [N, H / elements_per_byte] of the payload dtype, scales [N, H / block]) of rows ``x``."""
    import torch

    fmt = FORMATS[name]
    n, hidden = x.shape  # explicit sizes: no -1, which an empty tensor leaves ambiguous
    rows = x.float().reshape(n, hidden // fmt.block, fmt.block)
    amax = rows.abs().amax(dim=2)
    if name == "nvfp4":
        scale_e4m3 = (amax / E2M1_MAX / NVFP4_GLOBAL_SCALE).clamp(max=_FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        scale = scale_e4m3.float() * NVFP4_GLOBAL_SCALE
        scale_bytes = scale_e4m3.view(torch.uint8)
    else:
        shared = _mx_exponent(amax, fmt.emax)
        scale = torch.ldexp(torch.ones_like(amax), shared)
        scale_bytes = (shared + 127).to(torch.uint8)
    scaled = (rows / torch.where(scale > 0, scale, torch.ones_like(scale))[:, :, None]).reshape(n, hidden)
    if fmt.elements_per_byte == 2:
        payload = pack_e2m1(e2m1_codes(scaled.clamp(-E2M1_MAX, E2M1_MAX)))
    else:
        payload = scaled.clamp(-_FP8_E4M3_MAX, _FP8_E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return payload.view(getattr(torch, fmt.payload_dtype)), scale_bytes.view(getattr(torch, fmt.scale_dtype))


def dequantize(payload: Any, scales: Any, name: str) -> Any:
    """fp32 [N, H] values of a quantised payload and its scales."""
    import torch

    fmt = FORMATS[name]
    raw = payload.contiguous().view(torch.uint8)
    values = e2m1_values(unpack_e2m1(raw)) if fmt.elements_per_byte == 2 else raw.view(torch.float8_e4m3fn).float()
    if name == "nvfp4":
        scale = scales.contiguous().view(torch.float8_e4m3fn).float() * NVFP4_GLOBAL_SCALE
    else:
        exponents = scales.contiguous().view(torch.uint8).int() - 127
        scale = torch.ldexp(torch.ones(scales.shape, device=scales.device), exponents)
    n, hidden = values.shape
    return (values.view(n, hidden // fmt.block, fmt.block) * scale[:, :, None]).reshape(n, hidden)


def fp4_blockwise_row_values(row: Any, quant_blocks: int) -> Any:
    """What MORI's ``fp4_blockwise`` combine delivers of fp32 rows [N, H]: each of the row's
    ``quant_blocks`` blocks scaled by ``amax / 6`` (fp32; an all-zero block by 1), rounded to e2m1
    and multiplied back."""
    import torch

    blocks = row.float().view(row.shape[0], quant_blocks, row.shape[1] // quant_blocks)
    amax = blocks.abs().amax(dim=2, keepdim=True)
    scale = torch.where(amax > 0, amax / E2M1_MAX, torch.ones_like(amax))
    return (e2m1_values(e2m1_codes((blocks / scale).clamp(-E2M1_MAX, E2M1_MAX))) * scale).view_as(row)
