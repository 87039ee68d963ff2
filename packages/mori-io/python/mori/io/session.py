# SPDX-License-Identifier: MIT
"""IOEngineSession: repeated transfers between one (local, remote) memory pair."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mori.io._native import _C
from mori.io.descriptors import MemoryDesc

if TYPE_CHECKING:
    from mori.io.engine import IOEngine


class IOEngineSession:
    """Made by ``IOEngine.create_session``; each batch call returns one status for the whole batch."""

    def __init__(self, engine: IOEngine, local: MemoryDesc, remote: MemoryDesc) -> None:
        self._engine = engine
        self.local = local
        self.remote = remote

    def __repr__(self) -> str:
        return (f"IOEngineSession(local={self.local.engine_key!r}#{self.local.id}, "
                f"remote={self.remote.engine_key!r}#{self.remote.id})")  # fmt: skip

    def allocate_transfer_uid(self) -> int:
        return self._engine.allocate_transfer_uid()

    def read(self, local_offset: int, remote_offset: int, size: int, transfer_uid: int) -> _C.TransferStatus:
        return self._engine.read(self.local, local_offset, self.remote, remote_offset, size, transfer_uid)

    def write(self, local_offset: int, remote_offset: int, size: int, transfer_uid: int) -> _C.TransferStatus:
        return self._engine.write(self.local, local_offset, self.remote, remote_offset, size, transfer_uid)

    def batch_read(self, local_offsets: Sequence[int] | Any, remote_offsets: Sequence[int] | Any,
                   sizes: Sequence[int] | Any, transfer_uid: int) -> _C.TransferStatus:  # fmt: skip
        """Offsets and sizes may be lists or 1-D int64/uint64 numpy arrays (the cheap path)."""
        return self._engine._transfer(True, self.local, local_offsets, self.remote, remote_offsets, sizes,
                                      transfer_uid)  # fmt: skip

    def batch_write(self, local_offsets: Sequence[int] | Any, remote_offsets: Sequence[int] | Any,
                    sizes: Sequence[int] | Any, transfer_uid: int) -> _C.TransferStatus:  # fmt: skip
        return self._engine._transfer(False, self.local, local_offsets, self.remote, remote_offsets, sizes,
                                      transfer_uid)  # fmt: skip

    def alive(self) -> bool:
        """Whether the peer answers a ping on the control connection now."""
        return self._engine._native.ping(self.remote.engine_key)
