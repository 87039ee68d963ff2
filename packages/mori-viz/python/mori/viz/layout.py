# SPDX-License-Identifier: MIT
"""The trace buffer layout of ``mori_viz/layout.h`` as numpy dtypes, and host-side allocation.

A buffer is one flat byte array: a 64-byte header the host writes, then one 16-byte warp header per
warp slot, then one ring of ``events_per_warp`` 16-byte events per warp slot. tests/ checks these
dtypes against the C header compiled by a C compiler.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mori.viz.errors import InvalidArgumentError
from mori.viz.settings import setting

LAYOUT_VERSION = 1
MAGIC = int.from_bytes(b"MORIVIZ1", "little")
HEADER_BYTES = 64
WARP_HEADER_BYTES = 16
EVENT_BYTES = 16

EVENT_BEGIN = 1
EVENT_END = 2
EVENT_INSTANT = 3
EVENT_KINDS = (EVENT_BEGIN, EVENT_END, EVENT_INSTANT)

#: Slot ids are 16-bit on the device.
MAX_SLOTS = 1 << 16
#: Limits that keep every offset inside the device's 32-bit counters and a sane allocation.
MAX_WARPS = 1 << 20
MAX_EVENTS_PER_WARP = 1 << 24

HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u8"),
        ("version", "<u4"),
        ("header_bytes", "<u4"),
        ("num_warps", "<u4"),
        ("events_per_warp", "<u4"),
        ("pe", "<i4"),
        ("flags", "<u4"),
        ("dropped_warps", "<u4"),
        ("reserved0", "<u4"),
        ("reserved1", "<u8", (3,)),
    ]
)
WARP_HEADER_DTYPE = np.dtype(
    [("block", "<u4"), ("warp", "<u2"), ("smid", "<u2"), ("count", "<u4"), ("table_id", "<u4")]
)
#: Where the device counts dropped warps (reset() clears it).
DROPPED_WARPS_OFFSET = 32
EVENT_DTYPE = np.dtype([("timestamp_ns", "<u8"), ("slot", "<u2"), ("kind", "u1"), ("reserved", "u1"), ("arg", "<u4")])


def _check_geometry(num_warps: int, events_per_warp: int) -> None:
    if type(num_warps) is not int or not 1 <= num_warps <= MAX_WARPS:
        raise InvalidArgumentError(f"num_warps={num_warps!r} must be an int in [1, {MAX_WARPS}]")
    if (
        type(events_per_warp) is not int
        or not 1 <= events_per_warp <= MAX_EVENTS_PER_WARP
        or events_per_warp & (events_per_warp - 1)
    ):
        raise InvalidArgumentError(
            f"events_per_warp={events_per_warp!r} must be a power of two in [1, {MAX_EVENTS_PER_WARP}]"
        )


def warp_headers_offset() -> int:
    return HEADER_BYTES


def events_offset(num_warps: int) -> int:
    return HEADER_BYTES + WARP_HEADER_BYTES * num_warps


def buffer_nbytes(num_warps: int, events_per_warp: int | None = None) -> int:
    """Bytes of a buffer for ``num_warps`` warp slots of ``events_per_warp`` events each
    (default MORI_VIZ_EVENTS_PER_WARP)."""
    per_warp = setting("MORI_VIZ_EVENTS_PER_WARP") if events_per_warp is None else events_per_warp
    _check_geometry(num_warps, per_warp)
    return events_offset(num_warps) + EVENT_BYTES * num_warps * per_warp


def new_buffer(num_warps: int, events_per_warp: int | None = None, *, pe: int = 0) -> np.ndarray:
    """A zeroed host buffer (``uint8``) with its header written, ready to copy to the device."""
    per_warp = setting("MORI_VIZ_EVENTS_PER_WARP") if events_per_warp is None else events_per_warp
    nbytes = buffer_nbytes(num_warps, per_warp)
    if type(pe) is not int or not -(2**31) <= pe < 2**31:
        raise InvalidArgumentError(f"pe={pe!r} must be an int that fits in 32 bits")
    data = np.zeros(nbytes, dtype=np.uint8)
    header = np.zeros(1, dtype=HEADER_DTYPE)
    header["magic"] = MAGIC
    header["version"] = LAYOUT_VERSION
    header["header_bytes"] = HEADER_BYTES
    header["num_warps"] = num_warps
    header["events_per_warp"] = per_warp
    header["pe"] = pe
    data[:HEADER_BYTES] = header.view(np.uint8)
    return data


def allocate(num_warps: int, events_per_warp: int | None = None, *, pe: int = 0, device: Any = "cuda") -> Any:
    """A trace buffer as a torch ``uint8`` tensor on ``device`` (needs torch): pass it to the
    kernel as its ``void*`` trace argument and to :func:`mori.viz.read_trace` afterwards."""
    import torch  # optional: only this helper needs it

    return torch.from_numpy(new_buffer(num_warps, events_per_warp, pe=pe)).to(device)


def reset(buffer: Any) -> None:
    """Forget every recorded event of ``buffer`` (the 1-D ``uint8`` torch tensor or numpy array
    :func:`allocate` / :func:`new_buffer` made, in place) and its dropped-warp count, keeping its
    header: do it between profiled runs."""
    dtype = str(getattr(buffer, "dtype", ""))
    if dtype not in ("uint8", "torch.uint8") or len(getattr(buffer, "shape", ())) != 1:
        raise InvalidArgumentError(
            f"buffer has dtype {dtype or type(buffer).__name__} and shape {getattr(buffer, 'shape', '?')}; "
            "reset() needs the 1-D uint8 buffer allocate() or new_buffer() made"
        )
    head = buffer[:HEADER_BYTES]
    head = head.cpu().numpy() if hasattr(head, "cpu") else np.asarray(head)
    if head.size < HEADER_BYTES or int(head[:8].view("<u8")[0]) != MAGIC:
        raise InvalidArgumentError("buffer is not a mori-viz trace buffer (bad magic): allocate it with mori.viz")
    if hasattr(buffer, "zero_"):  # torch: zeroed on its own device, no copy
        buffer[DROPPED_WARPS_OFFSET : DROPPED_WARPS_OFFSET + 4].zero_()
        buffer[HEADER_BYTES:].zero_()
    else:
        buffer[DROPPED_WARPS_OFFSET : DROPPED_WARPS_OFFSET + 4] = 0
        buffer[HEADER_BYTES:] = 0
