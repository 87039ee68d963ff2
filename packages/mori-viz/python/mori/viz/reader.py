# SPDX-License-Identifier: MIT
"""Reading a trace buffer (torch tensor, numpy array or bytes) into per-warp event lists."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.viz import layout
from mori.viz.errors import InvalidArgumentError, TraceFormatError

_log = logging.getLogger("mori.viz")


@dataclass(frozen=True)
class WarpTrace:
    """The events of one warp slot, oldest first (a structured array of ``layout.EVENT_DTYPE``)."""

    pe: int
    warp_slot: int
    block: int
    warp: int
    smid: int
    table_id: int
    recorded: int  # events ever recorded; more than len(events) when the ring wrapped
    events: np.ndarray

    @property
    def overwritten(self) -> int:
        """Events lost because the ring wrapped (the oldest ones)."""
        return self.recorded - len(self.events)


@dataclass(frozen=True)
class Trace:
    """One buffer: its header fields and the warps that recorded anything."""

    pe: int
    num_warps: int
    events_per_warp: int
    dropped_warps: int
    warps: tuple[WarpTrace, ...]

    @property
    def event_count(self) -> int:
        return sum(len(w.events) for w in self.warps)


def as_bytes(buffer: Any) -> np.ndarray:
    """``buffer`` as a flat host ``uint8`` array: a torch tensor (any device, any dtype; copied to
    the host), a numpy array, or bytes / bytearray / memoryview."""
    if isinstance(buffer, bytes | bytearray | memoryview):
        return np.frombuffer(buffer, dtype=np.uint8)
    if hasattr(buffer, "detach") and hasattr(buffer, "cpu"):  # torch, without importing it
        host = buffer.detach().cpu().contiguous().reshape(-1)
        if str(host.dtype) != "torch.uint8":
            import torch  # the tensor exists, so torch does

            host = host.view(torch.uint8)
        return np.asarray(host.numpy())
    if isinstance(buffer, np.ndarray):
        return np.ascontiguousarray(buffer).reshape(-1).view(np.uint8)
    raise InvalidArgumentError(
        f"buffer has type {type(buffer).__name__}; expected a torch tensor, a numpy array or bytes"
    )


def _read_header(data: np.ndarray) -> np.void:
    if data.size < layout.HEADER_BYTES:
        raise TraceFormatError(f"buffer holds {data.size} bytes, less than the {layout.HEADER_BYTES}-byte header")
    header: np.void = data[: layout.HEADER_BYTES].view(layout.HEADER_DTYPE)[0]
    if int(header["magic"]) != layout.MAGIC:
        raise TraceFormatError(
            f"header magic is 0x{int(header['magic']):016x}, not 0x{layout.MAGIC:016x} ('MORIVIZ1'): "
            "not a mori-viz trace buffer, or one the host never initialised (use mori.viz.allocate)"
        )
    if int(header["version"]) != layout.LAYOUT_VERSION or int(header["header_bytes"]) != layout.HEADER_BYTES:
        raise TraceFormatError(
            f"layout version {int(header['version'])} / header {int(header['header_bytes'])} bytes; this "
            f"mori.viz reads version {layout.LAYOUT_VERSION} with {layout.HEADER_BYTES}-byte headers"
        )
    return header


def read_trace(buffer: Any) -> Trace:
    """Parses a trace buffer the device wrote (see ``mori_viz/layout.h``).

    Raises ``TraceFormatError`` naming the field when the buffer does not follow the layout.
    """
    data = as_bytes(buffer)
    header = _read_header(data)
    num_warps, per_warp = int(header["num_warps"]), int(header["events_per_warp"])
    try:
        expected = layout.buffer_nbytes(num_warps, per_warp)
    except InvalidArgumentError as exc:
        raise TraceFormatError(f"header geometry is invalid: {exc}") from None
    if data.size < expected:
        raise TraceFormatError(
            f"buffer holds {data.size} bytes; its header (num_warps={num_warps}, "
            f"events_per_warp={per_warp}) needs {expected}"
        )
    warp_headers = data[layout.HEADER_BYTES : layout.events_offset(num_warps)].view(layout.WARP_HEADER_DTYPE)
    rings = data[layout.events_offset(num_warps) : expected].view(layout.EVENT_DTYPE).reshape(num_warps, per_warp)
    pe = int(header["pe"])
    warps: list[WarpTrace] = []
    for slot in np.flatnonzero(warp_headers["count"]):
        info = warp_headers[slot]
        recorded = int(info["count"])
        ring = rings[slot]
        if recorded <= per_warp:
            events = ring[:recorded].copy()
        else:  # wrapped: the oldest surviving event sits where the next one would go
            start = recorded % per_warp
            events = np.concatenate([ring[start:], ring[:start]])
        bad = ~np.isin(events["kind"], layout.EVENT_KINDS)
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise TraceFormatError(
                f"warp slot {int(slot)}: event {index} has kind {int(events['kind'][index])}, not one of "
                f"{layout.EVENT_KINDS} (count {recorded} claims more events than were written?)"
            )
        warps.append(
            WarpTrace(
                pe=pe,
                warp_slot=int(slot),
                block=int(info["block"]),
                warp=int(info["warp"]),
                smid=int(info["smid"]),
                table_id=int(info["table_id"]),
                recorded=recorded,
                events=events,
            )
        )
    dropped = int(header["dropped_warps"])
    if dropped:
        _log.warning(
            "PE %d: %d warps found no slot (num_warps=%d is too small); they recorded nothing", pe, dropped, num_warps
        )
    return Trace(pe=pe, num_warps=num_warps, events_per_warp=per_warp, dropped_warps=dropped, warps=tuple(warps))
