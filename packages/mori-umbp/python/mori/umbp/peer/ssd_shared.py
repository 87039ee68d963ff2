# SPDX-License-Identifier: MIT
"""A read-only view of another process's SSD tier directory: MORI's shared-SSD follower reads the
blocks its leader writes through (``SsdTier``'s record files, see ``peer.ssd_format``).

The follower keeps no index: the leader adds and evicts files at any time, so every question goes
to the file system. A record file appears whole (the leader renames it into place) and a file the
leader deletes while it is being read stays readable through the open descriptor, so a reader sees
a block whole or not at all. The follower never writes, renames or deletes anything there.
"""

from __future__ import annotations

import ctypes
import logging
import zlib
from io import BufferedReader
from pathlib import Path

from mori.umbp.errors import InvalidArgumentError, PeerUnavailableError
from mori.umbp.peer import ssd_format
from mori.umbp.peer.ssd import key_path

log = logging.getLogger(__name__)


class SharedSsdReader:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key_path(self.dir, key).is_file()

    def read_into(self, key: str, ptr: int, size: int) -> int | None:
        """Copies the block into host memory [ptr, ptr+size) and returns its chain depth; None if
        the leader has not written it (or has evicted it). A record that names another key, or
        fails its CRC, raises PeerUnavailableError (it is corrupt, not missing)."""
        path = key_path(self.dir, key)
        try:
            with open(path, "rb") as f:
                return self._read(f, path, key, ptr, size)
        except FileNotFoundError:
            return None

    @staticmethod
    def _read(f: BufferedReader, path: Path, key: str, ptr: int, size: int) -> int:
        head = f.read(ssd_format.HEADER.size)
        if len(head) != ssd_format.HEADER.size:
            raise PeerUnavailableError(f"shared SSD block {key!r} in {path} is shorter than a header")
        magic, version, flags, key_len, stored, depth, crc = ssd_format.HEADER.unpack(head)
        if magic != ssd_format.MAGIC or version != ssd_format.VERSION or not flags & ssd_format.COMMITTED:
            raise PeerUnavailableError(f"{path} is not a committed UMBP v{ssd_format.VERSION} record")
        raw_key = f.read(key_len)
        if raw_key != key.encode("utf-8", "surrogatepass"):
            raise PeerUnavailableError(f"{path} holds another key than {key!r}")
        if stored != size:
            raise InvalidArgumentError(f"size={size} but shared SSD block {key!r} holds {stored} bytes")
        view = memoryview((ctypes.c_char * size).from_address(ptr)).cast("B")
        got = f.readinto(view)
        if got != size or zlib.crc32(view, zlib.crc32(raw_key)) != crc:
            raise PeerUnavailableError(f"shared SSD block {key!r} in {path} is corrupt (read {got} of {size} bytes)")
        return int(depth)

    def keys(self) -> list[str]:
        """The keys of the whole records there now (a listing: reads every file)."""
        found = []
        for path in self.dir.glob(f"*{key_path(self.dir, '').suffix}"):
            try:
                found.append(ssd_format.read_record(path).key)
            except (ssd_format.BadRecord, OSError):
                continue  # being written, evicted or torn: not a block a get would find
        return sorted(found)
