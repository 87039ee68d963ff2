# SPDX-License-Identifier: MIT
"""MORI's scatter combine (``combine_mode="scatter"``, MORI v1's ``_nop2p`` push path).

Where the gather combine has each source PE read its tokens' rows from the PEs that hold them,
scatter pushes them:

1. every PE writes each received row's expert output, in the wire format (bf16/f32 as given, or
   fp8 for the quant types), and the row's delivered weights into the *source* PE's inbox, at row
   ``this_rank * M + source_token``;
2. a barrier among the PEs;
3. every PE sums, for each of its tokens and in top-k order, the inbox rows of the distinct PEs
   the token went to (``routing.disp_dest_tok_id_map``), in float32, and the weights likewise.

The result contract is gather's (row t = sum over the distinct destination PEs of their row for
t), bit for bit: the same float32 sums in the same order, the same fp8 rounding (nearest even,
saturating at 448; blockwise scales amax / 448 per 128 elements, 1 when the block fits).

The inboxes are symmetric memory (mori.shmem's heap or the op's communicator), two of them used
in turn, so a PE that runs ahead into the next combine never writes the inbox a slower peer is
still summing. The steps are torch operations on the PEs' copies (host memory on the cpu backend,
peer-mapped GPU memory on the cuda one); the barrier is the memory's host barrier, so a scatter
combine synchronises the host with the stream and cannot be captured in a CUDA graph.
"""

from __future__ import annotations

from typing import Any

from mori.ep.errors import EpInputError, EpUnsupportedError
from mori.ep.v2.config import FP8_BLOCK, EpDispatchCombineConfig
from mori.ep.v2.memory import Block, SymmetricMemory
from mori.ep.v2.routing import EpDispatchRoutingHandle

FP8_MAX = 448.0
_ALIGN = 256


def _align(value: int) -> int:
    return -(-value // _ALIGN) * _ALIGN


class _Inbox:
    """Byte offsets of one inbox: rows [world_size * M] of wire bytes, weights, blockwise scales."""

    def __init__(self, cfg: EpDispatchCombineConfig, wire_bytes: int) -> None:
        rows = cfg.world_size * cfg.max_num_inp_token_per_rank
        self.rows, self.wire_bytes, self.blocks = rows, wire_bytes, cfg.combine_scale_dim
        self.weights = _align(rows * wire_bytes)
        self.scales = self.weights + _align(rows * cfg.num_experts_per_token * 4)
        self.nbytes = self.scales + _align(rows * self.blocks * 4)


def _wire_bytes(cfg: EpDispatchCombineConfig) -> int:
    return cfg.hidden_dim * cfg.wire_elem_size


def inbox_bytes(cfg: EpDispatchCombineConfig) -> int:
    """Symmetric bytes a scatter op takes on top of its v1 region (two inboxes)."""
    return 2 * _Inbox(cfg, _wire_bytes(cfg)).nbytes


class ScatterCombine:
    """The inboxes of one op and the three steps above (collective: every PE calls it in turn)."""

    def __init__(self, cfg: EpDispatchCombineConfig, memory: SymmetricMemory, max_recv: int) -> None:
        import torch

        self.cfg, self.memory, self._torch = cfg, memory, torch
        self._max_recv = max_recv  # R: the destination map encodes pe * R + slot
        self.device = memory.device
        self.layout = _Inbox(cfg, _wire_bytes(cfg))
        self._block: Block = memory.allocate(2 * self.layout.nbytes)  # collective
        self._peers = [self._block.peer(pe) for pe in range(cfg.world_size)]
        self._calls = 0  # every PE combines as often: the parity picks the same inbox everywhere
        m, k = cfg.max_num_inp_token_per_rank, cfg.num_experts_per_token
        self._out = torch.empty(m, cfg.hidden_dim, dtype=cfg.combine_dtype, device=self.device)
        self._out_weights = torch.empty(m, k, dtype=torch.float32, device=self.device)

    # ---- views of an inbox -----------------------------------------------------------------

    def _rows(self, memory: Any, base: int) -> Any:
        lay = self.layout
        return memory[base : base + lay.rows * lay.wire_bytes].view(lay.rows, lay.wire_bytes)

    def _weights(self, memory: Any, base: int) -> Any:
        lay, k = self.layout, self.cfg.num_experts_per_token
        start = base + lay.weights
        return memory[start : start + lay.rows * k * 4].view(self._torch.float32).view(lay.rows, k)

    def _scales(self, memory: Any, base: int) -> Any:
        lay = self.layout
        start = base + lay.scales
        return memory[start : start + lay.rows * lay.blocks * 4].view(self._torch.float32).view(lay.rows, lay.blocks)

    # ---- wire format -----------------------------------------------------------------------

    def _encode(self, rows: Any) -> tuple[Any, Any]:
        """Rows [n, H] of the combine dtype as wire bytes [n, wire] and blockwise scales [n, blocks]."""
        torch, cfg = self._torch, self.cfg
        if cfg.quant_type == "none":
            return rows.contiguous().view(torch.uint8).view(rows.shape[0], -1), None
        values = rows.float()
        if cfg.fp8_direct_cast:
            return _to_fp8(torch, values), None
        blocks = values.view(rows.shape[0], cfg.combine_scale_dim, FP8_BLOCK)
        amax = blocks.abs().amax(dim=-1)
        scales = torch.where(amax > FP8_MAX, amax / FP8_MAX, torch.ones_like(amax))
        return _to_fp8(torch, (blocks / scales[..., None]).view(rows.shape[0], -1)), scales

    def _decode(self, wire: Any, scales: Any) -> Any:
        torch, cfg = self._torch, self.cfg
        if cfg.quant_type == "none":
            return wire.view(cfg.combine_dtype).float()
        values = wire.view(torch.float8_e4m3fn).float()
        if scales is None:
            return values
        return (values.view(wire.shape[0], -1, FP8_BLOCK) * scales[..., None]).view(wire.shape[0], -1)

    # ---- the combine -----------------------------------------------------------------------

    def __call__(
        self, input: Any, delivered_weights: Any, routing: EpDispatchRoutingHandle, want_weights: bool
    ) -> tuple[Any, Any]:
        torch = self._torch
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise EpUnsupportedError(
                "combine_mode='scatter' ends its push with a host barrier, which a CUDA graph cannot capture; "
                "capture a combine_mode='gather' op"
            )
        if routing.disp_tok_id_to_src_tok_id_local is None:
            raise EpInputError(
                "routing.disp_tok_id_to_src_tok_id_local is None: a scatter combine sends each received row back "
                "to its source token, so the handle needs it"
            )
        base = (self._calls % 2) * self.layout.nbytes
        self._calls += 1
        total = int(routing.total_recv_token_num.item())
        rows = min(total, int(input.shape[0]))
        self._push(input[:rows], delivered_weights[:rows] if want_weights else None, routing, rows, base)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # our pushes have landed
        self.memory.barrier()  # ... and every peer's
        n = routing.cur_rank_num_token
        self._sum(routing.disp_dest_tok_id_map[:n], n, base, want_weights)
        if rows < total:
            raise EpInputError(
                f"combine input has {input.shape[0]} rows, fewer than total_recv={total}; the missing rows were not "
                "combined"
            )
        return self._out[:n], self._out_weights[:n] if want_weights else None

    def _push(self, input: Any, weights: Any, routing: EpDispatchRoutingHandle, rows: int, base: int) -> None:
        """Step 1: each received row to its source PE's inbox, row ``rank * M + token``."""
        torch, cfg = self._torch, self.cfg
        if rows == 0:
            return
        m = cfg.max_num_inp_token_per_rank
        sources = routing.disp_tok_id_to_src_tok_id_local[:rows].long()
        wire, scales = self._encode(input)
        origin = (sources // m).cpu()
        slot = cfg.rank * m + sources % m
        for pe in torch.unique(origin).tolist():
            pick = torch.nonzero(origin == pe).flatten().to(self.device)
            dest, at = self._peers[pe], slot[pick]
            self._rows(dest, base).index_copy_(0, at, wire[pick])
            if weights is not None:
                self._weights(dest, base).index_copy_(0, at, weights[pick].float())
            if scales is not None:
                self._scales(dest, base).index_copy_(0, at, scales[pick])

    def _sum(self, dest_map: Any, n: int, base: int, want_weights: bool) -> None:
        """Step 3: row t = sum over its distinct destination PEs of their inbox row for t."""
        torch, cfg = self._torch, self.cfg
        if n == 0:
            return
        m, k_count = cfg.max_num_inp_token_per_rank, cfg.num_experts_per_token
        recv = self._max_recv
        local = self._peers[cfg.rank]
        inbox, inbox_weights = self._rows(local, base), self._weights(local, base)
        inbox_scales = self._scales(local, base) if cfg.fp8_blockwise else None
        dest = dest_map.long()
        valid = (dest >= 0) & (dest < cfg.world_size * recv)
        tokens = torch.arange(n, device=self.device)
        acc = torch.zeros(n, cfg.hidden_dim, dtype=torch.float32, device=self.device)
        acc_weights = torch.zeros(n, k_count, dtype=torch.float32, device=self.device)
        for k in range(k_count):  # top-k order, as gather sums
            ok = valid[:, k]
            row = torch.where(ok, (dest[:, k] // recv) * m + tokens, 0)
            scales = inbox_scales[row] if inbox_scales is not None else None
            acc += torch.where(ok[:, None], self._decode(inbox[row], scales), 0.0)
            if want_weights:
                acc_weights += torch.where(ok[:, None], inbox_weights[row], 0.0)
        self._out[:n].copy_(acc.to(cfg.combine_dtype))
        if want_weights:
            self._out_weights[:n].copy_(acc_weights)

    def close(self) -> None:
        """Collective: frees the inboxes."""
        self._peers = []
        self._block.free()


def _to_fp8(torch: Any, values: Any) -> Any:
    """float32 -> e4m3 bytes, nearest even, saturating at +-448 (NaN stays NaN)."""
    return values.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
