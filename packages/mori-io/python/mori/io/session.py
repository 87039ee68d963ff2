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

    def __init__(self, engine: IOEngine, local: MemoryDesc, remote: MemoryDesc, native_remote: _C.RemoteMemory) -> None:
        self._engine = engine
        self.local = local
        self.remote = remote
        # The pair was checked when the session was made; the native engine routes every post
        # (P2P or the network, as its backends and peers are then) and still refuses memory
        # deregistered since, and peers forgotten since. The native pair holds the call's fixed
        # arguments: a post converts only its own four.
        self._pair = _C.SessionPair(engine._native, local.id, native_remote)

    def __repr__(self) -> str:
        return (f"IOEngineSession(local={self.local.engine_key!r}#{self.local.id}, "
                f"remote={self.remote.engine_key!r}#{self.remote.id})")  # fmt: skip

    def allocate_transfer_uid(self) -> int:
        return self._engine.allocate_transfer_uid()

    def read(self, local_offset: int, remote_offset: int, size: int, transfer_uid: int) -> _C.TransferStatus:
        return self._pair.post(True, local_offset, remote_offset, size, transfer_uid)

    def write(self, local_offset: int, remote_offset: int, size: int, transfer_uid: int) -> _C.TransferStatus:
        return self._pair.post(False, local_offset, remote_offset, size, transfer_uid)

    def batch_read(self, local_offsets: Sequence[int] | Any, remote_offsets: Sequence[int] | Any,
                   sizes: Sequence[int] | Any, transfer_uid: int) -> _C.TransferStatus:  # fmt: skip
        """Offsets and sizes may be lists or 1-D int64/uint64 numpy arrays (the cheap path)."""
        return self._pair.post(True, local_offsets, remote_offsets, sizes, transfer_uid)

    def batch_write(self, local_offsets: Sequence[int] | Any, remote_offsets: Sequence[int] | Any,
                    sizes: Sequence[int] | Any, transfer_uid: int) -> _C.TransferStatus:  # fmt: skip
        return self._pair.post(False, local_offsets, remote_offsets, sizes, transfer_uid)

    def alive(self) -> bool:
        """Whether the peer answers a ping on the control connection now."""
        return self._engine._native.ping(self.remote.engine_key)
