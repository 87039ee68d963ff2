# SPDX-License-Identifier: MIT
"""The independent reference of the dispatch/combine contract, shared by the tests and
``mori-ep-bench --verify`` (docs/benchmarks/ep.md, DESIGN.md "Correctness contracts").

It never asks the op what should have happened: every PE rebuilds every other PE's tokens and
routing from the workload's seed (:mod:`mori.ep.workload`) and derives with plain torch

- which rows PE ``rank`` must receive: every token whose valid top-k experts include one of its
  experts, exactly once, at source position ``src_rank * (world_size * max_tokens) + src_token``;
- what each received row carries: the token's bytes, its full top-k ids, weights and scales;
- what combine must return with an identity expert (expert output = the received row in the
  combine dtype): ``U * x`` and ``U * w``, U = the distinct destination PEs of the token (-1
  ignored), with the combine format's quantisation applied to the rows first.

The ``check_*`` functions return the first :class:`Mismatch` (or None) instead of asserting, so
that a benchmark can report it and a test can assert on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mori.ep import payload_formats
from mori.ep import workload as wl

#: Largest finite float8_e4m3fn; the fp8 combine formats saturate to it.
FP8_E4M3_MAX = 448.0
#: Kernel types that sum a node's rows in the combine dtype before the network hop (a second
#: rounding of the partial sums, at the proxy).
ROUNDS_PARTIAL_SUMS = frozenset({"InterNodeV1", "InterNodeV1LL"})
_FP32_SIGNIFICAND = 24


@dataclass(frozen=True)
class Mismatch:
    """The first place where an op's output differs from the reference."""

    field: str  # "received rows", "total_recv", "token data", "indices", "weights", "scales", "combined", ...
    row: int | None  # received row (dispatch fields) or token (combine fields)
    got: str
    expected: str
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.field}" if self.row is None else f"row {self.row}, {self.field}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{where}{detail}: got {self.got}, expected {self.expected}"


@dataclass(frozen=True)
class Tolerance:
    """How far combine's outputs may be from the reference, per element:
    ``|got - expected| <= atol + rtol * |expected|`` (0, 0: bit-equal values)."""

    rtol: float
    atol: float
    weights_rtol: float
    why: str


def source_position(w: wl.Workload, src_rank: int, src_token: Any) -> Any:
    return src_rank * w.world_size * w.max_tokens + src_token


def expected_rows(w: wl.Workload, rank: int, iteration: int) -> dict[int, tuple[int, int]]:
    """flat source position -> (src_rank, src_token) of every row PE ``rank`` must receive."""
    import torch

    expected = {}
    for src in range(w.world_size):
        dest = wl.destinations(w, wl.routing(w, src, iteration))
        for token in torch.nonzero(dest[:, rank]).flatten().tolist():
            expected[source_position(w, src, token)] = (src, token)
    return expected


def _values(tensor: Any, limit: int = 8) -> str:
    """A short printable form of a row: its first ``limit`` entries (bytes as hex)."""
    import torch

    flat = tensor.flatten()
    if flat.dtype == torch.uint8:
        text = " ".join(f"{int(b):02x}" for b in flat[:limit].tolist())
    else:
        text = ", ".join(f"{float(v):.6g}" for v in flat[:limit].double().tolist())
    more = f" ... ({flat.numel()} entries)" if flat.numel() > limit else ""
    return f"[{text}{more}]"


def _first_difference(got: Any, want: Any, unequal: Any) -> tuple[int, str, str, str] | None:
    """(row, got, expected, detail) of the first row of ``unequal`` [rows, cols] that is set."""
    import torch

    rows = torch.nonzero(unequal.any(dim=1)).flatten()
    if rows.numel() == 0:
        return None
    row = int(rows[0])
    col = int(torch.nonzero(unequal[row]).flatten()[0])
    start = max(0, col - 2)
    detail = f"first at column {col} of {unequal.shape[1]}; {int(unequal.sum())} elements in {rows.numel()} rows"
    return row, _values(got[row, start:]), _values(want[row, start:]), detail


def check_dispatch(
    w: wl.Workload,
    rank: int,
    iteration: int,
    outputs: tuple[Any, Any, Any, Any, Any],
    positions: Any,
) -> tuple[int, Mismatch | None]:
    """Checks dispatch's outputs ``(out, out_weights, out_scales, out_indices, total_recv)`` and
    the received rows' source positions (``op.get_dispatch_src_token_pos()``) on PE ``rank``
    against the reference; returns (total_recv, the first mismatch or None). Row data is
    compared as bytes: data movement is exact."""
    import torch

    out, out_weights, out_scales, out_indices, total_recv = outputs
    total = int(total_recv.reshape(-1)[0].item())
    got = positions.reshape(-1)[:total].cpu().long()
    wanted: list[Any] = []
    for src in range(w.world_size):
        tokens = torch.nonzero(wl.destinations(w, wl.routing(w, src, iteration))[:, rank]).flatten()
        wanted.append(source_position(w, src, tokens))
    want = torch.cat(wanted) if wanted else torch.zeros(0, dtype=torch.long)
    if positions.reshape(-1).numel() < total or total != want.numel():
        return total, Mismatch("total_recv", None, str(total), str(want.numel()), "rows this PE must receive")
    unique, counts = torch.unique(got, return_counts=True)
    if bool((counts > 1).any()):
        twice = int(unique[counts > 1][0])
        row = int(torch.nonzero(got == twice).flatten()[1])
        return total, Mismatch("source position", row, str(twice), "each source token at most once", "a duplicate")
    if not torch.equal(unique, torch.sort(want).values):
        missing = sorted(set(want.tolist()) - set(unique.tolist()))[:8]
        extra = sorted(set(unique.tolist()) - set(want.tolist()))[:8]
        return total, Mismatch("received rows", None, f"extra positions {extra}", f"missing positions {missing}")

    stride = w.world_size * w.max_tokens
    sources, tokens = got // stride, got % stride
    fields = [("token data", out), ("indices", out_indices), ("weights", out_weights)]
    if out_scales is not None:
        fields.append(("scales", out_scales))
    # Bytes: fp8 has no equality on every torch, fp4 no indexing, and NaN payloads must travel unchanged.
    received = {name: tensor[:total].cpu().contiguous().view(torch.uint8) for name, tensor in fields}
    first: Mismatch | None = None
    for src in range(w.world_size):
        rows = torch.nonzero(sources == src).flatten()
        if rows.numel() == 0:
            continue
        x, weights, scales = wl.tokens(w, src, iteration)
        reference = {"token data": x, "indices": wl.routing(w, src, iteration), "weights": weights, "scales": scales}
        picked = tokens[rows]
        for name, _ in fields:
            if reference[name] is None:
                return total, Mismatch(name, None, "scales received", "no scales (the workload has none)")
            got_rows = received[name][rows]
            want_rows = reference[name].contiguous().view(torch.uint8)[picked]
            difference = _first_difference(got_rows, want_rows, got_rows != want_rows)
            if difference is None:
                continue
            index, got_text, want_text, detail = difference
            row = int(rows[index])
            if first is None or first.row is None or row < first.row:
                source = f"from PE {src}, token {int(picked[index])}; bytes, {detail}"
                first = Mismatch(name, row, got_text, want_text, source)
    return total, first


def fp8_blocks(row: Any, quant_blocks: int) -> tuple[Any, Any]:
    """(blocks [N, B, H/B], scales [N, B, 1]) of fp8_blockwise: a block within fp8's range keeps
    scale 1, a larger one is scaled into range by amax / 448."""
    import torch

    blocks = row.view(row.shape[0], quant_blocks, row.shape[1] // quant_blocks)
    amax = blocks.abs().amax(dim=2, keepdim=True)
    return blocks, torch.where(amax > FP8_E4M3_MAX, amax / FP8_E4M3_MAX, torch.ones_like(amax))


def expected_combine(
    w: wl.Workload, rank: int, iteration: int, combine_dtype: Any, quant: str, quant_blocks: int = 0
) -> tuple[Any, Any]:
    """(out [N, H] in ``combine_dtype``, weights [N, K] f32) combine must return on PE ``rank``
    with an identity expert: U * row and U * w, the row rounded to the combine dtype and, with an
    fp8 combine format, to fp8 as the format specifies (saturating)."""
    import torch

    x, weights, scales = wl.tokens(w, rank, iteration)
    count = wl.destinations(w, wl.routing(w, rank, iteration)).sum(dim=1, keepdim=True).float()
    row = identity_expert(w, x, scales, combine_dtype).float()
    if quant == "fp8_direct_cast":  # saturating, as the formats are specified (not every torch saturates)
        row = row.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).float()
    elif quant == "fp8_blockwise":
        blocks, scale = fp8_blocks(row, quant_blocks)
        fp8 = (blocks / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).float()
        row = (fp8 * scale).view_as(row)
    elif quant == "fp4_blockwise":
        row = payload_formats.fp4_blockwise_row_values(row, quant_blocks)
    return (row * count).to(combine_dtype), weights * count


def identity_expert(w: wl.Workload, rows: Any, scales: Any, combine_dtype: Any) -> Any:
    """The expert output of received ``rows`` (and their scales) in the combine dtype: the rows
    themselves, dequantised first for a block-scaled payload format."""
    if w.payload in payload_formats.FORMATS:
        # On the rows' device: mori-ep-bench calls this between every timed dispatch and combine.
        return payload_formats.dequantize(rows, scales, w.payload).to(combine_dtype)
    return rows.to(combine_dtype)


def _significand_bits(dtype: Any) -> int:
    """Bits of the significand, the implicit one included (bf16 8, fp16 11, fp32 24, e4m3 4)."""
    import torch

    return round(-math.log2(float(torch.finfo(dtype).eps))) + 1


def combine_tolerance(
    w: wl.Workload,
    kernel_type: str,
    combine_dtype: Any,
    quant: str,
    gpu_per_node: int,
    iteration: int = 0,
) -> Tolerance:
    """The tolerance of :func:`check_combine`, derived from the formats' precision.

    The reference rounds U * row once to the combine dtype; the kernels sum U rows in fp32 and
    round once, which is the same value whenever every partial sum is exact, so the default is
    bit-equality. Two things break that, and each allows what its rounding can cost:

    - fp32 accumulation is inexact when the rows have more significant bits than fit beside U's
      (``s + bits(U) > 24``; fp8-valued rows have s = 4, so only wide tokens or blockwise scales
      other than 1): the final rounding may then land one unit of the combine format away, plus
      U fp32 roundings: rtol = eps(combine) + U * eps(fp32);
    - the rail-proxy types (InterNodeV1, InterNodeV1LL) round each node's partial sum to the
      combine dtype before the final sum: when such a partial is inexact
      (``s + bits(per node) > significand(combine)``) the partials' errors add up to one unit of
      the sum, and after the final rounding of both values they may be two units apart:
      + 2 * eps(combine).

    Combined weights are fp32 sums of U fp32 weights: rtol = U * eps(fp32) (the bound of U
    roundings is U/2 units; once U > 1)."""
    import torch

    eps_c = float(torch.finfo(combine_dtype).eps)
    eps_32 = float(torch.finfo(torch.float32).eps)
    destinations = max(1, min(w.world_size, w.topk))
    per_node = max(1, min(gpu_per_node, w.world_size, w.topk))
    dispatch_dtype = getattr(torch, w.dtype)
    if quant == "none":
        bits = _significand_bits(combine_dtype)
        if w.payload == "none" and dispatch_dtype.is_floating_point:
            bits = min(bits, _significand_bits(dispatch_dtype))
    elif quant == "fp8_direct_cast" or (
        quant == "fp8_blockwise" and not _blockwise_scales_other_than_one(w, combine_dtype, iteration)
    ):
        bits = _significand_bits(torch.float8_e4m3fn)
    else:
        bits = _FP32_SIGNIFICAND  # fp8 / e2m1 value x an arbitrary fp32 scale
    rtol, why = 0.0, []
    if bits + destinations.bit_length() > _FP32_SIGNIFICAND:
        rtol += eps_c + destinations * eps_32
        why.append(f"sums of up to {destinations} rows of {bits} significant bits need more than fp32's 24")
    if kernel_type in ROUNDS_PARTIAL_SUMS and bits + per_node.bit_length() > _significand_bits(combine_dtype):
        rtol += 2 * eps_c
        why.append(f"{kernel_type} rounds partial sums of up to {per_node} rows to {combine_dtype}")
    reason = "; ".join(why) if why else "every partial sum is exact: bit-equal values"
    weights_rtol = destinations * eps_32 if destinations > 1 else 0.0
    return Tolerance(rtol=rtol, atol=0.0, weights_rtol=weights_rtol, why=reason)


def _blockwise_scales_other_than_one(w: wl.Workload, combine_dtype: Any, iteration: int) -> bool:
    """Whether any PE's rows have an element beyond fp8's range: its block's scale is then not 1."""
    for src in range(w.world_size):
        x, _, scales = wl.tokens(w, src, iteration)
        if x.shape[0] and bool((identity_expert(w, x, scales, combine_dtype).float().abs() > FP8_E4M3_MAX).any()):
            return True
    return False


def _close(got: Any, want: Any, rtol: float, atol: float) -> Any:
    """Element-wise: not within the tolerance (NaN equals NaN)."""
    import torch

    got, want = got.double(), want.double()
    return ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def check_combine(
    w: wl.Workload,
    rank: int,
    iteration: int,
    combined: Any,
    combined_weights: Any,
    combine_dtype: Any,
    quant: str,
    tolerance: Tolerance,
    quant_blocks: int = 0,
) -> Mismatch | None:
    """Checks combine's ``(out, out_weights)`` of PE ``rank`` (rows [:N] of this PE's tokens)
    against :func:`expected_combine`; ``combined_weights`` None skips the weights."""
    want, want_weights = expected_combine(w, rank, iteration, combine_dtype, quant, quant_blocks)
    n = want.shape[0]
    checks = [("combined", combined, want, tolerance.rtol, tolerance.atol)]
    if combined_weights is not None:
        checks.append(("combined weights", combined_weights, want_weights, tolerance.weights_rtol, 0.0))
    for name, got, expected, rtol, atol in checks:
        got = got[:n].cpu()
        if got.dtype != expected.dtype:
            return Mismatch(name, None, str(got.dtype), str(expected.dtype), "dtype")
        difference = _first_difference(got, expected, _close(got, expected, rtol, atol))
        if difference is not None:
            row, got_text, want_text, detail = difference
            return Mismatch(name, row, got_text, want_text, f"token {row}; rtol {rtol:.3g}, atol {atol:.3g}; {detail}")
    return None
